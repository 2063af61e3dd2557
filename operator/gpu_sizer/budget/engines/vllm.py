"""vLLM: the KV cache pool it carves out of ``--gpu-memory-utilization``, by release. Pure.

Modeled from the source of three releases (the wheels' Python files):

**0.11.0 and 0.19.1 (V1 engine)** — ``vllm/v1/worker/gpu_worker.py``:

- ``init_device`` initializes the distributed environment (NCCL communicators, custom all-reduce)
  *before* the memory snapshot (vllm-project/vllm#25359), then
  ``requested_memory = total_memory x gpu_memory_utilization`` with ``total_memory`` from
  ``torch.cuda.mem_get_info`` (the class's usable bytes; 0.19.1 ``request_memory`` rounds up)
  and refuses to start when the free memory at that point is smaller ("Free memory on device
  ... on startup is less than desired GPU memory utilization").
- ``determine_available_memory`` runs ``profile_run`` inside ``memory_profiling`` and returns
  ``requested_memory - non_kv_cache_memory`` where ``non_kv_cache_memory`` = weights + the PyTorch
  peak increase of the profile run + the non-PyTorch increase since the snapshot. The profile run
  (``gpu_model_runner.py`` ``profile_run``) is a dummy forward of ``max_num_batched_tokens``
  tokens over ``min(max_num_seqs, max_num_batched_tokens)`` requests plus the sampler over those
  rows. What was allocated before the snapshot (CUDA context, NCCL) is outside the budget.
- CUDA graphs are captured after the KV cache is allocated (``compile_or_warm_up_model``); 0.19.1
  can subtract an estimate of their pool only with ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``
  (default off), so the graph pool is beyond the budget too.
- Defaults (``vllm/engine/arg_utils.py`` ``get_batch_defaults``, OpenAI API server usage
  context, which ``vllm serve`` uses): ``max_num_batched_tokens`` 8192 on GPUs with at least
  70 GiB whose name does not contain "a100", else 2048; ``max_num_seqs`` 1024 / 256 likewise
  (the spec's ``maxNumSeqs`` is always passed); the batched tokens are capped at
  ``max_num_seqs x max_model_len``. Graph capture sizes up to ``min(2 x max_num_seqs, 512)``
  (``config/vllm.py`` ``_set_cudagraph_sizes``), capped by ``max_num_batched_tokens``.
- ``kv_cache_utils.py``: ``num_blocks = available // page_size // num_layers`` with 16-token
  blocks; ``check_enough_kv_cache_memory`` refuses to start when the pool cannot hold one
  ``max_model_len`` request ("To serve at least one request with the models's max seq len ...").
- Non-PyTorch memory inside the budget at tensor-parallel size 1: 0.16 GiB, as vLLM logs it for
  an H100 after vllm-project/vllm#11809 counted PyTorch's reserved memory correctly
  (vllm-project/vllm#12126: ``non_torch_memory takes 0.16GiB``).

**0.6.3.post1 (V0 engine)** — ``vllm/worker/worker.py``:

- ``init_device`` records the free memory right after ``torch.cuda.set_device`` (the CUDA context
  is outside the budget), then initializes NCCL (inside: it is part of the measured peak).
- ``determine_num_available_blocks``: ``peak_memory = init_free - free_after_profile`` (weights,
  the profile run's *reserved* activations, NCCL and every other non-PyTorch allocation), and
  ``num_gpu_blocks = (total x gpu_memory_utilization - peak_memory) // cache_block_size``.
- ``raise_if_cache_size_invalid``: no blocks, or fewer than ``max_model_len`` tokens, refuses.
- Defaults (``engine/arg_utils.py``, ``config.py`` ``SchedulerConfig``): chunked prefill only for
  ``max_model_len`` above 32,768 (not with a sliding window); without it
  ``max_num_batched_tokens = max(max_model_len, 2048)``, with it 512. The profile run prefills
  ``max_num_seqs`` sequences totalling ``max_num_batched_tokens``. CUDA graphs for decode batches
  up to ``max_num_seqs`` padded to a multiple of 8 (``model_runner.py``
  ``_get_max_graph_batch_size``), captured after the KV cache is allocated.
- Non-PyTorch memory inside the budget at tensor-parallel size 1: 0.35 GiB, as the V0 profiler
  logs it for Llama-3.1-8B on a 24 GB Ampere GPU (vllm-project/vllm#10517:
  ``non_torch_memory=0.35GiB``), plus :data:`~.common.COMM_GROUP_BYTES` per parallel group
  (NCCL is initialized after the free-memory baseline, so it counts).

Releases between and after are sized with the rules of the nearest older modeled release (the
estimate's notes say so); gpu-sizer does not claim what it has not read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gpu_sizer.api import GPUWorkloadSpec, KvCacheDtype
from gpu_sizer.budget.engines.common import (
    COMM_GROUP_BYTES,
    CUDA_CONTEXT_BYTES,
    GIB,
    ClassInputs,
    EnginePlan,
    KvDemand,
    ServingFacts,
    choose_fraction,
    class_inputs,
    graph_pool_bytes,
    kv_capacity,
    parallel_args,
    profile_activation_bytes,
)
from gpu_sizer.budget.runtime import allocator_reserve_bytes
from gpu_sizer.catalog import GPUClass

__all__ = ["BLOCK_SIZE", "DEFAULT_UTILIZATION", "RELEASES", "VllmRelease", "plan", "planner"]

#: ``--block-size`` default (``CacheConfig``), tokens per KV page.
BLOCK_SIZE: Final = 16
#: ``--gpu-memory-utilization`` default in every modeled release.
DEFAULT_UTILIZATION: Final = 0.9


@dataclass(frozen=True)
class VllmRelease:
    """The allocation rules of one vLLM release (see the module docstring)."""

    version: str
    v1: bool
    #: Non-PyTorch bytes counted inside the budget at tensor-parallel size 1.
    non_torch_bytes: int
    #: Communication buffers are allocated before the memory snapshot (outside the budget).
    comm_outside_budget: bool


RELEASES: Final[tuple[VllmRelease, ...]] = (
    VllmRelease("0.19.1", v1=True, non_torch_bytes=round(0.16 * GIB), comm_outside_budget=True),
    VllmRelease("0.11.0", v1=True, non_torch_bytes=round(0.16 * GIB), comm_outside_budget=True),
    VllmRelease(
        "0.6.3.post1", v1=False, non_torch_bytes=round(0.35 * GIB), comm_outside_budget=False
    ),
)


def max_num_batched_tokens(spec: GPUWorkloadSpec, gpu: GPUClass, rel: VllmRelease) -> int:
    """Tokens of the profile run's forward pass (the spec's ``maxNumBatchedTokens`` or the
    release's default on ``gpu``)."""
    inf = spec.inference
    arch = spec.model.architecture
    assert inf is not None and arch is not None
    if inf.max_num_batched_tokens is not None:
        return inf.max_num_batched_tokens
    length, seqs = inf.max_model_len, inf.max_num_seqs
    if rel.v1:
        large = gpu.usable >= 70 * GIB and "a100" not in gpu.name.lower()
        return min(seqs * length, 8192 if large else 2048)
    chunked = length > 32768 and arch.sliding_window is None
    return 512 if chunked else max(length, 2048)


