"""A diffusers pipeline directory as a GPUWorkload skeleton (``gpu-sizer import-diffusers``). Pure.

A pipeline saved by ``DiffusionPipeline.save_pretrained`` (or downloaded from the Hub) holds
``model_index.json`` and one folder per component with its ``config.json`` (models) or
``scheduler_config.json`` / tokenizer files (parts without weights). This module reads them the
way ``diffusers`` 0.42.1 does:

- ``DiffusionPipeline.from_pretrained`` (``pipelines/pipeline_utils.py``) calls ``load_config``
  (plain ``json.loads``), then ``extract_init_dict`` (``configuration_utils.py``): keys starting
  with ``_`` (``_class_name``, ``_diffusers_version``, ``_name_or_path``...) are dropped, as are
  the keys listed in ``_use_default_values``; the rest are matched against the pipeline class's
  ``__init__`` (``_get_signature_keys``): components (required arguments and
  ``_optional_components``) and options (the other arguments with defaults:
  ``requires_safety_checker``, ``force_zeros_for_empty_prompt``, ``boundary_ratio``...); keys the
  signature does not name are "not expected and will be ignored".
- A component entry is a ``[library, class]`` pair; ``load_module`` skips it when the library is
  ``null`` (``[null, null]``: an optional component saved as absent). A library that is a
  ``diffusers.pipelines`` module (``stable_diffusion``) names a class defined in that module.
- ``_class_name`` is a string, or a ``[module, class]`` pair for a custom pipeline.

For a pipeline class gpu-sizer models (``budget.diffusion.pipelines.PIPELINES``) the signature
decides what is a component and what an option; for any other class, an entry whose value is a
two-item list of strings or nulls is a component and anything else an option (what every
diffusers pipeline saves).

For a component class gpu-sizer sizes (:data:`~gpu_sizer.api.components.COMPONENT_CLASSES`)
only the config keys it reads are written (camelCased; nested objects too); for any other class
the whole config.json is kept, and its parameter count is left to the caller (``gpu-sizer
import-diffusers`` builds it with ``diffusers`` on the meta device when that optional extra is
installed). Without a count, the estimate lists the component in ``missingComponents`` and the
verdict is ``Incomplete``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic.alias_generators import to_camel

from gpu_sizer.api.components import (
    COMPONENT_CLASSES,
    WEIGHTLESS_SUFFIXES,
    ComponentClass,
    ConfigKey,
    stray_key,
)

__all__ = [
    "CALL_DEFAULTS",
    "ImportedComponent",
    "ImportedPipeline",
    "UnsupportedPipeline",
    "component_config",
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
    "MochiPipeline": (480, 848, 19),
    "QwenImagePipeline": (1024, 1024, None),
}


@dataclass(frozen=True)
class ImportedComponent:
    """One component as written to ``spec.model.pipeline.components``, and its full config
    (snake_case, as read, ``_`` keys dropped) for a caller that counts the parameters of a class
    gpu-sizer does not size."""

    name: str
    class_name: str
    library: str
    config: dict[str, Any]
    entry: dict[str, Any]

    @property
    def sized(self) -> bool:
        """Whether gpu-sizer builds this class itself (exact counts without ``diffusers``)."""
        return self.class_name in COMPONENT_CLASSES


@dataclass(frozen=True)
class ImportedPipeline:
    """What ``model_index.json`` says: the pipeline class, its components with weights, its
    options (``spec.model.pipeline.config``, camelCased) and what was left out and why."""

    class_name: str
    components: list[ImportedComponent]
    options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _camel_known(
    cls: str,
    config: Mapping[str, Any],
    keys: Mapping[str, ConfigKey],
    prefix: str = "",
    ignored: list[str] | None = None,
) -> dict[str, Any]:
    """The keys of ``config`` that ``cls`` reads, camelCased, and those it does not read that
    stand for one it does (a misspelling, an alias: :func:`stray_key`), kept so that the
    spec's check refuses them: dropped, the key meant would silently take its default.

    A config.json key is snake_case: one already spelt as the spec spells a key the class reads
    (``numLayers``, ``NumLayers``) is no key of the library's (``ConfigMixin.from_config``
    warns "will be ignored"; ``PretrainedConfig`` keeps it as an unused attribute), so it is
    left out, and named in ``ignored``, rather than written as the spec key it would become."""
    out: dict[str, Any] = {}
    camels = {to_camel(k) for k in keys}
    for key, value in config.items():
        spec, camel = keys.get(key), to_camel(key)
        if spec is None:
            if camel in camels:
                if ignored is not None:
                    ignored.append(prefix + key)
                continue
            if stray_key(cls, camel, prefix) is not None:
                out[camel] = value
            continue
        if spec.kind == "obj" and isinstance(value, Mapping):
            out[camel] = _camel_known(cls, value, spec.default, f"{prefix}{camel}.", ignored)
        else:
            out[camel] = value
    return out


def _camel_all(config: Mapping[str, Any]) -> dict[str, Any]:
    return {
        to_camel(k): _camel_all(v) if isinstance(v, Mapping) else v
        for k, v in config.items()
        if not k.startswith("_")
    }


def component_config(config: Mapping[str, Any], *, diffusers_config: bool) -> dict[str, Any]:
    """A component's config.json as its library's loader reads it (snake_case): ``_`` keys
    dropped and, for a diffusers ``ConfigMixin`` config, the keys ``_use_default_values`` lists
    (``extract_init_dict``: "skip keys that were not present in the original config, so
    default __init__ values were used").

    :raises UnsupportedPipeline: ``_use_default_values`` is not a list of names.
    """
    defaults: Collection[str] = ()
    if diffusers_config:
        listed = config.get("_use_default_values", [])
        if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed):
            raise UnsupportedPipeline("_use_default_values must be a list of config keys")
        defaults = frozenset(listed)
    return {k: v for k, v in config.items() if not k.startswith("_") and k not in defaults}


#: The libraries diffusers imports a component class from by name (other first elements are a
#: ``diffusers.pipelines`` module or a custom module file).
_LIBRARIES: Final = ("diffusers", "transformers")


def _nested_flat_snake(known: ComponentClass, config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A flat config.json (the top-level keys of ``known.flat_into``, snake_case) with those
    keys moved into that object, as transformers' config class moves them
    (``Qwen2_5_VLConfig.__post_init__``); ``config`` itself otherwise."""
    if not known.flat_into:
        return config
    into, spec = known.wire[known.flat_into]
    inner = spec.default
    if into in config or not any(k in inner for k in config):
        return config
    return {
        **{k: v for k, v in config.items() if k not in inner},
        into: {k: v for k, v in config.items() if k in inner},
    }


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(v is None or isinstance(v, str) for v in value)
    )


