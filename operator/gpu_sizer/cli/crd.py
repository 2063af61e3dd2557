"""``gpu-sizer crd``: the CustomResourceDefinitions the operator serves, as YAML."""

from __future__ import annotations

import argparse
import sys

from gpu_sizer.cli.exit_status import EXIT_OK

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``crd`` subcommand."""
    p = sub.add_parser(
        "crd",
        help="print the CustomResourceDefinitions the operator serves (GPUWorkload and "
        "GPUMeasurement; YAML, for kubectl apply -f -)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Both CRDs as one multi-document stream: the operator needs both installed (it watches
    GPUMeasurement records too), and ``gpu-sizer crd | kubectl apply -f -`` must install all it
    needs."""
    from gpu_sizer.api.crd import crd_yaml, record_crd_yaml

    sys.stdout.write(crd_yaml() + "---\n" + record_crd_yaml())
    return EXIT_OK
