"""``gpu-sizer catalog``: the GPU classes gpu-sizer chooses from (:mod:`gpu_sizer.catalog`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

import yaml

from gpu_sizer.cli.exit_status import EXIT_INVALID, EXIT_OK

__all__ = ["add_parser", "print_catalog_problems", "run"]


def print_catalog_problems(path: str, exc: Any, err: TextIO) -> None:
    """One line per problem of a ``--catalog`` file, each starting with the file's path (once)."""
    for problem in exc.problems:
        print(str(problem) if problem.path == path else f"{path}: {problem}", file=err)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``catalog`` subcommand and its flags."""
    p = sub.add_parser(
        "catalog",
        help="print the GPU classes",
        description="Print the GPU classes gpu-sizer chooses from: NVML's total and the usable "
        "memory (GiB a CUDA process can allocate), RANK, vendor and the node label values that "
        "identify each class. RANK is the order of preference: a workload is recommended the "
        "first class in rank order (lowest first) that leaves "
        "spec.placement.minHeadroomFraction free, preferring classes with nodes in the cluster. "
        "The default ranks follow typical on-demand price per GPU, cheapest first; a catalog "
        "file (--catalog, or the chart's catalog value) sets your own order, e.g. your prices "
        "or what you have reserved.",
    )
    p.add_argument("-o", "--output", choices=["table", "yaml"], default="table")
    p.add_argument("--catalog", metavar="FILE", help="GPU class catalog YAML (overrides defaults)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
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
            print_catalog_problems(args.catalog, exc, sys.stderr)
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
