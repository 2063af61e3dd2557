"""SGLang: ``--mem-fraction-static`` for weights and KV pool, the rest for activations. Pure.

Modeled from SGLang 0.5.23 (the wheel's ``sglang/srt`` sources):

- ``arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``: ``mem_fraction_static`` is
  "(model weights + KV cache pool) / GPU memory capacity". GPU memory capacity is NVML's total
  (``utils/common.py`` ``get_nvgpu_memory_capacity`` runs ``nvidia-smi
  --query-gpu=memory.total``, MiB). Its default, unless given:
  ``round((gpu_mem - reserved_mem) / gpu_mem, 3)`` with ``reserved_mem`` (MiB) = 512 +
  ``max(chunked_prefill_size, 2048) x 1.5`` + ``tp x pp / 8 x 1024`` + the graph reserve
  (``reserve_for_graph_mb``: decode ``max_bs x 2`` plus 8 per prefill CUDA graph size), at least
  10,240 on GPUs above 60 GiB.
- The same hook sets ``chunked_prefill_size`` and the decode CUDA graph ``max_bs`` by GPU memory
  (MiB): under 20 Gi 2048 / 8; under 35 Gi 4096 / 48 (160 from TP 4); under 60 Gi 4096 / 32
  (160 from TP 4); under 90 Gi and under 160 Gi 8192 / 256 (512 from TP 4); above 16384 / 512.
  ``max_bs`` is capped at ``--max-running-requests``. Prefill CUDA graphs (default backend
  "breakable" on CUDA) are captured for token counts up to ``chunked_prefill_size``
  (``cuda_graph_hook.py`` ``generate_prefill_cuda_graph_batch_sizes``).
- ``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``: the KV pool is the free
  memory after loading less ``pre_model_load_memory x (1 - mem_fraction_static)``, where
  ``pre_model_load_memory`` is the free memory measured after the distributed initialization.
  So weights + pool = ``mem_fraction_static x`` that free memory; activations and CUDA graphs must
  fit in the rest, else the server runs out of memory under load. A pool of zero or less refuses
  to start ("Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static").
  Tokens: ``pool // cell_size`` (page size 1).
- Post-capture KV sizing (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``) is off by default; not
  modeled.

Modeled from SGLang 0.4.10 (``srt/server_args.py`` ``ServerArgs.__post_init__``, 0.4.x): the
default ``mem_fraction_static`` is a table by parallel size (``tp x pp``): 0.88 alone, 0.87 from
2 GPUs, 0.85 from 4, 0.81 from 8, 0.79 from 16; on GPUs above 96 GiB it grows to ``min(f + 48 GiB
x (1 - f) / gpu_mem, (gpu_mem - 18 GiB) / gpu_mem)``. ``chunked_prefill_size`` is 2048 under
25,000 MiB of GPU memory, else 8192; ``cuda_graph_max_bs`` 8 under 25,000 MiB (80 from TP 4),
else 160; no prefill CUDA graphs. The pool is carved out the same way
(``model_runner.py`` ``profile_max_num_token``: free memory after loading less
``(1 - mem_fraction_static)`` of the free memory measured after the distributed initialization).

**Start-up rule** (both releases, ``model_runner.py`` ``init_memory_pool``): SGLang refuses only
when the pool holds no token ("Not enough memory. Please try to increase
--mem-fraction-static"). A pool shorter than ``--context-length`` starts; the scheduler then
refuses longer prompts (``max_req_input_len = min(context_len - 1, max_total_num_tokens - 1)``),
which the plan notes say. vLLM's "one full-length request must fit" is not SGLang's rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpu_sizer.api import GPUWorkloadSpec, KvCacheDtype
from gpu_sizer.budget.engines.common import (
    CUDA_CONTEXT_BYTES,
    GIB,
    MIB,
    EnginePlan,
    ServingFacts,
    choose_fraction,
    class_inputs,
    comm_group_bytes,
    engine_plan,
    graph_pool_bytes,
    kv_capacity,
    parallel_args,
    profile_activation_bytes,
)
from gpu_sizer.catalog import GPUClass

__all__ = ["RELEASES", "SglangRelease", "default_mem_fraction_static", "plan"]

#: Non-PyTorch memory of one prefill CUDA graph (``reserve_for_graph_mb``: 8 MiB each).
PREFILL_GRAPH_BYTES: Final = 8 * MIB


@dataclass(frozen=True)
class SglangRelease:
    """An SGLang release whose rules are modeled (see the module docstring)."""

    version: str
    #: 0.4.x's fixed ``mem_fraction_static`` table instead of 0.5's reserve by GPU size.
    fraction_table: bool = False


RELEASES: Final[tuple[SglangRelease, ...]] = (
    SglangRelease("0.5.23"),
    SglangRelease("0.4.10", fraction_table=True),
)


def _gpu_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA graph max_bs) for a GPU of ``gpu_mib`` MiB."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def _prefill_graph_sizes(max_bs: int) -> int:
    """Number of prefill CUDA graph token counts up to ``max_bs``."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return sum(1 for s in sizes if s <= max_bs)


