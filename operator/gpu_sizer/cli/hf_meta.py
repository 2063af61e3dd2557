"""A model as ``transformers`` reads and builds it, on PyTorch's meta device (the ``hf`` extra).

``gpu-sizer import-hf-config`` uses :func:`read_with_transformers` for a ``model_type`` the
sizing engine has no parameter layout for: the config class reads config.json (filling its
defaults and deriving keys such as ``layer_types`` from ``sliding_window_pattern``), the model
class ``transformers`` would load is built from it on the meta device (no memory, no weights, no
download) and its parameters are counted, a tied matrix once (``nn.Module.parameters`` yields a
shared tensor once, as ``PreTrainedModel.num_parameters`` counts). The test suite builds every
known family the same way as its oracle (``tests/budget/test_budget_families.py``).

``gpu-sizer import-diffusers`` uses :func:`meta_parameter_count` the same way for a pipeline
component of a class gpu-sizer does not size.

Only the CLI imports this module, and only when it needs it: the operator, the webhook and the
pure core never import ``transformers``, ``diffusers`` or ``torch`` (``.importlinter``). What the
reading decides for ``spec.model`` is the core's (:mod:`gpu_sizer.api.hf_generic`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Final

from gpu_sizer.api.hf_generic import TransformersReading

__all__ = [
    "INSTALL_HINT",
    "HfUnavailable",
    "TransformersReading",
    "meta_parameter_count",
    "read_with_transformers",
]

#: How to get the extra; torch's CPU build first, so that pip does not pull a CUDA build.
INSTALL_HINT: Final = (
    "pip install torch --index-url https://download.pytorch.org/whl/cpu, then "
    "pip install 'gpu-sizer[hf]'"
)
#: Model classes tried, in order, after config.json's own ``architectures[0]``.
_AUTO_CLASSES: Final = ("AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModel")


class HfUnavailable(RuntimeError):
    """``transformers`` or torch is not installed, or the installed release cannot build the
    model (an unknown ``model_type``, a model that needs ``trust_remote_code``)."""


def _import() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise HfUnavailable(f"{exc.name} is not installed ({INSTALL_HINT})") from None
    return torch, transformers


def read_with_transformers(config: dict[str, Any]) -> TransformersReading:
    """Read ``config`` with ``transformers`` and count the model's parameters on the meta device.

    The class is config.json's ``architectures[0]`` when the installed ``transformers`` has it,
    else the first of ``AutoModelForCausalLM``, ``AutoModelForImageTextToText`` and ``AutoModel``
    that maps the config. ``quantization_config`` is left out of the build: it changes how
    parameters are stored, not how many there are.

    :raises HfUnavailable: see the class.
    """
    torch, transformers = _import()
    version = str(transformers.__version__)
    model_type = str(config.get("model_type"))
    keys = {
        k: v
        for k, v in config.items()
        if k not in ("model_type", "quantization_config") and not k.startswith("_")
    }
    try:
        cfg = transformers.AutoConfig.for_model(model_type, **keys)
    except (KeyError, ValueError):
        raise HfUnavailable(
            f"transformers {version} does not know model_type {model_type!r} (a model that "
            "needs trust_remote_code is not built)"
        ) from None
    except Exception as exc:  # the config class's own validators (huggingface_hub strict
        # dataclasses raise StrictDataclassClassValidationError, not a ValueError)
        raise HfUnavailable(
            f"transformers {version} refuses this config ({_first_line(exc)})"
        ) from None
    names = [n for n in config.get("architectures") or () if isinstance(n, str)]
    classes = [getattr(transformers, n) for n in names[:1] if hasattr(transformers, n)]
    classes += [getattr(transformers, auto) for auto in _AUTO_CLASSES]
    failures: list[str] = []
    for cls in classes:
        build = cls._from_config if cls.__name__ in names else cls.from_config
        try:
            with torch.device("meta"):
                model = build(cfg)
        except Exception as exc:  # any refusal of the model class: try the next one
            failures.append(f"{cls.__name__}: {_first_line(exc)}")
            continue
        return TransformersReading(
            config=cfg.to_dict(),
            parameters=int(sum(p.numel() for p in model.parameters())),
            attention_layers=_attention_modules(model),
            model_class=type(model).__name__,
            version=version,
        )
    raise HfUnavailable(
        f"transformers {version} has no model class that builds model_type {model_type!r} "
        f"({'; '.join(failures[-1:])})"
    )


def _first_line(exc: BaseException) -> str:
    """The exception's message in one line of at most 200 characters."""
    lines = (str(exc) or repr(exc)).strip().splitlines() or [repr(exc)]
    return " ".join(line.strip() for line in lines[:2])[:200]


