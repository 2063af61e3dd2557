"""A diffusers pipeline directory as a GPUWorkload skeleton (``gpu-sizer import-diffusers``). Pure.

A pipeline saved by ``DiffusionPipeline.save_pretrained`` (or downloaded from the Hub) holds
``model_index.json`` (``_class_name``: the pipeline class; one ``[library, class]`` pair per
component, ``[null, null]`` for an absent optional one) and one folder per component with its
``config.json`` (models) or ``scheduler_config.json`` / tokenizer files (parts without weights).
``diffusers`` 0.42.1 ``pipelines/pipeline_utils.py`` ``DiffusionPipeline.from_pretrained`` reads
the same files.

For a class gpu-sizer sizes (:data:`~gpu_sizer.api.components.COMPONENT_CLASSES`) only the
config keys it reads are written (camelCased); for any other class the whole config.json is
kept, and its parameter count is left to the caller (``gpu-sizer import-diffusers`` builds it
with ``diffusers`` on the meta device when that optional extra is installed). Without a count,
the estimate lists the component in ``missingComponents`` and the verdict is ``Incomplete``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from pydantic.alias_generators import to_camel

from gpu_sizer.api.components import COMPONENT_CLASSES, WEIGHTLESS_SUFFIXES

__all__ = [
    "CALL_DEFAULTS",
    "ImportedComponent",
    "UnsupportedPipeline",
    "pipeline_from_model_index",
]


class UnsupportedPipeline(ValueError):
    """``model_index.json`` or a component's config.json cannot be read as a pipeline."""


#: ``__call__`` defaults (height, width, frames) of each pipeline class in ``diffusers`` 0.42.1
#: (``pipelines/<family>/pipeline_<name>.py``): literal defaults (Wan 480x832x81, HunyuanVideo
#: 720x1280x129, LTX 512x704x161) or, where the signature says ``None``, what the call derives
#: from the published configs (the denoiser's ``sample_size`` times the VAE's scale factor 8:
#: 512 for SD 1.5, 1024 for SDXL, SD3 and Flux; CogVideoX-5B's ``sample_height/width`` 60x90 and
#: ``sample_frames`` 49).
CALL_DEFAULTS: Final[dict[str, tuple[int, int, int | None]]] = {
    "StableDiffusionPipeline": (512, 512, None),
    "StableDiffusionImg2ImgPipeline": (512, 512, None),
    "StableDiffusionXLPipeline": (1024, 1024, None),
    "StableDiffusionXLImg2ImgPipeline": (1024, 1024, None),
    "StableDiffusion3Pipeline": (1024, 1024, None),
    "StableDiffusion3Img2ImgPipeline": (1024, 1024, None),
    "FluxPipeline": (1024, 1024, None),
    "FluxImg2ImgPipeline": (1024, 1024, None),
    "WanPipeline": (480, 832, 81),
    "WanImageToVideoPipeline": (480, 832, 81),
    "HunyuanVideoPipeline": (720, 1280, 129),
    "CogVideoXPipeline": (480, 720, 49),
    "CogVideoXImageToVideoPipeline": (480, 720, 49),
    "LTXPipeline": (512, 704, 161),
    "LTXImageToVideoPipeline": (512, 704, 161),
}


@dataclass(frozen=True)
class ImportedComponent:
    """One component as written to ``spec.model.pipeline.components``, and its full config
    (snake_case, as read) for a caller that counts the parameters of a class gpu-sizer does not
    size."""

    name: str
    class_name: str
    library: str
    config: dict[str, Any]
    entry: dict[str, Any]

    @property
    def sized(self) -> bool:
        """Whether gpu-sizer builds this class itself (exact counts without ``diffusers``)."""
        return self.class_name in COMPONENT_CLASSES


def _camel(config: dict[str, Any], keys: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key.startswith("_") or (keys is not None and key not in keys):
            continue
        out[to_camel(key)] = value
    return out


def pipeline_from_model_index(
    index: dict[str, Any], read_config: Callable[[str], dict[str, Any] | None]
) -> tuple[str, list[ImportedComponent]]:
    """The pipeline class and its weighted components.

    :param index: ``model_index.json``.
    :param read_config: component folder name -> its ``config.json``, or ``None`` when the
        folder has none (a tokenizer, scheduler or processor).
    :raises UnsupportedPipeline: no ``_class_name``, a malformed entry, or a config that is not
        a JSON object.
    """
    cls = index.get("_class_name")
    if not isinstance(cls, str) or not cls:
        raise UnsupportedPipeline(
            "model_index.json has no _class_name: not a diffusers pipeline directory"
        )
    components: list[ImportedComponent] = []
    for name, value in index.items():
        if name.startswith("_"):
            continue
        if not (isinstance(value, list) and len(value) == 2):
            raise UnsupportedPipeline(
                f"model_index.json entry {name!r} is not a [library, class] pair"
            )
        library, class_name = value
        if library is None or class_name is None:
            continue  # an optional component saved as absent
        if not isinstance(class_name, str) or class_name.endswith(WEIGHTLESS_SUFFIXES):
            continue
        config = read_config(name)
        if config is None:
            continue
        if not isinstance(config, dict):
            raise UnsupportedPipeline(f"{name}/config.json must be a JSON object")
        known = COMPONENT_CLASSES.get(class_name)
        entry: dict[str, Any] = {
            "name": name,
            "class": class_name,
            "config": _camel(config, known.keys if known is not None else None),
        }
        components.append(ImportedComponent(name, class_name, str(library), config, entry))
    if not components:
        raise UnsupportedPipeline(
            "model_index.json lists no component with a config.json (models with weights)"
        )
    return cls, components