def _settings_04(spec: GPUWorkloadSpec, gpu: GPUClass) -> tuple[int, int, int]:
    """0.4.x's (chunked prefill tokens, decode graph max batch, 0 prefill graphs) on ``gpu``."""
    inf = spec.inference
    assert inf is not None
    small = gpu.memory_bytes / MIB < 25_000
    chunk = 2048 if small else 8192
    decode_bs = (8 if inf.tensor_parallel_size < 4 else 80) if small else 160
    if inf.max_num_batched_tokens is not None:
        chunk = inf.max_num_batched_tokens
    decode_bs = min(decode_bs, inf.max_num_seqs)
    return chunk, 0 if inf.enforce_eager else decode_bs, 0


def _fraction_04(spec: GPUWorkloadSpec, gpu: GPUClass) -> float:
    """0.4.x's default ``mem_fraction_static`` (see the module docstring)."""
    inf = spec.inference
    assert inf is not None
    size = inf.tensor_parallel_size * inf.pipeline_parallel_size
    fraction = 0.79 if size >= 16 else 0.81 if size >= 8 else 0.85 if size >= 4 else 0.87 \
        if size >= 2 else 0.88  # fmt: skip
    gpu_mib = gpu.memory_bytes / MIB
    if gpu_mib > 96 * 1024:
        fraction = min(
            fraction + 48 * 1024 * (1 - fraction) / gpu_mib, (gpu_mib - 18 * 1024) / gpu_mib
        )
    return round(fraction, 3)


def _settings(
    spec: GPUWorkloadSpec, gpu: GPUClass, rel: SglangRelease | None = None
) -> tuple[int, int, int]:
    """(chunked prefill tokens, decode graph max batch, prefill graph count) on ``gpu``."""
    if rel is not None and rel.fraction_table:
        return _settings_04(spec, gpu)
    inf = spec.inference
    assert inf is not None
    chunk, decode_bs = _gpu_defaults(gpu.memory_bytes / MIB, inf.tensor_parallel_size)
    if inf.max_num_batched_tokens is not None:
        chunk = inf.max_num_batched_tokens
    decode_bs = min(decode_bs, inf.max_num_seqs)
    if inf.enforce_eager:
        return chunk, 0, 0
    return chunk, decode_bs, _prefill_graph_sizes(chunk)


