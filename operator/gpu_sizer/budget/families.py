"""Model families as declarations composed from parts. Pure data.

A family says which parts its decoder layers are made of and how its checkpoint names them; the
sizes and the per-layer pattern come from the config (``spec.model.architecture``), read by one
generic function (:func:`gpu_sizer.budget.params.layout`). Adding a family is adding one
:class:`Family` entry to :data:`FAMILIES` (and its oracle test against ``transformers``).

The parts, each following the ``transformers`` modeling file of the families that use it:

- :class:`Attention`: multi-head / grouped-query attention (q, k, v, o; or a fused qkv), with
  biases, per-head or full-width q/k norms (Qwen3, Gemma 3, OLMo 2) and attention sinks
  (gpt-oss: one learned logit per head). Configs with ``kvLoraRank`` get multi-head latent
  attention instead (DeepSeek-V2/V3, ``modeling_deepseek_v2.py``/``modeling_deepseek_v3.py``).
- :class:`Mlp`: gated (SwiGLU/GeGLU: gate, up, down; Phi-3's fused gate_up) or plain (up, down).
- :class:`Moe`: a router and routed experts, optionally shared experts (Qwen2-MoE's gated
  ``shared_expert``, DeepSeek's ``shared_experts`` of ``nSharedExperts x moeIntermediateSize``,
  Llama 4's ``shared_expert`` of ``intermediateSize``), router and expert biases (gpt-oss).
- :class:`Mamba`: Mamba-2 (Nemotron-H, ``modeling_nemotron_h.py``) or Mamba-1 with Jamba's
  inner norms (``modeling_jamba.py``).
- the norm kind (RMSNorm: one weight vector; LayerNorm: weight and bias) and how many a layer has.

Which layers have which parts is the config's (:func:`gpu_sizer.budget.params.layer_plan`);
a family only supplies the config-class defaults of the keys that decide it (Gemma 3's
``sliding_window_pattern`` 6, gpt-oss's alternating ``layer_types``, Llama 4's NoPE layer every
fourth, Jamba's periods).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = [
    "FAMILIES",
    "GENERIC",
    "Activation",
    "Attention",
    "Family",
    "Mamba",
    "Mlp",
    "Moe",
    "family",
]

#: How q/k/v biases are decided: by ``attentionBias`` (Llama's flag) or always present (Qwen2).
BiasRule = Literal["flag", "always", "never"]
#: The MLP's activation as the family's modeling file applies it (``hidden_act``'s default):
#: SiLU (Llama and most), GELU (GPT-NeoX, Falcon, Gemma's ``gelu_pytorch_tanh``), ReLU (OPT) and
#: squared ReLU (Nemotron-H's ``relu2``). It changes compute, not memory; the probe runs it.
Activation = Literal["silu", "gelu", "relu", "relu2"]
#: Default per-layer attention pattern when the config has no ``layerTypes``.
Pattern = Literal[
    "uniform",  # every layer alike; ``slidingWindow`` (if set) slides every layer
    "gemma2",  # even layers slide (Gemma2DecoderLayer)
    "every_nth_global",  # (i + 1) % slidingWindowPattern != 0 slides (Gemma 3)
    "alternate",  # even layers slide (gpt-oss GptOssConfig default)
    "nope_every_4th",  # Llama 4: chunked except every fourth layer (noRopeLayers)
    "hybrid_pattern",  # Nemotron-H hybridOverridePattern
    "jamba",  # Jamba attention/expert periods
    "explicit",  # only ``layerTypes``; without it every layer is full attention
]


@dataclass(frozen=True, slots=True)
class Attention:
    """Grouped-query attention as a checkpoint names it (module names inside the layer)."""

    prefix: str = "self_attn"
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    o: str = "o_proj"
    #: one fused projection instead of q, k, v (Phi-3 ``qkv_proj``, GPT-NeoX/Falcon
    #: ``query_key_value``).
    fused_qkv: str | None = None
    qkv_bias: BiasRule = "flag"
    o_bias: BiasRule = "flag"
    #: RMSNorm over each head of q and k (``head``; GLM's only with ``useQkNorm``:
    #: ``head_if_flag``) or over the whole q and k width (``width``, OLMo 2).
    qk_norm: Literal["none", "head", "head_if_flag", "width"] = "none"
    #: gpt-oss: one learned sink logit per query head (``GptOssAttention.sinks``).
    sinks: bool = False


@dataclass(frozen=True, slots=True)
class Mlp:
    """A dense MLP: gated (gate, up, down) or plain (up, down)."""

    prefix: str = "mlp"
    gated: bool = True
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    #: fused gate and up (Phi-3 ``gate_up_proj``).
    fused_gate_up: str | None = None
    #: biases: Llama's ``mlpBias`` flag, always (GPT-NeoX), or the attention flag (OPT, Falcon).
    bias: Literal["flag", "always", "attention"] = "flag"
    #: config key of the dense width when it is not ``intermediateSize`` (Llama 4 dense layers).
    width_key: str = "intermediate_size"


@dataclass(frozen=True, slots=True)
class Moe:
    """Routed experts with a router, optionally shared experts."""

    prefix: str = "mlp"
    router: str = "gate"
    router_bias: bool = False
    #: checkpoint names of one expert's matrices (gate, up, down); ``fused_gate_up`` replaces
    #: gate and up where the checkpoint stores them fused (gpt-oss, Llama 4).
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    fused_gate_up: str | None = None
    experts_path: str = "experts"
    expert_bias: bool = False
    #: config key of the per-expert width.
    width_key: str = "moe_intermediate_size"
    #: ``qwen2``: ``shared_expert`` of sharedExpertIntermediateSize plus ``shared_expert_gate``;
    #: ``deepseek``: ``shared_experts`` of nSharedExperts x moeIntermediateSize;
    #: ``llama4``: ``shared_expert`` of intermediateSize.
    shared: Literal["none", "qwen2", "deepseek", "llama4"] = "none"


@dataclass(frozen=True, slots=True)
class Mamba:
    """A state-space mixer: Mamba-2 (Nemotron-H) or Mamba-1 with Jamba's inner norms."""

    version: Literal[1, 2]
    prefix: str = "mixer"


