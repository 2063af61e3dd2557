"""``gpu-sizer import-diffusers``: a GPUWorkload skeleton from a diffusers pipeline directory.

``spec.model.pipeline`` comes from :func:`gpu_sizer.api.diffusers_import.pipeline_from_model_index`
over ``model_index.json`` and each component's ``config.json``; ``spec.generation`` takes the
pipeline's call defaults. A component of a class gpu-sizer does not size is counted with its
library on the meta device when installed (:func:`.hf_meta.meta_parameter_count`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from gpu_sizer.argtypes import positive_int
from gpu_sizer.cli.exit_status import EXIT_INVALID, EXIT_OK

if TYPE_CHECKING:
    from gpu_sizer.api import GenerationTask
    from gpu_sizer.api.components import ConfigKey
    from gpu_sizer.api.diffusers_import import ImportedPipeline
    from gpu_sizer.api.errors import Problem
    from gpu_sizer.budget.diffusion.pipelines import PipelineKind

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``import-diffusers`` subcommand and its flags."""
    p = sub.add_parser(
        "import-diffusers",
        help="turn a diffusers pipeline directory into a GPUWorkload skeleton",
        description="Print a GPUWorkload YAML whose spec.model.pipeline comes from a pipeline "
        "directory (model_index.json and each component's config.json, as on the Hugging Face "
        "Hub) and whose spec.generation takes the pipeline's call defaults. Components of a "
        "class gpu-sizer does not size get their parameter count from diffusers/transformers on "
        "PyTorch's meta device when installed (pip install 'gpu-sizer[diffusion]'); otherwise "
        "their estimate is Incomplete.",
    )
    p.add_argument(
        "directory", metavar="DIR", help="the pipeline directory (or its model_index.json)"
    )
    p.add_argument("--name", required=True, help="metadata.name of the GPUWorkload")
    p.add_argument("--namespace", help="metadata.namespace")
    p.add_argument("--model-id", help="spec.model.name (default: the directory's name)")
    p.add_argument("--revision", help="spec.model.revision (commit of the weights)")
    p.add_argument("--dtype", help="spec.model.dtype (torch_dtype; default bfloat16)")
    p.add_argument(
        "--task",
        choices=["TextToImage", "ImageToImage", "TextToVideo", "ImageToVideo"],
        help="default: the pipeline class's task",
    )
    p.add_argument("--height", type=positive_int, help="default: the pipeline's call default")
    p.add_argument("--width", type=positive_int, help="default: the pipeline's call default")
    p.add_argument("--num-frames", type=positive_int, help="video only; default: the call default")
    p.add_argument("--batch-size", type=positive_int, help="images per call (default 1)")
    p.add_argument("--offload", choices=["None", "Model", "Sequential", "Group"], help="None")
    p.set_defaults(handler=run)


class ImportRefused(ValueError):
    """The folder or the flags cannot become a GPUWorkload. ``lines`` are printed one per line as
    ``error: LINE`` (each naming the file or the flag to fix, and how) and the command exits 2:
    bad input is the user's to fix, so it never reaches them as a traceback."""

    def __init__(self, *lines: str) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


def run(args: argparse.Namespace) -> int:
    """The handler of ``import-diffusers``: the GPUWorkload on stdout, or each refusal on
    stderr and exit 2."""
    try:
        return _import(args)
    except ImportRefused as exc:
        for line in exc.lines:
            print(f"error: {line}", file=sys.stderr)
        return EXIT_INVALID


def _import(args: argparse.Namespace) -> int:
    from gpu_sizer.api import API_VERSION, KIND

    _check_metadata(args)
    folder = _read_pipeline(_pipeline_folder(Path(args.directory)))
    root, imported = folder.root, folder.imported
    for note in imported.notes:
        print(f"Note: {note}", file=sys.stderr)
    generation = _generation(args, root, imported.class_name)
    entries = _entries(imported)
    pipeline: dict[str, Any] = {"class": imported.class_name}
    if imported.options:
        pipeline["config"] = imported.options
    pipeline["components"] = entries
    model: dict[str, Any] = {
        "name": args.model_id or root.resolve().name,
        "dtype": args.dtype or "bfloat16",
        "pipeline": pipeline,
    }
    if args.revision:
        model["revision"] = args.revision
    metadata: dict[str, Any] = {"name": args.name}
    if args.namespace:
        metadata["namespace"] = args.namespace
    spec = {"model": model, "generation": generation}
    doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
    _validate(doc, args, folder)
    sys.stdout.write(f"# Generated by gpu-sizer import-diffusers from {root}\n")
    yaml.safe_dump(doc, sys.stdout, sort_keys=False, width=100)
    return EXIT_OK


