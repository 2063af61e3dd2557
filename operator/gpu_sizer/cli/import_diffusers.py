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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpu_sizer.argtypes import positive_int
from gpu_sizer.cli.exit_status import EXIT_INVALID, EXIT_OK

if TYPE_CHECKING:
    from gpu_sizer.api.errors import Problem

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
    p.add_argument("directory", metavar="DIR", help="the pipeline directory")
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


def run(args: argparse.Namespace) -> int:
    from gpu_sizer.api import API_VERSION, KIND, InvalidWorkload, parse_workload
    from gpu_sizer.api.diffusers_import import (
        CALL_DEFAULTS,
        UnsupportedPipeline,
        pipeline_from_model_index,
    )
    from gpu_sizer.api.workload import validate_name, validate_namespace
    from gpu_sizer.budget.diffusion.pipelines import PIPELINES
    from gpu_sizer.cli.hf_meta import meta_parameter_count
    from gpu_sizer.yamlio import UnreadableFile, read_text

    root = Path(args.directory)
    usage = [p for p in (validate_name(args.name),) if p is not None]
    if args.namespace is not None:
        usage += [p for p in (validate_namespace(args.namespace),) if p is not None]
    if usage:
        for problem in usage:
            print(f"--{problem.path.removeprefix('metadata.')}: {problem.message}", file=sys.stderr)
        return EXIT_INVALID

    def read_config(name: str) -> dict[str, Any] | None:
        path = root / name / "config.json"
        if not path.is_file():
            return None
        try:
            loaded = _load_json(read_text(str(path)), f"{name}/config.json")
        except json.JSONDecodeError as exc:
            raise UnsupportedPipeline(f"{name}/config.json: invalid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise UnsupportedPipeline(f"{name}/config.json must be a JSON object")
        return loaded

    def signature(cls: str) -> tuple[tuple[str, ...], dict[str, Any]] | None:
        kind = PIPELINES.get(cls)
        return None if kind is None else (kind.components, kind.options)

    index_path = root / "model_index.json"
    try:
        index = _load_json(read_text(str(index_path)), "model_index.json")
        if not isinstance(index, dict):
            raise UnsupportedPipeline("model_index.json must be a JSON object")
        imported = pipeline_from_model_index(index, read_config, signature=signature)
    except UnreadableFile as exc:
        print(f"{index_path}: cannot read: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except json.JSONDecodeError as exc:
        print(f"{root}: invalid JSON: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except UnsupportedPipeline as exc:
        print(f"{root}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    cls = imported.class_name
    for note in imported.notes:
        print(f"Note: {note}", file=sys.stderr)
    defaults = CALL_DEFAULTS.get(cls)
    if defaults is None and (args.height is None or args.width is None):
        print(
            f"{root}: pipeline class {cls} has no known call defaults: give --height and "
            "--width (and --num-frames for video)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    height, width, frames = defaults or (args.height, args.width, None)
    kind = PIPELINES.get(cls)
    task = args.task or (
        kind.tasks[0].value if kind is not None else ("TextToVideo" if frames else "TextToImage")
    )
    generation: dict[str, Any] = {
        "task": task,
        "height": args.height or height,
        "width": args.width or width,
    }
    if task.endswith("Video"):
        generation["numFrames"] = args.num_frames or frames or 1
    elif args.num_frames is not None:
        print("--num-frames applies only to TextToVideo and ImageToVideo", file=sys.stderr)
        return EXIT_INVALID
    if args.batch_size is not None:
        generation["batchSize"] = args.batch_size
    if args.offload is not None:
        generation["offload"] = args.offload
    entries = []
    for c in imported.components:
        entry = dict(c.entry)
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
    pipeline: dict[str, Any] = {"class": cls}
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
    try:
        parse_workload(doc)
    except InvalidWorkload as exc:
        files = {c.name: c.config for c in imported.components}
        for problem in exc.problems:
            print(f"{root}/{_in_files(problem, entries, files)}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(f"# Generated by gpu-sizer import-diffusers from {root}\n")
    yaml.safe_dump(doc, sys.stdout, sort_keys=False, width=100)
    return EXIT_OK


def _load_json(text: str, name: str) -> Any:
    """``json.loads`` of a pipeline file, warning of each key an object repeats: diffusers'
    ``load_config`` (``json.loads``) keeps the last value silently, and so does this import,
    but a repeated key is usually an editing mistake worth seeing."""

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

    return json.loads(text, object_pairs_hook=pairs)


_COMPONENT_PATH = re.compile(r"spec\.model\.pipeline\.components\[(\d+)\]\.config\.(.+)")


def _in_files(
    problem: Problem, entries: list[dict[str, Any]], files: Mapping[str, Mapping[str, Any]]
) -> str:
    """``problem`` placed where the user can fix it: ``unet/config.json: norm_num_groups: ...``
    for a component's config key, ``model_index.json: boundary_ratio: ...`` for a pipeline
    option (the files' own snake_case keys), the spec path otherwise."""
    from pydantic.alias_generators import to_snake

    found = _COMPONENT_PATH.fullmatch(problem.path)
    if found is not None and int(found[1]) < len(entries):
        name = str(entries[int(found[1])]["name"])
        return f"{name}/config.json: {_snake(found[2], files.get(name, {}))}: {problem.message}"
    option = problem.path.removeprefix("spec.model.pipeline.config.")
    if option != problem.path:
        return f"model_index.json: {to_snake(option)}: {problem.message}"
    return f"{problem}"


def _snake(path: str, config: Mapping[str, Any]) -> str:
    """The file's own spelling of a dotted camelCase key path (nested objects followed)."""
    from pydantic.alias_generators import to_camel, to_snake

    out = []
    for part in path.split("."):
        key = next((k for k in config if to_camel(k) == part), to_snake(part))
        out.append(key)
        inner = config.get(key)
        config = inner if isinstance(inner, Mapping) else {}
    return ".".join(out)