@dataclass(frozen=True, slots=True)
class Family:
    """One ``model_type``: its parts, norm kind and the config-class defaults that differ."""

    attention: Attention = field(default_factory=Attention)
    mlp: Mlp = field(default_factory=Mlp)
    moe: Moe | None = None
    mamba: Mamba | None = None
    #: LayerNorm with bias (GPT-NeoX, Falcon, OPT) instead of RMSNorm.
    layer_norm: bool = False
    #: norms per attention + MLP layer (input and post-attention: 2; Gemma 2/3: 4).
    norms: int = 2
    #: norms of a layer with only a mixer or only an MLP (Nemotron-H blocks: 1).
    block_norms: int = 1
    pattern: Pattern = "uniform"
    #: ``transformers``' config-class defaults that differ from Llama's.
    tied: bool = False
    attention_bias: bool = False
    #: where the checkpoint keeps the decoder layers (``<prefix>.<index>.<Linear.path>``).
    layers_prefix: str = "model.layers"
    activation: Activation = "silu"
    #: attention and MLP read the same input and add to one residual (GPT-NeoX's
    #: ``use_parallel_residual``; Falcon decides it from its config, see
    #: :func:`gpu_sizer.budget.family_wiring.wiring`).
    parallel_residual: bool = False
    #: learned absolute positions, ``max_position_embeddings + offset`` rows (OPT's
    #: ``OPTLearnedPositionalEmbedding``: offset 2); ``None``: rotary, no position table.
    learned_positions_offset: int | None = None


_LLAMA = Family()
_QWEN2 = Family(attention=Attention(qkv_bias="always"))
_MOE_QWEN = Moe(shared="qwen2")
_DEEPSEEK = Family(moe=Moe(shared="deepseek"))
_NEOX = Attention(fused_qkv="query_key_value", o="dense")
_GEMMA3 = Family(
    tied=True,
    norms=4,
    attention=Attention(qk_norm="head"),
    pattern="every_nth_global",
    activation="gelu",
)

