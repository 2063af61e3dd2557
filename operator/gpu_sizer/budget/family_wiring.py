"""What a family's declaration means for one config: biases, norms, activation, residual. Pure.

:mod:`gpu_sizer.budget.families` declares each family's parts with rules (a bias "by the
``attentionBias`` flag", q/k norms "only with ``useQkNorm``"); a config decides the rules. This
module decides them once, for the parameter layout (:mod:`gpu_sizer.budget.params`) and for the
probe's synthetic model (:mod:`gpu_sizer.probe.model`), so the estimate and the model measured
against it cannot disagree on which tensors exist.

Three families decide part of their wiring from config keys the declarations cannot express as a
rule, each as its ``transformers`` modeling file does:

- Falcon (``modeling_falcon.py``, ``FalconDecoderLayer``): one ``bias`` flag on every linear
  (written as ``attentionBias``/``mlpBias``); ``ln_attn`` and ``ln_mlp`` with
  ``new_decoder_architecture``, input and post-attention norms without ``parallel_attn``, one
  shared ``input_layernorm`` otherwise; a parallel residual with either of the two flags.
- OPT (``modeling_opt.py``, ``OPTDecoder``): the final LayerNorm exists only with
  ``do_layer_norm_before``.
- GLM-4-MoE: per-head q/k norms only with ``use_qk_norm`` (``head_if_flag``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpu_sizer.api import Architecture
from gpu_sizer.budget.families import Activation, Family, family

__all__ = ["Wiring", "wiring"]


@dataclass(frozen=True, slots=True)
class Wiring:
    """A family's structure for one config: what decides parameter counts beyond the sizes."""

    #: the declaration the rest comes from (parts, prefixes, MoE and Mamba kinds).
    family: Family
    #: LayerNorm with weight and bias (GPT-NeoX, Falcon, OPT) instead of RMSNorm (weight only).
    layer_norm: bool
    tied: bool
    #: the ``attentionBias`` flag, or the family's config-class default when unset.
    attention_bias: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    #: per-head q/k RMSNorms (``head``) or over the whole q and k width (``width``, OLMo 2).
    qk_norm: Literal["none", "head", "width"]
    #: norms of a layer with both a token mixer and a feed-forward.
    norms: int
    #: norms of a layer with only one of them (Nemotron-H blocks).
    block_norms: int
    parallel_residual: bool
    final_norm: bool
    learned_positions_offset: int | None
    activation: Activation


def _flag(arch: Architecture, name: str, family_default: bool) -> bool:
    """A boolean the spec may leave unset (``None``): then the family's config default applies.

    Unset is ``None`` rather than "absent from the input" so that a spec re-serialised with its
    defaults filled (the mutating webhook, ``model_dump``) keeps the same meaning and hash.
    """
    value = getattr(arch, name)
    return family_default if value is None else bool(value)


def wiring(arch: Architecture, fam: Family | None = None) -> Wiring:
    """The wiring of ``arch`` as family ``fam`` (by default the declaration of its
    ``modelType``, :func:`gpu_sizer.budget.families.family`) declares it."""
    fam = fam if fam is not None else family(arch.model_type)
    mt = arch.model_type
    tied = _flag(arch, "tie_word_embeddings", fam.tied)
    attn_bias = _flag(arch, "attention_bias", fam.attention_bias)
    part = fam.attention
    qkv_bias = part.qkv_bias == "always" or (part.qkv_bias == "flag" and attn_bias)
    o_bias = part.o_bias == "always" or (part.o_bias == "flag" and attn_bias)
    # Llama's ``mlpBias`` flag; always (GPT-NeoX); the attention flag too (OPT, Falcon).
    rule = fam.mlp.bias
    mlp_bias = rule == "always" or (rule == "attention" and attn_bias) or arch.mlp_bias
    norms = fam.norms
    parallel = fam.parallel_residual
    if mt == "falcon":
        qkv_bias = o_bias = attn_bias or arch.mlp_bias
        norms = 2 if arch.new_decoder_architecture or not arch.parallel_attn else 1
        parallel = arch.new_decoder_architecture or arch.parallel_attn
    qk_norm: Literal["none", "head", "width"] = "none"
    if part.qk_norm == "head" or (part.qk_norm == "head_if_flag" and arch.use_qk_norm):
        qk_norm = "head"
    elif part.qk_norm == "width":
        qk_norm = "width"
    return Wiring(
        family=fam,
        layer_norm=fam.layer_norm,
        tied=tied,
        attention_bias=attn_bias,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=mlp_bias,
        qk_norm=qk_norm,
        norms=norms,
        block_norms=fam.block_norms,
        parallel_residual=parallel,
        final_norm=not (mt == "opt" and not arch.do_layer_norm_before),
        learned_positions_offset=fam.learned_positions_offset,
        activation=fam.activation,
    )
