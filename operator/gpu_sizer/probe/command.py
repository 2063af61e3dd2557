"""``gpu-sizer probe`` and ``python -m gpu_sizer.probe``: one argument parser for both.

The operator's measurement Job and local backend call exactly::

    python -m gpu_sizer.probe [--spec FILE|-] [--termination-log PATH]
                              [--deadline-seconds N] [--gpu-class NAME]

Heavy imports (torch) stay inside the handler so that ``gpu-sizer estimate`` never pays for them.
"""

from __future__ import annotations

import argparse
import math

from gpu_sizer.probe.errors import sigterm_sets_terminated
from gpu_sizer.probe.nvml import DEFAULT_HZ

__all__ = ["add_arguments", "add_parsers", "handle"]


def _positive_seconds(text: str) -> float:
    """A finite number of seconds greater than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number greater than 0")
    return value


def _sampler_hz(text: str) -> float:
    """A finite rate in samples per second, 0 (sampler off) or greater."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate in Hz") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text} must be 0 (off) or a finite rate greater than 0")
    return value


def _positive_bytes(text: str) -> int:
    """A whole number of bytes greater than 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a number of bytes greater than 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The probe's options (shared by ``gpu-sizer probe`` and ``python -m gpu_sizer.probe``)."""
    parser.add_argument(
        "--spec",
        metavar="FILE",
        help="GPUWorkload spec, JSON or YAML (its .spec or the whole object), - for stdin; "
        "default env GPU_SIZER_SPEC",
    )
    parser.add_argument(
        "--termination-log",
        metavar="PATH",
        default="/dev/termination-log",
        help="where the compact (< 4096 bytes) result goes (default /dev/termination-log; "
        "skipped with a note when not writable)",
    )
    parser.add_argument(
        "--deadline-seconds",
        type=_positive_seconds,
        metavar="N",
        help="stop the workload after N seconds (default: spec timeoutSeconds less a margin)",
    )
    parser.add_argument(
        "--gpu-class", metavar="NAME", help="catalog class the Job was scheduled on (recorded)"
    )
    parser.add_argument(
        "--sampler-hz",
        type=_sampler_hz,
        default=DEFAULT_HZ,
        metavar="HZ",
        help=f"NVML sampling rate per device (default {DEFAULT_HZ:g}; 0 disables the sampler)",
    )
    parser.add_argument(
        "--memory-limit-bytes",
        type=_positive_bytes,
        metavar="BYTES",
        help="cap what the workload may allocate beyond the probe's start (CUDA: caching "
        "allocator fraction; CPU: RLIMIT_AS), to check a smaller device or the OOM path",
    )
    parser.add_argument(
        "--cpu-max-bytes",
        type=_positive_bytes,
        metavar="BYTES",
        help="CPU runs: refuse workloads whose resident bytes exceed this (inference: weights "
        "and KV cache; training: weights, gradients and optimizer state; default 2 GiB)",
    )
    parser.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="synthetic mode: where to run (default cuda when available)",
    )


def handle(args: argparse.Namespace) -> int:
    """Run the probe; the process exit status (listed in :mod:`gpu_sizer.probe`)."""
    with sigterm_sets_terminated():  # from here on, SIGTERM still ends in a Timeout result
        from gpu_sizer.probe.run import DEFAULT_CPU_MAX_BYTES, Options, main_from_args

        options = Options(
            termination_log=args.termination_log,
            deadline_seconds=args.deadline_seconds,
            gpu_class=args.gpu_class,
            sampler_hz=args.sampler_hz,
            memory_limit_bytes=args.memory_limit_bytes,
            cpu_max_bytes=args.cpu_max_bytes or DEFAULT_CPU_MAX_BYTES,
            device=args.device,
        )
        return main_from_args(args.spec, options)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``gpu-sizer probe``."""
    parser = sub.add_parser(
        "probe",
        help="measure a GPUWorkload spec on this machine (what the measurement Job runs)",
        description="Run the measurement probe: synthetic model or the workload's command; "
        "prints one JSON result (gpusizer.dev/probe-result/v1) to stdout.",
    )
    add_arguments(parser)
    parser.set_defaults(handler=handle)
