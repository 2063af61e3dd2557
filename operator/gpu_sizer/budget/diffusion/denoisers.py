"""Denoisers (UNet and diffusion transformers) as module trees, from their config. Pure.

Each builder mirrors the ``__init__`` of one ``diffusers`` 0.42.1 class, named with its file,
and takes the resolved config (``gpu_sizer.api.components.resolved_config``: snake_case keys,
class defaults filled in). The oracle tests build every supported published config with
``diffusers`` on PyTorch's meta device and compare parameter and buffer counts exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpu_sizer.budget.diffusion.blocks import (
    ada_layer_norm_continuous,
    ada_layer_norm_zero,
    attention,
    feed_forward,
    text_projection,
    timestep_embedding,
)
from gpu_sizer.budget.diffusion.parts import (
    Part,
    buffer,
    conv,
    embedding,
    group_norm,
    layer_norm,
    linear,
    module,
    param,
    rms_norm,
    sequence,
)

__all__ = [
    "UnsupportedConfig",
    "cogvideox_transformer",
    "flux_transformer",
    "hunyuan_video_transformer",
    "ltx_video_transformer",
    "mochi_transformer",
    "qwen_image_transformer",
    "sd3_transformer",
    "unet_2d_condition",
    "wan_transformer",
]

Config = Mapping[str, Any]


class UnsupportedConfig(ValueError):
    """The config selects a variant of the class that gpu-sizer does not size (the message says
    which key and value); the estimate lists the component as missing."""


def _blocks(name: str, block: Part, count: int) -> Part:
    """A ``ModuleList`` of ``count`` identical blocks."""
    if count == 0:
        return sequence(name)
    return sequence(name, module("0", *block.children, copies=count))


# --- diffusion transformers --------------------------------------------------------------------


def flux_transformer(c: Config) -> Part:
    """``transformers/transformer_flux.py`` ``FluxTransformer2DModel`` (Flux.1 dev/schnell)."""
    dim = c["num_attention_heads"] * c["attention_head_dim"]
    heads, head_dim = c["num_attention_heads"], c["attention_head_dim"]
    out = c["out_channels"] or c["in_channels"]
    time_text = [
        timestep_embedding("timestep_embedder", 256, dim),
        timestep_embedding("guidance_embedder", 256, dim) if c["guidance_embeds"] else None,
        text_projection("text_embedder", c["pooled_projection_dim"], dim),
    ]
    joint = module(
        "block",
        ada_layer_norm_zero("norm1", dim),
        ada_layer_norm_zero("norm1_context", dim),
        attention(
            "attn", dim, added_kv_proj_dim=dim, dim_head=head_dim, heads=heads, out_dim=dim,
            context_pre_only=False, bias=True, qk_norm="rms_norm",
        ),
        feed_forward("ff", dim, dim_out=dim, activation_fn="gelu-approximate"),
        feed_forward("ff_context", dim, dim_out=dim, activation_fn="gelu-approximate"),
    )  # fmt: skip
    mlp = int(dim * 4.0)
    single = module(
        "block",
        ada_layer_norm_zero("norm", dim, chunks=3),
        linear("proj_mlp", dim, mlp),
        linear("proj_out", dim + mlp, dim),
        attention(
            "attn", dim, dim_head=head_dim, heads=heads, out_dim=dim, bias=True,
            qk_norm="rms_norm", pre_only=True,
        ),
    )  # fmt: skip
    return module(
        "transformer",
        module("time_text_embed", *time_text),
        linear("context_embedder", c["joint_attention_dim"], dim),
        linear("x_embedder", c["in_channels"], dim),
        _blocks("transformer_blocks", joint, c["num_layers"]),
        _blocks("single_transformer_blocks", single, c["num_single_layers"]),
        ada_layer_norm_continuous("norm_out", dim, dim),
        linear("proj_out", dim, c["patch_size"] ** 2 * out),
    )


def qwen_image_transformer(c: Config) -> Part:
    """``transformers/transformer_qwenimage.py`` ``QwenImageTransformer2DModel`` (Qwen-Image):
    60 dual-stream blocks, each with its own modulation, norms and MLP for the image and the
    text stream around one joint attention (``add_q/k/v_proj`` and ``to_add_out`` for the text,
    RMS q/k norms on both). The rotary tables (``QwenEmbedRope.pos_freqs``/``neg_freqs``) are
    plain attributes, neither parameters nor buffers; ``guidance_embeds`` builds nothing."""
    heads, head_dim = c["num_attention_heads"], c["attention_head_dim"]
    dim = heads * head_dim
    out = c["out_channels"] or c["in_channels"]
    block = module(
        "block",
        sequence("img_mod", linear("1", dim, 6 * dim)),
        module("img_norm1"),
        attention(
            "attn", dim, added_kv_proj_dim=dim, dim_head=head_dim, heads=heads, out_dim=dim,
            context_pre_only=False, bias=True, qk_norm="rms_norm",
        ),
        module("img_norm2"),
        feed_forward("img_mlp", dim, dim_out=dim, activation_fn="gelu-approximate"),
        sequence("txt_mod", linear("1", dim, 6 * dim)),
        module("txt_norm1"),
        module("txt_norm2"),
        feed_forward("txt_mlp", dim, dim_out=dim, activation_fn="gelu-approximate"),
    )  # fmt: skip
    extra = embedding("addition_t_embedding", 2, dim) if c["use_additional_t_cond"] else None
    return module(
        "transformer",
        module("pos_embed"),
        module(
            "time_text_embed",
            module("time_proj"),
            timestep_embedding("timestep_embedder", 256, dim),
            extra,
        ),
        rms_norm("txt_norm", c["joint_attention_dim"]),
        linear("img_in", c["in_channels"], dim),
        linear("txt_in", c["joint_attention_dim"], dim),
        _blocks("transformer_blocks", block, c["num_layers"]),
        ada_layer_norm_continuous("norm_out", dim, dim),
        linear("proj_out", dim, c["patch_size"] ** 2 * out),
    )


def sd3_transformer(c: Config) -> Part:
    """``transformers/transformer_sd3.py`` ``SD3Transformer2DModel`` with
    ``attention.py`` ``JointTransformerBlock`` (SD3 medium, SD3.5 large/medium)."""
    heads, head_dim = c["num_attention_heads"], c["attention_head_dim"]
    dim = heads * head_dim
    p = c["patch_size"]
    grid = c["pos_embed_max_size"] or int(((c["sample_size"] // p) ** 2) ** 0.5)
    pos_embed = module(
        "pos_embed",
        conv("proj", c["in_channels"], dim, (p, p)),
        buffer("pos_embed", grid * grid * dim),
    )
    time_text = module(
        "time_text_embed",
        timestep_embedding("timestep_embedder", 256, dim),
        text_projection("text_embedder", c["pooled_projection_dim"], dim),
    )
    dual = set(c["dual_attention_layers"])
    gelu = "gelu-approximate"
    layers = c["num_layers"]

    def block(i: int) -> Part:
        last = i == layers - 1
        return module(
            str(i),
            ada_layer_norm_zero("norm1", dim, chunks=9 if i in dual else 6),
            ada_layer_norm_continuous("norm1_context", dim, dim)
            if last
            else ada_layer_norm_zero("norm1_context", dim),
            attention(
                "attn", dim, added_kv_proj_dim=dim, dim_head=head_dim, heads=heads, out_dim=dim,
                context_pre_only=last, bias=True, qk_norm=c["qk_norm"],
            ),
            attention(
                "attn2", dim, dim_head=head_dim, heads=heads, out_dim=dim, bias=True,
                qk_norm=c["qk_norm"],
            )
            if i in dual
            else None,
            feed_forward("ff", dim, dim_out=dim, activation_fn="gelu-approximate"),
            None if last else feed_forward("ff_context", dim, dim_out=dim, activation_fn=gelu),
        )  # fmt: skip

    return module(
        "transformer",
        pos_embed,
        time_text,
        linear("context_embedder", c["joint_attention_dim"], c["caption_projection_dim"]),
        sequence("transformer_blocks", *(block(i) for i in range(layers))),
        ada_layer_norm_continuous("norm_out", dim, dim),
        linear("proj_out", dim, p * p * c["out_channels"]),
    )


def wan_transformer(c: Config) -> Part:
    """``transformers/transformer_wan.py`` ``WanTransformer3DModel`` (Wan 2.1 and 2.2, T2V/I2V)."""
    heads, head_dim = c["num_attention_heads"], c["attention_head_dim"]
    dim = heads * head_dim
    if c["qk_norm"] not in ("rms_norm_across_heads", None):
        raise UnsupportedConfig(
            f"qkNorm {c['qk_norm']!r} (WanAttention supports rms_norm_across_heads)"
        )
    image = None
    if c["image_dim"] is not None:
        d_img = c["image_dim"]
        pos = c["pos_embed_seq_len"]
        image = module(
            "image_embedder",
            layer_norm("norm1", d_img),
            feed_forward("ff", d_img, dim_out=dim, mult=1, activation_fn="gelu"),
            layer_norm("norm2", dim),
            param("pos_embed", pos * d_img) if pos is not None else None,
        )
    condition = module(
        "condition_embedder",
        timestep_embedding("time_embedder", c["freq_dim"], dim),
        linear("time_proj", dim, 6 * dim),
        text_projection("text_embedder", c["text_dim"], dim),
        image,
    )

    def wan_attention(name: str, added_kv: int | None) -> Part:
        parts = [
            linear("to_q", dim, dim),
            linear("to_k", dim, dim),
            linear("to_v", dim, dim),
            sequence("to_out", linear("0", dim, dim)),
            rms_norm("norm_q", dim),
            rms_norm("norm_k", dim),
        ]
        if added_kv is not None:
            parts += [linear("add_k_proj", added_kv, dim), linear("add_v_proj", added_kv, dim)]
            parts.append(rms_norm("norm_added_k", dim))
        return module(name, *parts)

    block = module(
        "block",
        layer_norm("norm1", dim, False),
        wan_attention("attn1", None),
        wan_attention("attn2", c["added_kv_proj_dim"]),
        layer_norm("norm2", dim) if c["cross_attn_norm"] else None,
        feed_forward("ffn", dim, inner_dim=c["ffn_dim"], activation_fn="gelu-approximate"),
        layer_norm("norm3", dim, False),
        param("scale_shift_table", 6 * dim),
    )
    patch = tuple(c["patch_size"])
    rope = c["rope_max_seq_len"] * head_dim
    return module(
        "transformer",
        module("rope", buffer("freqs_cos", rope), buffer("freqs_sin", rope)),
        conv("patch_embedding", c["in_channels"], dim, patch),
        condition,
        _blocks("blocks", block, c["num_layers"]),
        layer_norm("norm_out", dim, False),
        linear("proj_out", dim, c["out_channels"] * math.prod(patch)),
        param("scale_shift_table", 2 * dim),
    )


def hunyuan_video_transformer(c: Config) -> Part:
    """``transformers/transformer_hunyuan_video.py`` ``HunyuanVideoTransformer3DModel``."""
    if c["image_condition_type"] is not None:
        raise UnsupportedConfig(
            f"imageConditionType {c['image_condition_type']!r} (HunyuanVideo image-to-video)"
        )
    heads, head_dim = c["num_attention_heads"], c["attention_head_dim"]
    dim = heads * head_dim
    text = c["text_embed_dim"]
    refiner_block = module(
        "block",
        layer_norm("norm1", dim),
        attention("attn", dim, heads=heads, dim_head=head_dim, bias=True),
        layer_norm("norm2", dim),
        feed_forward("ff", dim, mult=4.0, activation_fn="linear-silu"),
        module("norm_out", linear("linear", dim, 2 * dim)),
    )
    refiner = module(
        "context_embedder",
        module(
            "time_text_embed",
            timestep_embedding("timestep_embedder", 256, dim),
            text_projection("text_embedder", text, dim),
        ),
        linear("proj_in", text, dim),
        module("token_refiner", _blocks("refiner_blocks", refiner_block, c["num_refiner_layers"])),
    )
    condition = module(
        "time_text_embed",
        timestep_embedding("timestep_embedder", 256, dim),
        text_projection("text_embedder", c["pooled_projection_dim"], dim),
        timestep_embedding("guidance_embedder", 256, dim) if c["guidance_embeds"] else None,
    )
    qk = c["qk_norm"]
    mlp = int(dim * c["mlp_ratio"])
    double = module(
        "block",
        ada_layer_norm_zero("norm1", dim),
        ada_layer_norm_zero("norm1_context", dim),
        attention(
            "attn", dim, added_kv_proj_dim=dim, dim_head=head_dim, heads=heads, out_dim=dim,
            context_pre_only=False, bias=True, qk_norm=qk,
        ),
        feed_forward("ff", dim, mult=c["mlp_ratio"], activation_fn="gelu-approximate"),
        feed_forward("ff_context", dim, mult=c["mlp_ratio"], activation_fn="gelu-approximate"),
    )  # fmt: skip
    single = module(
        "block",
        attention(
            "attn", dim, dim_head=head_dim, heads=heads, out_dim=dim, bias=True, qk_norm=qk,
            pre_only=True,
        ),
        ada_layer_norm_zero("norm", dim, chunks=3),
        linear("proj_mlp", dim, mlp),
        linear("proj_out", dim + mlp, dim),
    )  # fmt: skip
    pt, p = c["patch_size_t"], c["patch_size"]
    return module(
        "transformer",
        module("x_embedder", conv("proj", c["in_channels"], dim, (pt, p, p))),
        refiner,
        condition,
        _blocks("transformer_blocks", double, c["num_layers"]),
        _blocks("single_transformer_blocks", single, c["num_single_layers"]),
        ada_layer_norm_continuous("norm_out", dim, dim),
        linear("proj_out", dim, pt * p * p * c["out_channels"]),
    )


def cogvideox_transformer(c: Config) -> Part:
    """``transformers/cogvideox_transformer_3d.py`` ``CogVideoXTransformer3DModel`` with
    ``embeddings.py`` ``CogVideoXPatchEmbed`` (CogVideoX 2B/5B and 1.5)."""
    heads, head_dim = c["num_attention_heads"], c["attention_head_dim"]
    dim = heads * head_dim
    p, pt = c["patch_size"], c["patch_size_t"]
    proj = (
        conv("proj", c["in_channels"], dim, (p, p), c["patch_bias"])
        if pt is None
        else linear("proj", c["in_channels"] * p * p * pt, dim)
    )
    use_pos = not c["use_rotary_positional_embeddings"] or c["use_learned_positional_embeddings"]
    pos = None
    if use_pos:
        frames = (c["sample_frames"] - 1) // c["temporal_compression_ratio"] + 1
        patches = (c["sample_height"] // p) * (c["sample_width"] // p) * frames
        pos = buffer("pos_embedding", (c["max_text_seq_length"] + patches) * dim)
    patch_embed = module("patch_embed", proj, linear("text_proj", c["text_embed_dim"], dim), pos)
    t = c["time_embed_dim"]
    affine = c["norm_elementwise_affine"]
    block = module(
        "block",
        module("norm1", linear("linear", t, 6 * dim), layer_norm("norm", dim, affine)),
        attention(
            "attn1", dim, dim_head=head_dim, heads=heads, qk_norm="layer_norm",
            bias=c["attention_bias"],
        ),
        module("norm2", linear("linear", t, 6 * dim), layer_norm("norm", dim, affine)),
        feed_forward("ff", dim, activation_fn="gelu-approximate"),
    )  # fmt: skip
    ofs = c["ofs_embed_dim"]
    out = p * p * c["out_channels"] * (1 if pt is None else pt)
    return module(
        "transformer",
        patch_embed,
        timestep_embedding("time_embedding", dim, t),
        timestep_embedding("ofs_embedding", ofs, ofs) if ofs else None,
        _blocks("transformer_blocks", block, c["num_layers"]),
        layer_norm("norm_final", dim, affine),
        module("norm_out", linear("linear", t, 2 * dim), layer_norm("norm", dim, affine)),
        linear("proj_out", dim, out),
    )


def ltx_video_transformer(c: Config) -> Part:
    """``transformers/transformer_ltx.py`` ``LTXVideoTransformer3DModel`` (LTX-Video 0.9.x)."""
    heads, head_dim = c["num_attention_heads"], c["attention_head_dim"]
    dim = heads * head_dim
    bias, out_bias = c["attention_bias"], c["attention_out_bias"]

    def ltx_attention(name: str, cross: int) -> Part:
        return module(
            name,
            rms_norm("norm_q", dim),
            rms_norm("norm_k", dim),
            linear("to_q", dim, dim, bias),
            linear("to_k", cross, dim, bias),
            linear("to_v", cross, dim, bias),
            sequence("to_out", linear("0", dim, dim, out_bias)),
        )

    affine = c["norm_elementwise_affine"]
    block = module(
        "block",
        rms_norm("norm1", dim, affine),
        ltx_attention("attn1", dim),
        rms_norm("norm2", dim, affine),
        ltx_attention("attn2", c["cross_attention_dim"]),
        feed_forward("ff", dim, activation_fn="gelu-approximate"),
        param("scale_shift_table", 6 * dim),
    )
    return module(
        "transformer",
        linear("proj_in", c["in_channels"], dim),
        param("scale_shift_table", 2 * dim),
        module(
            "time_embed",
            module("emb", timestep_embedding("timestep_embedder", 256, dim)),
            linear("linear", dim, 6 * dim),
        ),
        text_projection("caption_projection", c["caption_channels"], dim),
        _blocks("transformer_blocks", block, c["num_layers"]),
        layer_norm("norm_out", dim, False),
        linear("proj_out", dim, c["out_channels"]),
    )


# --- UNet --------------------------------------------------------------------------------------


def _per_block(value: Any, n: int) -> list[Any]:
    return list(value) if isinstance(value, tuple | list) else [value] * n


def _resnet(name: str, cin: int, cout: int, temb: int | None) -> Part:
    """``resnet.py`` ``ResnetBlock2D`` (``time_embedding_norm="default"``)."""
    return module(
        name,
        group_norm("norm1", cin),
        conv("conv1", cin, cout, (3, 3)),
        linear("time_emb_proj", temb, cout) if temb is not None else None,
        group_norm("norm2", cout),
        conv("conv2", cout, cout, (3, 3)),
        conv("conv_shortcut", cin, cout, (1, 1)) if cin != cout else None,
    )


def _transformer_2d(
    name: str, heads: int, head_dim: int, channels: int, layers: int, cross: int, linear_proj: bool
) -> Part:
    """``transformers/transformer_2d.py`` ``Transformer2DModel`` (continuous input) of
    ``attention.py`` ``BasicTransformerBlock`` (self-attention, cross-attention, GEGLU)."""
    inner = heads * head_dim
    proj_in = (
        linear("proj_in", channels, inner)
        if linear_proj
        else conv("proj_in", channels, inner, (1, 1))
    )
    proj_out = (
        linear("proj_out", inner, channels)
        if linear_proj
        else conv("proj_out", inner, channels, (1, 1))
    )
    block = module(
        "block",
        layer_norm("norm1", inner),
        attention("attn1", inner, heads=heads, dim_head=head_dim),
        layer_norm("norm2", inner),
        attention("attn2", inner, cross_attention_dim=cross, heads=heads, dim_head=head_dim),
        layer_norm("norm3", inner),
        feed_forward("ff", inner, activation_fn="geglu"),
    )
    return module(
        name,
        group_norm("norm", channels),
        proj_in,
        _blocks("transformer_blocks", block, layers),
        proj_out,
    )


_DOWN = ("CrossAttnDownBlock2D", "DownBlock2D")
_UP = ("CrossAttnUpBlock2D", "UpBlock2D")


def unet_2d_condition(c: Config) -> Part:
    """``unets/unet_2d_condition.py`` ``UNet2DConditionModel`` with the blocks of
    ``unets/unet_2d_blocks.py`` (``CrossAttnDownBlock2D``, ``DownBlock2D``,
    ``UNetMidBlock2DCrossAttn``, ``CrossAttnUpBlock2D``, ``UpBlock2D``): SD 1.x, SD 2.x, SDXL."""
    for key, allowed in (
        ("class_embed_type", (None,)),
        ("encoder_hid_dim_type", (None,)),
        ("time_embedding_type", ("positional",)),
        ("resnet_time_scale_shift", ("default",)),
        ("attention_type", ("default",)),
        ("dual_cross_attention", (False,)),
        ("only_cross_attention", (False,)),
        ("addition_embed_type", (None, "text_time")),
        ("mid_block_type", ("UNetMidBlock2DCrossAttn", None)),
        ("reverse_transformer_layers_per_block", (None,)),
        ("time_cond_proj_dim", (None,)),
        ("class_embeddings_concat", (False,)),
    ):
        if c[key] not in allowed:
            raise UnsupportedConfig(f"{_camel(key)} {c[key]!r} (supported: {allowed})")
    downs, ups = list(c["down_block_types"]), list(c["up_block_types"])
    for kind in downs:
        if kind not in _DOWN:
            raise UnsupportedConfig(f"downBlockTypes entry {kind!r} (supported: {_DOWN})")
    for kind in ups:
        if kind not in _UP:
            raise UnsupportedConfig(f"upBlockTypes entry {kind!r} (supported: {_UP})")
    n = len(downs)
    boc = list(c["block_out_channels"])
    if len(boc) != n or len(ups) != n:
        raise UnsupportedConfig(
            "blockOutChannels, downBlockTypes and upBlockTypes differ in length"
        )
    heads = _per_block(c["num_attention_heads"] or c["attention_head_dim"], n)
    cross = _per_block(c["cross_attention_dim"], n)
    layers = _per_block(c["layers_per_block"], n)
    tlayers = _per_block(c["transformer_layers_per_block"], n)
    linear_proj = c["use_linear_projection"]
    temb = c["time_embedding_dim"] or boc[0] * 4
    k_in, k_out = c["conv_in_kernel"], c["conv_out_kernel"]
    parts: list[Part | None] = [
        conv("conv_in", c["in_channels"], boc[0], (k_in, k_in)),
        timestep_embedding("time_embedding", boc[0], temb),
    ]
    if c["addition_embed_type"] == "text_time":
        proj = c["projection_class_embeddings_input_dim"]
        if proj is None:
            raise UnsupportedConfig(
                "additionEmbedType text_time needs projectionClassEmbeddingsInputDim"
            )
        parts.append(timestep_embedding("add_embedding", proj, temb))
    down_parts = []
    out = boc[0]
    for i, kind in enumerate(downs):
        cin, out = out, boc[i]
        blocks: list[Part | None] = [
            sequence(
                "resnets",
                *(_resnet(str(j), cin if j == 0 else out, out, temb) for j in range(layers[i])),
            )
        ]
        if kind == "CrossAttnDownBlock2D":
            blocks.insert(
                0,
                sequence(
                    "attentions",
                    *(
                        _transformer_2d(
                            str(j),
                            heads[i],
                            out // heads[i],
                            out,
                            tlayers[i],
                            cross[i],
                            linear_proj,
                        )
                        for j in range(layers[i])
                    ),
                ),
            )
        if i < n - 1:
            blocks.append(sequence("downsamplers", module("0", conv("conv", out, out, (3, 3)))))
        down_parts.append(module(str(i), *blocks))
    parts.append(sequence("down_blocks", *down_parts))
    up_parts = []
    rev = boc[::-1]
    rheads, rcross, rlayers, rtl = heads[::-1], cross[::-1], layers[::-1], tlayers[::-1]
    out = rev[0]
    for i, kind in enumerate(ups):
        prev, out = out, rev[i]
        cin = rev[min(i + 1, n - 1)]
        count = rlayers[i] + 1
        resnets = []
        for j in range(count):
            skip = cin if j == count - 1 else out
            res_in = prev if j == 0 else out
            resnets.append(_resnet(str(j), res_in + skip, out, temb))
        ublocks: list[Part | None] = [sequence("resnets", *resnets)]
        if kind == "CrossAttnUpBlock2D":
            ublocks.insert(
                0,
                sequence(
                    "attentions",
                    *(
                        _transformer_2d(
                            str(j), rheads[i], out // rheads[i], out, rtl[i], rcross[i], linear_proj
                        )
                        for j in range(count)
                    ),
                ),
            )
        if i < n - 1:
            ublocks.append(sequence("upsamplers", module("0", conv("conv", out, out, (3, 3)))))
        up_parts.append(module(str(i), *ublocks))
    mid = None
    if c["mid_block_type"] is not None:
        ch = boc[-1]
        mid = module(
            "mid_block",
            sequence(
                "attentions",
                _transformer_2d(
                    "0", heads[-1], ch // heads[-1], ch, tlayers[-1], cross[-1], linear_proj
                ),
            ),
            sequence("resnets", _resnet("0", ch, ch, temb), _resnet("1", ch, ch, temb)),
        )
    parts += [
        sequence("up_blocks", *up_parts),
        mid,
        group_norm("conv_norm_out", boc[0]),
        conv("conv_out", boc[0], c["out_channels"], (k_out, k_out)),
    ]
    return module("unet", *parts)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w.title() for w in rest)


def mochi_transformer(c: Config) -> Part:
    """``transformers/transformer_mochi.py`` ``MochiTransformer3DModel`` (``MochiTransformerBlock``
    with ``attention_processor.py`` ``MochiAttention``; ``embeddings.py``
    ``MochiCombinedTimestepCaptionEmbedding`` and ``MochiAttentionPool``). ``qk_norm`` and
    ``max_sequence_length`` are stored but not read by the 0.42.1 constructor: ``MochiAttention``
    always builds four affine RMS norms of the head width, and the text length is the
    pipeline's."""
    if c["activation_fn"] != "swiglu":
        raise UnsupportedConfig(
            f"activationFn {c['activation_fn']!r} (Mochi's feed-forwards are sized for swiglu)"
        )
    heads, head_dim = c["num_attention_heads"], c["attention_head_dim"]
    dim, pooled, text = heads * head_dim, c["pooled_projection_dim"], c["text_embed_dim"]
    p = c["patch_size"]
    out_channels = c["out_channels"] or c["in_channels"]

    def block(last: bool) -> Part:
        attn = module(
            "attn1",
            rms_norm("norm_q", head_dim),
            rms_norm("norm_k", head_dim),
            rms_norm("norm_added_q", head_dim),
            rms_norm("norm_added_k", head_dim),
            linear("to_q", dim, dim, False),
            linear("to_k", dim, dim, False),
            linear("to_v", dim, dim, False),
            linear("add_k_proj", pooled, dim, False),
            linear("add_v_proj", pooled, dim, False),
            linear("add_q_proj", pooled, dim, False),
            sequence("to_out", linear("0", dim, dim)),
            None if last else linear("to_add_out", dim, pooled),
        )
        # MochiLayerNormContinuous (last block) or MochiRMSNormZero; their RMS norms own nothing
        context = (
            module("norm1_context", linear("linear_1", dim, pooled))
            if last
            else module("norm1_context", linear("linear", dim, 4 * pooled))
        )
        return module(
            "block",
            module("norm1", linear("linear", dim, 4 * dim)),
            context,
            attn,
            feed_forward(
                "ff", dim, inner_dim=(4 * dim * 2) // 3, activation_fn="swiglu", bias=False
            ),
            None
            if last
            else feed_forward(
                "ff_context", pooled, inner_dim=(4 * pooled * 2) // 3, activation_fn="swiglu",
                bias=False,
            ),
        )  # fmt: skip

    layers = c["num_layers"]
    blocks = [module("0", *block(False).children, copies=layers - 1)] if layers > 1 else []
    last = module(str(layers - 1), *block(True).children) if layers else None
    return module(
        "transformer",
        module("patch_embed", conv("proj", c["in_channels"], dim, (p, p))),
        module(
            "time_embed",
            timestep_embedding("timestep_embedder", c["time_embed_dim"], dim),
            module(
                "pooler",
                linear("to_kv", text, 2 * text),
                linear("to_q", text, text),
                linear("to_out", text, dim),
            ),
            linear("caption_proj", text, pooled),
        ),
        param("pos_frequencies", 3 * heads * (head_dim // 2)),
        sequence("transformer_blocks", *blocks, last),
        ada_layer_norm_continuous("norm_out", dim, dim),
        linear("proj_out", dim, p * p * out_channels),
    )
