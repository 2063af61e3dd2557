"""``spec.model`` of a Hugging Face ``model_type`` without a parameter layout in gpu-sizer. Pure.

Any model ``transformers`` can build is accepted: its parameters are counted on the meta device
by the caller (``gpu-sizer import-hf-config`` through :mod:`gpu_sizer.cli.hf_meta`, the ``hf``
extra), which hands this module what it found as a :class:`TransformersReading`. What the
estimate may then count is decided here, on the safe side:

- the attention geometry (``spec.model.architecture``, which sizes the KV cache and the
  activations) is kept only when the built model has one attention module per layer; a model
  whose layers are not all attention layers (a hybrid of Mamba and attention blocks) would get a
  KV cache for layers that have none, or miss state the memory model does not know, so its
  architecture is left out and the estimate is Incomplete, never a fit;
- the parameter count is the built model's (``nn.Module.parameters``, tied matrices once), not a
  figure given by hand that disagrees with it.

Without a reading (transformers missing, or it cannot build the model) a hand-given parameter
count is required, and the geometry is config.json's keys as written.

A model whose architecture the API refuses (a layer kind gpu-sizer does not size yet, such as
Nemotron-H's MoE layers) is kept as its parameter count alone when every problem is in the
architecture (:func:`architecture_refused_only`, :func:`keep_count_only`): the estimate is then
Incomplete, never a fit, where any other problem still refuses the document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpu_sizer.api.hf import UnsupportedConfig, model_from_hf_config

if TYPE_CHECKING:
    from gpu_sizer.api.errors import Problem

__all__ = [
    "ARCHITECTURE_PATH",
    "TransformersReading",
    "architecture_refused_only",
    "keep_count_only",
    "model_from_reading",
    "model_without_reading",
]

#: Where the API's problems with the attention geometry are reported.
ARCHITECTURE_PATH = "spec.model.architecture"


@dataclass(frozen=True, slots=True)
class TransformersReading:
    """What ``transformers`` makes of a config.json.

    :ivar config: the config as its class reads it (``PretrainedConfig.to_dict``: defaults filled,
        derived keys such as ``layer_types`` present).
    :ivar parameters: parameters of the model built from it (tied matrices once).
    :ivar attention_layers: attention modules of the model (outermost modules whose class name
        ends in ``Attention``): one per decoder layer for a model that only attends.
    :ivar model_class: the class that was built.
    :ivar version: ``transformers.__version__``.
    """

    config: dict[str, Any]
    parameters: int
    attention_layers: int
    model_class: str
    version: str


def model_from_reading(
    config: dict[str, Any],
    reading: TransformersReading,
    parameter_count: int | None,
    notes: list[str],
    *,
    serving: bool,
) -> dict[str, Any]:
    """``spec.model`` (camelCase keys) from config.json as ``transformers`` read it.

    ``config`` is config.json as written: its private keys (``_name_or_path``) and its
    ``quantization_config`` are kept over the reading, which drops them. ``parameter_count`` is
    the one given by hand, if any: a figure that differs from the built model's is noted (the
    command writes the user's over the built model's ``parameterCount``). Appends to ``notes``
    what was left out and why.

    :raises UnsupportedConfig: the config cannot be turned into ``spec.model``.
    """
    model_type = config.get("model_type")
    kept = {k: v for k, v in config.items() if k.startswith("_") or k == "quantization_config"}
    read = {**reading.config, **kept}
    model = model_from_hf_config(read, notes, serving=serving)
    layers = (model.get("architecture") or {}).get("numHiddenLayers")
    if layers is not None and reading.attention_layers != layers:
        del model["architecture"]
        notes.append(
            f"model type {model_type!r}: {reading.model_class} has {reading.attention_layers} "
            f"attention modules for {layers} layers, so its layers are not all attention "
            "layers; spec.model.architecture is left out, so the KV cache and activations are "
            "not counted and the estimate is Incomplete"
        )
    if parameter_count is not None and parameter_count != reading.parameters:
        notes.append(
            f"--parameter-count {parameter_count} differs from the {reading.parameters} "
            f"parameters of {reading.model_class} (transformers {reading.version}); yours is kept"
        )
    model["parameterCount"] = reading.parameters
    return model


def model_without_reading(
    config: dict[str, Any],
    parameter_count: int | None,
    unavailable: str,
    notes: list[str],
    *,
    serving: bool,
) -> dict[str, Any]:
    """``spec.model`` when ``transformers`` could not read the config (``unavailable`` says
    why): the geometry is config.json's keys as written, unchecked, and a note says so.

    :raises UnsupportedConfig: no ``parameter_count`` was given, so nothing counts the weights
        (the message says how to get one).
    """
    model_type = config.get("model_type")
    if parameter_count is None:
        raise UnsupportedConfig(
            f"model type {model_type!r} has no parameter layout in gpu-sizer, and its "
            f"parameters cannot be counted: {unavailable}. Or give --parameter-count N (the "
            "model card's total)"
        )
    notes.append(
        f"model type {model_type!r}: transformers could not read it ({unavailable}); the "
        "attention geometry is config.json's keys as written, unchecked"
    )
    return model_from_hf_config(config, notes, serving=serving)


def architecture_refused_only(problems: Sequence[Problem]) -> bool:
    """Whether the API refused the document for its ``spec.model.architecture`` alone (at
    least one problem, every one under that path)."""
    return bool(problems) and all(p.path.startswith(ARCHITECTURE_PATH) for p in problems)


def keep_count_only(model: dict[str, Any], parameter_count: int) -> None:
    """Drop ``model``'s architecture and keep ``parameter_count`` (edits ``model``): the
    weights are counted, the KV cache and activations are not, so the estimate is Incomplete.
    Only for a model :func:`architecture_refused_only` says is refused for its architecture."""
    del model["architecture"]
    model["parameterCount"] = parameter_count
