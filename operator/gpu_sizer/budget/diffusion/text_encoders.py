"""Text and image encoders as module trees, from their config. Pure.

Each builder mirrors one ``transformers`` 5.24.0 class (``models/<family>/modeling_<family>.py``
named in its docstring); the oracle tests compare counts with the library's models on the meta
device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpu_sizer.budget.diffusion.denoisers import UnsupportedConfig
from gpu_sizer.budget.diffusion.parts import (
    Part,
    buffer,
    conv,
    embedding,
    layer_norm,
    linear,
    module,
    param,
    rms_norm,
    sequence,
)

__all__ = [
    "IMAGE_ENCODERS",
    "clip_text_model",
    "clip_text_model_with_projection",
    "clip_vision_model",
    "clip_vision_model_with_projection",
    "llama_model",
    "qwen2_5_vl_for_conditional_generation",
    "stable_diffusion_safety_checker",
    "t5_encoder_model",
    "umt5_encoder_model",
]

Config = Mapping[str, Any]


def _clip_layers(c: Config) -> Part:
    """``modeling_clip.py`` ``CLIPEncoder``: ``layers`` of ``CLIPEncoderLayer``."""
    h, inner = c["hidden_size"], c["intermediate_size"]
    layer = module(
        "0",
        module(
            "self_attn",
            linear("k_proj", h, h),
            linear("v_proj", h, h),
            linear("q_proj", h, h),
            linear("out_proj", h, h),
        ),
        layer_norm("layer_norm1", h),
        module("mlp", linear("fc1", h, inner), linear("fc2", inner, h)),
        layer_norm("layer_norm2", h),
        copies=c["num_hidden_layers"],
    )
    return module("encoder", sequence("layers", layer))


#: The CLIP vision towers a pipeline calls with ``output_hidden_states=True`` (Wan 2.1
#: image-to-video's ``encode_image`` reads ``hidden_states[-2]``), keeping one tensor per layer.
IMAGE_ENCODERS: Final = frozenset({"CLIPVisionModel", "CLIPVisionModelWithProjection"})


def clip_text_model(c: Config) -> Part:
    """``modeling_clip.py`` ``CLIPTextModel`` (SD's CLIP ViT-L/14 text tower)."""
    h, pos = c["hidden_size"], c["max_position_embeddings"]
    return module(
        "text_encoder",
        module(
            "embeddings",
            embedding("token_embedding", c["vocab_size"], h),
            embedding("position_embedding", pos, h),
            buffer("position_ids", pos),
        ),
        _clip_layers(c),
        layer_norm("final_layer_norm", h),
    )


def clip_text_model_with_projection(c: Config) -> Part:
    """``modeling_clip.py`` ``CLIPTextModelWithProjection`` (SDXL's and SD3's OpenCLIP
    bigG/14, SD3's CLIP-L): ``text_model`` and a bias-free ``text_projection``."""
    inner = clip_text_model(c)
    return module(
        "text_encoder",
        module("text_model", *inner.children),
        linear("text_projection", c["hidden_size"], c["projection_dim"], bias=False),
    )


def clip_vision_model(c: Config) -> Part:
    """``modeling_clip.py`` ``CLIPVisionModel`` (Wan 2.1 image-to-video's ViT-H/14 image
    encoder)."""
    h, p = c["hidden_size"], c["patch_size"]
    positions = (c["image_size"] // p) ** 2 + 1
    return module(
        "image_encoder",
        module(
            "embeddings",
            param("class_embedding", h),
            conv("patch_embedding", c["num_channels"], h, (p, p), bias=False),
            embedding("position_embedding", positions, h),
            buffer("position_ids", positions),
        ),
        layer_norm("pre_layrnorm", h),
        _clip_layers(c),
        layer_norm("post_layernorm", h),
    )


def clip_vision_model_with_projection(c: Config) -> Part:
    """``modeling_clip.py`` ``CLIPVisionModelWithProjection`` (the class the published Wan 2.1
    image-to-video ``model_index.json`` names): ``vision_model`` and a bias-free
    ``visual_projection`` to ``projection_dim``."""
    inner = clip_vision_model(c)
    return module(
        "image_encoder",
        module("vision_model", *inner.children),
        linear("visual_projection", c["hidden_size"], c["projection_dim"], bias=False),
    )


def stable_diffusion_safety_checker(c: Config) -> Part:
    """``diffusers/pipelines/stable_diffusion/safety_checker.py``
    ``StableDiffusionSafetyChecker`` (SD 1.x/2.x): a ``CLIPVisionModel`` of the config's
    ``vision_config`` (ViT-L/14 in the published checker), a bias-free ``visual_projection`` to
    ``projection_dim``, and the concept embeddings and thresholds it compares against (17 + 3
    rows, kept as ``nn.Parameter``)."""
    vision = c["vision_config"]
    dim = c["projection_dim"]
    return module(
        "safety_checker",
        module("vision_model", *clip_vision_model(vision).children),
        linear("visual_projection", vision["hidden_size"], dim, bias=False),
        param("concept_embeds", 17 * dim),
        param("special_care_embeds", 3 * dim),
        param("concept_embeds_weights", 17),
        param("special_care_embeds_weights", 3),
    )


def _t5(c: Config, every_layer_bias: bool) -> Part:
    d, inner, heads, kv = c["d_model"], c["d_ff"], c["num_heads"], c["d_kv"]
    proj = str(c["feed_forward_proj"])
    gated = proj.startswith("gated-")
    if proj.removeprefix("gated-") not in ("relu", "gelu", "gelu_new", "silu"):
        raise UnsupportedConfig(f"feedForwardProj {proj!r}")
    wide = heads * kv

    def block(name: str, bias: bool, copies: int) -> Part:
        attn = module(
            "SelfAttention",
            linear("q", d, wide, False),
            linear("k", d, wide, False),
            linear("v", d, wide, False),
            linear("o", wide, d, False),
            embedding("relative_attention_bias", c["relative_attention_num_buckets"], heads)
            if bias
            else None,
        )
        ff = (
            module(
                "DenseReluDense",
                linear("wi_0", d, inner, False),
                linear("wi_1", d, inner, False),
                linear("wo", inner, d, False),
            )
            if gated
            else module(
                "DenseReluDense", linear("wi", d, inner, False), linear("wo", inner, d, False)
            )
        )
        return module(
            name,
            sequence(
                "layer",
                module("0", attn, rms_norm("layer_norm", d)),
                module("1", ff, rms_norm("layer_norm", d)),
            ),
            copies=copies,
        )

    layers = c["num_layers"]
    if every_layer_bias:
        blocks = sequence("block", block("0", True, layers))
    else:
        blocks = sequence(
            "block", block("0", True, 1), block("1", False, layers - 1) if layers > 1 else None
        )
    return module(
        "text_encoder",
        embedding("shared", c["vocab_size"], d),
        module("encoder", blocks, rms_norm("final_layer_norm", d)),
    )


def t5_encoder_model(c: Config) -> Part:
    """``models/t5/modeling_t5.py`` ``T5EncoderModel`` (T5 v1.1 XXL in SD3, Flux, CogVideoX,
    LTX-Video): relative position bias in the first block only; ``encoder.embed_tokens`` is
    ``shared``."""
    return _t5(c, every_layer_bias=False)


def umt5_encoder_model(c: Config) -> Part:
    """``models/umt5/modeling_umt5.py`` ``UMT5EncoderModel`` (Wan's umT5-XXL): a relative
    position bias in every block."""
    return _t5(c, every_layer_bias=True)


def _decoder_layer(
    h: int, inner: int, heads: int, kv: int, hd: int, bias: tuple[bool, bool, bool], copies: int
) -> Part:
    """``copies`` Llama-style decoder layers (``LlamaDecoderLayer``, ``Qwen2_5_VLDecoderLayer``):
    grouped-query attention and a gated MLP between two RMS norms; ``bias`` says which of the
    q/k/v projections, ``o_proj`` and the MLP's projections carry one."""
    qkv, out, mlp = bias
    return module(
        "0",
        module(
            "self_attn",
            linear("q_proj", h, heads * hd, qkv),
            linear("k_proj", h, kv * hd, qkv),
            linear("v_proj", h, kv * hd, qkv),
            linear("o_proj", heads * hd, h, out),
        ),
        module(
            "mlp",
            linear("gate_proj", h, inner, mlp),
            linear("up_proj", h, inner, mlp),
            linear("down_proj", inner, h, mlp),
        ),
        rms_norm("input_layernorm", h),
        rms_norm("post_attention_layernorm", h),
        copies=copies,
    )


def llama_model(c: Config) -> Part:
    """``models/llama/modeling_llama.py`` ``LlamaModel`` without ``lm_head`` (HunyuanVideo's
    LLaVA-Llama-3-8B text encoder)."""
    h, inner = c["hidden_size"], c["intermediate_size"]
    heads = c["num_attention_heads"]
    kv = c["num_key_value_heads"] or heads
    hd = c["head_dim"] or h // heads
    ab, mb = c["attention_bias"], c["mlp_bias"]
    layer = _decoder_layer(h, inner, heads, kv, hd, (ab, ab, mb), c["num_hidden_layers"])
    half = hd // 2
    return module(
        "text_encoder",
        embedding("embed_tokens", c["vocab_size"], h),
        sequence("layers", layer),
        rms_norm("norm", h),
        module("rotary_emb", buffer("inv_freq", half), buffer("original_inv_freq", half)),
    )


def qwen2_5_vl_for_conditional_generation(c: Config) -> Part:
    """``models/qwen2_5_vl/modeling_qwen2_5_vl.py`` ``Qwen2_5_VLForConditionalGeneration``
    (Qwen-Image's text encoder, Qwen2.5-VL-7B-Instruct): the pipeline loads the whole class,
    ``model.visual`` (the vision tower and its patch merger, unused by text-to-image) and
    ``lm_head`` included. Text layers: q/k/v with bias, ``o_proj`` and the gated MLP without;
    vision blocks: fused ``qkv`` and a gated MLP, all with bias. ``lm_head`` shares the token
    embedding's weight under ``tie_word_embeddings`` (``_tied_weights_keys``), counted once."""
    t, v = c["text_config"], c["vision_config"]
    h, inner, heads = t["hidden_size"], t["intermediate_size"], t["num_attention_heads"]
    kv = t["num_key_value_heads"] or heads
    hd = h // heads
    layer = _decoder_layer(h, inner, heads, kv, hd, (True, False, False), t["num_hidden_layers"])
    language = module(
        "language_model",
        embedding("embed_tokens", t["vocab_size"], h),
        sequence("layers", layer),
        rms_norm("norm", h),
        module("rotary_emb", buffer("inv_freq", hd // 2), buffer("original_inv_freq", hd // 2)),
    )
    vh, vi, merge = v["hidden_size"], v["intermediate_size"], v["spatial_merge_size"]
    block = module(
        "0",
        rms_norm("norm1", vh),
        rms_norm("norm2", vh),
        module("attn", linear("qkv", vh, 3 * vh), linear("proj", vh, vh)),
        module(
            "mlp",
            linear("gate_proj", vh, vi),
            linear("up_proj", vh, vi),
            linear("down_proj", vi, vh),
        ),
        copies=v["depth"],
    )
    axial = -(-(vh // v["num_heads"] // 2) // 2)  # arange(0, head_dim // 2, 2)
    merged = vh * merge**2
    patch = (v["temporal_patch_size"], v["patch_size"], v["patch_size"])
    visual = module(
        "visual",
        module("patch_embed", conv("proj", v["in_channels"], vh, patch, bias=False)),
        module("rotary_pos_emb", buffer("inv_freq", axial), buffer("original_inv_freq", axial)),
        sequence("blocks", block) if v["depth"] else sequence("blocks"),
        module(
            "merger",
            rms_norm("ln_q", vh),
            sequence("mlp", linear("0", merged, merged), linear("2", merged, v["out_hidden_size"])),
        ),
    )
    head = None if c["tie_word_embeddings"] else linear("lm_head", h, t["vocab_size"], False)
    return module("text_encoder", module("model", visual, language), head)


def encoder_forward_bytes(cls: str, c: Config, batch: int, tokens: int, act_bytes: int) -> int:
    """Peak transient bytes of one text (or image) encoder forward pass over ``batch`` sequences
    of ``tokens`` tokens.

    Per token the live set of a pre-norm transformer layer is at most the residual stream, its
    normalised copy, q, k, v and the attention output (6 x width) or the residual stream, the
    normalised copy and the MLP's intermediate tensors (two of the FFN width, three for gated
    MLPs). T5 and UMT5 compute attention eagerly in ``transformers`` (``T5Attention.forward``:
    ``matmul`` scores plus the position bias, ``softmax(scores.float())``): the scores in the
    activation dtype, their float32 softmax and the cast back, per head, plus the position bias
    ``[1, heads, L, L]`` kept across layers. CLIP and Llama use SDPA (no score matrix). Every
    pipeline keeps the hidden states it reads: HunyuanVideo's Llama and Wan's CLIP vision tower
    are called with ``output_hidden_states=True`` (one tensor per layer).
    """
    a = act_bytes
    if cls in ("T5EncoderModel", "UMT5EncoderModel"):
        d, inner, heads = c["d_model"], c["d_ff"], c["num_heads"]
        gated = str(c["feed_forward_proj"]).startswith("gated-")
        per_token = max(6 * d, 2 * d + (3 if gated else 2) * inner) * a
        scores = batch * heads * tokens * tokens * (a + 4 + a)
        bias = heads * tokens * tokens * 4
        return int(batch * tokens * per_token + scores + bias)
    if cls == "LlamaModel":
        h, inner = c["hidden_size"], c["intermediate_size"]
        layers = c["num_hidden_layers"]
        per_token = max(6 * h, 2 * h + 3 * inner) * a
        return int(batch * tokens * (per_token + (layers + 1) * h * a))
    if cls == "Qwen2_5_VLForConditionalGeneration":
        return _qwen2_5_vl_forward_bytes(c, batch, tokens, act_bytes)
    if cls == "StableDiffusionSafetyChecker":
        # run_safety_checker calls vision_model(clip_input): no hidden states kept
        c = c["vision_config"]
    h, inner = c["hidden_size"], c["intermediate_size"]
    per_token = max(6 * h, 2 * h + 2 * inner) * a
    keep = (c["num_hidden_layers"] + 1) * h * a if cls in IMAGE_ENCODERS else 0
    return int(batch * tokens * (per_token + keep))


def _qwen2_5_vl_forward_bytes(c: Config, batch: int, tokens: int, act_bytes: int) -> int:
    """``Qwen2_5_VLForConditionalGeneration.forward`` as QwenImagePipeline's
    ``_get_qwen_prompt_embeds`` calls it (transformers 5.24 ``modeling_qwen2_5_vl.py``):

    - ``output_hidden_states=True`` keeps every layer's output (the embeddings and one per
      layer, the last replaced by the final norm's);
    - ``use_cache`` is left to the config (true in Qwen-Image's), so a ``DynamicCache`` keeps
      each layer's keys and values;
    - ``logits_to_keep=0`` makes ``lm_head`` compute logits over every token (``vocab_size``
      per token, in the activation dtype), which the pipeline then discards.

    The peak is the end of the pass (the logits over the kept hidden states and cache) or the
    last layer's gated MLP (gate, its activation, up and their product: ``2 h + 3 i`` against
    q, k, v and the keys and values ``repeat_kv`` expands for SDPA), while the rotary
    ``cos``/``sin`` (``head_dim`` each, activation dtype) and the int64 position ids are alive.
    A batch whose prompts are of one length has no padding, and SDPA then runs without a mask
    (``_ignore_causal_mask_sdpa``); the vision tower does not run (no image is given)."""
    t = c["text_config"]
    h, inner, heads = t["hidden_size"], t["intermediate_size"], t["num_attention_heads"]
    kv = t["num_key_value_heads"] or heads
    layers, hd = t["num_hidden_layers"], h // heads
    cache = layers * 2 * kv * hd
    in_layer = (layers * h + cache + 2 * hd + max(6 * h, 2 * h + 3 * inner)) * act_bytes + 8
    at_end = ((layers + 1) * h + cache + t["vocab_size"]) * act_bytes
    return int(batch * tokens * max(in_layer, at_end))
