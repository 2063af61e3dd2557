"""Which family reads which architecture key. Pure data.

A Hugging Face config class carries only the keys its modeling code reads, and the sizing engine
reads a key only for the families whose code reads it (``gpu_sizer.budget.params``; the family
declarations in ``gpu_sizer.budget.families``). A key set under a family that does not read it
would be accepted and ignored: ``moeIntermediateSize`` under ``modelType: mixtral`` sizes every
expert at ``intermediateSize`` (Mixtral's ``MixtralConfig`` has no per-expert width), which is
7.5 times the weights a user who meant Qwen-MoE's layout expects. So for the families with a
parameter layout such a key is an error naming the families that do read it.

The table follows the ``transformers`` config classes of the families (``MixtralConfig``,
``Qwen2MoeConfig``, ``Qwen3MoeConfig``, ``DeepseekV3Config``, ``Glm4MoeConfig``,
``Llama4TextConfig``, ``Gemma3TextConfig``, ``FalconConfig``, ``OPTConfig``, ``NemotronHConfig``,
``JambaConfig``, ``Mistral3Config``) and what ``gpu_sizer.budget.params`` reads for each. Keys
every family reads (layers, widths, heads, vocabulary, biases, ``slidingWindow``, ``layerTypes``,
``ropeScaling``) are not listed. Families without a parameter layout are sized from their
attention geometry, which reads whatever the config names: they are not checked.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["FAMILY_KEYS", "MOE_KEYS", "MOE_MODEL_TYPES", "family_key_problems", "unused_keys"]

#: Model families that are mixture-of-experts: their architecture must say how many experts.
MOE_MODEL_TYPES: Final = (
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "llama4",
    "glm4_moe",
    "jamba",
)
_QWEN_MOE: Final = ("qwen2_moe", "qwen3_moe")
_DEEPSEEK: Final = ("deepseek_v2", "deepseek_v3")
_DEEPSEEK_GLM: Final = ("deepseek_v2", "deepseek_v3", "glm4_moe")
_NEMOTRON_H: Final = ("nemotron_h",)
_JAMBA: Final = ("jamba",)

#: Mixture-of-experts keys: the expert count (whichever name the config uses) and the top-k.
MOE_KEYS: Final = ("numLocalExperts", "numExperts", "nRoutedExperts", "numExpertsPerTok")

#: Wire key -> the model types whose modeling code reads it.
FAMILY_KEYS: Final[dict[str, tuple[str, ...]]] = {
    **{key: MOE_MODEL_TYPES for key in MOE_KEYS},
    # per-expert width: Qwen-MoE, DeepSeek and GLM; Mixtral, gpt-oss, Llama 4 and Jamba size
    # their experts at intermediateSize
    "moeIntermediateSize": (*_QWEN_MOE, *_DEEPSEEK_GLM),
    "sharedExpertIntermediateSize": ("qwen2_moe",),
    "nSharedExperts": _DEEPSEEK_GLM,
    "firstKDenseReplace": _DEEPSEEK_GLM,
    "moeLayerFreq": _DEEPSEEK,
    "decoderSparseStep": _QWEN_MOE,
    "mlpOnlyLayers": _QWEN_MOE,
    "interleaveMoeLayerStep": ("llama4",),
    "intermediateSizeMlp": ("llama4",),
    "attentionChunkSize": ("llama4",),
    "noRopeLayers": ("llama4",),
    "useQkNorm": ("glm4_moe", "llama4"),
    "qLoraRank": _DEEPSEEK,
    "kvLoraRank": _DEEPSEEK,
    "qkRopeHeadDim": _DEEPSEEK,
    "qkNopeHeadDim": _DEEPSEEK,
    "vHeadDim": _DEEPSEEK,
    "slidingWindowPattern": ("gemma3", "gemma3_text"),
    "wordEmbedProjDim": ("opt",),
    "doLayerNormBefore": ("opt",),
    "newDecoderArchitecture": ("falcon",),
    "parallelAttn": ("falcon",),
    "hybridOverridePattern": _NEMOTRON_H,
    "mambaNumHeads": _NEMOTRON_H,
    "mambaHeadDim": _NEMOTRON_H,
    "ssmStateSize": _NEMOTRON_H,
    "nGroups": _NEMOTRON_H,
    "convKernel": _NEMOTRON_H,
    "expand": _NEMOTRON_H,
    "useConvBias": _NEMOTRON_H,
    "useBias": _NEMOTRON_H,
    "attnLayerPeriod": _JAMBA,
    "attnLayerOffset": _JAMBA,
    "expertLayerPeriod": _JAMBA,
    "expertLayerOffset": _JAMBA,
    "mambaDState": _JAMBA,
    "mambaDConv": _JAMBA,
    "mambaExpand": _JAMBA,
    "mambaDtRank": _JAMBA,
    "mambaConvBias": _JAMBA,
    "mambaProjBias": (*_JAMBA, *_NEMOTRON_H),
    "multimodalProjectorBias": ("mistral3",),
    "spatialMergeSize": ("mistral3",),
}

#: Keys with a non-``None`` default: set means "differs from the default" (a spec re-serialised
#: with its defaults filled, as the mutating webhook does, must keep passing).
_DEFAULTS: Final[dict[str, Any]] = {
    "newDecoderArchitecture": False,
    "parallelAttn": True,
    "doLayerNormBefore": True,
}


#: Keys a family's config class has but whose layers gpu-sizer does not size: refused with why.
_NOT_SIZED: Final[dict[tuple[str, str], str]] = {
    ("nemotron_h", key): f"{key}: the mixture-of-experts layers of Nemotron-H (Nemotron 3 Nano "
    "and later, hybridOverridePattern code E) are not sized yet, so it would be ignored; "
    "it is read for "
    for key in ("numLocalExperts", "numExperts", "nRoutedExperts", "numExpertsPerTok",
                "moeIntermediateSize", "nSharedExperts")
}  # fmt: skip


def unused_keys(model_type: str, keys: dict[str, Any]) -> list[str]:
    """The keys of ``keys`` (wire names -> values) that ``model_type`` does not read; values
    ``None`` and those equal to the field's default are not set."""
    out = []
    for key, value in keys.items():
        families = FAMILY_KEYS.get(key)
        if families is None or model_type in families or value is None:
            continue
        if key in _DEFAULTS and value == _DEFAULTS[key]:
            continue
        if key in MOE_KEYS and not value:
            continue
        out.append(key)
    return out


def family_key_problems(model_type: str, keys: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for each key of ``keys`` that ``model_type`` does not read, naming the
    families that would (see the module docstring)."""
    problems = []
    for key in unused_keys(model_type, keys):
        families = FAMILY_KEYS[key]
        dense = key in MOE_KEYS
        what = _NOT_SIZED.get((model_type, key)) or (
            f"{model_type} is a dense model (no experts): {key} would be ignored; it is read "
            "for the mixture-of-experts families "
            if dense
            else f"{model_type} does not read {key} (its transformers config class has no such "
            "key), so it would be ignored; it is read for "
        )
        problems.append(
            (
                key,
                what
                + ", ".join(families)
                + ": remove it, or set modelType to the family whose layout you mean",
            )
        )
    return problems
