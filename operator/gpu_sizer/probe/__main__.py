"""``python -m gpu_sizer.probe``: the measurement Job's entry point."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpu_sizer.probe.command import add_arguments, handle


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the probe's arguments and run it; the process exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m gpu_sizer.probe",
        description="gpu-sizer measurement probe: prints one JSON result to stdout.",
    )
    add_arguments(parser)
    return handle(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