def default_mem_fraction_static(
    spec: GPUWorkloadSpec, gpu: GPUClass, rel: SglangRelease | None = None
) -> float:
    """SGLang's own ``mem_fraction_static`` default on ``gpu`` (0.5: ``handle_gpu_memory_settings``;
    0.4: ``ServerArgs.__post_init__``'s table)."""
    if rel is not None and rel.fraction_table:
        return _fraction_04(spec, gpu)
    inf = spec.inference
    assert inf is not None
    gpu_mib = gpu.memory_bytes / MIB
    chunk, decode_bs, prefill_graphs = _settings(spec, gpu)
    reserved = 512 + max(chunk, 2048) * 1.5
    reserved += inf.tensor_parallel_size * inf.pipeline_parallel_size / 8 * 1024
    reserved += decode_bs * 2 + prefill_graphs * 8
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def plan(
    spec: GPUWorkloadSpec,
    facts: ServingFacts,
    gpu: GPUClass,
    rel: SglangRelease,
    headroom: float,
    fraction: float | None = None,
) -> EnginePlan:
    """What SGLang ``rel`` holds on one GPU of ``gpu`` for ``spec`` (see
    :func:`gpu_sizer.budget.engines.vllm.plan` for ``headroom``, and
    :class:`~gpu_sizer.budget.engines.common.Planner` for ``fraction``)."""
    inf = spec.inference
    assert inf is not None
    usable = gpu.usable
    quant, marlin_excess, kv_flag, kv, notes = class_inputs(spec, facts, gpu)
    chunk, decode_bs, prefill_graphs = _settings(spec, gpu, rel)
    acts = profile_activation_bytes(spec, facts, chunk, inf.max_num_seqs)
    graphs = graph_pool_bytes(facts, decode_bs) + prefill_graphs * PREFILL_GRAPH_BYTES
    outside = CUDA_CONTEXT_BYTES + facts.groups * comm_group_bytes(gpu)
    pre_load = usable - outside
    default = default_mem_fraction_static(spec, gpu, rel)
    dynamic = acts + graphs + marlin_excess
    given = inf.gpu_memory_utilization if fraction is None else fraction
    if given is not None:
        fraction, chosen = given, False
    else:
        fraction, chosen = choose_fraction(
            default, ((1 - headroom) * usable - outside - dynamic) / pre_load, 3
        )
    static = int(pre_load * fraction)
    weights = facts.weights + facts.rope_cache_bytes  # the cos/sin cache is built with the model
    # An unread release's margin (facts.margin_bytes) is in the activations outside the static
    # share and also out of the pool: what it allocates otherwise may sit on either side.
    pool = static - weights - quant - facts.margin_bytes
    tokens, _ = kv_capacity(pool, kv, 1)
    start_error = None
    runtime_error = None
    if pool <= 0:
        minimum = (weights + quant + facts.margin_bytes) / pre_load
        start_error = (
            f"SGLang {rel.version} refuses to start: loaded weights leave no GPU memory for the "
            f"KV cache under --mem-fraction-static={fraction:g} (raise it above {minimum:.3f})"
        )
    elif kv.token_bytes and tokens < inf.max_model_len:
        notes = (
            *notes,
            f"SGLang {rel.version} starts with a KV pool of {tokens:,} tokens, fewer than "
            f"--context-length {inf.max_model_len}: it refuses prompts longer than "
            f"{max(tokens - 1, 0):,} tokens (max_req_input_len)",
        )
    if start_error is None and dynamic > pre_load - static:
        runtime_error = (
            f"SGLang {rel.version} runs out of memory under load: activations "
            f"({acts / GIB:.2f} GiB for {chunk} prefill tokens) and CUDA graphs "
            f"({(graphs + marlin_excess) / GIB:.2f} GiB) exceed the "
            f"{(pre_load - static) / GIB:.2f} GiB that --mem-fraction-static={fraction:g} leaves "
            "outside weights and KV pool"
        )
    sglang_kv = {"auto": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
    args = {
        "--context-length": str(inf.max_model_len),
        "--max-running-requests": str(inf.max_num_seqs),
        "--mem-fraction-static": f"{fraction:g}",
        **parallel_args(spec, "--tp-size", "--pp-size"),
    }
    if inf.data_parallel_size > 1:
        args["--dp-size"] = str(inf.data_parallel_size)
    if inf.enable_expert_parallel:
        args["--ep-size"] = str(inf.tensor_parallel_size)
    if kv_flag != KvCacheDtype.auto.value:
        args["--kv-cache-dtype"] = sglang_kv[kv_flag]
    if inf.max_num_batched_tokens is not None:
        args["--chunked-prefill-size"] = str(inf.max_num_batched_tokens)
    if inf.enforce_eager:
        args["--disable-cuda-graph"] = "true"
    return engine_plan(
        gpu,
        inf,
        rel.version,
        facts,
        kv,
        fraction=fraction,
        fraction_default=default,
        fraction_chosen=chosen,
        weights=weights,
        quant=quant,
        activations=acts,
        pool=pool,
        runtime=outside + graphs + marlin_excess,
        max_num_batched_tokens=chunk,
        block_size=1,
        start_error=start_error,
        runtime_error=runtime_error,
        engine_args=args,
        notes=notes,
    )
