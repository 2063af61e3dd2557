"""vLLM: the KV cache pool it carves out of ``--gpu-memory-utilization``, by release. Pure.

Modeled from the source of the releases listed (the wheels' Python files), and calibrated where
the source leaves a quantity to the runtime (the figures named):

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

**0.8, 0.9 and 0.10 (V1 engine, the default from 0.8.0)** — the same ``gpu_worker.py`` flow
with an older accounting and defaults:

- 0.9 and 0.10 size the pool from ``memory_profiling`` as 0.11 does, but ``init_device`` takes
  the memory snapshot *before* ``init_worker_distributed_environment`` (0.9.2 and 0.10.0
  ``gpu_worker.py``): the CUDA context is outside the budget, the NCCL communicators and
  all-reduce buffers inside it (:func:`~gpu_sizer.budget.engines.common.comm_group_bytes`: 1.79
  GiB per group on NVLink systems, 0.25 on PCIe-only ones). vllm-project/vllm#21348
  (Qwen3-235B-A22B-FP8, 4x H100, TP 4, July 2025: 8.11 GiB) and #22177 (0.10.0, TP 8 on PCIe
  GPUs: 12.22 GiB) are both reproduced that way. 0.8 subtracts every non-PyTorch byte the
  device holds after the profile run (``total - free - torch allocated``: the CUDA context and
  NCCL too) from ``total x gpu_memory_utilization``.
- CUDA graphs for decode batches ``[1, 2, 4] + range(8, 513, 8)`` (``cuda_graph_sizes`` default
  512) whatever ``max_num_seqs``; 0.8's OpenAI server defaults ``max_num_batched_tokens`` to
  2048 on every GPU, the GPU-dependent 8192 came with 0.9.
- The sampler warm-up (``_dummy_sampler_run``) goes through FlashInfer's top-k/top-p kernels only
  where FlashInfer is installed (``topk_topp_sampler.py``: ``is_flashinfer_available``, else
  "Falling back to the PyTorch-native implementation"): the vllm/vllm-openai images ship it, the
  wheel does not depend on it (0.9.2 and 0.10.0 METADATA). The plan takes PyTorch's native path,
  the larger warm-up (:data:`SAMPLER_BYTES_V1`, the code 0.11 runs), and the notes give what
  an image with FlashInfer saves: #21348 matches the native path within 6 %, #22177 (the docker
  image) the FlashInfer one.

**The sampler warm-up in 0.11 and later** (``gpu_model_runner.py`` ``_dummy_sampler_run``: one
row per request, ``min(max_num_seqs, max_num_batched_tokens)`` of them, with dummy top-k/top-p
through PyTorch's native ``apply_top_k_top_p``): the 16-bit logits, their float32 copy, the sort's
values and int64 indices, the softmax, cumulative sum and masks over the full vocabulary, and the
scattered result, all live at once. It runs after the dummy forward pass has returned, so the
profile peak is the larger of the forward pass and the sampler (plus the forward's hidden states,
still referenced). Calibrated on the llm-d-benchmark table of vLLM 0.11 runs on H100 (default
``max_num_seqs`` 1024, ``config_explorer/empirical-vllm-memory-results.md``): Qwen3-0.6B,
Qwen3-32B, Llama-3.1-8B, Llama-3.3-70B TP 2, gpt-oss-20b and -120b log a peak activation of
``1024 x vocab x 38.3 bytes`` within 0.5 % (5.56, 5.64, 4.76, 4.84, 7.38 and 7.38 GiB), whatever
the model's width: :data:`SAMPLER_BYTES_V1`. Tensor parallelism adds 0.42 GiB of non-PyTorch
memory inside the budget there (0.55 GiB at TP 2 against 0.13 GiB at TP 1 in the same table:
all-reduce buffers registered on first use).

**0.19** (FlashInfer sampling "available but disabled by default"): the native warm-up peaks at
``rows x vocab x 15.45`` bytes, :data:`SAMPLER_BYTES_V19`, the largest of the llm-d-planner
sweep of vLLM 0.19.0 on H100 (``accuracy/results/v0.19.0``: Llama-3.1-8B 1.89 GiB, Qwen2.5-7B and
Qwen3-8B 2.21, Gemma 2 3.62-3.66 for 1024 rows); its debug lines split the non-KV memory: 0.24-0.27
GiB of non-PyTorch memory inside the budget at TP 1 (:attr:`VllmRelease.non_torch_bytes`),
2.06-2.21 GiB at TP 2 and 4 (:data:`TP_INSIDE_BYTES_V19` on top), and 1.0-1.5 GiB of
communicators in the snapshot, outside it (planned as :data:`~.common.COMM_GROUP_BYTES`).

**Sliding-window and chunked layers under V1** (``kv_cache_interface.py`` ``SlidingWindowSpec``/
``ChunkedLocalAttentionSpec.max_memory_usage_bytes``): one request reserves
``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1`` blocks of a sliding
layer (``min(chunk + max_num_batched_tokens, max_model_len)`` tokens of a chunked one), not the
window; the start-up check and the "Maximum concurrency" use that.

**V0 specifics**: the start check compares ``max_model_len`` with the pool's tokens, windows or
not (``raise_if_cache_size_invalid``), and MLA's 576-element entry (1,152 bytes in 16 bits) is
padded to a multiple of 256 bytes (``CacheEngine`` ``align_cache``: 1,280).

Releases between and after are sized with the rules of the nearest older modeled release (the
estimate's notes say so); gpu-sizer does not claim what it has not read. A release newer than
every modeled one is sized with the newest rules plus a stated margin (see
:mod:`gpu_sizer.budget.engines`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Final

from gpu_sizer.api import GPUWorkloadSpec, KvCacheDtype
from gpu_sizer.budget.activations import logits_bytes
from gpu_sizer.budget.engines.common import (
    CUDA_CONTEXT_BYTES,
    GIB,
    ClassInputs,
    EnginePlan,
    KvDemand,
    Planner,
    ServingFacts,
    choose_fraction,
    class_inputs,
    comm_group_bytes,
    engine_plan,
    graph_pool_bytes,
    parallel_args,
    profile_activation_bytes,
)
from gpu_sizer.budget.kv_cache import kv_cache_bytes, mla_aligned, v1_request_bytes
from gpu_sizer.budget.runtime import allocator_reserve_bytes
from gpu_sizer.catalog import GPUClass

__all__ = ["BLOCK_SIZE", "DEFAULT_UTILIZATION", "RELEASES", "VllmRelease", "plan", "planner"]

#: ``--block-size`` default (``CacheConfig``), tokens per KV page.
BLOCK_SIZE: Final = 16
#: ``--gpu-memory-utilization`` default in every modeled release.
DEFAULT_UTILIZATION: Final = 0.9


#: Bytes per logit element the 0.11 sampler warm-up holds at its peak (see the module docstring).
SAMPLER_BYTES_V1: Final = 38.3
#: The same for 0.19 (see the module docstring).
SAMPLER_BYTES_V19: Final = 15.45
#: Non-PyTorch bytes a tensor-parallel group adds inside the budget in 0.11.
TP_INSIDE_BYTES: Final = round(0.42 * GIB)
#: The same in 0.19: 2.07 to 2.21 GiB at TP 2 and 4 against 0.25 GiB at TP 1 (see the module
#: docstring); the largest difference.
TP_INSIDE_BYTES_V19: Final = round(1.96 * GIB)
#: Bytes per logit element of FlashInfer's top-k/top-p sampling kernels in the warm-up (0.8 to
#: 0.10 images that ship FlashInfer): the 16-bit logits and their float32 copy; for the note.
FLASHINFER_SAMPLER_BYTES: Final = 6
#: V0's MLA cache entry alignment (``CacheEngine`` ``align_to_256bytes``).
MLA_ALIGN_BYTES: Final = 256


@dataclass(frozen=True)
class VllmRelease:
    """The allocation rules of one vLLM release (see the module docstring)."""

    version: str
    v1: bool
    #: Non-PyTorch bytes counted inside the budget at tensor-parallel size 1.
    non_torch_bytes: int
    #: Communication buffers are allocated before the memory snapshot (outside the budget).
    comm_outside_budget: bool
    #: Every non-PyTorch byte on the device counts inside the budget (0.8: the CUDA context too).
    context_inside_budget: bool = False
    #: Sampler warm-up bytes per logit element at its own peak, after the forward pass; 0: the
    #: logits add to the forward pass (:func:`~gpu_sizer.budget.activations.logits_bytes`).
    sampler_bytes: float = 0
    #: Decode CUDA graphs up to ``min(2 x max_num_seqs, 512)`` (0.11+); else up to 512.
    graphs_follow_seqs: bool = True
    #: ``max_num_batched_tokens`` defaults by GPU (0.9+); else 2048 (0.8's OpenAI server).
    device_batch_defaults: bool = True
    #: Non-PyTorch bytes a tensor-parallel group adds inside the budget.
    tp_inside_bytes: int = 0
    #: The sampler runs through FlashInfer only when the image ships it (0.8 to 0.10); the plan
    #: takes PyTorch's path (the larger warm-up) and the notes give the other.
    flashinfer_sampler_optional: bool = False


RELEASES: Final[tuple[VllmRelease, ...]] = (
    VllmRelease("0.19.1", v1=True, non_torch_bytes=round(0.27 * GIB), comm_outside_budget=True,
                sampler_bytes=SAMPLER_BYTES_V19, tp_inside_bytes=TP_INSIDE_BYTES_V19),
    VllmRelease("0.11.0", v1=True, non_torch_bytes=round(0.13 * GIB), comm_outside_budget=True,
                sampler_bytes=SAMPLER_BYTES_V1, tp_inside_bytes=TP_INSIDE_BYTES),
    VllmRelease("0.10.2", v1=True, non_torch_bytes=round(0.16 * GIB), comm_outside_budget=False,
                sampler_bytes=SAMPLER_BYTES_V1, graphs_follow_seqs=False,
                flashinfer_sampler_optional=True),
    VllmRelease("0.9.2", v1=True, non_torch_bytes=round(0.16 * GIB), comm_outside_budget=False,
                sampler_bytes=SAMPLER_BYTES_V1, graphs_follow_seqs=False,
                flashinfer_sampler_optional=True),
    VllmRelease("0.8.5", v1=True, non_torch_bytes=round(0.16 * GIB), comm_outside_budget=False,
                context_inside_budget=True, sampler_bytes=SAMPLER_BYTES_V1,
                graphs_follow_seqs=False, device_batch_defaults=False,
                flashinfer_sampler_optional=True),
    VllmRelease(
        "0.6.3.post1", v1=False, non_torch_bytes=round(0.35 * GIB), comm_outside_budget=False
    ),
)  # fmt: skip


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
        default = 8192 if large and rel.device_batch_defaults else 2048
        return min(seqs * length, default)
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
        return min(2 * seqs if rel.graphs_follow_seqs else 512, 512, batched)
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
) -> Planner:
    """:func:`plan` for one spec and many classes and fractions: what depends on neither is
    computed once (the verdict plans every allowed class per admission review, and a fix
    search up to a hundred fractions per class; see :class:`Planner`)."""
    inf = spec.inference
    assert inf is not None

    def accounting(gpu: GPUClass) -> tuple[int, int]:
        """(non-PyTorch bytes inside the budget, bytes allocated before the memory snapshot)."""
        comm = facts.groups * comm_group_bytes(gpu)
        non_torch = rel.non_torch_bytes + (0 if rel.comm_outside_budget else comm)
        if inf.tensor_parallel_size > 1:
            non_torch += rel.tp_inside_bytes
        before_snapshot = comm if rel.comm_outside_budget else 0
        if rel.context_inside_budget:
            non_torch += CUDA_CONTEXT_BYTES
        else:
            before_snapshot += CUDA_CONTEXT_BYTES
        return non_torch, before_snapshot

    base_args = {
        "--max-model-len": str(inf.max_model_len),
        "--max-num-seqs": str(inf.max_num_seqs),
    }
    extra_args = parallel_args(spec, "--tensor-parallel-size", "--pipeline-parallel-size")
    if inf.data_parallel_size > 1:
        extra_args["--data-parallel-size"] = str(inf.data_parallel_size)
    if inf.enable_expert_parallel:
        extra_args["--enable-expert-parallel"] = "true"
    if inf.max_num_batched_tokens is not None:
        extra_args["--max-num-batched-tokens"] = str(inf.max_num_batched_tokens)
    if inf.enforce_eager:
        extra_args["--enforce-eager"] = "true"
    by_batch: dict[int, tuple[int, int, int]] = {}
    plain = not facts.fp8_weights and inf.kv_cache_dtype is KvCacheDtype.auto
    as_stored = ClassInputs(facts.quant, 0, "auto", facts.kv, ())
    weights = facts.weights + facts.mxfp4_pad_bytes + facts.rope_cache_bytes

    def per_batch(batched: int) -> tuple[int, int, int]:
        """(activations, CUDA graph pool, activations less with FlashInfer's sampler) for a
        profile run of ``batched`` tokens."""
        if batched not in by_batch:
            rows = min(inf.max_num_seqs, batched)
            acts = profile_bytes(spec, facts, rel, batched, rows)
            if not rel.v1:  # V0 measures the profile run's reserved memory, not allocated
                acts += allocator_reserve_bytes(acts)
            saved = 0
            if rel.flashinfer_sampler_optional:
                flash = dataclasses.replace(rel, sampler_bytes=0)
                saved = max(acts - profile_bytes(spec, facts, flash, batched, rows), 0)
            graphs = graph_pool_bytes(facts, graph_batch(spec, rel, batched))
            by_batch[batched] = (acts, graphs, saved)
        return by_batch[batched]

    def on(gpu: GPUClass, fraction: float | None = None) -> EnginePlan:
        usable = gpu.usable
        given = inf.gpu_memory_utilization if fraction is None else fraction
        quant, marlin_excess, kv_flag, kv, notes = (
            as_stored if plain else class_inputs(spec, facts, gpu)
        )
        non_torch, before_snapshot = accounting(gpu)
        batched = max_num_batched_tokens(spec, gpu, rel)
        acts, graphs, saved = per_batch(batched)
        if saved >= GIB // 10:
            notes = (
                *notes,
                f"vLLM {rel.version} warms its sampler up through PyTorch's top-k/top-p when "
                "FlashInfer is not installed (pip install vllm), as planned here; an image that "
                f"ships FlashInfer (vllm/vllm-openai) holds {saved / GIB:.2f} GiB less in the "
                "profile run and its KV pool is that much larger",
            )
        beyond = before_snapshot + graphs + marlin_excess
        if given is not None:
            fraction, chosen = given, False
        else:
            fraction, chosen = choose_fraction(
                DEFAULT_UTILIZATION, ((1 - headroom) * usable - beyond) / usable, 2
            )
        requested = math.ceil(usable * fraction) if rel.v1 else int(usable * fraction)
        pool = requested - (weights + quant + acts + non_torch)
        kv = reserved_demand(spec, rel, kv, batched)
        start_error = _start_error(
            spec, rel, usable, fraction, requested, before_snapshot, pool, kv
        )
        args = {**base_args, "--gpu-memory-utilization": f"{fraction:g}", **extra_args}
        if kv_flag != "auto":
            args["--kv-cache-dtype"] = kv_flag
        return engine_plan(
            gpu,
            inf,
            rel.version,
            facts,
            kv,
            fraction=fraction,
            fraction_default=DEFAULT_UTILIZATION,
            fraction_chosen=chosen,
            weights=weights,
            quant=quant,
            activations=acts,
            pool=pool,
            runtime=non_torch + beyond,
            max_num_batched_tokens=batched,
            block_size=BLOCK_SIZE,
            start_error=start_error,
            engine_args=args,
            notes=notes,
        )

    return on


def profile_bytes(
    spec: GPUWorkloadSpec, facts: ServingFacts, rel: VllmRelease, tokens: int, rows: int
) -> int:
    """Peak bytes of ``rel``'s profile run: a dummy forward of ``tokens`` tokens, then the sampler
    warm-up over ``rows`` requests (see the module docstring). Releases whose warm-up stays within
    the logits count them with the forward pass; from 0.11 on the warm-up peaks on its own, while
    the forward's hidden states (``tokens x hiddenSize``) are still held."""
    forward = profile_activation_bytes(spec, facts, tokens, rows)
    if not rel.sampler_bytes:
        return forward
    arch = spec.model.architecture
    assert arch is not None
    act = facts.act_bytes
    sampler = int(rows * arch.vocab_size * rel.sampler_bytes) + tokens * arch.hidden_size * act
    without_logits = forward - logits_bytes(arch, rows, act)
    return max(without_logits, sampler + facts.dequant_workspace + facts.margin_bytes)


def reserved_demand(
    spec: GPUWorkloadSpec, rel: VllmRelease, kv: KvDemand, batched: int
) -> KvDemand:
    """``kv`` as ``rel`` reserves it per request: V1's per-layer-group pages
    (:func:`gpu_sizer.budget.kv_cache.v1_request_bytes`), V0's MLA entries padded to 256 bytes."""
    inf = spec.inference
    assert inf is not None
    geometry = kv.geometry
    if geometry is None:
        return kv
    if not rel.v1:
        if not any(g.kind == "mla" for g in geometry.groups):
            return kv
        padded = mla_aligned(geometry, MLA_ALIGN_BYTES)
        request, _ = kv_cache_bytes(padded, inf.max_model_len, 1)
        return KvDemand(padded.bytes_per_token, request, padded)
    if all(g.kind in ("full", "mla") for g in geometry.groups):
        return kv  # one page per block of maxModelLen in every layer: the plain figure
    request = v1_request_bytes(geometry, inf.max_model_len, batched, BLOCK_SIZE)
    return KvDemand(kv.token_bytes, request, geometry)


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
    """vLLM's own refusal to start, with its figures, or ``None``; or, for a regime these rules
    do not model, the reason and the fix (never a plan that admits it)."""
    inf = spec.inference
    assert inf is not None
    if not rel.v1 and (inf.data_parallel_size > 1 or inf.enable_expert_parallel):
        return (
            f"vLLM {inf.engine_version or rel.version} is sized with the V0 rules, and data or "
            "expert parallelism is not modeled there (gpu-sizer models vLLM's "
            "--data-parallel-size and --enable-expert-parallel from the V1 releases, 0.8.5 on): "
            "set inference.engineVersion to 0.8.5 or later"
        )
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
    if not rel.v1:
        # raise_if_cache_size_invalid: maxModelLen tokens in the pool, sliding window or not
        stored = pool // block_bytes * BLOCK_SIZE
        if kv.token_bytes and inf.max_model_len > stored:
            return (
                f"vLLM {rel.version} refuses to start: the model's max seq len "
                f"({inf.max_model_len}) is larger than the maximum number of tokens that can be "
                f"stored in KV cache ({stored})"
            )
        return None
    needed = -(-kv.request_bytes // block_bytes) * block_bytes
    if needed > pool:
        return (
            f"vLLM {rel.version} refuses to start: to serve one request of maxModelLen "
            f"{inf.max_model_len} tokens, {needed / GIB:.2f} GiB of KV cache is needed, more than "
            f"the available KV cache memory ({pool / GIB:.2f} GiB)"
        )
    return None