def _attention_modules(model: Any) -> int:
    """Outermost modules whose class name ends in ``Attention``."""
    found: list[str] = []
    for name, module in model.named_modules():
        if not type(module).__name__.endswith("Attention"):
            continue
        if any(name.startswith(f"{outer}.") for outer in found):
            continue
        found.append(name)
    return len(found)


@contextlib.contextmanager
def _libraries_quiet() -> Iterator[None]:
    """diffusers' and transformers' loggers at ERROR while a model is built for its count: their
    warnings there are about the library's own use of the config (a key it ignores, a RoPE
    field renamed), not about sizing, and the command says what it counted in its own notes.
    Their levels are restored after."""
    loggers = [logging.getLogger(name) for name in ("diffusers", "transformers")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def missing_class(library: str, cls: str) -> str | None:
    """Why ``library`` (as :func:`meta_parameter_count` resolves it) has no class ``cls``,
    naming the library's version and the closest name it has; ``None`` when it has the class
    or is not installed (then nothing can be told)."""
    import difflib
    import importlib

    try:
        module = library if library in ("diffusers", "transformers") else "diffusers"
        version = getattr(importlib.import_module(module), "__version__", "")
        lib = importlib.import_module(
            library if module == library else f"diffusers.pipelines.{library}"
        )
    except (ImportError, ValueError):
        return None
    if getattr(lib, cls, None) is not None:
        return None
    close = difflib.get_close_matches(cls, [n for n in dir(lib) if n[:1].isupper()], n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{module} {version} has no class {cls}{hint}"


def meta_parameter_count(library: str, cls: str, config: dict[str, Any]) -> int | None:
    """Parameters of ``cls`` built from ``config`` by its library on PyTorch's meta device (no
    memory), or ``None`` when the library or the class is not available. An optional extra of
    this command only: the operator and the webhook never import diffusers or transformers.

    ``library`` is the ``model_index.json`` entry's: ``diffusers``, ``transformers``, or a
    ``diffusers.pipelines`` module (``stable_diffusion`` for SD's safety checker), as
    ``diffusers``' ``load_sub_model`` resolves it. A transformers model is built from its
    config class (``from_dict``: nested ``text_config``/``vision_config`` objects included).
    """
    import importlib
    import warnings

    try:
        torch = importlib.import_module("torch")
        if library in ("diffusers", "transformers"):
            lib = importlib.import_module(library)
        else:
            lib = importlib.import_module(f"diffusers.pipelines.{library}")
        model_cls = getattr(lib, cls)
    except (ImportError, AttributeError, ValueError):
        return None
    try:
        with warnings.catch_warnings(), _libraries_quiet(), torch.device("meta"):
            warnings.simplefilter("ignore")
            config_class = getattr(model_cls, "config_class", None)
            if config_class is not None and hasattr(config_class, "from_dict"):
                model = model_cls(config_class.from_dict(config))
            else:
                model = model_cls.from_config(config)
        return int(sum(p.numel() for p in model.parameters()))
    except Exception:  # any refusal of the library's config or model class
        # (huggingface_hub's StrictDataclassClassValidationError is not a ValueError)
        return None  # a config the class's constructor refuses: left uncounted
