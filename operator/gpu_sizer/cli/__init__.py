"""The ``gpu-sizer`` command: one subcommand per job, one module per subcommand.

The offline subcommands live in this package (``estimate``, ``import-hf-config``,
``import-diffusers``, ``accuracy``, ``crd``, ``catalog``: :mod:`.estimate`, :mod:`.import_hf`,
...), each a thin layer over the core; the operator and probe packages register theirs through
``add_parsers(subparsers)``, so that this package stays a dispatcher for them and ``gpu-sizer
estimate`` never imports kopf, kmock or torch.

Exit status: 0 success / every workload fits, 1 some workload has no safe headroom, 2 invalid
input or usage, 3 some workload's estimate is incomplete (a component it needs cannot be counted,
so it is a lower bound). When several apply the strongest wins: 2, then 1 (a definite rejection:
even the lower bound has no safe headroom, or another workload has none), then 3. Problems print
one per line as ``FILE: NAME: spec.path: message`` on stderr; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from gpu_sizer import __version__
from gpu_sizer.cli import accuracy, catalog, crd, estimate, import_diffusers, import_hf
from gpu_sizer.cli.exit_status import EXIT_INCOMPLETE, EXIT_INVALID, EXIT_NO_HEADROOM, EXIT_OK

__all__ = ["EXIT_INCOMPLETE", "EXIT_INVALID", "EXIT_NO_HEADROOM", "EXIT_OK", "main"]

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

    # The offline commands, which need no cluster (accuracy reads one only when asked), in the
    # order `gpu-sizer --help` has always listed them.
    for command in (estimate, import_hf, accuracy, import_diffusers, crd, catalog):
        command.add_parser(sub)
    add_operator_parsers(sub)
    add_probe_parsers(sub)
    return parser


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
