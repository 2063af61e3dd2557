"""The memory model: per-GPU bytes by category for a GPUWorkload spec. Pure functions.

Entry point: :func:`estimate`. Modules, each with its formulas' sources:

- ``params``: exact parameter layout per family and tensor-parallel rank;
- ``weights``: weights by dtype and quantized formats with their metadata;
- ``kv_cache``: KV cache per token and for the configured sequences;
- ``activations``: inference activations and engine defaults;
- ``training``: the training phases (Load, Step), LoRA, activations;
- ``training_precision``: precision recipes (which tensors hold which dtype), optimizer state;
- ``training_sharding``: DDP, FSDP 1/2, DeepSpeed ZeRO-1/2/3 and offload as implemented;
- ``training_load``: the initialisation and checkpoint-load peak;
- ``training_loss``: logits under the standard, chunked and fused cross-entropy;
- ``runtime``: CUDA context, workspaces, CUDA graphs, NCCL, allocator reserve;
- ``estimate``: the assembly.
"""

from gpu_sizer.budget.estimate import estimate
from gpu_sizer.budget.params import parameter_count

__all__ = ["estimate", "parameter_count"]
