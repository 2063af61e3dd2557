"""Image and video generation: diffusion pipelines sized component by component, phase by phase.

A pipeline is a list of components, each a known part (``registry``: UNet and diffusion
transformers in ``denoisers``, 2D and causal 3D VAEs in ``vaes``, CLIP/T5/UMT5/Llama/Qwen2.5-VL
encoders in ``text_encoders``) whose module tree (``parts``) gives exact parameter counts and
what each offload mode keeps on the GPU; activations come from ``denoise``, ``decode`` and
``text_encoders``; ``pipelines`` says what each pipeline class does in a call and ``estimate``
assembles the phases (TextEncode, Denoise, VaeDecode).
"""

from __future__ import annotations

from gpu_sizer.api import EstimateStatus, GPUWorkloadSpec, MissingComponent
from gpu_sizer.budget.diffusion.estimate import Missing, generation_estimate

__all__ = ["Missing", "diffusion_estimate", "generation_estimate"]


def diffusion_estimate(spec: GPUWorkloadSpec) -> EstimateStatus:
    """:func:`generation_estimate` as ``budget.estimate`` reports it: the parts that could not be
    counted become ``missingComponents``, so the verdict is ``Incomplete``, never ``Fits``."""
    status, missing = generation_estimate(spec)
    if not missing:
        return status
    listed = [
        MissingComponent(component=m.component, fields=m.fields, message=m.message, fix=m.fix)
        for m in missing
    ]
    return status.model_copy(update={"missing_components": [*status.missing_components, *listed]})
