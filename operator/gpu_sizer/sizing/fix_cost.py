"""What a computed fix costs the user, to list the cheapest first. Pure.

A rejected serving spec can usually be made to fit several ways; they are not equal. In order:

0. an engine flag: the engine's memory fraction (vLLM ``--gpu-memory-utilization``, SGLang
   ``--mem-fraction-static``), activation checkpointing in training: the same model, the same
   GPUs, a line in the manifest;
1. a policy or a sharding the spec's own GPUs already allow: ``minHeadroomFraction``, ZeRO-3
   over the data-parallel ranks it has;
2. an FP8 KV cache: the same GPUs, a small accuracy cost;
3. less work per GPU: a shorter context (``maxModelLen``), fewer sequences (``maxNumSeqs``), a
   lower concurrency target;
4. a larger GPU class than the spec allows;
5. more GPUs (tensor or data parallelism).

Fixes of the same cost keep the order they were computed in. Image and video generation fixes
are ordered by their own cost model (:mod:`gpu_sizer.budget.diffusion.fixes`).
"""

from __future__ import annotations

from typing import Final

__all__ = ["FIX_COST", "fix_cost"]

#: Spec path -> cost rank (see the module docstring); unlisted paths rank after the listed ones.
FIX_COST: Final[dict[str, int]] = {
    "spec.inference.gpuMemoryUtilization": 0,
    "spec.training.activationCheckpointing": 0,
    "spec.placement.minHeadroomFraction": 1,
    "spec.training.parallelism.strategy": 1,
    "spec.inference.kvCacheDtype": 2,
    "spec.inference.maxModelLen": 3,
    "spec.inference.maxNumSeqs": 3,
    "spec.inference.targetConcurrency": 3,
    "spec.placement.gpuClasses": 4,
    "spec.inference.tensorParallelSize": 5,
    "spec.training.parallelism.dataParallelSize": 5,
}


def fix_cost(path: str) -> int:
    """The cost rank of a fix that changes ``path`` (lower is cheaper)."""
    return FIX_COST.get(path, len(FIX_COST))
