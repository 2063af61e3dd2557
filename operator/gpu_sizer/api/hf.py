"""Hugging Face ``config.json`` to GPUWorkload ``spec.model``: the keys that change memory.

Key names differ by family (``transformers`` config classes, by ``model_type``):

- Llama, Mistral, Mixtral, Qwen2(-MoE), Gemma, Phi-3 use ``num_hidden_layers``, ``hidden_size``,
  ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``;
- OPT (``OPTConfig``) calls the MLP width ``ffn_dim`` and may have ``word_embed_proj_dim`` and
  ``do_layer_norm_before: false`` (OPT-350m);
- Falcon (``FalconConfig``; the original RefinedWeb configs) uses ``n_layer``, ``n_head``,
  ``n_head_kv``/``num_kv_heads``, ``multi_query`` (one KV head) and has no ``intermediate_size``
  (the MLP is 4 x hidden) nor ``max_position_embeddings`` (2048); ``parallel_attn`` false adds a
  layer norm;
- GPT-NeoX (``GPTNeoXConfig``) uses the Llama names, without KV heads (multi-head attention);
- Qwen2-MoE names its experts ``num_experts``; Qwen2 only uses its ``sliding_window`` when
  ``use_sliding_window`` is true.

``tie_word_embeddings``, ``attention_bias`` (Falcon: ``bias``) and ``mlp_bias`` are written only
when config.json has them; unset, the memory model applies the family's config-class default.

Every other key the architecture knows is copied when config.json has it, under its own name
camelCased (``kv_lora_rank`` -> ``kvLoraRank``, ``n_routed_experts`` -> ``nRoutedExperts``,
``layer_types`` -> ``layerTypes``, ``hybrid_override_pattern`` -> ``hybridOverridePattern``).
Vision-language configs (Gemma 3, Mistral 3, Llama 4, and Qwen2.5-VL's newer layout) nest the
language model in ``text_config``: its keys are read at the architecture's level, the top-level
``model_type`` names the family, and ``vision_config`` becomes ``visionConfig`` (its keys
camelCased the same way). Mistral 3's lm_head follows ``text_config.tie_word_embeddings`` as vLLM
reads it (``transformers`` 5.24's ``Mistral3Config`` defaults to tied, the published checkpoints
are not).
"""

from __future__ import annotations

from typing import Any, Final

from pydantic.alias_generators import to_camel

from gpu_sizer.api.family_keys import unused_keys
from gpu_sizer.api.spec import KNOWN_MODEL_TYPES, LIMITS, Architecture, VisionConfig

__all__ = ["UnsupportedConfig", "config_bound_problems", "model_from_hf_config", "model_type_of"]

_DTYPES: Final = {
    "float32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
}


class UnsupportedConfig(ValueError):
    """config.json lacks a key the sizing needs, or uses a format gpu-sizer does not know."""


#: config.json size keys -> (the spec.model.architecture field they map to, its LIMITS bound).
_BOUNDED_KEYS: Final = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), ("numHiddenLayers", "layers")),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), ("hiddenSize", "width")),
    "head_dim": ("headDim", "width"),
    **dict.fromkeys(("num_attention_heads", "n_head"), ("numAttentionHeads", "heads")),
    **dict.fromkeys(
        ("num_key_value_heads", "num_kv_heads", "n_head_kv"), ("numKeyValueHeads", "heads")
    ),
    **dict.fromkeys(
        ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
        ("intermediateSize", "intermediate"),
    ),
    "moe_intermediate_size": ("moeIntermediateSize", "intermediate"),
    "shared_expert_intermediate_size": ("sharedExpertIntermediateSize", "intermediate"),
    "vocab_size": ("vocabSize", "vocab"),
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions"), ("maxPositionEmbeddings", "tokens")
    ),
    "sliding_window": ("slidingWindow", "tokens"),
    "num_local_experts": ("numLocalExperts", "experts"),
    "num_experts": ("numExperts", "experts"),
    "num_experts_per_tok": ("numExpertsPerTok", "experts"),
}