def _check_metadata(args: argparse.Namespace) -> None:
    """``--name`` and ``--namespace`` are checked before any file is read: a typo in a flag is
    reported as the flag, not as a problem of the folder."""
    from gpu_sizer.api.workload import validate_name, validate_namespace

    found = [validate_name(args.name)]
    if args.namespace is not None:
        found.append(validate_namespace(args.namespace))
    problems = [p for p in found if p is not None]
    if problems:
        raise ImportRefused(
            *(f"--{p.path.removeprefix('metadata.')}: {p.message}" for p in problems)
        )


def _pipeline_folder(path: Path) -> Path:
    """The folder DIR names. ``DIR/model_index.json`` itself means its folder (what a user
    tab-completes to); any other file is refused, since reading ``FILE/model_index.json`` could
    only fail with the OS's "Not a directory"."""
    if path.is_file():
        if path.name == _INDEX:
            return path.parent
        raise ImportRefused(
            f"{path}: is a file; import-diffusers expects the pipeline folder, the one holding "
            f"{_INDEX}"
        )
    return path


_INDEX: Final = "model_index.json"
_FOLDER_FIX: Final = (
    "DIR must be a diffusers pipeline folder: model_index.json and a folder per component, "
    "as DiffusionPipeline.save_pretrained writes it or the Hub publishes it"
)


@dataclass(frozen=True)
class _Folder:
    """A pipeline folder as read: its path as given (messages name files under it), its
    ``model_index.json`` (the spelling of its keys) and what the import made of them."""

    root: Path
    index: dict[str, Any]
    imported: ImportedPipeline


def _read_pipeline(root: Path) -> _Folder:
    """``model_index.json`` and the config.json of each component with weights, as diffusers'
    ``from_pretrained`` reads them; every refusal names the file it is about."""
    from gpu_sizer.api.diffusers_import import UnsupportedPipeline, pipeline_from_model_index
    from gpu_sizer.budget.diffusion.pipelines import PIPELINES

    index_path = root / _INDEX
    if not index_path.exists():
        raise ImportRefused(f"{index_path}: cannot read: No such file or directory; {_FOLDER_FIX}")

    def read_config(name: str) -> dict[str, Any] | None:
        path = root / name / "config.json"
        return _read_config(path, f"{name}/config.json") if path.is_file() else None

    def signature(cls: str) -> tuple[tuple[str, ...], dict[str, Any]] | None:
        kind = PIPELINES.get(cls)
        return None if kind is None else (kind.components, kind.options)

    index = _read_object(index_path, _INDEX)
    try:
        imported = pipeline_from_model_index(index, read_config, signature=signature)
    except UnsupportedPipeline as exc:
        raise ImportRefused(_in_folder(root, str(exc))) from None
    return _Folder(root, index, imported)


def _read_config(path: Path, shown: str) -> dict[str, Any]:
    """A component's config.json, its ``_use_default_values`` checked here, where the file is
    known (:func:`~gpu_sizer.api.diffusers_import.component_config` raises without naming it)."""
    from gpu_sizer.api.diffusers_import import UnsupportedPipeline, component_config

    config = _read_object(path, shown)
    try:
        component_config(config, diffusers_config="_class_name" in config)
    except UnsupportedPipeline as exc:
        raise ImportRefused(f"{path}: {exc}") from None
    return config


