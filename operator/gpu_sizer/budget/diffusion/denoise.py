"""Activation bytes of one denoiser forward pass at inference (``torch.no_grad``). Pure.

Inference frees every tensor as soon as nothing references it, so the peak of a forward pass is
the tensors the block loop holds (the hidden states, the rotary tables, the text states) plus the
largest live set inside one block. Each family's live set below is read from its ``diffusers``
0.42.1 source, statement by statement, with CUDA's fused kernels (layer norm, GELU, SDPA write
only their output): a tensor stays alive while a Python name refers to it, a temporary dies when
the expression that made it completes. Elements are counted per token in units of the model width
``D`` (and the MLP width ``F``), split into tensors in the activation dtype and tensors PyTorch
makes in float32 (``.float()`` upcasts, products with float32 rotary tables or modulation
vectors, diffusers' ``RMSNorm``'s float32 path).

``tests/budget/diffusion`` runs each family's real ``diffusers`` forward on the CPU in float32 on
tiny configs and checks these counts against PyTorch's own allocation trace (the profiler's
``total_allocated``); float32 makes the two splits the same bytes, so that check covers the
statement reading, not the split.

Attention: every backend except ``math`` (``flash``, ``native`` SDPA, ``sage``, ``xformers``)
keeps no score matrix (FlashAttention, Dao et al. 2022; PyTorch's memory-efficient kernel,
Rabe and Staats 2021); ``math`` (diffusers' ``_native_math``, or a materialising
``AttnProcessor``) holds the ``heads x Nq x Nk`` scores and their softmax at once, per layer.

Sequence parallelism (Ulysses or ring, diffusers ``ContextParallelConfig``, xDiT) gives each GPU
``1 / degree`` of the tokens; Ulysses' all-to-all also holds a second copy of q, k and v while it
reshards them by heads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FP32",
    "DenoiseShape",
    "denoiser_forward_bytes",
    "denoiser_tokens",
]

Config = Mapping[str, Any]
FP32 = 4


@dataclass(frozen=True)
class DenoiseShape:
    """One denoiser forward pass on one GPU.

    :param batch: samples in the pass (prompts x images per prompt, doubled when the pipeline
        batches classifier-free guidance).
    :param frames: latent frames (1 for images).
    :param height: latent height (pixels / the VAE's spatial factor).
    :param width: latent width.
    :param text_tokens: text-encoder tokens per sample the denoiser attends to.
    :param act_bytes: bytes per element of the activation dtype (the denoiser's dtype).
    :param materialised: attention backend ``math``: the score matrix is held.
    :param sequence_split: Ulysses x ring degree (tokens are split over that many GPUs).
    :param ulysses: Ulysses degree (its all-to-all holds a second q, k, v).
    :param per_token_timesteps: the pipeline passes one timestep per token (Wan 2.2 TI2V's
        ``expand_timesteps``): the modulation tensors are per token instead of per sample.
    """

    batch: int
    frames: int
    height: int
    width: int
    text_tokens: int
    act_bytes: int
    materialised: bool = False
    sequence_split: int = 1
    ulysses: int = 1
    per_token_timesteps: bool = False


def _split(tokens: int, shape: DenoiseShape) -> int:
    return -(-tokens // shape.sequence_split)


def _attention_matrix(shape: DenoiseShape, heads: int, q_tokens: int, k_tokens: int) -> int:
    """Score matrix and softmax of one attention call when the backend materialises them:
    ``batch x heads x Nq x Nk`` each, in the activation dtype (heads split by Ulysses, queries by
    the sequence split)."""
    if not shape.materialised:
        return 0
    local_heads = -(-heads // shape.ulysses)
    local_q = -(-q_tokens // max(1, shape.sequence_split // shape.ulysses))  # ring splits queries
    return int(2 * shape.batch * local_heads * local_q * k_tokens * shape.act_bytes)


def _ulysses(tokens: int, width: int, shape: DenoiseShape) -> int:
    """Ulysses' all-to-all output buffers for q, k and v (a second copy while resharding)."""
    return int(3 * tokens * width * shape.act_bytes if shape.ulysses > 1 else 0)


def denoiser_tokens(cls: str, c: Config, shape: DenoiseShape) -> int:
    """Image/video tokens per sample the denoiser sees (before any sequence split)."""
    if cls == "UNet2DConditionModel":
        return int(shape.frames * shape.height * shape.width)
    if cls == "WanTransformer3DModel":
        pt, ph, pw = c["patch_size"]
        return int((shape.frames // pt) * (shape.height // ph) * (shape.width // pw))
    if cls == "HunyuanVideoTransformer3DModel":
        p, pt = c["patch_size"], c["patch_size_t"]
        return int((shape.frames // pt) * (shape.height // p) * (shape.width // p))
    if cls == "CogVideoXTransformer3DModel":
        p, pt = c["patch_size"], c["patch_size_t"] or 1
        return int(-(-shape.frames // pt) * (shape.height // p) * (shape.width // p))
    if cls == "LTXVideoTransformer3DModel":
        p, pt = c["patch_size"], c["patch_size_t"]
        return int((shape.frames // pt) * (shape.height // p) * (shape.width // p))
    if cls == "MochiTransformer3DModel":
        p = c["patch_size"]
        return int(shape.frames * (shape.height // p) * (shape.width // p))
    if cls in ("FluxTransformer2DModel", "QwenImageTransformer2DModel"):
        # FluxPipeline._pack_latents (and QwenImagePipeline's) packs 2x2 latent cells into one
        # token before the transformer, whatever the config says; Flux's patch_size (1) is on
        # top of it, Qwen-Image's patch_size only sizes proj_out (2 x 2 x out_channels)
        p = 2 * c["patch_size"] if cls == "FluxTransformer2DModel" else 2
        return int(shape.frames * (shape.height // p) * (shape.width // p))
    p = c["patch_size"]  # SD3
    return int(shape.frames * (shape.height // p) * (shape.width // p))


def _wan(c: Config, s: DenoiseShape) -> int:
    """``WanTransformer3DModel``: per token of ``D``, with ``a`` the activation dtype's bytes.

    - self-attention, while the second rotary product of the key is computed: the block's
      normalised input, q, k, v and the rotary output (5 a) plus three float32 half-width
      products (``x1 * cos``, ``x2 * sin``, their difference: 1.5 x 4);
    - FFN: the residual stream, the stale attention output and the modulated input (3 a) plus
      ``proj`` and GELU outputs of width ``F`` (2 a F / D);
    - the gated FFN residual ``(h.float() + ff.float() * gate).type_as(h)``: four tensors in
      ``a`` and three float32 temporaries.

    Around the blocks: the residual stream (``a D``), the rotary tables (float32 cos and sin of
    ``head_dim`` per token per sample), the text states (512 tokens, plus 257 image tokens for
    image-to-video).

    Per-token timesteps (``expand_timesteps``, ``timestep.ndim == 2`` in ``forward``): ``temb``
    (``a D``) and ``timestep_proj`` (``6 a D``) per token around the blocks; each block starts
    with ``(scale_shift_table.unsqueeze(0) + temb.float()).chunk(6, dim=2)``: the float32 copy
    and the float32 sum (``2 x 6 x 4 D``), the sum's six chunks alive through the block.
    """
    heads, hd = c["num_attention_heads"], c["attention_head_dim"]
    d, f, a = heads * hd, c["ffn_dim"], s.act_bytes
    n = _split(s.batch * denoiser_tokens("WanTransformer3DModel", c, s), s)
    per_sample = _split(denoiser_tokens("WanTransformer3DModel", c, s), s)
    block = max(
        5 * a * d + 6 * d,
        3 * a * d + 2 * a * f,
        4 * a * d + 3 * FP32 * d,
    )
    if s.per_token_timesteps:
        block = max(block + 6 * FP32 * d, 12 * FP32 * d)
    text = s.batch * (s.text_tokens + (257 if c["image_dim"] else 0)) * d * a
    around = n * a * d + per_sample * 2 * hd * FP32 + text
    if s.per_token_timesteps:
        around += n * 7 * a * d
    tokens = denoiser_tokens("WanTransformer3DModel", c, s)
    return int(around + n * block + _attention_matrix(s, heads, tokens, tokens) + _ulysses(n, d, s))


def _mmdit_joint(d: int, f: int, a: int) -> int:
    """An MMDiT double-stream block per joint token (Flux ``FluxTransformerBlock``, HunyuanVideo
    ``HunyuanVideoTransformerBlock``): modulated input, joint q/k/v and the rotary output in
    ``a`` (5 a), ``x.float() * cos`` and ``rotated.float() * sin`` float32 products with their
    sum (3 x 4), against the FFN stage (residual, stale attention output, modulated input and the
    two ``F``-wide GELU tensors)."""
    return int(max(5 * a * d + 3 * FP32 * d, 3 * a * d + 2 * a * f))


def _single_stream(d: int, f: int, a: int) -> int:
    """A single-stream block per joint token (Flux ``FluxSingleTransformerBlock``, HunyuanVideo
    ``HunyuanVideoSingleTransformerBlock``): the concatenated input, its modulated copy and the
    GELU-activated MLP branch (``F``) stay alive across the attention (q, k, v, rotary output and
    its float32 products), then ``cat([attn, mlp])`` (``D + F``) meets ``proj_out``."""
    attention = 2 * a * d + a * f + 4 * a * d + 3 * FP32 * d
    output = 2 * a * d + a * f + a * d + a * (d + f) + a * d
    return int(max(attention, output))


def _flux(c: Config, s: DenoiseShape) -> int:
    """``FluxTransformer2DModel``: image tokens (``(H/2)(W/2)`` after packing) and the 512 T5
    tokens share every attention; rotary tables are float32 cos/sin per joint token."""
    heads, hd = c["num_attention_heads"], c["attention_head_dim"]
    d, a = heads * hd, s.act_bytes
    img = s.batch * denoiser_tokens("FluxTransformer2DModel", c, s)
    n = _split(img + s.batch * s.text_tokens, s)
    f = 4 * d
    block = max(_mmdit_joint(d, f, a), _single_stream(d, f, a))
    around = n * a * d + (n // max(1, s.batch)) * 2 * hd * FP32
    per = img // s.batch + s.text_tokens
    return int(around + n * block + _attention_matrix(s, heads, per, per) + _ulysses(n, d, s))


def _qwen_image(c: Config, s: DenoiseShape) -> int:
    """``QwenImageTransformer2DModel``: dual-stream blocks over the packed image tokens and the
    text tokens, with no single-stream blocks. ``QwenImageTransformerBlock.forward`` keeps every
    intermediate under a Python name until it returns, so the live set grows through the block
    (per token of ``D`` in ``a``):

    - image MLP: the caller's block input, ``img_normed``, ``img_modulated``, the attention
      output, the new residual, ``img_normed2``, ``img_modulated2`` (7) and the
      ``FeedForward``'s ``proj`` and GELU outputs (``2 F / D``), while each text token holds its
      input, ``txt_normed``, ``txt_modulated``, its attention output and its new residual (5);
    - text MLP: the image stream's 9 (the above, its MLP output and the second residual) and the
      text stream's 7 plus ``2 F / D``;
    - joint attention (``QwenDoubleStreamAttnProcessor2_0``): each stream's input, normalised and
      modulated copies (3), q/k/v per stream and their concatenations (6), the SDPA output and
      the output projection (2); or, while the image key is rotated
      (``apply_rotary_emb_qwen``), the image tokens' 3, the rotated query, the key, the value,
      the rotated output (4) and ``x.float()`` with its complex product (two float32 tensors),
      the text tokens' 3 and their q/k/v.

    Around the blocks: the rotary table of the image tokens (``_compute_video_freqs``, complex64
    of ``head_dim / 2`` per token, kept by its ``lru_cache``), and the device copies of
    ``QwenEmbedRope.pos_freqs``/``neg_freqs`` (complex64 ``4096 x head_dim / 2`` each, cached by
    ``_get_device_freqs`` on the first call).
    """
    if c["zero_cond_t"] or c["use_layer3d_rope"]:
        key = "zeroCondT" if c["zero_cond_t"] else "useLayer3dRope"
        raise ValueError(
            f"{key}: its per-token modulation or layered rotary embedding is not modelled"
        )
    heads, hd = c["num_attention_heads"], c["attention_head_dim"]
    d, a = heads * hd, s.act_bytes
    f = 4 * d
    img = _split(s.batch * denoiser_tokens("QwenImageTransformer2DModel", c, s), s)
    txt = _split(s.batch * s.text_tokens, s)
    wide = 2 * f / d
    per = max(
        img * (7 + wide) + txt * 5,
        img * 9 + txt * (7 + wide),
        (img + txt) * (3 + 6 + 2),
        img * (3 + 4 + 2 * FP32 / a) + txt * 6,
    )
    rope = (img // max(1, s.batch)) * hd // 2 * 8 + 2 * 4096 * hd // 2 * 8
    joint = img // max(1, s.batch) + s.text_tokens
    return int(
        per * d * a + rope + _attention_matrix(s, heads, joint, joint) + _ulysses(img + txt, d, s)
    )


def _hunyuan(c: Config, s: DenoiseShape) -> int:
    """``HunyuanVideoTransformer3DModel``: as Flux, with diffusers' ``RMSNorm`` q/k norms, whose
    float32 path (``to(float32)``, ``pow``, the rescaled product) adds two float32 tensors of the
    normalised width while q, k and v are alive; the rotary product runs on the video tokens and
    ``torch.cat`` rebuilds q and k over video + text tokens."""
    heads, hd = c["num_attention_heads"], c["attention_head_dim"]
    d, a = heads * hd, s.act_bytes
    f = int(d * c["mlp_ratio"])
    vid = s.batch * denoiser_tokens("HunyuanVideoTransformer3DModel", c, s)
    n = _split(vid + s.batch * s.text_tokens, s)
    norm = 4 * a * d + 2 * FP32 * d
    block = max(_mmdit_joint(d, f, a) + a * d, _single_stream(d, f, a) + a * d, norm + a * f)
    around = 2 * n * a * d + (n // max(1, s.batch)) * 2 * hd * FP32
    per = vid // s.batch + s.text_tokens
    return int(around + n * block + _attention_matrix(s, heads, per, per) + _ulysses(n, d, s))


def _sd3(c: Config, s: DenoiseShape) -> int:
    """``SD3Transformer2DModel`` (``JointTransformerBlock``, ``JointAttnProcessor2_0``): image
    and text q/k/v concatenated, no rotary tables; SD3.5's dual-attention layers run a second
    image self-attention while the first one's output is held."""
    heads, hd = c["num_attention_heads"], c["attention_head_dim"]
    d, a = heads * hd, s.act_bytes
    img = s.batch * denoiser_tokens("SD3Transformer2DModel", c, s)
    n = _split(img + s.batch * s.text_tokens, s)
    dual = 2 * a * d if c["dual_attention_layers"] else 0
    block = max(9 * a * d + dual, 4 * a * d + 2 * a * 4 * d)
    per = img // s.batch + s.text_tokens
    return int(n * (a * d + block) + _attention_matrix(s, heads, per, per) + _ulysses(n, d, s))


def _cogvideox(c: Config, s: DenoiseShape) -> int:
    """``CogVideoXTransformer3DModel`` (``CogVideoXBlock``, ``CogVideoXAttnProcessor2_0``):
    text tokens prepended to the video tokens for attention and the FFN; layer-norm q/k norms;
    rotary products (float32) on the video tokens for the rotary variants (5B, 1.5)."""
    heads, hd = c["num_attention_heads"], c["attention_head_dim"]
    d, a = heads * hd, s.act_bytes
    vid = s.batch * denoiser_tokens("CogVideoXTransformer3DModel", c, s)
    n = _split(vid + s.batch * s.text_tokens, s)
    rotary = 3 * FP32 * d if c["use_rotary_positional_embeddings"] else 0
    f = 4 * d
    block = max(7 * a * d + rotary, 4 * a * d + 2 * a * f)
    around = n * a * d + ((n // max(1, s.batch)) * 2 * hd * FP32 if rotary else 0)
    per = vid // s.batch + s.text_tokens
    return int(around + n * block + _attention_matrix(s, heads, per, per) + _ulysses(n, d, s))


def _ltx(c: Config, s: DenoiseShape) -> int:
    """``LTXVideoTransformer3DModel`` (``LTXVideoTransformerBlock``): self-attention with
    across-heads RMS norms and float32 rotary tables, cross-attention to 128 T5 tokens, a GELU
    FFN of ``4 D``; the modulation is ``a``-typed."""
    heads, hd = c["num_attention_heads"], c["attention_head_dim"]
    d, a = heads * hd, s.act_bytes
    n = _split(s.batch * denoiser_tokens("LTXVideoTransformer3DModel", c, s), s)
    tokens = denoiser_tokens("LTXVideoTransformer3DModel", c, s)
    block = max(6 * a * d + 3 * FP32 * d, 3 * a * d + 2 * a * 4 * d)
    around = n * a * d + _split(tokens, s) * 2 * d * FP32 + s.batch * s.text_tokens * d * a
    return int(around + n * block + _attention_matrix(s, heads, tokens, tokens) + _ulysses(n, d, s))


def _mochi(c: Config, s: DenoiseShape) -> int:
    """``MochiTransformer3DModel`` (``MochiTransformerBlock``, ``MochiAttnProcessor2_0``): the
    largest live set is the video stream's SwiGLU feed-forward (``FeedForward`` with ``inner_dim
    = 4 D 2 // 3``, ``F``): the block's input (still held by the model's loop), the attention
    output ``attn_hidden_states``, the new residual and its modulated copy ``norm_hidden_states``
    (4 a D per token) with ``proj``'s ``2 F`` output, ``silu(gate)`` and the gated product
    (4 a F). In the last block (``context_pre_only``) ``to_add_out`` does not exist, so the text
    half of ``split_with_sizes`` keeps the whole joint attention output (``a (N + T) D``) alive
    through the feed-forward. Around the blocks: the float32 rotary cos and sin tables
    (``heads x head_dim / 2`` each per video token, not batched) and the caption projection
    (``T x pooled_projection_dim``). The attention runs sample by sample (``for idx in
    range(batch_size)`` over the valid prompt tokens): with ``math`` one sample's
    ``heads x (N + T)^2`` scores are held. The model has no ``_cp_plan`` and its processor calls
    SDPA itself, so sequence parallelism is not modelled for it.

    :raises ValueError: a sequence split (Ulysses or ring) was asked for.
    """
    if s.sequence_split > 1:
        raise ValueError(
            "sequence parallelism (ulyssesDegree/ringDegree) is not modelled for "
            "MochiTransformer3DModel: it has no _cp_plan and MochiAttnProcessor2_0 calls SDPA "
            "per sample"
        )
    heads, hd = c["num_attention_heads"], c["attention_head_dim"]
    d, a = heads * hd, s.act_bytes
    f = (4 * d * 2) // 3
    per = denoiser_tokens("MochiTransformer3DModel", c, s)
    n = s.batch * per
    joint = s.batch * (per + s.text_tokens) * d * a
    block = n * (4 * a * d + 4 * a * f) + joint
    rotary = per * 2 * (d // 2) * FP32
    text = s.batch * s.text_tokens * c["pooled_projection_dim"] * a
    one = DenoiseShape(1, s.frames, s.height, s.width, s.text_tokens, a, s.materialised)
    scores = _attention_matrix(one, heads, per + s.text_tokens, per + s.text_tokens)
    return int(block + rotary + text + scores)


def _unet(c: Config, s: DenoiseShape) -> int:
    """``UNet2DConditionModel``: the skip connections of every down block stay alive for the up
    path (``down_block_res_samples``); the largest live set is a ``BasicTransformerBlock``'s
    GEGLU feed-forward at the widest attention level: the ``Transformer2DModel`` input, its
    channels-last copy, ``proj_in`` output and the normalised input (4 x inner), the GEGLU
    ``proj`` (8 x inner), ``gelu(gate)`` and the gated product (4 + 4 x inner)."""
    boc = list(c["block_out_channels"])
    layers = c["layers_per_block"]
    n_layers = list(layers) if isinstance(layers, tuple | list) else [layers] * len(boc)
    a = s.act_bytes
    area = s.frames * s.height * s.width
    skips = boc[0] * area
    level = area
    for i, ch in enumerate(boc):
        skips += n_layers[i] * ch * level
        if i < len(boc) - 1:
            level //= 4
            skips += ch * level
    peak = 0
    level = area
    heads = c["num_attention_heads"] or c["attention_head_dim"]
    heads_list = list(heads) if isinstance(heads, tuple | list) else [heads] * len(boc)
    for i, ch in enumerate(boc):
        resnet = 2 * ch + 4 * ch
        geglu = 4 * ch + 8 * ch + 4 * ch + 4 * ch
        cross = (
            i < len(c["down_block_types"]) and c["down_block_types"][i] == "CrossAttnDownBlock2D"
        )
        local = geglu if cross else resnet
        attn = 0
        if cross and s.materialised:
            attn = 2 * heads_list[i] * level * level
        peak = max(peak, local * level + attn)
        if i < len(boc) - 1:
            level //= 4
    return int(s.batch * a * (skips + peak))


_FAMILIES: dict[str, Callable[[Config, DenoiseShape], int]] = {
    "WanTransformer3DModel": _wan,
    "FluxTransformer2DModel": _flux,
    "QwenImageTransformer2DModel": _qwen_image,
    "HunyuanVideoTransformer3DModel": _hunyuan,
    "SD3Transformer2DModel": _sd3,
    "CogVideoXTransformer3DModel": _cogvideox,
    "LTXVideoTransformer3DModel": _ltx,
    "UNet2DConditionModel": _unet,
    "MochiTransformer3DModel": _mochi,
}


def denoiser_forward_bytes(cls: str, c: Config, shape: DenoiseShape) -> int:
    """Peak transient bytes of one forward pass of denoiser class ``cls`` on one GPU.

    :raises KeyError: ``cls`` is not a supported denoiser class.
    """
    return math.ceil(_FAMILIES[cls](c, shape))