def graph_batch(spec: GPUWorkloadSpec, rel: VllmRelease, batched: int) -> int:
    """Largest decode batch captured in a CUDA graph (0 with ``enforceEager``)."""
    inf = spec.inference
    assert inf is not None
    if inf.enforce_eager:
        return 0
    seqs = inf.max_num_seqs
    if rel.v1:
        return min(2 * seqs, 512, batched)
    padded = seqs if seqs in (1, 2, 4) else -(-seqs // 8) * 8
    return min(padded, 8192)


def plan(
    spec: GPUWorkloadSpec,
    facts: ServingFacts,
    gpu: GPUClass,
    rel: VllmRelease,
    headroom: float,
) -> EnginePlan:
    """What ``rel`` holds on one GPU of ``gpu`` for ``spec``.

    ``headroom`` is the share of usable memory to leave free; it decides the utilization only
    when ``spec.inference.gpuMemoryUtilization`` is unset (see
    :func:`gpu_sizer.budget.engines.common.choose_fraction`).
    """
    return planner(spec, facts, rel, headroom)(gpu)


def planner(
    spec: GPUWorkloadSpec, facts: ServingFacts, rel: VllmRelease, headroom: float
) -> Callable[[GPUClass], EnginePlan]:
    """:func:`plan` for one spec and many classes: what does not depend on the class is
    computed once (the verdict plans every allowed class per admission review)."""
    inf = spec.inference
    assert inf is not None
    comm = facts.groups * COMM_GROUP_BYTES
    non_torch = rel.non_torch_bytes + (0 if rel.comm_outside_budget else comm)
    before_snapshot = CUDA_CONTEXT_BYTES + (comm if rel.comm_outside_budget else 0)
    given = inf.gpu_memory_utilization
    base_args = {
        "--max-model-len": str(inf.max_model_len),
        "--max-num-seqs": str(inf.max_num_seqs),
    }
    extra_args = parallel_args(spec, "--tensor-parallel-size", "--pipeline-parallel-size")
    if inf.max_num_batched_tokens is not None:
        extra_args["--max-num-batched-tokens"] = str(inf.max_num_batched_tokens)
    if inf.enforce_eager:
        extra_args["--enforce-eager"] = "true"
    by_batch: dict[int, tuple[int, int]] = {}
    plain = not facts.fp8_weights and inf.kv_cache_dtype is KvCacheDtype.auto
    as_stored = ClassInputs(facts.quant, 0, "auto", facts.kv, ())
    weights = facts.weights

    def per_batch(batched: int) -> tuple[int, int]:
        """(activations, CUDA graph pool) for a profile run of ``batched`` tokens."""
        if batched not in by_batch:
            rows = min(inf.max_num_seqs, batched)
            acts = profile_activation_bytes(spec, facts, batched, rows)
            if not rel.v1:  # V0 measures the profile run's reserved memory, not allocated
                acts += allocator_reserve_bytes(acts)
            by_batch[batched] = (acts, graph_pool_bytes(facts, graph_batch(spec, rel, batched)))
        return by_batch[batched]

    def on(gpu: GPUClass) -> EnginePlan:
        usable = gpu.usable
        quant, marlin_excess, kv_flag, kv, notes = (
            as_stored if plain else class_inputs(spec, facts, gpu)
        )
        batched = max_num_batched_tokens(spec, gpu, rel)
        acts, graphs = per_batch(batched)
        beyond = before_snapshot + graphs + marlin_excess
        if given is not None:
            fraction, chosen = given, False
        else:
            fraction, chosen = choose_fraction(
                DEFAULT_UTILIZATION, ((1 - headroom) * usable - beyond) / usable, 2
            )
        requested = math.ceil(usable * fraction) if rel.v1 else int(usable * fraction)
        pool = requested - (weights + quant + acts + non_torch)
        start_error = _start_error(
            spec, rel, usable, fraction, requested, before_snapshot, pool, kv
        )
        tokens, concurrency = (0, 0.0) if start_error else kv_capacity(pool, kv, BLOCK_SIZE)
        args = {**base_args, "--gpu-memory-utilization": f"{fraction:g}", **extra_args}
        if kv_flag != "auto":
            args["--kv-cache-dtype"] = kv_flag
        return EnginePlan(
            gpu=gpu,
            engine=inf.engine,
            version=rel.version,
            fraction=fraction,
            fraction_default=DEFAULT_UTILIZATION,
            fraction_chosen=chosen,
            weights=facts.weights,
            quant=quant,
            activations=acts,
            kv_pool=max(pool, 0),
            runtime=non_torch + beyond,
            capacity_tokens=tokens,
            max_concurrency=concurrency,
            max_num_batched_tokens=batched,
            parameter_count=facts.parameter_count,
            kv_token_bytes=kv.token_bytes,
            start_error=start_error,
            engine_args=args,
            notes=notes,
        )

    return on


def _start_error(
    spec: GPUWorkloadSpec,
    rel: VllmRelease,
    usable: int,
    fraction: float,
    requested: int,
    before_snapshot: int,
    pool: int,
    kv: KvDemand,
) -> str | None:
    """vLLM's own refusal to start, with its figures, or ``None``."""
    inf = spec.inference
    assert inf is not None
    free = usable - before_snapshot
    if rel.v1 and free < requested:
        return (
            f"vLLM {rel.version} refuses to start: free memory on the device "
            f"({free / GIB:.2f}/{usable / GIB:.2f} GiB after the CUDA context and NCCL) is less "
            f"than the desired GPU memory utilization ({fraction:g}, {requested / GIB:.2f} GiB)"
        )
    if pool <= 0:
        return (
            f"vLLM {rel.version} refuses to start: no available memory for the cache blocks "
            f"({pool / GIB:.2f} GiB left for the KV cache)"
        )
    block_bytes = BLOCK_SIZE * max(kv.token_bytes, 1)
    needed = -(-kv.request_bytes // block_bytes) * block_bytes
    if needed > pool:
        if not rel.v1:
            return (
                f"vLLM {rel.version} refuses to start: the model's max seq len "
                f"({inf.max_model_len}) is larger than the maximum number of tokens that can be "
                f"stored in KV cache ({pool // block_bytes * BLOCK_SIZE})"
            )
        return (
            f"vLLM {rel.version} refuses to start: to serve one request of maxModelLen "
            f"{inf.max_model_len} tokens, {needed / GIB:.2f} GiB of KV cache is needed, more than "
            f"the available KV cache memory ({pool / GIB:.2f} GiB)"
        )
    return None
