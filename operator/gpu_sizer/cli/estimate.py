"""``gpu-sizer estimate``: size GPUWorkload files without a cluster, as the webhook and the
operator do before measuring (:func:`gpu_sizer.sizing.verdict.assess`, then the status
:func:`gpu_sizer.lifecycle.estimated_status` writes).

Output (:mod:`.estimate_output`): a kubectl-style table, the objects with their status (json,
yaml), or strategic-merge patches of a pod template. Exit status as :mod:`gpu_sizer.cli` says.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

import yaml

from gpu_sizer.api.times import now_rfc3339
from gpu_sizer.cli.catalog import print_catalog_problems
from gpu_sizer.cli.documents import Doc, read_docs, row_name
from gpu_sizer.cli.estimate_output import print_patches, print_table
from gpu_sizer.cli.exit_status import EXIT_INCOMPLETE, EXIT_INVALID, EXIT_NO_HEADROOM, EXIT_OK

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``estimate`` subcommand and its flags."""
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
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpu_sizer.api import InvalidWorkload, parse_workload, spec_hash
    from gpu_sizer.catalog import DEFAULT_CATALOG, InvalidCatalog, load_catalog_file
    from gpu_sizer.lifecycle import estimated_status
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
            print_catalog_problems(args.catalog, exc, err)
            return EXIT_INVALID
    calibration = None
    if args.calibration != "off":
        from gpu_sizer.records.calibration import Calibration, learn, parse_mode, samples_from

        records: list[Any] = []
        if args.records:
            record_docs, bad = read_docs(args.records, err, records=True)
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
    docs, invalid = read_docs(args.files, err)
    if not docs and not invalid:
        names = ", ".join("(stdin)" if f == "-" else str(f) for f in args.files)
        print(f"{names}: No GPUWorkload documents found.", file=err)
        invalid = True
    seen: dict[str, Doc] = {}
    unique: list[Doc] = []
    for doc in docs:
        key = row_name(doc)
        first = seen.setdefault(key, doc)
        if first is doc:
            unique.append(doc)
            continue
        where = (
            f"twice in {doc.source} (documents {first.index + 1} and {doc.index + 1})"
            if first.source == doc.source and first.index != doc.index
            else f"twice on the command line ({doc.source})"
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
    rows: list[tuple[Doc, Assessment]] = []
    objects: list[dict[str, Any]] = []
    now = now_rfc3339()
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
        print_table(rows, out)
        for doc, assessment in rows:
            who = row_name(doc)
            if assessment.verdict is not Verdict.Fits:
                for line in assessment.message.splitlines():
                    print(f"{who}: {line}", file=err)
            for warning in [*assessment.estimate.notes, *assessment.warnings]:
                print(f"Warning: {who}: {warning}", file=err)
            cal = assessment.estimate.calibration
            if cal is not None:
                print(f"{who}: calibration ({cal.mode}, {cal.gpu_class}): {cal.message}", file=err)
    elif args.output == "patch":
        print_patches(rows, objects, args.container, out, err)
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
