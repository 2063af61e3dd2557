"""``gpu-sizer import-hf-config``: a GPUWorkload skeleton from a Hugging Face config.json.

``spec.model`` comes from :func:`gpu_sizer.api.hf.model_from_hf_config` for a ``model_type``
gpu-sizer has a parameter layout for, else from :mod:`gpu_sizer.api.hf_generic` over what
``transformers`` builds on the meta device (:mod:`.hf_meta`); the mode's flags fill
``spec.inference`` or ``spec.training``. The document printed is one the webhook accepts.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import yaml

from gpu_sizer.argtypes import positive_int
from gpu_sizer.cli.exit_status import EXIT_INVALID, EXIT_OK

if TYPE_CHECKING:
    from gpu_sizer.api import Problem

__all__ = ["add_parser", "run"]

#: Flags of one mode and their defaults; they default to None so that one given for the other
#: mode is an error.
_INFERENCE_FLAGS: dict[str, Any] = {
    "engine": "vllm",
    "max_model_len": None,
    "max_num_seqs": 16,
    "tensor_parallel_size": 1,
    "kv_cache_dtype": "auto",
}
_TRAINING_FLAGS: dict[str, Any] = {
    "micro_batch_size": 1,
    "sequence_length": None,
    "gradient_accumulation_steps": 1,
    "finetuning": "full",
    "optimizer": "adamw",
    "strategy": "none",
    "data_parallel_size": 1,
    "activation_checkpointing": False,
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``import-hf-config`` subcommand and its flags."""
    p = sub.add_parser(
        "import-hf-config",
        help="turn a Hugging Face config.json into a GPUWorkload skeleton",
        description="Print a GPUWorkload YAML whose spec.model comes from a model's config.json.",
    )
    p.add_argument("config", metavar="CONFIG_JSON", help="path to config.json, - for stdin")
    p.add_argument("--name", required=True, help="metadata.name of the GPUWorkload")
    p.add_argument("--namespace", help="metadata.namespace")
    p.add_argument("--model-id", help="spec.model.name (e.g. the Hub id)")
    p.add_argument("--revision", help="spec.model.revision (commit of the weights)")
    p.add_argument(
        "--parameter-count",
        type=positive_int,
        help="spec.model.parameterCount (the model card's total); for a model_type without a "
        "parameter layout in gpu-sizer it is counted with transformers when installed",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--inference", action="store_true", help="serving workload (default)")
    mode.add_argument("--training", action="store_true", help="training/fine-tuning workload")
    # Mode-specific flags default to None so that one given for the other mode is an error.
    p.add_argument("--engine", choices=["vllm", "transformers", "tgi", "sglang"], help="vllm")
    p.add_argument("--max-model-len", type=positive_int, help="min(maxPositionEmbeddings, 8192)")
    p.add_argument("--max-num-seqs", type=positive_int, help="default 16")
    p.add_argument("--tensor-parallel-size", type=positive_int, help="default 1")
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])
    p.add_argument("--micro-batch-size", type=positive_int, help="default 1")
    p.add_argument("--sequence-length", type=positive_int, help="min(maxPositionEmbeddings, 4096)")
    p.add_argument("--gradient-accumulation-steps", type=positive_int, help="default 1")
    p.add_argument(
        "--finetuning",
        choices=["full", "lora", "qlora"],
        help="default full; qlora also sets model.quantization to bitsandbytes-nf4 (4 bits)",
    )
    p.add_argument("--optimizer", help="default adamw")
    p.add_argument("--strategy", help="none|ddp|fsdp-full-shard|zero1|2|3 ... (default none)")
    p.add_argument("--data-parallel-size", type=positive_int, help="default 1")
    p.add_argument("--activation-checkpointing", action="store_true", default=None)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpu_sizer.api import API_VERSION, KIND, KNOWN_MODEL_TYPES, InvalidWorkload, parse_workload
    from gpu_sizer.api.hf import (
        UnsupportedConfig,
        config_bound_problems,
        model_from_hf_config,
        model_type_of,
    )
    from gpu_sizer.api.workload import validate_name, validate_namespace
    from gpu_sizer.jsonio import loads
    from gpu_sizer.yamlio import UnreadableFile, read_text

    source = "(stdin)" if args.config == "-" else args.config
    usage = [p for p in (validate_name(args.name),) if p is not None]
    if args.namespace is not None:
        usage += [p for p in (validate_namespace(args.namespace),) if p is not None]
    wrong, other = (
        (_INFERENCE_FLAGS, "--inference") if args.training else (_TRAINING_FLAGS, "--training")
    )
    for dest in wrong:
        if getattr(args, dest) is not None:
            flag = "--" + dest.replace("_", "-")
            mode = "--training" if args.training else "--inference (the default)"
            print(f"{flag} applies only with {other}, not with {mode}", file=sys.stderr)
            return EXIT_INVALID
    for dest, default in {**_INFERENCE_FLAGS, **_TRAINING_FLAGS}.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    if usage:
        for problem in usage:
            print(f"--{problem.path.removeprefix('metadata.')}: {problem.message}", file=sys.stderr)
        return EXIT_INVALID
    notes: list[str] = []
    try:
        text = read_text(args.config)
        config = loads(text)
        if not isinstance(config, dict):
            raise UnsupportedConfig("config.json must be a JSON object")
        bounds = config_bound_problems(config)
        if bounds:
            for bound in bounds:
                print(f"{source}: {bound}", file=sys.stderr)
            return EXIT_INVALID
        serving = not args.training and args.engine != "transformers"
        if model_type_of(config) in KNOWN_MODEL_TYPES:
            model = model_from_hf_config(config, notes, serving=serving)
        else:
            model = _generic_model(config, args.parameter_count, notes, serving=serving)
    except UnreadableFile as exc:
        print(f"{source}: cannot read: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except json.JSONDecodeError as exc:
        print(f"{source}: invalid JSON: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (UnsupportedConfig, TypeError, ValueError) as exc:
        print(f"{source}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    for note in notes:
        print(f"Warning: {source}: {note}", file=sys.stderr)
    if args.model_id:
        model["name"] = args.model_id
    if args.revision:
        model["revision"] = args.revision
    if args.parameter_count is not None:
        model["parameterCount"] = args.parameter_count
    shape = model.get("architecture") or {}
    context = int(shape.get("maxPositionEmbeddings") or _first_int(config, _CONTEXT_KEYS, 4096))
    rope = shape.get("ropeScaling")
    if rope and rope.get("factor", 1.0) > 1.0:
        base = rope.get("originalMaxPositionEmbeddings", context)
        context = max(context, int(base * rope["factor"]))
    spec: dict[str, Any] = {"model": model}
    if args.training:
        spec["training"] = {
            "microBatchSize": args.micro_batch_size,
            "sequenceLength": args.sequence_length or min(context, 4096),
            "gradientAccumulationSteps": args.gradient_accumulation_steps,
            "optimizer": args.optimizer,
            "activationCheckpointing": bool(args.activation_checkpointing),
            "finetuning": {"method": args.finetuning},
            "parallelism": {"strategy": args.strategy, "dataParallelSize": args.data_parallel_size},
        }
        if args.finetuning == "qlora" and "quantization" not in model:
            # QLoRA (Dettmers et al. 2023) trains adapters on a 4-bit NF4 base by definition.
            model["quantization"] = {"method": "bitsandbytes-nf4", "bits": 4}
    else:
        spec["inference"] = {
            "engine": args.engine,
            "maxModelLen": args.max_model_len or min(context, 8192),
            "maxNumSeqs": args.max_num_seqs,
            "kvCacheDtype": args.kv_cache_dtype,
            "tensorParallelSize": args.tensor_parallel_size,
        }
    metadata: dict[str, Any] = {"name": args.name}
    if args.namespace:
        metadata["namespace"] = args.namespace
    doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
    try:
        parse_workload(doc)
    except InvalidWorkload as exc:
        problems = exc.problems
        if _count_only(config, model, problems, source):
            try:
                parse_workload(doc)
                problems = []
            except InvalidWorkload as again:
                problems = again.problems
        for problem in problems:
            print(f"{source}: {args.name}: {problem}", file=sys.stderr)
        if problems:
            return EXIT_INVALID
    sys.stdout.write(f"# Generated by gpu-sizer import-hf-config from {source}\n")
    yaml.safe_dump(doc, sys.stdout, sort_keys=False, width=100)
    return EXIT_OK


def _count_only(
    config: dict[str, Any], model: dict[str, Any], problems: list[Problem], source: str
) -> bool:
    """Keep a model whose architecture gpu-sizer refuses as its parameter count alone (the
    core's rule, :func:`gpu_sizer.api.hf_generic.keep_count_only`), when a count is at hand
    (``--parameter-count`` or ``transformers``). Edits ``model``; ``False`` when it cannot."""
    from gpu_sizer.api.hf_generic import architecture_refused_only, keep_count_only
    from gpu_sizer.cli.hf_meta import HfUnavailable, read_with_transformers

    if not architecture_refused_only(problems):
        return False
    count = model.get("parameterCount")
    if count is None:
        try:
            count = read_with_transformers(config).parameters
        except HfUnavailable:
            return False
    keep_count_only(model, count)
    print(
        f"Warning: {source}: {problems[0]}; spec.model.architecture is left out and "
        f"parameterCount {count} written (counted by transformers on the meta device unless "
        "given), so the KV cache and activations are not counted and the estimate is Incomplete",
        file=sys.stderr,
    )
    return True


#: config.json keys of the context length, for a model written without an architecture.
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def _first_int(config: dict[str, Any], keys: tuple[str, ...], default: int) -> int:
    sources = [config, *(v for v in config.values() if isinstance(v, dict))]
    for source in sources:
        for key in keys:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return default


def _generic_model(
    config: dict[str, Any], parameter_count: int | None, notes: list[str], *, serving: bool
) -> dict[str, Any]:
    """``spec.model`` of a ``model_type`` without a parameter layout in gpu-sizer: read and counted
    with ``transformers`` on the meta device when installed (:mod:`.hf_meta`), then decided by the
    core (:mod:`gpu_sizer.api.hf_generic`).

    :raises UnsupportedConfig: no parameter count can be had (the message says how to get one).
    """
    from gpu_sizer.api.hf_generic import model_from_reading, model_without_reading
    from gpu_sizer.cli.hf_meta import HfUnavailable, read_with_transformers

    try:
        reading = read_with_transformers(config)
    except HfUnavailable as exc:
        return model_without_reading(config, parameter_count, str(exc), notes, serving=serving)
    return model_from_reading(config, reading, parameter_count, notes, serving=serving)
