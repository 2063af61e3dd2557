"""Argument parsers for ``gpu-sizer operator`` and ``gpu-sizer demo``. Heavy imports (kopf,
kubernetes) stay inside the handlers so that the offline commands stay fast.

The demo itself is not operator code: it needs a Kubernetes API to run the operator against
(kmock's emulator, or a real control plane from envtest binaries), and that lives in the
``gpu-sizer-testbed`` distribution (the ``demo`` extra), which the operator's wheel and image do
not carry. Its flags are parsed here so that ``gpu-sizer demo --help`` works without it."""

from __future__ import annotations

import argparse
import logging
import sys

from gpu_sizer.argtypes import nonnegative_seconds, port, positive_int, positive_seconds


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``operator`` and ``demo``."""
    from gpu_sizer.controller.options import add_operator_arguments

    p = sub.add_parser(
        "operator",
        help="run the operator (kopf): estimate, measure and recommend GPUWorkloads",
        description="Watch GPUWorkloads, estimate them, measure them with a short Job on a GPU "
        "node of the right class and write the result into their status. Every flag also reads "
        "env GPU_SIZER_<FLAG>.",
    )
    add_operator_arguments(p)
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    p.set_defaults(handler=_operator)

    d = sub.add_parser(
        "demo",
        help="run the whole operator against a Kubernetes API on loopback (no cluster, no GPU)",
        description="Serve a Kubernetes API on loopback (kmock's emulator; a real control plane "
        "from envtest binaries when KUBEBUILDER_ASSETS is set), install the CRDs, namespaces "
        "and fake GPU nodes, apply examples/, run the real operator with the local measurement "
        "backend, print the final statuses and exit; with --serve, keep serving for kubectl "
        "until Ctrl-C. There is no fixed time limit: the demo waits while the operator makes "
        "progress. Needs the demo extra: pip install 'gpu-sizer[demo]'.",
    )
    d.add_argument("--examples", default=None, metavar="DIR", help="GPUWorkload YAML directory")
    d.add_argument(
        "--serve",
        action="store_true",
        help="after the workloads settle, keep the API server and the operator running and "
        "print a kubeconfig for kubectl; Ctrl-C stops both",
    )
    d.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="also write the kubeconfig here (removed again when the demo ends)",
    )
    d.add_argument(
        "--port",
        type=port,
        default=None,
        metavar="PORT",
        help="API server port on 127.0.0.1, 0 to 65535 (default or 0: a free one)",
    )
    d.add_argument(
        "--stall-seconds",
        type=positive_seconds,
        default=600.0,
        metavar="SECONDS",
        help="give up when no status changed and the operator logged nothing for this long "
        "(default 600)",
    )
    d.add_argument(
        "--timeout",
        type=nonnegative_seconds,
        default=None,
        metavar="SECONDS",
        help="give up after this long in all (default: no limit while progress is made)",
    )
    d.add_argument(
        "--probe-seconds",
        type=positive_seconds,
        default=600.0,
        metavar="SECONDS",
        help="upper bound on each local probe run (default 600; a run ends as soon as it is done)",
    )
    d.add_argument(
        "--probe-device",
        choices=["auto", "cpu", "cuda"],
        default=None,
        help="where the probes run (default: cpu when NVML finds no NVIDIA GPU, else auto)",
    )
    d.add_argument(
        "--probe-concurrency",
        type=positive_int,
        default=None,
        metavar="N",
        help="local probes at once (default: one per CPU core on the CPU, 1 on a GPU, where "
        "runs sharing the device would spoil each other's peaks)",
    )
    d.add_argument("--verbose", "-v", action="store_true", help="show the operator's log")
    d.set_defaults(handler=_demo)


def _operator(args: argparse.Namespace) -> int:
    from gpu_sizer.controller.options import options_from

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # kopf logs every successful timer run at INFO
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    from gpu_sizer.controller import log_levels

    log_levels.install()  # a retried HTTP 429 (the server's flow control) is not an ERROR
    try:
        opts = options_from(args)
    except (ValueError, OSError) as exc:
        print(f"gpu-sizer operator: {exc}", file=sys.stderr)
        return 2
    from gpu_sizer.controller.running import run

    return run(opts)


#: Printed by ``gpu-sizer demo`` when the testbed is not installed.
DEMO_MISSING = (
    "gpu-sizer demo: the demo extra is not installed (the Kubernetes APIs it runs the operator "
    "against); install it with pip install 'gpu-sizer[demo]' (from a source checkout: "
    "pip install -e ./testbed -e '.[demo]')"
)


def _demo(args: argparse.Namespace) -> int:
    # The one place gpu_sizer reaches into the testbed (an exception in .importlinter), and only
    # when a user asks for the demo.
    try:
        from gpu_sizer_testbed.demo import main
    except ModuleNotFoundError as exc:
        if exc.name not in {"gpu_sizer_testbed", "gpu_sizer_testbed.demo", "kmock"}:
            raise
        print(DEMO_MISSING, file=sys.stderr)
        return 2
    return main(args)
