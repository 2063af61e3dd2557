"""Runtime overhead: CUDA context, library workspaces, CUDA graphs, NCCL, allocator reserve. Pure.

These are the bytes a process holds besides tensors the model asks for. Most are empirical
planning constants, named here so that the probe's measurements (docs/accuracy.md) can correct
them in one place:

- ``CUDA_CONTEXT_BYTES`` (empirical): the CUDA context plus the kernels of PyTorch, cuBLAS and
  the attention library loaded with lazy module loading (``CUDA_MODULE_LOADING=LAZY``, the
  default since CUDA 11.7 / PyTorch 1.13, PyTorch docs "CUDA semantics"). It is outside the
  caching allocator (vLLM's profiler counts it as "non-torch memory"); 512 MiB is a planning
  value until the probe's NVML-minus-reserved figures replace it.
- ``CUBLAS_WORKSPACE_BYTES`` (engine source, rounded up): PyTorch ``CublasHandlePool.cpp`` gives
  each cuBLAS handle and stream a workspace sized by ``CUBLAS_WORKSPACE_CONFIG`` (a few MiB by
  default), and ``CUDABlas.cpp`` ``_parseChosenWorkspaceSize`` a cuBLASLt workspace of 32 MiB on
  Hopper, 4 MiB on large Ampere parts (PyTorch PR #120925, after the cuBLAS API reference's
  recommendation): 64 MiB covers both on Hopper.
- ``CUDA_GRAPH_BASE_BYTES`` (empirical) plus the decode activations of the largest captured
  batch: CUDA graphs of all batch sizes share one memory pool (``torch.cuda.graph_pool_handle``),
  so the pool holds about the intermediates of the largest graph. vLLM captures decode batches
  up to ``min(2 x max_num_seqs, 512)`` tokens by default (``VllmConfig._set_cudagraph_sizes``,
  ``max_cudagraph_capture_size``) unless ``enforce_eager`` (vLLM docs, "Conserving memory");
  TGI up to 32 (launcher ``--cuda-graphs`` default 1,2,4,8,16,32); SGLang up to 160
  (``ServerArgs.cuda_graph_max_bs``; its default depends on the GPU, 160 is a planning value).
  The empirical base covers per-graph kernel state and the persistent input buffers.
- ``NCCL_COMMUNICATOR_BYTES`` (documented default, empirical channel count): NCCL's
  ``NCCL_BUFFSIZE`` default is 4 MiB per channel and direction (NCCL docs, "Environment
  Variables"); with up to 32 channels on NVLink, 2 x 32 x 4 MiB = 256 MiB per communicator. One
  communicator per parallel group the process joins (tensor, pipeline, data).
- ``ALLOCATOR_RESERVE_FRACTION`` (empirical): PyTorch's caching allocator keeps freed blocks
  reserved and rounds large allocations to 2 MiB segments (PyTorch docs, "CUDA semantics, memory
  management"), so reserved exceeds allocated by a share of the transient tensors (activations,
  gradient buffers). 10% of them is planned until the probe's reserved/allocated ratios say
  otherwise.

All figures are bytes per GPU (per process).
"""

from __future__ import annotations

from gpu_sizer.api import Engine

__all__ = [
    "ALLOCATOR_RESERVE_FRACTION",
    "CUBLAS_WORKSPACE_BYTES",
    "CUDA_CONTEXT_BYTES",
    "CUDA_GRAPH_BASE_BYTES",
    "CUDA_GRAPH_MAX_BATCH",
    "NCCL_COMMUNICATOR_BYTES",
    "allocator_reserve_bytes",
    "base_overhead_bytes",
    "cuda_graph_batch",
]

MIB = 1 << 20

CUDA_CONTEXT_BYTES = 512 * MIB
CUBLAS_WORKSPACE_BYTES = 64 * MIB
CUDA_GRAPH_BASE_BYTES = 256 * MIB
NCCL_COMMUNICATOR_BYTES = 256 * MIB
ALLOCATOR_RESERVE_FRACTION = 0.10

#: Largest decode batch each engine captures in a CUDA graph by default (0: no CUDA graphs;
#: ``transformers`` ``generate`` runs eagerly).
CUDA_GRAPH_MAX_BATCH: dict[Engine, int] = {
    Engine.vllm: 512,
    Engine.sglang: 160,
    Engine.tgi: 32,
    Engine.transformers: 0,
}


def base_overhead_bytes(parallel_groups: int) -> int:
    """CUDA context, cuBLAS workspace and one NCCL communicator per parallel group (bytes)."""
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + parallel_groups * NCCL_COMMUNICATOR_BYTES


def cuda_graph_batch(engine: Engine, max_num_seqs: int, enforce_eager: bool) -> int:
    """Tokens in the largest captured decode CUDA graph (0 when the engine runs eagerly)."""
    if enforce_eager:
        return 0
    if engine is Engine.vllm:
        return min(2 * max_num_seqs, CUDA_GRAPH_MAX_BATCH[engine])
    return min(max_num_seqs, CUDA_GRAPH_MAX_BATCH[engine])


def allocator_reserve_bytes(transient_bytes: int) -> int:
    """Caching-allocator reserve over allocated for ``transient_bytes`` of short-lived tensors."""
    return int(transient_bytes * ALLOCATOR_RESERVE_FRACTION)