def _pipeline_class(index: Mapping[str, Any]) -> tuple[str, list[str]]:
    cls = index.get("_class_name")
    if isinstance(cls, list) and len(cls) == 2 and all(isinstance(v, str) and v for v in cls):
        return cls[1], [f"custom pipeline {cls[1]} from module {cls[0]}: not one gpu-sizer models"]
    if not isinstance(cls, str) or not cls:
        found = (
            "has no _class_name"
            if cls is None
            else f"has _class_name {json.dumps(cls, default=str)}"
        )
        raise UnsupportedPipeline(
            f"model_index.json {found}; it must be the pipeline's class name (a string, or a "
            "[module, class] pair): not a diffusers pipeline directory"
        )
    return cls, []


def pipeline_from_model_index(
    index: Mapping[str, Any],
    read_config: Callable[[str], dict[str, Any] | None],
    *,
    signature: Callable[[str], tuple[Collection[str], Mapping[str, Any]] | None] | None = None,
) -> ImportedPipeline:
    """The pipeline class, its weighted components and its options.

    :param index: ``model_index.json``.
    :param read_config: component folder name -> its ``config.json``, or ``None`` when the
        folder has none (asked only of components with weights: tokenizers, schedulers and
        processors are not read).
    :param signature: pipeline class -> (component names, options with defaults) of its
        ``__init__``, or ``None`` for a class not modelled (then entries are told apart by
        shape).
    :raises UnsupportedPipeline: no ``_class_name``, a component entry that is not a ``[library,
        class]`` pair, a present component without a class, a component with weights whose
        config.json is missing, or a config that is not a JSON object.
    """
    cls, notes = _pipeline_class(index)
    known = signature(cls) if signature is not None and not notes else None
    used_defaults = index.get("_use_default_values", [])
    skipped = frozenset(used_defaults) if isinstance(used_defaults, list) else frozenset()
    components: list[ImportedComponent] = []
    options: dict[str, Any] = {}
    ignored: list[str] = []
    for name, value in index.items():
        if name.startswith("_") or name in skipped:
            continue
        if known is not None:
            names, defaults = known
            if name in defaults:
                options[to_camel(name)] = value
                continue
            if name not in names:
                ignored.append(name)
                continue
            if not _is_pair(value):
                raise UnsupportedPipeline(
                    f"model_index.json entry {name!r} is a component of {cls} but not a "
                    "[library, class] pair"
                )
        elif not _is_pair(value):
            options[to_camel(name)] = value
            continue
        library, class_name = value
        if library is None:
            continue  # an optional component saved as absent ([null, null])
        if class_name is None:
            raise UnsupportedPipeline(
                f"model_index.json entry {name!r} names library {library!r} but no class"
            )
        if class_name.endswith(WEIGHTLESS_SUFFIXES):
            continue
        raw = read_config(name)
        if raw is None:
            # diffusers' loader fails here too (from_pretrained reads every listed model's
            # config.json): sizing the rest would pass off a partial download as the pipeline.
            raise UnsupportedPipeline(
                f"{name}/config.json: not found, but model_index.json lists {name!r} as "
                f"[{library!r}, {class_name!r}], a model diffusers loads with that file; "
                f"download {name}/config.json, or set the entry to [null, null] to leave the "
                "component out"
            )
        if not isinstance(raw, dict):
            raise UnsupportedPipeline(f"{name}/config.json must be a JSON object")
        sized = COMPONENT_CLASSES.get(class_name)
        library_name = str(library)
        if sized is not None:
            raw = dict(_nested_flat_snake(sized, raw))
        if sized is not None and library_name != sized.library and library_name in _LIBRARIES:
            # get_class_obj_and_candidates looks the class up in the library the entry names
            raise UnsupportedPipeline(
                f"model_index.json entry {name!r} is [{library!r}, {class_name!r}], but "
                f"{class_name} is not in {library_name}: diffusers' loader fails on it "
                "(pipeline_loading_utils.get_class_obj_and_candidates); use "
                f"[{sized.library!r}, {class_name!r}]"
            )
        config = component_config(raw, diffusers_config="_class_name" in raw)
        unread: list[str] = []
        written = (
            _camel_known(class_name, config, sized.keys, ignored=unread)
            if sized is not None
            else _camel_all(config)
        )
        if unread:
            notes.append(
                f"{name}/config.json: {', '.join(unread)} not a key {library_name} reads "
                "(config.json keys are snake_case): ignored, as its loader ignores it"
            )
        entry: dict[str, Any] = {"name": name, "class": class_name, "config": written}
        components.append(ImportedComponent(name, class_name, library_name, config, entry))
    if ignored:
        notes.append(
            f"model_index.json entries not expected by {cls} and ignored, as diffusers does: "
            + ", ".join(ignored)
        )
    if not components:
        raise UnsupportedPipeline(
            "model_index.json lists no component with a config.json (models with weights)"
        )
    return ImportedPipeline(cls, components, options, notes)
