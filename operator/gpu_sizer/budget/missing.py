"""Components an estimate cannot count, as data: what is missing and which spec fields supply it.

An estimate that leaves out a component the workload needs is a lower bound. It must never read
as a fit (``gpu_sizer.sizing.assessment.Verdict.Incomplete``), and every consumer (the CLI's exit
status, the webhook's namespace policy, the operator's conditions) decides from
``EstimateStatus.missingComponents``, built here, rather than from prose notes.

Which terms need which fields follows the budget modules that compute them:

- KV cache (``budget.kv_cache``): layers, KV heads and head size; bytes per token are
  ``2 x layers x kv_heads x head_dim x bytes`` (Kwon et al. 2023, section 3).
- Inference activations (``budget.activations``) and the per-sequence share of the CUDA graph
  pool (``budget.runtime``): hidden and MLP widths, query and KV heads, vocabulary (sampler
  logits).
- Training activations and logits (``budget.training``): the same widths plus the layer count
  (every layer's activations are kept for the backward pass) and the vocabulary.

Pure; no figures here, only which parts are absent.
"""

from __future__ import annotations

from typing import Final

from gpu_sizer.api import GPUWorkloadSpec, MissingComponent

__all__ = ["FIX_HINT", "missing_without_architecture"]

#: How a user supplies the shape: the config.json keys, written by the CLI.
FIX_HINT: Final = (
    "set spec.model.architecture from the model's config.json "
    "(gpu-sizer import-hf-config CONFIG_JSON writes it)"
)

_ARCH = "spec.model.architecture."
_KV_FIELDS: Final = ("numHiddenLayers", "numKeyValueHeads", "headDim")
_INFERENCE_ACTIVATION_FIELDS: Final = (
    "hiddenSize",
    "intermediateSize",
    "numAttentionHeads",
    "numKeyValueHeads",
    "vocabSize",
)
_TRAINING_ACTIVATION_FIELDS: Final = (
    "numHiddenLayers",
    "hiddenSize",
    "intermediateSize",
    "numAttentionHeads",
    "vocabSize",
)


def _component(component: str, what: str, fields: tuple[str, ...]) -> MissingComponent:
    return MissingComponent(
        component=component,
        fields=[_ARCH + f for f in fields],
        message=f"{what} not counted: needs spec.model.architecture ({', '.join(fields)})",
        fix=FIX_HINT,
    )


def missing_without_architecture(spec: GPUWorkloadSpec) -> list[MissingComponent]:
    """The components a bare ``spec.model.parameterCount`` leaves uncounted for ``spec``.

    Inference: the KV cache (``kvCacheBytes``) and the activations (``activationBytes``, which
    stand here also for the CUDA graph pool's per-sequence share). Training: the activations and
    logits (``activationBytes``). Weights, gradients, optimizer state and master weights follow
    from the parameter count alone and are counted.
    """
    if spec.inference is not None:
        return [
            _component("kvCacheBytes", "KV cache", _KV_FIELDS),
            _component(
                "activationBytes",
                "activations (and the CUDA graph pool's per-sequence share)",
                _INFERENCE_ACTIVATION_FIELDS,
            ),
        ]
    return [_component("activationBytes", "activations and logits", _TRAINING_ACTIVATION_FIELDS)]
