"""The ``gpu-sizer`` command: one subcommand per job.

The offline subcommands live here (``estimate``, ``import-hf-config``, ``import-diffusers``,
``accuracy``, ``crd``, ``catalog``); the
operator and probe packages register theirs through ``add_parsers(subparsers)``, so that this file
stays a dispatcher for them and ``gpu-sizer estimate`` never imports kopf, kmock or torch.

Exit status: 0 success / every workload fits, 1 some workload has no safe headroom, 2 invalid
input or usage, 3 some workload's estimate is incomplete (a component it needs cannot be counted,
so it is a lower bound). When several apply the strongest wins: 2, then 1 (a definite rejection:
even the lower bound has no safe headroom, or another workload has none), then 3. Problems print
one per line as ``FILE: NAME: spec.path: message`` on stderr; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from gpu_sizer import __version__
from gpu_sizer.argtypes import positive_int

if TYPE_CHECKING:
    from gpu_sizer.api import Problem

Handler = Callable[[argparse.Namespace], int]

EXIT_OK = 0
EXIT_NO_HEADROOM = 1
EXIT_INVALID = 2
EXIT_INCOMPLETE = 3
GIB = 1 << 30


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-sizer",
        description="Size, measure and admit GPU workloads (GPUWorkload, gpusizer.dev/v1alpha1).",
    )
    parser.add_argument("--version", action="version", version=f"gpu-sizer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each add_parsers() sets `handler` via set_defaults(handler=...). Those modules import kopf,
    # kmock and torch inside their handlers, so `gpu-sizer estimate` never pays for them.
    from gpu_sizer.controller.command import add_parsers as add_operator_parsers
    from gpu_sizer.probe.command import add_parsers as add_probe_parsers

    _add_offline_parsers(sub)
    add_operator_parsers(sub)
    add_probe_parsers(sub)
    return parser


def _add_offline_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """estimate, import-hf-config, import-diffusers, crd, catalog: the commands that need no
    cluster."""
    p = sub.add_parser(
        "estimate",
        help="estimate GPUWorkload files without a cluster",
        description="Estimate the GPU memory of GPUWorkload documents and choose a GPU class, "
        "exactly as the admission webhook and the operator do before measuring. "
        "Exit 0: all fit; 1: some have no safe headroom; 2: invalid input; 3: some estimates "
        "are incomplete (a component the workload needs, such as the KV cache without "
        "spec.model.architecture, is not counted, so the figure is a lower bound and never a "
        "fit). Precedence when several apply: 2, then 1 (a definite rejection), then 3.",
    )
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE|DIR",
        help="YAML files (multi-document), directories (their *.yaml, sorted), - for stdin",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml", "patch"],
        default="table",
        help="table (components in GiB on the most loaded GPU), the objects with the status "
        "the operator would write before measuring (json, yaml), or patch: a strategic-merge "
        "patch of a pod template applying the recommendation (kubectl patch deployment NAME "
        "--type strategic --patch-file FILE)",
    )
    p.add_argument(
        "--container",
        metavar="NAME",
        help="-o patch: the container that uses the GPU (default: the GPUWorkload's name); "
        "containers merge by name",
    )
    p.add_argument(
        "--mig-strategy",
        choices=["single", "mixed"],
        default="single",
        help="how the cluster's GPU Operator exposes MIG slices (its mig.strategy): single "
        "(one nvidia.com/gpu is a slice, product label <product>-MIG-<profile>) or mixed "
        "(nvidia.com/mig-<profile> on nodes of the whole GPU's product); sets the resource and "
        "node affinity of a MIG recommendation's snippets (-o json/yaml/patch)",
    )
    p.add_argument("--catalog", metavar="FILE", help="GPU class catalog YAML (overrides defaults)")
    p.add_argument(
        "--calibration",
        choices=["off", "report", "apply"],
        type=str.lower,
        default="report",
        help="correction factors learned from --records (gpu_sizer.records.calibration): report "
        "(default) shows them in status.estimate.calibration, apply also scales the figures "
        "and judges the verdict with them, off ignores them",
    )
    p.add_argument(
        "--records",
        action="append",
        default=[],
        metavar="FILE|DIR",
        help="measured GPUWorkloads to learn calibration factors from (kubectl get "
        "gpuworkloads -A -o yaml); repeatable",
    )
    p.set_defaults(handler=_estimate)

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
    p.set_defaults(handler=_import_hf_config)

    p = sub.add_parser(
        "accuracy",
        help="estimate versus measurement over measurement records",
        description="Read measurement records, GPUMeasurements and/or GPUWorkloads, exported "
        "(kubectl get gpumeasurements -o yaml; kubectl get gpuworkloads -A -o yaml) or listed "
        "from the cluster (--from-cluster), and print the relative error of the estimate "
        "against the measured GPU peak, (estimated - measured) / measured, by GPU class, "
        "engine, model family and workload kind: median, p90 of the absolute error, worst, "
        "count. A workload measured for a record of the input counts once, as the record. "
        "Exit 0: table printed; 1: no finished GPU measurement in the input; 2: unreadable "
        "input or an unreachable cluster.",
    )
    p.add_argument(
        "files",
        nargs="*",
        metavar="FILE|DIR",
        help="YAML/JSON files (a List or several documents), directories, - for stdin",
    )
    p.add_argument(
        "--from-cluster",
        action="store_true",
        help="list every GPUMeasurement and GPUWorkload of the cluster (kubeconfig, or the "
        "in-cluster service account)",
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="--from-cluster: kubeconfig file")
    p.add_argument("--context", metavar="NAME", help="--from-cluster: kubeconfig context")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.set_defaults(handler=_accuracy)

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
    p.set_defaults(handler=_import_diffusers)

    p = sub.add_parser(
        "crd",
        help="print the CustomResourceDefinitions the operator serves (GPUWorkload and "
        "GPUMeasurement; YAML, for kubectl apply -f -)",
    )
    p.set_defaults(handler=_crd)

    p = sub.add_parser(
        "catalog",
        help="print the GPU classes",
        description="Print the GPU classes gpu-sizer chooses from: usable memory (GiB as NVML "
        "reports it), RANK, vendor and the node label values that identify each class. RANK "
        "is the order of preference: a workload is recommended the first class in rank order "
        "(lowest first) that leaves spec.placement.minHeadroomFraction free, preferring classes "
        "with nodes in the cluster. The default ranks follow typical on-demand price per GPU, "
        "cheapest first; a catalog file (--catalog, or the chart's catalog value) sets your "
        "own order, e.g. your prices or what you have reserved.",
    )
    p.add_argument("-o", "--output", choices=["table", "yaml"], default="table")
    p.add_argument("--catalog", metavar="FILE", help="GPU class catalog YAML (overrides defaults)")
    p.set_defaults(handler=_catalog)


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


# --- reading documents -------------------------------------------------------------------------


@dataclass
class _Doc:
    source: str
    index: int
    data: Any

    @property
    def name(self) -> str:
        meta = self.data.get("metadata") if isinstance(self.data, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            ns = meta.get("namespace")
            return f"{ns}/{meta['name']}" if isinstance(ns, str) and ns else meta["name"]
        return f"(document {self.index + 1})"


def _expand(paths: Sequence[str]) -> Iterator[str]:
    for path in paths:
        p = Path(path)
        if path != "-" and p.is_dir():
            yield from sorted(
                str(f)
                for f in p.iterdir()
                if f.suffix in (".yaml", ".yml", ".json") and f.is_file()
            )
        else:
            yield path


def _read_docs(
    paths: Sequence[str], err: TextIO, *, records: bool = False
) -> tuple[list[_Doc], bool]:
    """Every GPUWorkload document of ``paths`` (and GPUMeasurement with ``records``); the bool
    says whether some input was unusable.

    Like ``kubectl apply -f``, each document is handled on its own: a document of another kind
    (a ConfigMap next to the workload) is skipped with a warning and does not change the exit
    status; a Namespace (the workloads' own, created by the same ``kubectl apply -f``) is
    skipped without one. Input that holds no document at all (an empty file, a directory
    without YAML files) is an error, so that a CI gate pointed at a wrong path cannot pass.
    """
    from gpu_sizer.api import KIND
    from gpu_sizer.api.workload import is_near_kind
    from gpu_sizer.yamlio import UnreadableFile, YamlError, load_all, read_text

    docs: list[_Doc] = []
    failed = False
    for path in paths:
        files = list(_expand([path]))
        if not files:
            print(f"{path}: no *.yaml, *.yml or *.json files in this directory", file=err)
            failed = True
        for file in files:
            source = "(stdin)" if file == "-" else file
            try:
                loaded = load_all(read_text(file))
            except UnreadableFile as exc:
                print(f"{source}: cannot read: {exc}", file=err)
                failed = True
                continue
            except YamlError as exc:
                where = f"line {exc.line}: " if exc.line is not None else ""
                print(f"{source}: {where}invalid YAML: {exc.message}", file=err)
                failed = True
                continue
            index = 0
            found = False
            for data in loaded:
                if data is None:
                    continue
                items = [data]
                if isinstance(data, dict) and data.get("kind") == "List":
                    if not isinstance(data.get("items"), list):
                        print(f"{source}: kind List: items must be a list", file=err)
                        failed = found = True
                        continue
                    items = data["items"]
                    found = True  # an empty List is an export of nothing, not empty input
                for item in items:
                    doc = _Doc(source, index, item)
                    index += 1
                    kind = item.get("kind") if isinstance(item, dict) else None
                    accepted = (KIND, "GPUMeasurement") if records else (KIND,)
                    if records and not isinstance(item, dict):
                        print(
                            f"{source}: {doc.name}: must be a YAML/JSON object (a GPUWorkload "
                            f"or GPUMeasurement), not {type(item).__name__}",
                            file=err,
                        )
                        failed = True
                        continue
                    near = difflib.get_close_matches(str(kind), accepted, n=1, cutoff=0.8)
                    if records and isinstance(kind, str) and kind not in accepted and near:
                        print(
                            f"{source}: {doc.name}: kind {kind}: did you mean {near[0]}?", file=err
                        )
                        failed = True
                        continue
                    # The namespaces a directory for `kubectl apply -f` creates for its
                    # workloads (examples/00-namespaces.yaml) belong there: no warning.
                    if kind == "Namespace":
                        continue
                    # A misspelt GPUWorkload (GpuWorkload) is a typo to report, not another kind.
                    if isinstance(kind, str) and kind not in accepted and not is_near_kind(kind):
                        print(
                            f"Warning: {source}: {doc.name}: kind {kind} is not a {KIND}; skipped",
                            file=err,
                        )
                        continue
                    found = True
                    docs.append(doc)
            if not found and index == 0:
                print(f"{source}: no YAML documents (empty input)", file=err)
                failed = True
    return docs, failed


# --- estimate ----------------------------------------------------------------------------------

_COLUMNS = (
    ("weights_bytes", "WEIGHTS"),
    ("quantization_overhead_bytes", "QUANT"),
    ("kv_cache_bytes", "KV-CACHE"),
    ("activation_bytes", "ACTIV"),
    ("gradient_bytes", "GRADS"),
    ("optimizer_state_bytes", "OPTIM"),
    ("master_weight_bytes", "MASTER"),
    ("communication_buffer_bytes", "COMM"),
    ("runtime_overhead_bytes", "RUNTIME"),
)
"""Component columns of the table (GiB per GPU on the most loaded GPU); all-zero ones are hidden."""


def _print_catalog_problems(path: str, exc: Any, err: TextIO) -> None:
    """One line per problem, each starting with the catalog file's path (once)."""
    for problem in exc.problems:
        print(str(problem) if problem.path == path else f"{path}: {problem}", file=err)


def _now() -> str:
    return (
        datetime.datetime.now(datetime.UTC)
        .replace(microsecond=0)
        .isoformat()
        .replace("+00:00", "Z")
    )


def _estimate(args: argparse.Namespace) -> int:
    from gpu_sizer.api import InvalidWorkload, parse_workload, spec_hash
    from gpu_sizer.catalog import DEFAULT_CATALOG, InvalidCatalog, load_catalog_file
    from gpu_sizer.reconcile import estimated_status
    from gpu_sizer.sizing.assessment import Assessment, Verdict
    from gpu_sizer.sizing.verdict import assess

    out, err = sys.stdout, sys.stderr
    if args.container is not None:
        from gpu_sizer.api.workload import is_dns1123_label

        if args.output != "patch":
            print("--container needs -o patch", file=err)
            return EXIT_INVALID
        if not is_dns1123_label(args.container):
            print(
                f"--container {args.container!r}: not a container name: lower-case letters, "
                "digits and '-', starting and ending with a letter or digit, at most 63 "
                "characters (DNS-1123 label)",
                file=err,
            )
            return EXIT_INVALID
    catalog = DEFAULT_CATALOG
    if args.catalog:
        try:
            catalog = load_catalog_file(args.catalog)
        except InvalidCatalog as exc:
            _print_catalog_problems(args.catalog, exc, err)
            return EXIT_INVALID
    calibration = None
    if args.calibration != "off":
        from gpu_sizer.records.calibration import Calibration, learn, parse_mode, samples_from

        records: list[Any] = []
        if args.records:
            record_docs, bad = _read_docs(args.records, err, records=True)
            if bad:
                return EXIT_INVALID
            records = [d.data for d in record_docs]
        samples = samples_from(records)
        if args.records and not samples:
            print(
                f"Warning: 0 usable records in {', '.join(args.records)} (a record needs a "
                "finished GPU measurement and a complete estimate); nothing is calibrated",
                file=err,
            )
        elif not args.records and args.calibration == "apply":
            print(
                "Warning: --calibration apply without --records: there are no records, so "
                "nothing is calibrated",
                file=err,
            )
        calibration = Calibration(parse_mode(args.calibration), learn(samples))
    docs, invalid = _read_docs(args.files, err)
    if not docs and not invalid:
        print("No GPUWorkload documents found.", file=err)
        invalid = True
    seen: dict[str, _Doc] = {}
    unique: list[_Doc] = []
    for doc in docs:
        key = _row_name(doc)
        first = seen.setdefault(key, doc)
        if first is doc:
            unique.append(doc)
            continue
        where = (
            f"twice in {doc.source} (documents {first.index + 1} and {doc.index + 1})"
            if first.source == doc.source
            else f"also in {first.source}"
        )
        if doc.data == first.data:  # a copy: one row, one set of messages
            print(f"Warning: {doc.source}: {key}: the same document is {where}; estimated once",
                  file=err)  # fmt: skip
            continue
        unique.append(doc)
        print(
            f"Warning: {doc.source}: {key}: the same namespace/name is {where}; applying both "
            "keeps only the last",
            file=err,
        )
    docs = unique
    rows: list[tuple[_Doc, Assessment]] = []
    objects: list[dict[str, Any]] = []
    now = _now()
    for doc in docs:
        try:
            spec = parse_workload(doc.data)
        except InvalidWorkload as exc:
            for problem in exc.problems:
                print(f"{doc.source}: {doc.name}: {problem}", file=err)
            invalid = True
            continue
        assessment = assess(spec, catalog, calibration=calibration)
        if assessment.verdict is Verdict.SizingFailed:  # an estimator bug, not a traceback
            print(f"{doc.source}: {doc.name}: cannot estimate: {assessment.message}", file=err)
            invalid = True
            continue
        if assessment.verdict is Verdict.UnknownGpuClass:
            print(f"{doc.source}: {doc.name}: {assessment.message}", file=err)
            invalid = True
            continue
        if assessment.recommendation is not None and args.mig_strategy == "mixed":
            from gpu_sizer.sizing.placement import for_strategy

            mixed = for_strategy(assessment.recommendation, "mixed", catalog)
            assessment = dataclasses.replace(assessment, recommendation=mixed)
        rows.append((doc, assessment))
        meta = doc.data["metadata"]
        status = estimated_status(
            spec,
            assessment,
            spec_hash=spec_hash(spec),
            generation=meta.get("generation") if isinstance(meta.get("generation"), int) else None,
            now=now,
        )
        obj = dict(doc.data)
        obj["status"] = status.model_dump(by_alias=True, mode="json", exclude_none=True)
        objects.append(obj)
    if args.output == "table":
        _print_table(rows, out)
        for doc, assessment in rows:
            who = _row_name(doc)
            if assessment.verdict is not Verdict.Fits:
                for line in assessment.message.splitlines():
                    print(f"{who}: {line}", file=err)
            for warning in [*assessment.estimate.notes, *assessment.warnings]:
                print(f"Warning: {who}: {warning}", file=err)
            cal = assessment.estimate.calibration
            if cal is not None:
                print(f"{who}: calibration ({cal.mode}, {cal.gpu_class}): {cal.message}", file=err)
    elif args.output == "patch":
        _print_patches(rows, objects, args.container, out, err)
    else:
        doc_out: Any = (
            objects[0]
            if len(objects) == 1 and len(docs) == 1
            else {"apiVersion": "v1", "kind": "List", "items": objects}
        )
        if args.output == "json":
            json.dump(doc_out, out, indent=2)
            out.write("\n")
        else:
            yaml.safe_dump(doc_out, out, sort_keys=False, width=100)
    if invalid:
        return EXIT_INVALID
    if any(a.verdict is Verdict.NoSafeHeadroom for _, a in rows):
        return EXIT_NO_HEADROOM
    if any(a.verdict is Verdict.Incomplete for _, a in rows):
        return EXIT_INCOMPLETE
    return EXIT_OK


def _print_patches(
    rows: Sequence[tuple[_Doc, Any]],
    objects: Sequence[dict[str, Any]],
    container: str | None,
    out: TextIO,
    err: TextIO,
) -> None:
    """One strategic-merge patch per workload with a recommendation (YAML; with several workloads
    each is headed by a comment naming it, separated by ``---``); the others are said on
    stderr."""
    from gpu_sizer.sizing.placement import memory_request, pod_template_patch

    patches: list[tuple[str, dict[str, Any]]] = []
    for (doc, assessment), obj in zip(rows, objects, strict=True):
        who = _row_name(doc)
        rec = assessment.recommendation
        if rec is None:
            print(f"{who}: no patch: {assessment.verdict.value}, no recommendation", file=err)
            for line in assessment.message.splitlines():
                print(f"{who}: {line}", file=err)
            continue
        name = container or str(doc.data["metadata"].get("name") or "main")
        spec_hash = obj.get("status", {}).get("specHash")
        args = _engine_container_args(doc, rec.engine_command_args)
        if args:
            print(f"{who}: the patch sets the container's args to the engine's ({name!r}): a "
                  "strategic merge replaces the whole list", file=err)  # fmt: skip
        patches.append(
            (who, pod_template_patch(rec, container=name, spec_hash=spec_hash, args=args))
        )
        if rec.host_memory_bytes_per_worker:
            print(
                f"{who}: the patch requests {memory_request(rec.host_memory_bytes_per_worker)} "
                "of host memory per worker (hostMemoryBytesPerWorker: the loading path and "
                "offload); no memory limit is set, and an existing limit below it must be "
                "raised (a request may not exceed its limit)",
                file=err,
            )
        if rec.launch is not None and (rec.worker_count or 1) > 1:
            # The patch is one worker's template: say how many workers the launcher starts.
            launch = rec.launch
            print(
                f"{who}: the patch is one worker's pod template ({rec.gpus_per_worker} GPUs); "
                f"run {rec.worker_count} workers: torchrun {' '.join(launch.torchrun_args)}; "
                f"PyTorchJob replicas {launch.pytorch_job_replicas}; JobSet parallelism "
                f"{launch.job_set_parallelism}; LeaderWorkerSet size "
                f"{launch.leader_worker_set_size}; interconnect {launch.interconnect}",
                file=err,
            )
    for i, (who, patch) in enumerate(patches):
        if len(rows) > 1:
            if i:
                out.write("---\n")
            out.write(f"# {who}\n")
        yaml.safe_dump(patch, out, sort_keys=False, width=100)


#: The flag that names the model on each pre-allocating engine's command line.
_MODEL_FLAG = {"vllm": "--model", "sglang": "--model-path", "tgi": "--model-id"}


def _engine_container_args(doc: _Doc, command: list[str] | None) -> list[str] | None:
    """The engine container's args: the model (``spec.model.name``) and ``engineCommandArgs``."""
    if not command:
        return None
    spec = doc.data.get("spec") or {}
    engine = str((spec.get("inference") or {}).get("engine") or "vllm")
    name = (spec.get("model") or {}).get("name")
    model = [f"{_MODEL_FLAG[engine]}={name}"] if name and engine in _MODEL_FLAG else []
    return [*model, *command]


def _row_name(doc: _Doc) -> str:
    meta = doc.data.get("metadata") if isinstance(doc.data, dict) else None
    if not isinstance(meta, dict):
        return doc.name
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _class_cell(rec: Any) -> str:
    """The CLASS cell: ``CLASS xN`` for one pod of N GPUs, ``CLASS WxG`` for a job of W workers
    of G GPUs each (``nvidia-a100-80gb 2x8``), as launchers count them."""
    workers = rec.worker_count or 1
    if workers > 1 and rec.gpus_per_worker:
        return f"{rec.gpu_class} {workers}x{rec.gpus_per_worker}"
    return f"{rec.gpu_class} x{rec.gpu_count}"


def _print_table(rows: Sequence[tuple[_Doc, Any]], out: TextIO) -> None:
    """kubectl-style: upper-case headers, columns padded with three spaces, GiB per GPU."""
    if not rows:
        return
    columns = [
        (attr, title)
        for attr, title in _COLUMNS
        if any(getattr(a.estimate.per_gpu, attr) for _, a in rows)
    ]
    pools = any(a.estimate.kv_cache_capacity_tokens is not None for _, a in rows)
    header = [
        "NAMESPACE/NAME",
        "CLASS",
        *(t for _, t in columns),
        "TOTAL/GPU",
        *(("KV-TOKENS", "MAX-CONC") if pools else ()),
        "HEADROOM",
        "VERDICT",
    ]
    table = [header]
    for doc, a in rows:
        est = a.estimate
        per = est.per_gpu
        rec = a.recommendation
        pool: tuple[str, ...] = ()
        if pools:
            tokens = est.kv_cache_capacity_tokens
            conc = est.max_concurrency
            pool = (
                f"{tokens:,}" if tokens is not None else "-",
                f"{conc:.2f}x" if conc is not None else "-",
            )
        table.append(
            [
                _row_name(doc),
                _class_cell(rec) if rec else "-",
                *(f"{getattr(per, attr) / GIB:.1f}" for attr, _ in columns),
                f"{per.total_bytes / GIB:.1f} GiB",
                *pool,
                f"{rec.headroom_fraction:.0%}" if rec else "-",
                str(a.verdict),
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        out.write("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        out.write("\n")


# --- import-hf-config --------------------------------------------------------------------------


def _import_hf_config(args: argparse.Namespace) -> int:
    from gpu_sizer.api import API_VERSION, KIND, KNOWN_MODEL_TYPES, InvalidWorkload, parse_workload
    from gpu_sizer.api.hf import (
        UnsupportedConfig,
        config_bound_problems,
        model_from_hf_config,
        model_type_of,
    )
    from gpu_sizer.api.workload import validate_name, validate_namespace
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
        config = json.loads(text)
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
    """Keep a model whose architecture gpu-sizer refuses (a layer kind it does not size yet,
    such as Nemotron-H's MoE layers) as its parameter count alone, when every problem is in
    the architecture and a count is at hand (``--parameter-count`` or ``transformers``): the
    estimate is then Incomplete, never a fit. Edits ``model``; ``False`` when it cannot."""
    from gpu_sizer.hf_meta import HfUnavailable, read_with_transformers

    arch = "spec.model.architecture"
    if not problems or any(not p.path.startswith(arch) for p in problems):
        return False
    count = model.get("parameterCount")
    if count is None:
        try:
            count = read_with_transformers(config).parameters
        except HfUnavailable:
            return False
    del model["architecture"]
    model["parameterCount"] = count
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
    """``spec.model`` of a ``model_type`` without a parameter layout in gpu-sizer (issue 10: any
    model ``transformers`` can build is accepted).

    With ``transformers`` installed (the ``hf`` extra) the config is read as its class reads it
    and the parameters are counted on the meta device (:mod:`gpu_sizer.hf_meta`); the attention
    geometry is kept only when the built model has one attention module per layer. Without it,
    ``--parameter-count`` is needed and the geometry is taken from config.json's keys as written.

    :raises UnsupportedConfig: no parameter count can be had (the message says how to get one).
    """
    from gpu_sizer.api.hf import UnsupportedConfig, model_from_hf_config
    from gpu_sizer.hf_meta import HfUnavailable, read_with_transformers

    model_type = config.get("model_type")
    try:
        reading = read_with_transformers(config)
    except HfUnavailable as exc:
        if parameter_count is None:
            raise UnsupportedConfig(
                f"model type {model_type!r} has no parameter layout in gpu-sizer, and its "
                f"parameters cannot be counted: {exc}. Or give --parameter-count N (the model "
                "card's total)"
            ) from None
        notes.append(
            f"model type {model_type!r}: transformers could not read it ({exc}); the attention "
            "geometry is config.json's keys as written, unchecked"
        )
        return model_from_hf_config(config, notes, serving=serving)
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


# --- import-diffusers --------------------------------------------------------------------------


def _import_diffusers(args: argparse.Namespace) -> int:
    from gpu_sizer.api import API_VERSION, KIND, InvalidWorkload, parse_workload
    from gpu_sizer.api.diffusers_import import (
        CALL_DEFAULTS,
        UnsupportedPipeline,
        pipeline_from_model_index,
    )
    from gpu_sizer.api.workload import validate_name, validate_namespace
    from gpu_sizer.budget.diffusion.pipelines import PIPELINES
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
            loaded = json.loads(read_text(str(path)))
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
        index = json.loads(read_text(str(index_path)))
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
            count = _meta_parameter_count(c.library, c.class_name, c.config)
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
        for problem in exc.problems:
            print(f"{root}: {args.name}: {problem}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(f"# Generated by gpu-sizer import-diffusers from {root}\n")
    yaml.safe_dump(doc, sys.stdout, sort_keys=False, width=100)
    return EXIT_OK


def _meta_parameter_count(library: str, cls: str, config: dict[str, Any]) -> int | None:
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
        with warnings.catch_warnings(), torch.device("meta"):
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


# --- crd, catalog ------------------------------------------------------------------------------


def _accuracy(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from gpu_sizer.records.accuracy import format_table, read_records, summarize

    if not args.files and not args.from_cluster:
        print("give FILE|DIR arguments or --from-cluster", file=sys.stderr)
        return EXIT_INVALID
    for flag, value in (("--kubeconfig", args.kubeconfig), ("--context", args.context)):
        if value is not None and not args.from_cluster:
            print(f"{flag} needs --from-cluster", file=sys.stderr)
            return EXIT_INVALID
    kubeconfigs = [("--kubeconfig", args.kubeconfig)] if args.kubeconfig is not None else []
    if args.from_cluster and args.kubeconfig is None and os.environ.get("KUBECONFIG"):
        kubeconfigs = [("KUBECONFIG", p) for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
        kubeconfigs = [(name, p) for name, p in kubeconfigs if Path(p).is_file()]
    for name, path in kubeconfigs:
        problem = _kubeconfig_problem(path)
        if problem is not None:
            print(f"{name} {path}: not a kubeconfig: {problem}", file=sys.stderr)
            return EXIT_INVALID
    objects: list[Any] = []
    if args.files:
        docs, failed = _read_docs(args.files, sys.stderr, records=True)
        if failed:
            return EXIT_INVALID
        objects = [d.data for d in docs]
    if args.from_cluster:
        try:
            objects += _list_records(args.kubeconfig, args.context)
        except ClusterUnreadable as exc:
            print(f"--from-cluster: {exc}", file=sys.stderr)
            return EXIT_INVALID
    summary = read_records(objects)
    for problem in summary.rejected:
        print(f"Error: {problem}; the record is left out", file=sys.stderr)
    if args.output == "json":
        rows = [asdict(r) for r in summarize(summary.records)]
        print(json.dumps({"rows": rows, "skipped": summary.skipped}, indent=2))
    else:
        sys.stdout.write(format_table(summary))
    if not summary.records:
        print(
            "no measured GPUWorkload in the input: a record needs a finished GPU measurement "
            "(status.measurement with device cuda) of the current spec",
            file=sys.stderr,
        )
        return EXIT_INVALID if summary.rejected else EXIT_NO_HEADROOM
    return EXIT_INVALID if summary.rejected else EXIT_OK


def _kubeconfig_problem(path: str) -> str | None:
    """Why ``path`` is not a kubeconfig file (unreadable, malformed YAML, not a mapping, or a
    ``clusters``/``contexts``/``users`` entry that is not a list), or ``None``.

    The kubernetes client's own loader (kubernetes ``config/kube_config.py``,
    ``KubeConfigMerger.load_config``) lets ``yaml.YAMLError`` and ``TypeError`` escape on such
    files, so the file is checked here first, with the project's safe loader.
    """
    from gpu_sizer.yamlio import UnreadableFile, YamlError, load, read_text

    try:
        data = load(read_text(path))
    except UnreadableFile as exc:
        return f"cannot read: {exc}"
    except YamlError as exc:
        where = f"line {exc.line}: " if exc.line is not None else ""
        return f"{where}invalid YAML: {exc.message}"
    if not isinstance(data, dict):
        return f"must be a YAML mapping (apiVersion: v1, kind: Config), not {type(data).__name__}"
    for key in ("clusters", "contexts", "users"):
        if data.get(key) is not None and not isinstance(data[key], list):
            return f"{key} must be a list"
    return None


class ClusterUnreadable(Exception):
    """The cluster could not be listed (no kubeconfig, unreachable, forbidden)."""


def _list_records(kubeconfig: str | None, context: str | None) -> list[dict[str, Any]]:
    """Every GPUMeasurement and GPUWorkload of the cluster, as plain data, listed in pages of
    500 with the official kubernetes client; a kind the cluster does not serve (404: the CRD
    is not installed) is left out.

    :raises ClusterUnreadable: no configuration, or the API server refused or could not be
        reached (the message says which and how to fix it).
    """
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    from gpu_sizer.api import GROUP, KIND, PLURAL, VERSION

    try:
        if kubeconfig or context or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context
            )
        else:
            configuration = client.Configuration()
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            api_client = client.ApiClient(configuration)
    except (ConfigException, OSError) as exc:
        raise ClusterUnreadable(
            f"no usable kubeconfig ({exc}); give --kubeconfig FILE or set KUBECONFIG"
        ) from None
    api = client.CustomObjectsApi(api_client)
    out: list[dict[str, Any]] = []
    try:
        for plural, kind in (("gpumeasurements", "GPUMeasurement"), (PLURAL, KIND)):
            token: str | None = None
            while True:
                kw: dict[str, Any] = {"limit": 500}
                if token:
                    kw["_continue"] = token
                try:
                    page: Any = api.list_cluster_custom_object(GROUP, VERSION, plural, **kw)
                except ApiException as exc:
                    if exc.status == 404:
                        break  # not served here (CRD not installed)
                    raise
                for item in page.get("items") or []:
                    out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, **item})
                token = (page.get("metadata") or {}).get("continue") or None
                if not token:
                    break
    except ApiException as exc:
        raise ClusterUnreadable(
            f"listing {GROUP} objects: HTTP {exc.status} {exc.reason}; the identity needs "
            "list on gpumeasurements and gpuworkloads (the chart's view role grants it)"
        ) from None
    except OSError as exc:  # urllib3 connection errors derive from it
        raise ClusterUnreadable(f"cannot reach the API server: {exc}") from None
    finally:
        api_client.close()
    return out


def _crd(args: argparse.Namespace) -> int:
    """Both CRDs as one multi-document stream: the operator needs both installed (it watches
    GPUMeasurement records too), and ``gpu-sizer crd | kubectl apply -f -`` must install all it
    needs."""
    from gpu_sizer.api.crd import crd_yaml, record_crd_yaml

    sys.stdout.write(crd_yaml() + "---\n" + record_crd_yaml())
    return EXIT_OK


def _catalog(args: argparse.Namespace) -> int:
    from gpu_sizer.catalog import (
        DEFAULT_CATALOG,
        InvalidCatalog,
        catalog_to_data,
        load_catalog_file,
    )

    catalog = DEFAULT_CATALOG
    if args.catalog:
        try:
            catalog = load_catalog_file(args.catalog)
        except InvalidCatalog as exc:
            _print_catalog_problems(args.catalog, exc, sys.stderr)
            return EXIT_INVALID
    if args.output == "yaml":
        yaml.safe_dump(catalog_to_data(catalog), sys.stdout, sort_keys=False, width=100)
        return EXIT_OK
    table = [["NAME", "NVML", "USABLE", "CC", "RANK", "VENDOR", "PRODUCTS (node label values)"]]
    for c in catalog:
        table.append(
            [
                c.name,
                f"{c.memory_gib:.2f} GiB",
                f"{c.usable_gib:.2f} GiB",
                c.compute_capability or "-",
                str(c.rank),
                c.vendor,
                ", ".join(c.products),
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for row in table:
        print("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpu-sizer`` console script."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
