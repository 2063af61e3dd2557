"""Building diffusers and transformers components from published configs on the meta device."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

#: transformers config class of each transformers component class.
CONFIG_CLASSES = {
    "CLIPTextModel": "CLIPTextConfig",
    "CLIPTextModelWithProjection": "CLIPTextConfig",
    "CLIPVisionModel": "CLIPVisionConfig",
    "CLIPVisionModelWithProjection": "CLIPVisionConfig",
    "T5EncoderModel": "T5Config",
    "UMT5EncoderModel": "UMT5Config",
    "LlamaModel": "LlamaConfig",
    "StableDiffusionSafetyChecker": "CLIPConfig",
}


def model_class(cls: str) -> Any:
    """The library class of ``cls`` (SD's safety checker lives in a diffusers pipeline module)."""
    if cls == "StableDiffusionSafetyChecker":
        from diffusers.pipelines.stable_diffusion.safety_checker import (
            StableDiffusionSafetyChecker,
        )

        return StableDiffusionSafetyChecker
    return getattr(transformers if cls in CONFIG_CLASSES else diffusers, cls)


def build_on_meta(cls: str, config: dict[str, Any], dtype: Any = None) -> Any:
    """The library's own model of ``cls`` from ``config`` (snake_case), without memory."""
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        if cls in CONFIG_CLASSES:
            model = model_class(cls)(getattr(transformers, CONFIG_CLASSES[cls])(**config))
        else:
            model = model_class(cls).from_config(config)
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()
