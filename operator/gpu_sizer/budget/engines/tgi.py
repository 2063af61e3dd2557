"""Text Generation Inference: the KV blocks it sizes from free memory after warm-up. Pure.

Modeled from TGI 3.3.7 (huggingface/text-generation-inference at tag v3.3.7):

- ``server/text_generation_server/models/flash_causal_lm.py`` ``FlashCausalLM.warmup``: after a
  warm-up forward of the largest prefill batch, ``free_memory = get_free_memory(device,
  MEMORY_FRACTION x TGI_WIGGLE_ROOM)`` with ``get_free_memory`` (``utils/import_utils.py``) =
  ``mem_get_info free - (1 - fraction) x total_memory``: everything the process holds (CUDA
  context, NCCL, weights, the warm-up's cached activations) counts inside
  ``MEMORY_FRACTION x 0.90 x total``. ``num_blocks = free_memory // block_bytes`` (+ the warm-up
  batch's blocks, which the free memory already excluded); the KV cache is then re-allocated
  with that many blocks, and CUDA graphs for batch sizes 1, 2, 4, 8, 16, 32 (launcher
  ``--cuda-graphs`` default) are captured after it: outside the fraction.
- ``MEMORY_FRACTION`` is ``--cuda-memory-fraction`` (launcher default 1.0, ``utils/dist.py``);
  ``TGI_WIGGLE_ROOM`` 0.90 (``models/globals.py``).
- ``BLOCK_SIZE`` (``models/globals.py``): 1 with the default ``flashinfer`` attention, 256 with
  ``flashdecoding`` (launcher ``resolve_attention``: head sizes other than 64/128/256, or falcon).
- The router (``backends/v3/src/lib.rs``) refuses to start when ``--max-total-tokens`` exceeds
  the blocks' tokens ("Not enough memory to handle `max_total_tokens`").
- ``--max-batch-prefill-tokens`` default (launcher ``main.rs``): the GPU's FP16 FLOPS (its table,
  times the shard count) over the model's FLOPs per token (``Config::flop``) when above 100, else
  4096; capped at ``max_position_embeddings`` and at what fits the launcher's own VRAM estimate
  (``vram_maximum``: NVML total x shards x fraction x 0.95 less ``model_vram``, over
  ``token_vram``; skipped for quantized models).
- No pipeline parallelism (shards are tensor-parallel only).

The pool is the wiggle room's share of the memory left *under the fraction*:
``num_blocks = free_memory x TGI_WIGGLE_ROOM // block_bytes + batch.num_blocks``, where
``free_memory = mem_get_info free - (1 - fraction) x total`` is what the fraction leaves after
everything the process holds (CUDA context, NCCL, weights, the warm-up's cached activations and
its own KV blocks, which are added back). So ``pool = 0.90 x (fraction x total - held) + warm-up
blocks``, not ``0.90 x fraction x total - held``: a 15 GiB model gets 1.5 GiB more pool than
the second form says.

Earlier releases (the tags' ``flash_causal_lm.py`` ``warmup``, ``models/globals.py`` and
``launcher/src/main.rs``), where the rules changed:

- 2.4.1: the same ``warmup`` arithmetic with ``TGI_WIGGLE_ROOM`` 0.90; the launcher's
  ``resolve_attention`` already defaults to flashinfer (1-token blocks), and
  ``--max-batch-prefill-tokens`` defaults to ``min(4096, max_position_embeddings)``.
- 2.3.1: ``TGI_WIGGLE_ROOM`` 0.95, flashinfer by default, prefill ``max_input_tokens + 50``.
- 2.0.4 (2.0 to 2.2): ``free_memory x 0.95`` hard-coded, paged attention (16-token blocks),
  prefill ``max_input_tokens + 50``, CUDA graphs 1..32 by default.
- 1.4.5 (1.4.2 to 1.4.5): ``x 0.95``, paged attention, prefill 4096, CUDA graphs only with
  ``ENABLE_CUDA_GRAPHS=true``.
- 1.4.0 (0.9.4, which first sized the KV cache from the free memory after warm-up, to 1.4.1):
  ``num_blocks = free_memory // block_bytes + warm-up blocks`` with no wiggle room, paged
  attention, prefill 4096, no CUDA graphs (huggingface/text-generation-inference#653: Llama-2-7b
  on an A10G "overwrites the max batch total tokens to 16224").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpu_sizer.api import GPUWorkloadSpec, KvCacheDtype
from gpu_sizer.budget.engines.common import (
    CUDA_CONTEXT_BYTES,
    GIB,
    EnginePlan,
    ServingFacts,
    choose_fraction,
    class_inputs,
    comm_group_bytes,
    engine_plan,
    graph_pool_bytes,
    kv_capacity,
    profile_activation_bytes,
)
from gpu_sizer.budget.runtime import allocator_reserve_bytes
from gpu_sizer.catalog import GPUClass

__all__ = ["RELEASES", "TgiRelease", "max_batch_prefill_tokens", "plan"]

#: ``TGI_WIGGLE_ROOM`` default in the server (``models/globals.py``).
WIGGLE_ROOM: Final = 0.90
#: The launcher's own wiggle room in ``ComputeType::vram``.
LAUNCHER_WIGGLE_ROOM: Final = 0.95
#: Largest default CUDA graph batch (``--cuda-graphs`` default 1,2,4,8,16,32).
CUDA_GRAPH_MAX_BATCH: Final = 32
#: Non-PyTorch memory of the server process besides its CUDA context (cuBLAS workspaces, kernels
#: loaded lazily): the figure vLLM logs for its PyTorch-based workers (vllm-project/vllm#12126).
NON_TORCH_BYTES: Final = round(0.16 * GIB)
#: ``ComputeType::f16_flop`` card table (FLOP/s), keyed by the lowercased nvidia-smi name with
#: dashes, which is what GFD's product label lowercased reads.
CARD_FLOPS: Final[dict[str, int]] = {
    "nvidia-l4": 121 * 10**12,
    "nvidia-l40s": 363 * 10**12,
    "nvidia-a10g": 125 * 10**12,
    "nvidia-h100-80gb-hbm3": 900 * 10**12,
    "nvidia-h100-nvl": 900 * 10**12,
    "nvidia-h100": 900 * 10**12,
    "nvidia-a100-sxm4-80gb": 312 * 10**12,
    "nvidia-a100-sxm4-40gb": 312 * 10**12,
    "nvidia-a100-80gb-pcie": 312 * 10**12,
    "nvidia-a100": 312 * 10**12,
    "nvidia-h200": 989 * 10**12,
}


@dataclass(frozen=True)
class TgiRelease:
    """A TGI release whose rules are modeled (see the module docstring)."""

    version: str
    #: Paged attention with 16-token blocks by default (before 2.3); else flashinfer (1 token).
    paged: bool = False
    #: The share of the free memory the KV blocks take (``TGI_WIGGLE_ROOM``; 0.95 hard-coded in
    #: 1.4.2-2.2; none before).
    wiggle: float = WIGGLE_ROOM
    #: ``--max-batch-prefill-tokens`` default: "flops" (3.x), "4096" (``min(4096,
    #: max_position_embeddings)``, 2.4), "input" (``max_input_tokens + 50``, 2.0-2.3),
    #: "fixed" (4096 whatever the model, 0.9-1.4).
    prefill_default: str = "flops"
    #: CUDA graphs captured by default (``--cuda-graphs`` 1,2,4,8,16,32 from 2.0; 1.4 only
    #: with ENABLE_CUDA_GRAPHS, none before).
    cuda_graphs: bool = True


RELEASES: Final[tuple[TgiRelease, ...]] = (
    TgiRelease("3.3.7"),
    TgiRelease("2.4.1", prefill_default="4096"),
    TgiRelease("2.3.1", wiggle=0.95, prefill_default="input"),
    TgiRelease("2.0.4", paged=True, wiggle=0.95, prefill_default="input"),
    TgiRelease("1.4.5", paged=True, wiggle=0.95, prefill_default="fixed", cuda_graphs=False),
    TgiRelease("1.4.0", paged=True, wiggle=1.0, prefill_default="fixed", cuda_graphs=False),
)


def block_size(spec: GPUWorkloadSpec, rel: TgiRelease | None = None) -> int:
    """Tokens per KV block: 1 (flashinfer, the launcher's default from 2.3) or 16 (paged
    attention before) unless the launcher falls back to flashdecoding (256: head sizes other than
    64/128/256, falcon)."""
    arch = spec.model.architecture
    assert arch is not None
    if arch.head_size not in (64, 128, 256) or arch.model_type == "falcon":
        return 256
    return 16 if rel is not None and rel.paged else 1


def max_batch_prefill_tokens(
    spec: GPUWorkloadSpec, gpu: GPUClass, fraction: float, rel: TgiRelease | None = None
) -> int:
    """The launcher's ``--max-batch-prefill-tokens`` default on ``gpu`` (or the spec's value)."""
    inf = spec.inference
    arch = spec.model.architecture
    assert inf is not None and arch is not None
    if inf.max_num_batched_tokens is not None:
        return inf.max_num_batched_tokens
    if rel is not None and rel.prefill_default == "input":
        return max(1, inf.max_model_len - 1) + 50
    if rel is not None and rel.prefill_default == "4096":
        return min(4096, arch.max_position_embeddings)
    if rel is not None and rel.prefill_default == "fixed":
        return 4096
    shards = inf.tensor_parallel_size
    heads, kv_heads, head = arch.num_attention_heads, arch.kv_heads, arch.head_size
    hidden, layers = arch.hidden_size, arch.num_hidden_layers
    inter = arch.moe_intermediate_size or arch.intermediate_size
    experts_per_tok = arch.num_experts_per_tok or 1
    attn = 2 * head * hidden * (3 * heads + 2 * kv_heads)
    model_flop = (attn + 6 * hidden * inter * experts_per_tok) * layers
    card = CARD_FLOPS.get(gpu.products[0].lower()) if gpu.products else None
    optimal = card * shards // model_flop if card else 0
    value = optimal if optimal > 100 else 4096
    value = min(value, arch.max_position_embeddings)
    if spec.model.quantization is None:
        experts = arch.num_local_experts or 1
        model_vram = 2 * (
            ((heads + 2 * kv_heads) * head + heads * head * hidden + 3 * inter * experts * hidden)
            * layers
            + 2 * hidden * arch.vocab_size
        )
        token_vram = kv_heads * 2 * head * 2 * layers + (inter + inter // 2) * experts * 2 * 3
        available = int(gpu.memory_bytes * shards * fraction * LAUNCHER_WIGGLE_ROOM)
        if available > model_vram:
            value = min(value, (available - model_vram) // token_vram)
    return max(1, value)


def plan(
    spec: GPUWorkloadSpec,
    facts: ServingFacts,
    gpu: GPUClass,
    rel: TgiRelease,
    headroom: float,
    fraction: float | None = None,
) -> EnginePlan:
    """What TGI ``rel`` holds on one GPU of ``gpu`` for ``spec`` (see
    :func:`gpu_sizer.budget.engines.vllm.plan` for ``headroom``, and
    :class:`~gpu_sizer.budget.engines.common.Planner` for ``fraction``)."""
    inf = spec.inference
    assert inf is not None
    usable = gpu.usable
    quant, marlin_excess, kv_flag, kv, notes = class_inputs(spec, facts, gpu)
    eager = inf.enforce_eager or not rel.cuda_graphs
    graphs = graph_pool_bytes(facts, 0 if eager else min(CUDA_GRAPH_MAX_BATCH, inf.max_num_seqs))
    beyond = graphs + marlin_excess
    inside = CUDA_CONTEXT_BYTES + facts.groups * comm_group_bytes(gpu) + NON_TORCH_BYTES
    block = block_size(spec, rel)

    def holds(fraction: float) -> tuple[int, int, int, int]:
        """(prefill tokens, warm-up activations, its KV blocks' bytes, all the process holds)."""
        prefill = max_batch_prefill_tokens(spec, gpu, fraction, rel)
        acts = profile_activation_bytes(spec, facts, prefill, inf.max_num_seqs)
        acts += allocator_reserve_bytes(acts)  # the warm-up's blocks stay reserved when measured
        warmup_kv = -(-prefill // block) * block * kv.token_bytes
        return prefill, acts, warmup_kv, inside + facts.weights + quant + acts + warmup_kv

    given = inf.gpu_memory_utilization if fraction is None else fraction
    if given is not None:
        fraction, chosen = given, False
    else:
        # footprint = 0.90 x fraction x usable + 0.10 x held + beyond (see the module docstring)
        held_at_default = holds(1.0)[3]
        fraction, chosen = choose_fraction(
            1.0,
            ((1 - headroom) * usable - beyond - (1 - rel.wiggle) * held_at_default)
            / (rel.wiggle * usable),
            2,
        )
    prefill, acts, warmup_kv, held = holds(fraction)
    budget = int(fraction * usable)
    pool = int(rel.wiggle * (budget - held)) + warmup_kv if budget > held else budget - held
    tokens, _ = kv_capacity(pool, kv, block)
    start_error = None
    if inf.pipeline_parallel_size > 1:
        start_error = "TGI has no pipeline parallelism (its shards are tensor-parallel only)"
    elif pool <= 0:
        start_error = (
            f"TGI {rel.version} refuses to start: not enough memory to handle {prefill} prefill "
            f"tokens within --cuda-memory-fraction {fraction:g} ({budget / GIB:.2f} GiB); "
            "decrease --max-batch-prefill-tokens"
        )
    elif inf.max_model_len > tokens:
        start_error = (
            f"TGI {rel.version} refuses to start: not enough memory to handle "
            f"`max_total_tokens={inf.max_model_len}` (the KV blocks hold {tokens} tokens)"
        )
    old_names = int(rel.version.split(".")[0]) < 2  # 1.x: --max-input-length
    args = {
        "--max-input-length" if old_names else "--max-input-tokens": str(
            max(1, inf.max_model_len - 1)
        ),
        "--max-total-tokens": str(inf.max_model_len),
        "--max-batch-prefill-tokens": str(prefill),
        "--cuda-memory-fraction": f"{fraction:g}",
    }
    if inf.tensor_parallel_size > 1:
        args["--num-shard"] = str(inf.tensor_parallel_size)
    if kv_flag != KvCacheDtype.auto.value:
        args["--kv-cache-dtype"] = "fp8_e5m2" if kv_flag == "fp8_e5m2" else "fp8_e4m3fn"
    if inf.enforce_eager:
        args["--cuda-graphs"] = "0"
    return engine_plan(
        gpu,
        inf,
        rel.version,
        facts,
        kv,
        fraction=fraction,
        fraction_default=1.0,
        fraction_chosen=chosen,
        weights=facts.weights,
        quant=quant,
        activations=acts,
        pool=pool,
        runtime=inside + beyond,
        max_num_batched_tokens=prefill,
        block_size=block,
        start_error=start_error,
        engine_args=args,
        notes=notes,
    )
