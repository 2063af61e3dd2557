"""``spec.model``: what is loaded (an architecture, a bare parameter count or a diffusion
pipeline) and how its weights are stored."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from gpu_sizer.api.spec.architecture import KNOWN_MODEL_TYPES, Architecture
from gpu_sizer.api.spec.base import _Model, _Problems
from gpu_sizer.api.spec.bounds import LIMITS, Name
from gpu_sizer.api.spec.enums import Dtype, QuantizationMethod
from gpu_sizer.api.spec.generation import Pipeline
from gpu_sizer.api.spec.quantization import Quantization

__all__ = ["Model"]


class Model(_Model):
    """What is loaded: an architecture (preferred) or a bare parameter count."""

    name: Name | None = Field(None, description="Model name, informational (e.g. a Hub id).")
    revision: Name | None = Field(
        None, description="Model revision (commit), informational; recorded with measurements."
    )
    architecture: Architecture | None = Field(
        None, description="Shape from config.json; gives exact parameter and KV cache figures."
    )
    parameter_count: Annotated[int, Field(ge=1, le=LIMITS["parameters"], strict=True)] | None = (
        Field(None, description="Total parameters; required when architecture is absent.")
    )
    dtype: Dtype = Field(Dtype.bfloat16, description="Storage dtype of unquantized weights.")
    quantization: Quantization | None = Field(None, description="Weight quantization, if any.")
    pipeline: Pipeline | None = Field(
        None,
        description="A diffusion pipeline (image or video generation): its class and components "
        "from model_index.json and each config.json (gpu-sizer import-diffusers).",
    )

    @property
    def quantization_method(self) -> QuantizationMethod | None:
        """The quantization method, or ``None`` for unquantized weights."""
        return self.quantization.method if self.quantization else None

    @model_validator(mode="after")
    def _check(self) -> Model:
        problems = _Problems()
        if self.pipeline is not None:
            if self.architecture is not None:
                problems.add(
                    "pipeline",
                    "give spec.model.pipeline (a diffusion pipeline) or spec.model.architecture "
                    "(a language model), not both",
                )
        elif self.architecture is None and self.parameter_count is None:
            problems.add(
                "parameterCount",
                "give spec.model.architecture (config.json keys), spec.model.parameterCount, or "
                "spec.model.pipeline (a diffusion pipeline)",
            )
        arch = self.architecture
        if (
            arch is not None
            and arch.model_type not in KNOWN_MODEL_TYPES
            and self.parameter_count is None
        ):
            problems.add(
                "architecture.modelType",
                f"model type {arch.model_type!r} has no exact parameter layout in gpu-sizer "
                "(those with one: " + ", ".join(KNOWN_MODEL_TYPES) + "): give "
                "spec.model.parameterCount with it (gpu-sizer import-hf-config counts it with "
                "transformers on the meta device when the hf extra is installed); the "
                "architecture then sizes the KV cache and activations",
            )
        problems.raise_if_any()
        return self
