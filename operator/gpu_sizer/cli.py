"""The ``gpu-sizer`` command: one subcommand per job, each implemented in its own module.

Subcommands register themselves through ``add_parser(subparsers)`` functions so that this file
stays a dispatcher. Exit status: 0 success / everything fits, 1 some workload has no safe
headroom, 2 invalid input or usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from gpu_sizer import __version__

Handler = Callable[[argparse.Namespace], int]


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
    """estimate, import-hf-config, crd, catalog: the commands that need no cluster."""
    p = sub.add_parser("estimate", help="estimate GPUWorkload files without a cluster")
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML files, - for stdin")
    p.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    p.add_argument("--catalog", metavar="FILE", help="GPU class catalog YAML")
    p.set_defaults(handler=_not_yet)


def _not_yet(args: argparse.Namespace) -> int:
    print(f"gpu-sizer {args.command}: not implemented yet", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpu-sizer`` console script."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
