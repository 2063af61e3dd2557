"""Exit statuses of the ``gpu-sizer`` subcommands (see :mod:`gpu_sizer.cli`).

A CI gate reads them, so each keeps its number: 2 (invalid input) outranks 1 (a definite
rejection), which outranks 3 (an incomplete estimate, a lower bound).
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXIT_INCOMPLETE", "EXIT_INVALID", "EXIT_NO_HEADROOM", "EXIT_OK"]

EXIT_OK: Final = 0
EXIT_NO_HEADROOM: Final = 1
EXIT_INVALID: Final = 2
EXIT_INCOMPLETE: Final = 3
