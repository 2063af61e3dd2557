"""diffusers' shared building blocks as :class:`~gpu_sizer.budget.diffusion.parts.Part` trees.

Each function mirrors one constructor of ``diffusers`` 0.42.1 (file and class named in its
docstring) and takes the same arguments, so that a model builder reads like the model's
``__init__``. Pure; counts are elements.
"""

from __future__ import annotations

from gpu_sizer.budget.diffusion.parts import (
    Part,
    group_norm,
    layer_norm,
    linear,
    module,
    rms_norm,
    sequence,
)

__all__ = [
    "ada_layer_norm_continuous",
    "ada_layer_norm_zero",
    "attention",
    "feed_forward",
    "qk_norms",
    "text_projection",
    "timestep_embedding",
]


def qk_norms(qk_norm: str | None, dim_head: int, heads: int, kv_heads: int) -> tuple[Part, ...]:
    """``norm_q``/``norm_k`` of ``attention_processor.Attention`` by ``qk_norm``."""
    if qk_norm is None or qk_norm == "l2":
        return ()
    if qk_norm in ("layer_norm", "rms_norm"):
        make = layer_norm if qk_norm == "layer_norm" else rms_norm
        return make("norm_q", dim_head), make("norm_k", dim_head)
    if qk_norm == "fp32_layer_norm":
        return layer_norm("norm_q", dim_head, False), layer_norm("norm_k", dim_head, False)
    if qk_norm == "layer_norm_across_heads":
        return layer_norm("norm_q", dim_head * heads), layer_norm("norm_k", dim_head * kv_heads)
    if qk_norm == "rms_norm_across_heads":
        return rms_norm("norm_q", dim_head * heads), rms_norm("norm_k", dim_head * kv_heads)
    raise ValueError(f"unknown qk_norm {qk_norm!r}")


def attention(
    name: str,
    query_dim: int,
    *,
    cross_attention_dim: int | None = None,
    heads: int = 8,
    kv_heads: int | None = None,
    dim_head: int = 64,
    bias: bool = False,
    qk_norm: str | None = None,
    added_kv_proj_dim: int | None = None,
    added_proj_bias: bool = True,
    norm_num_groups: int | None = None,
    out_bias: bool = True,
    out_dim: int | None = None,
    context_pre_only: bool | None = None,
    pre_only: bool = False,
) -> Part:
    """``diffusers/models/attention_processor.py`` ``Attention.__init__`` (also the layout of
    ``FluxAttention``, ``WanAttention`` and ``LTXAttention`` for the arguments they share)."""
    inner = out_dim if out_dim is not None else dim_head * heads
    n_heads = out_dim // dim_head if out_dim is not None else heads
    inner_kv = inner if kv_heads is None else dim_head * kv_heads
    kv = kv_heads if kv_heads is not None else n_heads
    cross = cross_attention_dim if cross_attention_dim is not None else query_dim
    outd = out_dim if out_dim is not None else query_dim
    parts: list[Part | None] = []
    if norm_num_groups is not None:
        parts.append(group_norm("group_norm", query_dim))
    parts += qk_norms(qk_norm, dim_head, heads, kv)
    parts += [
        linear("to_q", query_dim, inner, bias),
        linear("to_k", cross, inner_kv, bias),
        linear("to_v", cross, inner_kv, bias),
    ]
    if added_kv_proj_dim is not None:
        parts += [
            linear("add_k_proj", added_kv_proj_dim, inner_kv, added_proj_bias),
            linear("add_v_proj", added_kv_proj_dim, inner_kv, added_proj_bias),
        ]
        if context_pre_only is not None:
            parts.append(linear("add_q_proj", added_kv_proj_dim, inner, added_proj_bias))
    if not pre_only:
        parts.append(sequence("to_out", _named(linear("0", inner, outd, out_bias))))
    if context_pre_only is not None and not context_pre_only:
        parts.append(linear("to_add_out", inner, query_dim, out_bias))
    if qk_norm is not None and added_kv_proj_dim is not None:
        if qk_norm == "layer_norm":
            parts += [layer_norm("norm_added_q", dim_head), layer_norm("norm_added_k", dim_head)]
        elif qk_norm == "rms_norm":
            parts += [rms_norm("norm_added_q", dim_head), rms_norm("norm_added_k", dim_head)]
        elif qk_norm == "rms_norm_across_heads":
            parts.append(rms_norm("norm_added_k", dim_head * kv))
    return module(name, *parts)


def _named(part: Part) -> Part:
    return part


def feed_forward(
    name: str,
    dim: int,
    *,
    dim_out: int | None = None,
    mult: float = 4,
    activation_fn: str = "geglu",
    inner_dim: int | None = None,
    bias: bool = True,
) -> Part:
    """``diffusers/models/attention.py`` ``FeedForward``: ``net.0`` the activation module with its
    ``proj`` (doubled width for GEGLU and SwiGLU), ``net.2`` the output ``Linear``."""
    inner = inner_dim if inner_dim is not None else int(dim * mult)
    out = dim_out if dim_out is not None else dim
    width = 2 * inner if activation_fn in ("geglu", "swiglu") else inner
    return module(
        name,
        sequence(
            "net",
            module("0", linear("proj", dim, width, bias)),
            linear("2", inner, out, bias),
        ),
    )


def ada_layer_norm_zero(name: str, dim: int, chunks: int = 6) -> Part:
    """``normalization.py`` ``AdaLayerNormZero`` (6 chunks), ``AdaLayerNormZeroSingle`` (3) and
    ``SD35AdaLayerNormZeroX`` (9): a ``Linear(dim, chunks * dim)`` and an affine-free norm."""
    return module(name, linear("linear", dim, chunks * dim), layer_norm("norm", dim, False))


def ada_layer_norm_continuous(
    name: str,
    dim: int,
    conditioning_dim: int,
    *,
    affine: bool = False,
    norm_type: str = "layer_norm",
) -> Part:
    """``normalization.py`` ``AdaLayerNormContinuous``: ``Linear(cond, 2 * dim)`` and the norm."""
    norm = (
        layer_norm("norm", dim, affine)
        if norm_type == "layer_norm"
        else rms_norm("norm", dim, affine)
    )
    return module(name, linear("linear", conditioning_dim, 2 * dim), norm)


def timestep_embedding(
    name: str, in_channels: int, time_embed_dim: int, out_dim: int | None = None
) -> Part:
    """``embeddings.py`` ``TimestepEmbedding``: ``linear_1`` and ``linear_2``."""
    return module(
        name,
        linear("linear_1", in_channels, time_embed_dim),
        linear("linear_2", time_embed_dim, out_dim if out_dim is not None else time_embed_dim),
    )


def text_projection(
    name: str, in_features: int, hidden: int, out_features: int | None = None
) -> Part:
    """``embeddings.py`` ``PixArtAlphaTextProjection``: ``linear_1`` and ``linear_2``."""
    return module(
        name,
        linear("linear_1", in_features, hidden),
        linear("linear_2", hidden, out_features if out_features is not None else hidden),
    )
