"""The memory model: per-GPU bytes by category for a GPUWorkload spec. Pure functions.

Entry point: :func:`estimate`. (PLACEHOLDER first cut: the full model lands with issue 2.)
"""

from gpu_sizer.budget.estimate import estimate

__all__ = ["estimate"]
