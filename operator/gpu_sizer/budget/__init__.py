"""The memory model: per-GPU bytes by category for a GPUWorkload spec. Pure functions.

Entry point: :func:`estimate`. Modules, each with its formulas' sources:

- ``params``: exact parameter layout per family and tensor-parallel rank;
- ``weights``: weights by dtype and quantized formats with their metadata;
- ``kv_cache``: KV cache per token and for the configured sequences;
- ``activations``: inference activations and engine defaults;
- ``training``: gradients, optimizer state, master weights, ZeRO/FSDP, LoRA, activations;
- ``runtime``: CUDA context, workspaces, CUDA graphs, NCCL, allocator reserve;
- ``estimate``: the assembly.
"""

from gpu_sizer.budget.estimate import estimate
from gpu_sizer.budget.params import parameter_count

__all__ = ["estimate", "parameter_count"]