def _read_object(path: Path, shown: str) -> dict[str, Any]:
    """The JSON object in ``path``; ``shown`` names it in warnings of repeated keys."""
    from gpu_sizer.jsonio import JsonLimitError
    from gpu_sizer.yamlio import UnreadableFile, read_text

    try:
        text = read_text(str(path))
    except UnreadableFile as exc:
        fix = "; diffusers reads it as UTF-8 JSON: re-save it as UTF-8 or download it again"
        reason = f"{exc}{fix}" if str(exc).startswith("not UTF-8") else str(exc)
        raise ImportRefused(f"{path}: cannot read: {reason}") from None
    try:
        loaded = _load_json(text, shown)
    except json.JSONDecodeError as exc:
        raise ImportRefused(f"{path}: {_not_json(exc)}") from None
    except JsonLimitError as exc:
        raise ImportRefused(f"{path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ImportRefused(
            f"{path}: must be a JSON object ({{...}}), not a JSON {_json_kind(loaded)}"
        )
    return loaded


def _not_json(exc: json.JSONDecodeError) -> str:
    """Why the text is not JSON, with the line and column to look at (an empty file, the usual
    interrupted download, said as such rather than as "Expecting value")."""
    if not exc.doc.strip():
        return "not JSON: the file is empty; download it again"
    return (
        f"not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}; fix it there or "
        "download the file again"
    )


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return "number"


#: The start of an :class:`UnsupportedPipeline` message that names a file of the folder
#: (``model_index.json ...``, ``unet/config.json: ...``): placed under DIR as it is.
_FILE_FIRST = re.compile(r"(model_index\.json|[^\s/:]+/config\.json)\b")


def _in_folder(root: Path, message: str) -> str:
    """``message`` about a file of ``root`` (named relative to it) as ``DIR/FILE...``; any
    other message as ``DIR/model_index.json: ...``, the file that lists what is read."""
    if _FILE_FIRST.match(message):
        return f"{root}/{message}"
    return f"{root}/{_INDEX}: {message}"


def _generation(args: argparse.Namespace, root: Path, cls: str) -> dict[str, Any]:
    """``spec.generation``: the flags over the pipeline class's call defaults."""
    from gpu_sizer.api.diffusers_import import CALL_DEFAULTS
    from gpu_sizer.budget.diffusion.pipelines import PIPELINES

    defaults = CALL_DEFAULTS.get(cls)
    if defaults is None and (args.height is None or args.width is None):
        raise ImportRefused(
            f"{root}/{_INDEX}: pipeline class {cls} has no known call defaults: give --height "
            "and --width (and --num-frames for video)"
        )
    height, width, frames = defaults or (args.height, args.width, None)
    video = None if defaults is None else frames is not None
    task = _task(args.task, f"{cls} ({root / _INDEX})", PIPELINES.get(cls), video=video)
    generation: dict[str, Any] = {
        "task": task.value,
        "height": args.height or height,
        "width": args.width or width,
    }
    if task.video:
        count = args.num_frames or frames
        if count is None:
            raise ImportRefused(
                f"--task {task.value}: pipeline class {cls} has no known call defaults: give "
                "--num-frames too"
            )
        generation["numFrames"] = count
    elif args.num_frames is not None:
        raise ImportRefused(
            f"--num-frames: applies only to TextToVideo and ImageToVideo, not {task.value} "
            f"({cls} in {root / _INDEX}); leave --num-frames out"
        )
    if args.batch_size is not None:
        generation["batchSize"] = args.batch_size
    if args.offload is not None:
        generation["offload"] = args.offload
    return generation


def _task(
    given: str | None, shown: str, kind: PipelineKind | None, *, video: bool | None
) -> GenerationTask:
    """The task: ``--task`` when the pipeline class (``shown``, with its file) can run it, else
    its own. A modelled class (``kind``) runs only its tasks: ``StableDiffusionPipeline`` makes
    no video, and writing TextToVideo would size a call it cannot make. A class with call
    defaults but not modelled makes videos exactly when its call has a frame count (``video``);
    an unknown class takes the flag."""
    from gpu_sizer.api import GenerationTask

    if kind is not None:
        supported = kind.tasks
    elif video is not None:
        supported = tuple(t for t in GenerationTask if t.video == video)
    else:
        return GenerationTask(given or "TextToImage")
    if given is None:
        return supported[0]
    if GenerationTask(given) not in supported:
        names = " or ".join(t.value for t in supported)
        raise ImportRefused(
            f"--task {given}: pipeline class {shown} runs {names}, not {given}; pass --task "
            f"{supported[0].value} or leave --task out"
        )
    return GenerationTask(given)