#: Every family the sizing engine knows, by Hugging Face ``model_type``.
FAMILIES: dict[str, Family] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "granite": _LLAMA,
    "mixtral": Family(
        moe=Moe(
            prefix="block_sparse_moe", gate="w1", up="w3", down="w2", width_key="intermediate_size"
        )
    ),
    "qwen2": _QWEN2,
    "qwen2_moe": Family(attention=Attention(qkv_bias="always"), moe=_MOE_QWEN),
    "qwen3": Family(attention=Attention(qk_norm="head")),
    "qwen3_moe": Family(attention=Attention(qk_norm="head"), moe=Moe()),
    "gemma": Family(tied=True, activation="gelu"),
    "gemma2": Family(tied=True, norms=4, pattern="gemma2", activation="gelu"),
    "gemma3_text": _GEMMA3,
    "gemma3": replace(_GEMMA3, layers_prefix="language_model.model.layers"),
    "phi3": Family(
        attention=Attention(fused_qkv="qkv_proj"), mlp=Mlp(fused_gate_up="gate_up_proj")
    ),
    "olmo2": Family(attention=Attention(qk_norm="width")),
    "gpt_neox": Family(
        attention=_NEOX,
        mlp=Mlp(gated=False, up="dense_h_to_4h", down="dense_4h_to_h", bias="always"),
        layer_norm=True,
        attention_bias=True,
        layers_prefix="gpt_neox.layers",
        activation="gelu",
        parallel_residual=True,
    ),
    "falcon": Family(
        attention=Attention(fused_qkv="query_key_value", o="dense"),
        mlp=Mlp(gated=False, up="dense_h_to_4h", down="dense_4h_to_h", bias="attention"),
        layer_norm=True,
        tied=True,
        layers_prefix="transformer.h",
        activation="gelu",
    ),
    "opt": Family(
        attention=Attention(o="out_proj"),
        mlp=Mlp(gated=False, up="fc1", down="fc2", bias="attention", prefix=""),
        layer_norm=True,
        tied=True,
        attention_bias=True,
        layers_prefix="model.decoder.layers",
        activation="relu",
        learned_positions_offset=2,
    ),
    "deepseek_v2": _DEEPSEEK,
    "deepseek_v3": _DEEPSEEK,
    "glm4_moe": Family(
        attention=Attention(qkv_bias="flag", o_bias="never", qk_norm="head_if_flag"),
        moe=Moe(shared="deepseek"),
    ),
    "gpt_oss": Family(
        attention=Attention(sinks=True),
        moe=Moe(
            router="router",
            router_bias=True,
            fused_gate_up="gate_up_proj",
            expert_bias=True,
            width_key="intermediate_size",
        ),
        pattern="alternate",
    ),
    "llama4": Family(
        mlp=Mlp(prefix="feed_forward", width_key="intermediate_size_mlp"),
        moe=Moe(
            prefix="feed_forward",
            router="router",
            fused_gate_up="gate_up_proj",
            width_key="intermediate_size",
            shared="llama4",
        ),
        pattern="nope_every_4th",
        layers_prefix="language_model.model.layers",
    ),
    "mistral3": Family(layers_prefix="language_model.model.layers"),
    "qwen2_5_vl": Family(attention=Attention(qkv_bias="always"), layers_prefix="model.layers"),
    "nemotron_h": Family(
        mlp=Mlp(prefix="mixer", gated=False),
        mamba=Mamba(version=2),
        # NemotronHAttention: bias=False on every projection, whatever attention_bias says.
        attention=Attention(prefix="mixer", qkv_bias="never", o_bias="never"),
        norms=1,
        pattern="hybrid_pattern",
        layers_prefix="backbone.layers",
        activation="relu2",
    ),
    "jamba": Family(
        mlp=Mlp(prefix="feed_forward"),
        moe=Moe(prefix="feed_forward", router="router", width_key="intermediate_size"),
        mamba=Mamba(version=1, prefix="mamba"),
        pattern="jamba",
    ),
}


#: Any other ``model_type`` (given with ``spec.model.parameterCount``): only its attention
#: geometry is read, for the KV cache and activations; its parameters are never laid out from
#: this. Gated MLP and routed experts when the config names them: the larger live set of the
#: MLP kinds, so activations err on the safe side. A ``slidingWindow`` applies only where
#: ``layerTypes`` says ``sliding_attention``: which layers slide is family code (Gemma 2's even
#: layers, Mistral's all), and a window on the wrong layers would under-count the KV cache.
GENERIC = Family(moe=Moe(), pattern="explicit")


def family(model_type: str) -> Family:
    """The declaration of ``model_type``; :data:`GENERIC` for one without a parameter layout."""
    return FAMILIES.get(model_type, GENERIC)
