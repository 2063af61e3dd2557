"""``gpu-sizer accuracy``: estimate versus measurement over measurement records.

Records come from files (``kubectl get gpumeasurements -o yaml``) or from the cluster
(:mod:`.cluster`); the figures are :mod:`gpu_sizer.records.accuracy`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from gpu_sizer.cli.documents import read_docs
from gpu_sizer.cli.exit_status import EXIT_INVALID, EXIT_NO_HEADROOM, EXIT_OK

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``accuracy`` subcommand and its flags."""
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
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from gpu_sizer.cli.cluster import ClusterUnreadable, kubeconfig_problem, list_records
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
        problem = kubeconfig_problem(path)
        if problem is not None:
            print(f"{name} {path}: not a kubeconfig: {problem}", file=sys.stderr)
            return EXIT_INVALID
    objects: list[Any] = []
    if args.files:
        docs, failed = read_docs(args.files, sys.stderr, records=True)
        if failed:
            return EXIT_INVALID
        objects = [d.data for d in docs]
    if args.from_cluster:
        try:
            objects += list_records(args.kubeconfig, args.context)
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