def _entries(imported: ImportedPipeline) -> list[dict[str, Any]]:
    """``spec.model.pipeline.components``: a class gpu-sizer does not size gets its
    ``parameterCount`` from its library on the meta device when installed."""
    from gpu_sizer.cli.hf_meta import meta_parameter_count, missing_class

    entries = []
    for c in imported.components:
        entry = dict(c.entry)
        if not c.sized and (why := missing_class(c.library, c.class_name)) is not None:
            raise ImportRefused(
                f"model_index.json entry {c.name!r} is [{c.library!r}, {c.class_name!r}]: {why}, "
                "so diffusers' from_pretrained fails on it; write the class the checkpoint was "
                "saved with"
            )
        if not c.sized:
            count = meta_parameter_count(c.library, c.class_name, c.config)
            if count is not None:
                entry["parameterCount"] = count
                print(
                    f"Note: {c.name} ({c.class_name}): {count:,} parameters, counted with "
                    f"{c.library} on the meta device; its activations are not sized",
                    file=sys.stderr,
                )
            else:
                print(
                    f"Warning: {c.name} ({c.class_name}) is not a class gpu-sizer sizes and "
                    "could not be counted (install gpu-sizer[diffusion], or add "
                    "parameterCount): the estimate is Incomplete",
                    file=sys.stderr,
                )
        entries.append(entry)
    return entries


def _validate(doc: dict[str, Any], args: argparse.Namespace, folder: _Folder) -> None:
    """``doc`` as ``gpu-sizer estimate`` will parse it; each problem placed where the user
    typed the value (:func:`_placed`)."""
    from gpu_sizer.api import InvalidWorkload, parse_workload

    try:
        parse_workload(doc)
    except InvalidWorkload as exc:
        raise ImportRefused(*(_placed(p, args, folder) for p in exc.problems)) from None


#: spec path -> the flag that sets it, and the ``argparse`` attribute it is stored in.
_FLAGS: Final[dict[str, tuple[str, str]]] = {
    "spec.model.name": ("--model-id", "model_id"),
    "spec.model.revision": ("--revision", "revision"),
    "spec.model.dtype": ("--dtype", "dtype"),
    "spec.generation.task": ("--task", "task"),
    "spec.generation.height": ("--height", "height"),
    "spec.generation.width": ("--width", "width"),
    "spec.generation.numFrames": ("--num-frames", "num_frames"),
    "spec.generation.batchSize": ("--batch-size", "batch_size"),
    "spec.generation.offload": ("--offload", "offload"),
}


def _load_json(text: str, name: str) -> Any:
    """``json.loads`` of a pipeline file, warning of each key an object repeats: diffusers'
    ``load_config`` (``json.loads``) keeps the last value silently, and so does this import,
    but a repeated key is usually an editing mistake worth seeing. Read through
    :func:`gpu_sizer.jsonio.loads`, so that a too-long integer or too-deep nesting is a
    :class:`~gpu_sizer.jsonio.JsonLimitError` naming the problem, not a traceback."""
    from gpu_sizer.jsonio import loads

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                print(
                    f"Warning: {name}: key {key!r} appears more than once; the last value is "
                    "used, as diffusers does",
                    file=sys.stderr,
                )
            seen[key] = value
        return seen

    return loads(text, object_pairs_hook=pairs)


_COMPONENT_PATH = re.compile(r"spec\.model\.pipeline\.components\[(\d+)\]\.config\.(.+)")
_OPTION_PREFIX: Final = "spec.model.pipeline.config."