def config_bound_problems(config: dict[str, Any]) -> list[str]:
    """config.json size keys (top level and nested ``text_config``-like objects) that are not
    integers within the bounds of the ``spec.model.architecture`` field they map to
    (:data:`gpu_sizer.api.spec.LIMITS`), each as ``KEY: must be ...``.

    Checked before anything reads the config further: ``transformers`` builds a model of 10**15
    layers on the meta device for as long as memory lasts, and a negative count would be
    counted as given.
    """
    problems: list[str] = []
    scopes = [("", config)] + [(f"{k}.", v) for k, v in config.items() if isinstance(v, dict)]
    for prefix, scope in scopes:
        for key, (field, bound) in _BOUNDED_KEYS.items():
            value = scope.get(key)
            if value is None:
                continue
            where = f"{prefix}{key}"
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(
                    f"{where}: must be an integer (spec.model.architecture.{field}), not {value!r}"
                )
            elif not 1 <= value <= LIMITS[bound]:
                problems.append(
                    f"{where}: must be between 1 and {LIMITS[bound]} (the bound of "
                    f"spec.model.architecture.{field}), not {value}"
                )
    return problems


def _first(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _require(config: dict[str, Any], *keys: str) -> Any:
    value = _first(config, *keys)
    if value is None:
        raise UnsupportedConfig(f"config.json has none of {', '.join(keys)}")
    return value


def _quantization(qc: dict[str, Any]) -> dict[str, Any]:
    """``quantization_config`` as ``spec.model.quantization`` (:mod:`.hf_quantization`)."""
    from gpu_sizer.api.hf_quantization import UnsupportedQuantization, quantization_from_hf

    try:
        return quantization_from_hf(qc)
    except UnsupportedQuantization as exc:
        raise UnsupportedConfig(str(exc)) from None


#: Keys read above with family-specific rules, never copied as they are.
_HANDLED: Final = frozenset(
    {
        "model_type",
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "intermediate_size",
        "num_key_value_heads",
        "head_dim",
        "tie_word_embeddings",
        "max_position_embeddings",
        "attention_bias",
        "mlp_bias",
        "num_experts_per_tok",
        "word_embed_proj_dim",
        "sliding_window",
        "rope_scaling",
        "new_decoder_architecture",
        "parallel_attn",
        "do_layer_norm_before",
        "vision_config",
    }
)
#: Vision-language families and the ``vision_config.model_type`` their config class defaults to.
_VISION_LANGUAGE: Final = {
    "gemma3": "siglip_vision_model",
    "mistral3": "pixtral",
    "qwen2_5_vl": "qwen2_5_vl",
    "llama4": "llama4_vision_model",
}
#: Text-config keys published configs leave to the config class default (``Gemma3TextConfig``:
#: vocab_size 262208, max_position_embeddings 131072).
_TEXT_DEFAULTS: Final = {"gemma3": {"vocab_size": 262208, "max_position_embeddings": 131072}}


def _copy_known(
    config: dict[str, Any], out: dict[str, Any], model: type[Any], skip: frozenset[str]
) -> dict[str, Any]:
    """Copy every config key ``model`` has a field for, camelCased, skipping ``skip`` and
    ``null`` values (``null`` is the config class default). Lists stay lists; a zero expert
    count (a dense config of an MoE class) is left out."""
    for key in model.model_fields:
        if key in skip or config.get(key) is None:
            continue
        value = config[key]
        if key in ("num_local_experts", "num_experts", "n_routed_experts") and not value:
            continue
        if key == "model_type" and model is VisionConfig:
            value = str(value)
        out[to_camel(key)] = value
    return out


#: Keys of families with state-space or linear-attention layers, whose per-sequence state only
#: a known family's keys size (``nemotron_h``, ``jamba``).
_STATE_KEYS: Final = (
    "hybrid_override_pattern",
    "layers_block_type",
    "mamba_num_heads",
    "mamba_d_state",
    "ssm_state_size",
    "attn_layer_period",
    "linear_num_key_heads",
    "linear_conv_kernel_dim",
)
_ATTENTION_LAYERS: Final = frozenset({"full_attention", "sliding_attention", "chunked_attention"})


def _generic_gap(outer: dict[str, Any], config: dict[str, Any]) -> str | None:
    """Why a family without a parameter layout cannot be sized from its attention geometry
    (``budget.families.GENERIC``), or ``None`` when it can: every layer must be a decoder
    attention layer whose kind ``layer_types`` says."""
    if outer.get("is_encoder_decoder"):
        return "an encoder-decoder model caches cross-attention too"
    towers = sorted(
        k
        for k, v in outer.items()
        if k.endswith("_config") and isinstance(v, dict)
        and k not in ("text_config", "quantization_config", "rope_scaling")
    )  # fmt: skip
    if towers:
        return f"its {', '.join(towers)} (an encoder whose activations are not sized)"
    state = [k for k in _STATE_KEYS if config.get(k) is not None]
    if state:
        return (
            f"its state-space or linear-attention layers ({state[0]}: Gated DeltaNet, KDA or "
            "Mamba), which hold a recurrent state per sequence rather than a KV cache per token "
            "(vLLM's MambaSpec, v1/kv_cache_interface.py, whose pages it sizes together with "
            "the attention layers'); gpu-sizer sizes that state only for nemotron_h and jamba"
        )
    kinds = set(config.get("layer_types") or ()) - _ATTENTION_LAYERS
    if kinds:
        return f"its {sorted(kinds)} layers (layer_types)"
    return None


#: config.json keys counting multi-token-prediction (MTP) layers: DeepSeek-V3/R1, GLM-4.5,
#: Qwen3-Next, Nemotron.
_MTP_KEYS: Final = ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers")


def _note_mtp(config: dict[str, Any], warnings: list[str] | None) -> None:
    """Say what becomes of a checkpoint's MTP layers: vLLM's target model skips their weights
    (``deepseek_v2.py`` ``load_weights``: ``get_spec_layer_idx_from_weight_name`` ... continue)
    and loads them only as a speculative drafter (``--speculative-config`` with method
    ``deepseek_mtp`` / ``mtp``), which gpu-sizer does not size."""
    layers = next((config[k] for k in _MTP_KEYS if isinstance(config.get(k), int)), 0)
    if layers and warnings is not None:
        warnings.append(
            f"config.json has {layers} multi-token-prediction (MTP) layer(s): they are not "
            "counted, as vLLM and SGLang do not load them unless speculative decoding uses them "
            "as a drafter (--speculative-config); gpu-sizer does not size speculative decoding, "
            "so a server started with it needs more than this estimate (its draft layers' "
            "weights and KV cache)"
        )


def model_type_of(config: dict[str, Any]) -> str:
    """config.json's ``model_type`` as the sizing engine names the family (the original Falcon
    configs say ``RefinedWeb``/``RefinedWebModel``).

    :raises UnsupportedConfig: config.json has no ``model_type``.
    """
    model_type = str(_require(config, "model_type"))
    return "falcon" if model_type in ("RefinedWeb", "RefinedWebModel") else model_type


def model_from_hf_config(
    config: dict[str, Any], warnings: list[str] | None = None, *, serving: bool = False
) -> dict[str, Any]:
    """``spec.model`` (wire names) from a parsed config.json: architecture, dtype, quantization.

    A ``model_type`` without a parameter layout here gets its attention geometry as its
    architecture (layers, KV heads, head size, ``layerTypes``, ``slidingWindow`` where
    ``layer_types`` places it, ``kvLoraRank``); the caller adds ``parameterCount``. When that
    geometry cannot describe the model (other layer kinds, an encoder tower, a missing key) the
    architecture is left out and ``warnings`` says why: the estimate is then Incomplete.

    ``serving``: the model is for an inference engine, which reads the checkpoint's dtype its own
    way (a float32 ``torch_dtype`` is served in bfloat16, with a warning); training keeps it.

    :raises UnsupportedConfig: a required key is missing or a quantization format is unknown.
    """
    model_type = model_type_of(config)
    outer = config
    text = config.get("text_config")
    if isinstance(text, dict):
        config = {**_TEXT_DEFAULTS.get(model_type, {}), **config, **text}
        if model_type == "mistral3":
            config["tie_word_embeddings"] = bool(text.get("tie_word_embeddings", False))
    model: dict[str, Any] = {}
    _note_mtp(config, warnings)
    if model_type in KNOWN_MODEL_TYPES:
        arch = _architecture(model_type, outer, config)
        unused = unused_keys(model_type, arch)
        for key in unused:
            # config.json keys the family's transformers config class does not read (a
            # checkpoint's leftovers): the modeling code ignores them, and so does the spec,
            # which would refuse them (gpu_sizer.api.family_keys)
            del arch[key]
        if unused and warnings is not None:
            warnings.append(
                f"config.json keys that {model_type} does not read were left out: "
                + ", ".join(unused)
            )
        model["architecture"] = arch
    else:
        gap = _generic_gap(outer, config)
        if gap is None:
            try:
                model["architecture"] = _generic_architecture(model_type, outer, config, warnings)
            except UnsupportedConfig as exc:
                gap = str(exc)
        if gap is not None and warnings is not None:
            warnings.append(
                f"model type {model_type!r} has no parameter layout in gpu-sizer and its "
                f"attention geometry cannot describe it: {gap}; spec.model.architecture is left "
                "out, so the KV cache and activations are not counted and the estimate is "
                "Incomplete"
            )
    name = config.get("_name_or_path")
    if isinstance(name, str) and name and "/" in name:
        model["name"] = name
    dtype = _first(config, "torch_dtype", "dtype")
    if isinstance(dtype, str) and _DTYPES.get(dtype) == "float32" and serving:
        # vLLM --dtype auto (config/model.py _resolve_auto_dtype, 0.19.1): float32 checkpoints
        # are downcast to the platform's first supported dtype, bfloat16 on compute capability
        # 8.0+ (platforms/cuda.py supported_dtypes), float16 on older GPUs. SGLang and TGI
        # likewise serve float32 checkpoints in 16 bits.
        model["dtype"] = "bfloat16"
        if warnings is not None:
            warnings.append(
                f"torch_dtype {dtype!r}: serving engines load float32 checkpoints in 16 bits "
                "(vLLM --dtype auto picks bfloat16 on compute capability 8.0 and newer, "
                "float16 before), so spec.model.dtype is bfloat16; set it to float32 only if "
                "you start the engine with --dtype float32"
            )
    elif isinstance(dtype, str) and dtype in _DTYPES:
        model["dtype"] = _DTYPES[dtype]
    elif dtype is not None and warnings is not None:
        warnings.append(
            f"torch_dtype {dtype!r} is not a storage dtype gpu-sizer sizes (float32, bfloat16, "
            "float16); spec.model.dtype left at its default bfloat16: edit it if the weights "
            "are served in another dtype"
        )
    qc = config.get("quantization_config")
    if isinstance(qc, dict):
        model["quantization"] = _quantization(qc)
    return model


def _generic_architecture(
    model_type: str, outer: dict[str, Any], config: dict[str, Any], warnings: list[str] | None
) -> dict[str, Any]:
    """The attention geometry of a family without a parameter layout (see
    :func:`model_from_hf_config`)."""
    arch = _architecture(model_type, outer, config)
    if "slidingWindow" in arch and "layerTypes" not in arch:
        del arch["slidingWindow"]
        if warnings is not None:
            warnings.append(
                f"model type {model_type!r}: config.json has sliding_window but no layer_types "
                "saying which layers slide; every layer is counted as full attention (an upper "
                "bound). With transformers installed, import-hf-config reads layer_types as "
                "the config class derives it"
            )
    return arch


def _architecture(model_type: str, outer: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``spec.model.architecture`` (wire names) from config.json's keys (module docstring)."""
    hidden = int(_require(config, "hidden_size", "n_embd", "d_model"))
    heads = int(_require(config, "num_attention_heads", "n_head"))
    arch: dict[str, Any] = {
        "modelType": model_type,
        "numHiddenLayers": int(_require(config, "num_hidden_layers", "n_layer", "num_layers")),
        "hiddenSize": hidden,
        "numAttentionHeads": heads,
        "vocabSize": int(_require(config, "vocab_size")),
    }
    if model_type == "opt":
        arch["intermediateSize"] = int(_require(config, "ffn_dim"))
    elif model_type == "falcon":
        arch["intermediateSize"] = int(_first(config, "ffn_hidden_size") or 4 * hidden)
    elif model_type == "qwen2_moe":
        arch["intermediateSize"] = int(_require(config, "intermediate_size"))
    else:
        arch["intermediateSize"] = int(_require(config, "intermediate_size", "n_inner"))
    kv = _first(config, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if model_type == "falcon":
        if config.get("new_decoder_architecture"):
            arch["newDecoderArchitecture"] = True
        elif config.get("multi_query", True):
            kv = 1
    if kv is not None:
        arch["numKeyValueHeads"] = int(kv)
    if model_type == "falcon" and config.get("parallel_attn") is False:
        arch["parallelAttn"] = False
    if model_type == "opt" and config.get("do_layer_norm_before") is False:
        arch["doLayerNormBefore"] = False
    if config.get("head_dim") is not None:
        arch["headDim"] = int(config["head_dim"])
    # Written only when config.json says so: unset means the family's config-class default,
    # which the memory model applies (gpu_sizer.budget.params).
    if config.get("tie_word_embeddings") is not None:
        arch["tieWordEmbeddings"] = bool(config["tie_word_embeddings"])
    arch["maxPositionEmbeddings"] = int(
        _first(config, "max_position_embeddings", "n_positions") or 2048
    )
    bias_keys: tuple[tuple[str, str], ...] = (
        ("attention_bias", "attentionBias"),
        ("mlp_bias", "mlpBias"),
    )
    if model_type == "falcon":
        bias_keys += (("bias", "attentionBias"),)  # FalconConfig.bias: every linear layer
    for key, wire in bias_keys:
        if config.get(key) is not None:
            arch[wire] = bool(config[key])
    if any(config.get(k) for k in ("num_local_experts", "num_experts", "n_routed_experts")):
        arch["numExpertsPerTok"] = int(_require(config, "num_experts_per_tok"))
    if config.get("word_embed_proj_dim") not in (None, hidden):
        arch["wordEmbedProjDim"] = int(config["word_embed_proj_dim"])
    _copy_known(config, arch, Architecture, skip=_HANDLED)
    vision = outer.get("vision_config")
    if isinstance(vision, dict) and model_type in _VISION_LANGUAGE:
        encoder = {"modelType": _VISION_LANGUAGE[model_type]}
        arch["visionConfig"] = _copy_known(vision, encoder, VisionConfig, skip=frozenset())
    window = config.get("sliding_window")
    if window is not None and config.get("use_sliding_window", True):
        arch["slidingWindow"] = int(window)
    rope = config.get("rope_scaling")
    if isinstance(rope, dict):
        scaling: dict[str, Any] = {
            "ropeType": str(_first(rope, "rope_type", "type") or "linear"),
            "factor": float(rope.get("factor", 1.0)),
        }
        if rope.get("original_max_position_embeddings") is not None:
            scaling["originalMaxPositionEmbeddings"] = int(rope["original_max_position_embeddings"])
        arch["ropeScaling"] = scaling
    return arch