def _placed(problem: Problem, args: argparse.Namespace, folder: _Folder) -> str:
    """``problem`` where the user can fix it: the flag they typed (``--height: must be ...``);
    the file and its own snake_case keys for a component's config (``DIR/unet/config.json:
    norm_num_groups: ...``) or a pipeline option (``DIR/model_index.json: boundary_ratio:
    ...``), since that is the file they have open; the spec path, under DIR, otherwise."""
    found = _COMPONENT_PATH.fullmatch(problem.path)
    if found is not None and int(found[1]) < len(folder.imported.components):
        c = folder.imported.components[int(found[1])]
        names = _snake_names(c.class_name, c.config)
        key = _snake(found[2], c.config, names)
        return f"{folder.root}/{c.name}/config.json: {key}: {_in_words(problem.message, names)}"
    if problem.path.startswith(_OPTION_PREFIX):
        names = _file_names(folder.index, {})
        key = _snake(problem.path.removeprefix(_OPTION_PREFIX), folder.index, names)
        return f"{folder.root}/{_INDEX}: {key}: {_in_words(problem.message, names)}"
    if problem.path in _FLAGS:
        return _at_flag(problem, args, folder.root)
    return f"{folder.root}: {problem}"


def _at_flag(problem: Problem, args: argparse.Namespace, root: Path) -> str:
    """A problem of a value a flag sets: as the flag when the user gave it, else as the default
    the import took (the folder's name, the pipeline's call default) and the flag to override
    it. Field names in the message are said as flags too (``numFrames``: ``--num-frames``)."""
    flag, attribute = _FLAGS[problem.path]
    flags = {path.rpartition(".")[2]: f for path, (f, _) in _FLAGS.items()}
    message = _in_words(problem.message, flags)
    if getattr(args, attribute) is not None:
        return f"{flag}: {message}"
    source = _DEFAULT_SOURCES.get(problem.path, "the pipeline's call default")
    return f"{root}: {flag} not given, so {source}: {message}; pass {flag} to choose another"


#: Where a value no flag gave comes from (others: the pipeline class's call default).
_DEFAULT_SOURCES: Final = {"spec.model.name": "the folder's name", "spec.model.dtype": "bfloat16"}


def _snake_names(cls: str, config: Mapping[str, Any]) -> dict[str, str]:
    """camelCase -> snake_case of every key ``cls`` reads (nested objects' too: a rule's message
    may name a key the file leaves to its default) and, over those, of every key the file has,
    as the file spells it."""
    from gpu_sizer.api.components import COMPONENT_CLASSES

    names: dict[str, str] = {}
    known = COMPONENT_CLASSES.get(cls)
    if known is not None:
        _wire_names(known.wire, names)
    return _file_names(config, names)


def _wire_names(wire: Mapping[str, tuple[str, ConfigKey]], names: dict[str, str]) -> None:
    for camel, (snake, spec) in wire.items():
        names[camel] = snake
        _wire_names(spec.inner, names)


def _file_names(config: Mapping[str, Any], names: dict[str, str]) -> dict[str, str]:
    from pydantic.alias_generators import to_camel

    for key, value in config.items():
        names[to_camel(key)] = key
        if isinstance(value, Mapping):
            _file_names(value, names)
    return names


#: A camelCase word (``numAttentionHeads``, ``blockOutChannels``): a spec name in a message.
_CAMEL_WORD = re.compile(r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b")


def _in_words(message: str, names: Mapping[str, str]) -> str:
    """``message`` with each camelCase word ``names`` knows replaced by its spelling there."""
    return _CAMEL_WORD.sub(lambda m: names.get(m[0], m[0]), message)


#: ``name``, or ``name[3]``: one part of a dotted spec path.
_PART = re.compile(r"([^\[]+)(.*)")


def _snake(path: str, config: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """The file's own spelling of a dotted camelCase key path (nested objects followed; a key
    the file leaves out is spelt as the class reads it)."""
    from pydantic.alias_generators import to_camel, to_snake

    out = []
    for part in path.split("."):
        found = _PART.fullmatch(part)
        name, rest = (found[1], found[2]) if found is not None else (part, "")
        key = next((k for k in config if to_camel(k) == name), None)
        key = key or names.get(name) or to_snake(name)
        out.append(key + rest)
        inner = config.get(key)
        config = inner if isinstance(inner, Mapping) else {}
    return ".".join(out)
