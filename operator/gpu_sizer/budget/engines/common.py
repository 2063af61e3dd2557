"""What the pre-allocating serving engines share. Pure.

vLLM, SGLang and TGI all take a fixed share of each GPU when they start and carve their KV cache
pool out of it; what differs is the share's definition and what they subtract first (their
modules say, version by version). This module holds what they have in common:

- :class:`ServingFacts`: the class-independent figures of one spec on its most loaded GPU
  (weights, activation bytes per token, KV geometry), computed once and reused for every GPU
  class the verdict tries;
- :func:`kv_demand`: what the engines read of the KV cache's shape
  (:func:`gpu_sizer.budget.kv_cache.kv_geometry`, by layer group): bytes per token of context
  and bytes one ``maxModelLen`` request holds (layers capped at a window or chunk count it
  only; state-space layers their fixed state);
- the memory outside an engine's own accounting: the CUDA context and the communication buffers
  of each tensor- or pipeline-parallel group (:data:`COMM_GROUP_BYTES`, calibrated below);
- the FP8 weight-only path of GPUs without FP8 tensor cores (:func:`fp8_weight_only`);
- :class:`EnginePlan`: what an engine will hold on one GPU class, the flags that make it so,
  and whether it starts.

Calibration of the communication buffers (bytes per GPU per parallel group): vLLM's
``non_torch_memory`` for Llama-3-8B on H100, logged in vllm-project/vllm#10511 under one
accounting, is 1.79 GiB at tensor-parallel size 1 and 3.58 GiB at size 2; the difference, 1.79 GiB,
is what one tensor-parallel group adds: NCCL communicators (vLLM opens two per group, PyTorch's
``ProcessGroupNCCL`` and its own ``PyNcclCommunicator``) and the custom all-reduce's IPC buffers.
vllm-project/vllm#25359 saw about 4.5 GiB of NCCL buffers per GPU on an 8-GPU H100 node (NVLink
SHARP buffers); that larger figure is not modeled (no tensor-parallel size is given with it).
SGLang and TGI open the same kind of communicators and are charged the same figure.

All figures are bytes per GPU unless named otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

from gpu_sizer.api import (
    DTYPE_BYTES,
    Architecture,
    Engine,
    GPUWorkloadSpec,
    Inference,
    KvCacheDtype,
    QuantizationMethod,
)
from gpu_sizer.budget.activations import (
    activation_token_elements,
    inference_activation_bytes,
)
from gpu_sizer.budget.kv_cache import (
    KvGeometry,
    kv_cache_bytes,
    kv_element_bytes,
    kv_geometry,
    state_element_bytes,
)
from gpu_sizer.budget.params import Layout
from gpu_sizer.budget.runtime import CUDA_CONTEXT_BYTES, CUDA_GRAPH_BASE_BYTES
from gpu_sizer.budget.weights import dequantization_workspace_bytes, weight_bytes
from gpu_sizer.catalog import GPUClass

__all__ = [
    "COMM_GROUP_BYTES",
    "CUDA_CONTEXT_BYTES",
    "GIB",
    "MARLIN_MOE_EXCESS_FACTOR",
    "MIB",
    "PCIE_COMM_GROUP_BYTES",
    "ClassInputs",
    "EnginePlan",
    "KvDemand",
    "Planner",
    "ServingFacts",
    "choose_fraction",
    "class_inputs",
    "comm_group_bytes",
    "communication_groups",
    "engine_plan",
    "fp8_weight_only",
    "graph_pool_bytes",
    "kv_capacity",
    "kv_demand",
    "pcie_only",
    "profile_activation_bytes",
    "rope_cache_bytes",
    "serving_facts",
]

GIB: Final = 1 << 30
MIB: Final = 1 << 20

#: Non-PyTorch memory of one tensor- or pipeline-parallel group per GPU (NCCL communicators and
#: all-reduce buffers) on NVLink / NVSwitch systems; calibrated on vllm-project/vllm#10511 (see the
#: module docstring).
COMM_GROUP_BYTES: Final = round(1.79 * GIB)
#: The same on GPUs joined by PCIe only. vLLM turns its custom all-reduce off there for more than
#: two GPUs (``custom_all_reduce.py``: "not supported on more than two PCIe-only GPUs") and NCCL
#: has no NVLink SHARP buffers to allocate, so a group costs NCCL's per-channel staging buffers:
#: vllm-project/vllm#22177 (vLLM 0.10.0 docker image, 8 PCIe Ampere 24 GB GPUs, TP 8, whose
#: communicators are inside the budget) leaves 0.06 GiB for them; rounded up to 0.25 GiB.
PCIE_COMM_GROUP_BYTES: Final = round(0.25 * GIB)


def pcie_only(gpu: GPUClass) -> bool:
    """Whether ``gpu``'s GPUs are joined by PCIe only, as its catalog ``interconnect`` says ("no
    NVLink", "pcie"). A class that may be SXM/HGX or has NVLink bridges is not: the larger figure
    (:data:`COMM_GROUP_BYTES`) is the safe side when the text cannot tell."""
    text = gpu.interconnect.lower()
    return "no nvlink" in text or text.strip() == "pcie"


def comm_group_bytes(gpu: GPUClass) -> int:
    """Non-PyTorch bytes one communication group holds per GPU of ``gpu``."""
    return PCIE_COMM_GROUP_BYTES if pcie_only(gpu) else COMM_GROUP_BYTES


#: Memory beyond vLLM's budget on GPUs without FP8 tensor cores when FP8 MoE experts run through
#: the fused Marlin MoE kernels, as a multiple of the expert weight bytes on the GPU. One public
#: report, vllm-project/vllm#22177 (Qwen3-Coder-30B-A3B, 8 Ampere GPUs of 24,564 MiB, expert
#: parallel): the BF16 checkpoint at --gpu-memory-utilization 0.85 held 22,457 MiB per GPU, the FP8
#: one OOMed at 0.85 and held 24,003 MiB at 0.70: with 0.10's accounting (communicators inside
#: the budget) the FP8 run holds 5.75 GiB beyond its budget more than the BF16 one, with 3.4 GiB
#: of FP8 experts per GPU. The source we read (vLLM 0.11.0 ``marlin_utils_fp8.py``) frees the FP8
#: originals after repacking, so the cause is not identified: a planning constant from that
#: report, applied to FP8 MoE experts on such GPUs only.
MARLIN_MOE_EXCESS_FACTOR: Final = 1.7


@dataclass(frozen=True)
class KvDemand:
    """The KV cache's shape on the most loaded GPU, as the engines' pools consume it.

    ``token_bytes``: one token of context in every attention layer the GPU holds, uncapped (what a
    block of the paged pool costs per token); ``request_bytes``: what one request of
    ``maxModelLen`` tokens holds (window- and chunk-capped layers count their cap; state-space
    layers their fixed state).
    """

    token_bytes: int
    request_bytes: int
    #: the layer groups both figures come from (engines that reserve per group read it).
    geometry: KvGeometry | None = None


@dataclass(frozen=True)
class ServingFacts:
    """Class-independent figures of one serving spec on its most loaded GPU (bytes).

    ``token_activation_bytes``: live activation bytes per token of a forward pass
    (:func:`gpu_sizer.budget.activations.activation_token_elements` times the activation width,
    what a captured CUDA graph holds per token); ``kv``: the KV demand with the spec's
    ``kvCacheDtype``, ``kv16``: with the model's 16-bit dtype (engines fall back to it where the GPU
    has no FP8 KV cache); ``marlin_scale_bytes``/``fp8_expert_bytes``: for the FP8 weight-only path
    (:func:`fp8_weight_only`); ``groups``: communicator groups the process joins
    (:func:`communication_groups`).
    """

    weights: int
    quant: int
    dequant_workspace: int
    token_activation_bytes: int
    kv: KvDemand
    kv16: KvDemand
    fp8_weights: bool
    marlin_scale_bytes: int
    fp8_expert_bytes: int
    groups: int
    act_bytes: int
    parameter_count: int
    #: bytes added to every profile/warm-up pass (and, on SGLang, taken out of the pool too) when
    #: the release lies outside the modeled rules (:func:`gpu_sizer.budget.engines.planner` sets
    #: it; the notes say so).
    margin_bytes: int = 0
    #: vLLM's MXFP4 MoE pads each expert's per-rank intermediate width to a multiple of 256
    #: (:func:`mxfp4_pad_bytes`): the bytes that padding adds on this GPU.
    mxfp4_pad_bytes: int = 0
    #: the rotary embedding's cos/sin cache (:func:`rope_cache_bytes`).
    rope_cache_bytes: int = 0


#: vLLM ``mxfp4.py`` ``Mxfp4MoEMethod.create_weights`` (0.10-0.19): the intermediate size per
#: partition is rounded up to a multiple of 256 for its Triton/FlashInfer kernels
#: (``round_up(intermediate_size_per_partition, 256)``); MXFP4 stores 4 bits and one 8-bit
#: scale per 32 elements. gpt-oss's 2880 becomes 3072: vllm-project/vllm#33155 and the llm-d
#: table log 64.38 GiB for gpt-oss-120b (the checkpoint holds 60.8 GiB) and 13.47 for -20b.
MXFP4_PAD: Final = 256


def mxfp4_pad_bytes(lay: Layout) -> int:
    """Bytes vLLM's MXFP4 expert padding adds to ``lay`` (see :data:`MXFP4_PAD`)."""
    total = 0.0
    for group in lay.groups:
        for lin in group.linears:
            if lin.copies <= 1 or lin.role not in ("gate", "up", "gate_up", "down"):
                continue
            fused = lin.role == "gate_up"
            width = lin.in_features if lin.role == "down" else lin.out_features // (1 + fused)
            other = lin.out_features if lin.role == "down" else lin.in_features
            pad = -(-width // MXFP4_PAD) * MXFP4_PAD - width
            total += group.count * lin.copies * pad * other * (1 + fused) * 4.25 / 8
    return int(total)


#: RoPE scaling types whose vLLM/SGLang cos/sin cache covers ``maxPositionEmbeddings x factor``
#: positions (``LinearScalingRotaryEmbedding``, ``DynamicNTKScalingRotaryEmbedding``,
#: ``YaRNScalingRotaryEmbedding``, ``DeepseekScalingRotaryEmbedding``); the others (none,
#: ``llama3``, ``longrope``'s short cache) cover ``maxPositionEmbeddings``.
_SCALED_ROPE_CACHE: Final = frozenset({"linear", "dynamic", "yarn", "deepseek_yarn"})


def rope_cache_bytes(arch: Architecture, act_bytes: int) -> int:
    """The rotary embedding's cos/sin cache the serving engine keeps on every GPU (bytes).

    vLLM ``rotary_embedding.py`` ``RotaryEmbedding.__init__`` (0.9 to 0.19; SGLang's copy of it
    likewise) computes ``cos_sin_cache`` for every position up to ``max_position_embeddings``
    (times the scaling factor for the types in :data:`_SCALED_ROPE_CACHE`; YaRN's from the
    original length, ``original_max_position x scaling_factor``), ``rotary_dim``
    values each, casts it to the model dtype and registers it as a buffer: it is allocated while
    the model is built, so vLLM's "Model loading took" includes it. One instance is shared by
    every layer (``get_rope`` caches them). Small for most models (Llama-3.1: 32 MiB), 2.5 GiB
    for Llama 4's 10M positions (llm-d-planner's vLLM 0.19.0 log of Llama-4-Scout at TP 4:
    53.12 GiB loaded for 50.68 GiB of parameters). ``rotary_dim`` is the head size (a partial
    rotary factor would shrink it: an upper bound), MLA's ``qkRopeHeadDim``.
    """
    positions = arch.max_position_embeddings
    scaling = arch.rope_scaling
    kind = (scaling.rope_type or "linear") if scaling is not None else None
    if scaling is not None and kind in _SCALED_ROPE_CACHE:
        if kind in ("yarn", "deepseek_yarn") and scaling.original_max_position_embeddings:
            # get_rope builds YaRN caches from the original length (YaRNScalingRotaryEmbedding,
            # DeepseekScalingRotaryEmbedding: original_max_position x scaling_factor)
            positions = scaling.original_max_position_embeddings
        positions = int(positions * scaling.factor)
    dim = arch.qk_rope_head_dim if arch.kv_lora_rank is not None else arch.head_size
    return positions * (dim or arch.head_size) * act_bytes


def kv_demand(spec: GPUWorkloadSpec, element_bytes: int) -> KvDemand:
    """What ``spec``'s KV cache costs per token and per ``maxModelLen`` request, with
    ``element_bytes`` per cached attention element, read from
    :func:`gpu_sizer.budget.kv_cache.kv_geometry` (its docstring gives the sources)."""
    arch = spec.model.architecture
    inf = spec.inference
    assert arch is not None and inf is not None
    geometry = kv_geometry(
        arch,
        element_bytes,
        inf.tensor_parallel_size,
        inf.pipeline_parallel_size,
        state_element_bytes(spec.model),
    )
    request, _ = kv_cache_bytes(geometry, inf.max_model_len, 1)
    return KvDemand(geometry.bytes_per_token, request, geometry)


def serving_facts(
    spec: GPUWorkloadSpec, lay: Layout, outer: int, parameter_count: int
) -> ServingFacts:
    """The class-independent figures of a serving ``spec`` with an architecture.

    :param lay: the most loaded rank's layout (its pipeline stage's layers); ``outer``: its
        parameters outside the layers (see :func:`gpu_sizer.budget.estimate.stage_outer_params`);
        ``parameter_count``: the whole model's.
    """
    arch = spec.model.architecture
    inf = spec.inference
    assert arch is not None and inf is not None
    model = spec.model
    weights, quant = weight_bytes(lay, model, outer)
    act_bytes = max(2, DTYPE_BYTES[model.dtype])
    tp = inf.tensor_parallel_size
    element = kv_element_bytes(model, inf)
    kv = kv_demand(spec, element)
    kv16 = kv if element >= 2 else kv_demand(spec, act_bytes)
    fp8 = model.quantization_method is QuantizationMethod.fp8
    scales = 0
    experts = 0
    if fp8:
        for group in lay.groups:
            for lin in group.linears:
                if lin.quantizable:
                    scales += group.count * lin.out_features * lin.copies * 2
                    if lin.copies > 1:
                        experts += group.count * lin.in_features * lin.out_features * lin.copies
    return ServingFacts(
        weights=weights,
        quant=quant,
        dequant_workspace=dequantization_workspace_bytes(lay, model.quantization, training=False),
        token_activation_bytes=activation_token_elements(arch, tp) * act_bytes,
        kv=kv,
        kv16=kv16,
        fp8_weights=fp8,
        marlin_scale_bytes=scales,
        fp8_expert_bytes=experts,
        groups=communication_groups(inf),
        act_bytes=act_bytes,
        parameter_count=parameter_count,
        mxfp4_pad_bytes=mxfp4_pad_bytes(lay)
        if model.quantization_method is QuantizationMethod.mxfp4
        else 0,
        rope_cache_bytes=rope_cache_bytes(arch, act_bytes),
    )


def generic_serving_facts(spec: GPUWorkloadSpec, weights: int, quant: int) -> ServingFacts:
    """:func:`serving_facts` of a family without a parameter layout (``budget.families``): the
    weights are ``spec.model.parameterCount`` split evenly over the GPUs (``weights``/``quant``,
    from :func:`gpu_sizer.budget.weights.flat_weight_bytes`), the KV cache and activations come
    from the architecture's attention geometry as for a known family. Without a layout the FP8
    weight-only path's per-channel scales and expert buffers are not counted (0)."""
    arch = spec.model.architecture
    inf = spec.inference
    assert arch is not None and inf is not None and spec.model.parameter_count is not None
    model = spec.model
    act_bytes = max(2, DTYPE_BYTES[model.dtype])
    element = kv_element_bytes(model, inf)
    kv = kv_demand(spec, element)
    return ServingFacts(
        weights=weights,
        quant=quant,
        dequant_workspace=0,
        token_activation_bytes=activation_token_elements(arch, inf.tensor_parallel_size)
        * act_bytes,
        kv=kv,
        kv16=kv if element >= 2 else kv_demand(spec, act_bytes),
        fp8_weights=model.quantization_method is QuantizationMethod.fp8,
        marlin_scale_bytes=0,
        fp8_expert_bytes=0,
        groups=communication_groups(inf),
        act_bytes=act_bytes,
        parameter_count=spec.model.parameter_count,
        rope_cache_bytes=rope_cache_bytes(arch, act_bytes),
    )


def communication_groups(inf: Inference) -> int:
    """Communicator groups of more than one rank a serving process joins: tensor parallel,
    pipeline parallel, and the data-parallel group of an engine run with ``dataParallelSize``
    above 1 (vLLM's DP group, and the expert-parallel group over tensor x data ranks that its MoE
    layers all-to-all over)."""
    return (
        (inf.tensor_parallel_size > 1)
        + (inf.pipeline_parallel_size > 1)
        + (inf.data_parallel_size > 1)
    )


_NO_NOTES: Final[list[str]] = []


def fp8_weight_only(facts: ServingFacts, gpu: GPUClass) -> tuple[int, int, list[str]]:
    """(quantization metadata, bytes beyond the engine's budget, notes) for FP8 weights on ``gpu``.

    On GPUs with FP8 tensor cores the checkpoint's FP8 weights are used as stored. Without them
    (compute capability below 8.9: A10G, A100, RTX A6000) vLLM's ``Fp8LinearMethod`` sets
    ``use_marlin`` (``not current_platform.has_device_capability(89)``) and
    ``prepare_fp8_layer_for_marlin`` repacks each weight into Marlin's layout (same one byte per
    weight) and turns its scale into one 16-bit scale per output channel
    (``marlin_utils_fp8.py``, vLLM 0.11.0); activations stay 16-bit; SGLang and TGI use the same
    Marlin FP8 kernels there. MoE experts go through ``fused_marlin_moe``; the memory it is
    observed to hold beyond the budget is :data:`MARLIN_MOE_EXCESS_FACTOR` times the FP8 expert
    bytes (a planning constant, see its comment).
    """
    if not facts.fp8_weights or gpu.native_fp8:
        return facts.quant, 0, _NO_NOTES
    excess = int(facts.fp8_expert_bytes * MARLIN_MOE_EXCESS_FACTOR)
    note = (
        f"{gpu.name} (compute capability {gpu.compute_capability}) has no FP8 tensor cores: the "
        "FP8 checkpoint runs weight-only through Marlin kernels (16-bit activations, one 16-bit "
        "scale per output channel) and the KV cache cannot be FP8 there"
    )
    notes = [note]
    if excess:
        notes.append(
            f"FP8 MoE experts through fused Marlin MoE on {gpu.name}: {excess / GIB:.1f} GiB "
            f"planned beyond the engine's budget ({MARLIN_MOE_EXCESS_FACTOR}x the expert weights, "
            "from vllm-project/vllm#22177)"
        )
    return facts.marlin_scale_bytes, excess, notes


def profile_activation_bytes(
    spec: GPUWorkloadSpec, facts: ServingFacts, tokens: int, rows: int
) -> int:
    """The engine's profile (or warm-up) forward pass of ``tokens`` tokens sampling ``rows`` rows:
    :func:`gpu_sizer.budget.activations.inference_activation_bytes` (decoder live set, sampler
    logits, a vision encoder's largest image) plus the dequantization workspace."""
    arch = spec.model.architecture
    inf = spec.inference
    assert arch is not None and inf is not None
    acts = inference_activation_bytes(arch, inf, facts.act_bytes, tokens, rows)
    return acts + facts.dequant_workspace + facts.margin_bytes


def graph_pool_bytes(facts: ServingFacts, batch: int) -> int:
    """CUDA graph pool for decode batches up to ``batch`` tokens (0: eager).

    As :mod:`gpu_sizer.budget.runtime`: a base for per-graph state and persistent input buffers
    plus the decode activations of the largest captured batch (graphs share one memory pool).
    """
    if batch <= 0:
        return 0
    return CUDA_GRAPH_BASE_BYTES + batch * facts.token_activation_bytes


def kv_capacity(pool: int, kv: KvDemand, block: int) -> tuple[int, float]:
    """(tokens, concurrency) a KV pool of ``pool`` bytes holds with ``block``-token pages.

    vLLM ``kv_cache_utils.py`` (0.11.0, 0.19.1): ``num_blocks = available_memory // page_size //
    num_layers``; it logs ``num_blocks x block_size`` tokens ("GPU KV cache size") and
    ``num_blocks / cdiv(max_memory_usage_per_request, memory_per_block)`` ("Maximum concurrency").
    With ``page_size`` per layer = ``block x`` the layer's bytes per token, that is
    ``pool // (block x token_bytes)`` blocks here. SGLang (page size 1) and TGI use the same
    arithmetic with their own block size.
    """
    if pool <= 0 or kv.request_bytes <= 0:
        return 0, 0.0
    if kv.token_bytes <= 0:  # state-space only: a fixed state per sequence, no token blocks
        return 0, pool / kv.request_bytes
    block_bytes = block * kv.token_bytes
    blocks = pool // block_bytes
    per_request = max(1, -(-kv.request_bytes // block_bytes))
    return blocks * block, blocks / per_request


def choose_fraction(default: float, usable_fraction: float, digits: int) -> tuple[float, bool]:
    """The fraction an engine is started with when the spec leaves it unset.

    ``usable_fraction`` is the largest value that still leaves the required headroom. Returns
    (value, whether it is below the engine's default): the default when it leaves the headroom,
    else the largest value rounded down to ``digits`` decimals (never below 0.01).
    """
    if usable_fraction >= default:
        return default, False
    scale = 10**digits
    return max(1, int(usable_fraction * scale)) / scale, True


class EnginePlan(NamedTuple):
    """What a pre-allocating engine holds on one GPU of ``gpu`` (bytes), and whether it starts.

    ``fraction`` is the engine flag's value (vLLM ``--gpu-memory-utilization``, SGLang
    ``--mem-fraction-static``, TGI ``--cuda-memory-fraction``); ``fraction_chosen`` is true when
    the spec left it unset and gpu-sizer picked it below the engine's default to leave the
    headroom. ``kv_pool`` is the KV cache pool; ``runtime`` the CUDA context, communication
    buffers, non-PyTorch memory and CUDA graph pool; ``total`` their sum with weights and
    activations: the engine's steady-state peak. ``start_error`` is the engine's own refusal (its
    message, its figures) when it would not start; ``runtime_error`` a configuration that starts
    but runs out of memory under load.
    """

    gpu: GPUClass
    engine: Engine
    version: str
    fraction: float
    fraction_default: float
    fraction_chosen: bool
    weights: int
    quant: int
    activations: int
    kv_pool: int
    runtime: int
    capacity_tokens: int
    max_concurrency: float
    max_num_batched_tokens: int
    parameter_count: int = 0
    kv_token_bytes: int = 0
    block_size: int = 16
    start_error: str | None = None
    runtime_error: str | None = None
    engine_args: dict[str, str] = {}  # noqa: RUF012 - never mutated: each plan builds its own
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        """The engine's peak on one GPU: every component."""
        return self.weights + self.quant + self.activations + self.kv_pool + self.runtime

    @property
    def headroom(self) -> float:
        """Share of the class's usable memory left free at :attr:`total`."""
        return (self.gpu.usable - self.total) / self.gpu.usable

    @property
    def error(self) -> str | None:
        """Why the engine cannot serve on this class, in the engine's terms, if it cannot."""
        return self.start_error or self.runtime_error


class Planner(Protocol):
    """What a spec's engine holds on one GPU of a class, as a function of the class and, for the
    fix search, of the engine's memory fraction.

    ``fraction`` stands in for ``spec.inference.gpuMemoryUtilization`` (vLLM's
    ``--gpu-memory-utilization``, SGLang's ``--mem-fraction-static``, TGI's
    ``--cuda-memory-fraction``); ``None`` is the spec's own (the flag as given, or chosen for the
    headroom when unset). Passing it, rather than planning a copy of the spec with the flag
    changed, lets one planner share what no fraction changes (the profile run's activations,
    the CUDA graph pool) across the many fractions a fix search plans."""

    def __call__(self, gpu: GPUClass, fraction: float | None = None) -> EnginePlan: ...


def engine_plan(
    gpu: GPUClass,
    inf: Inference,
    version: str,
    facts: ServingFacts,
    kv: KvDemand,
    *,
    fraction: float,
    fraction_default: float,
    fraction_chosen: bool,
    weights: int,
    quant: int,
    activations: int,
    pool: int,
    runtime: int,
    max_num_batched_tokens: int,
    block_size: int,
    start_error: str | None,
    runtime_error: str | None = None,
    engine_args: dict[str, str],
    notes: tuple[str, ...],
) -> EnginePlan:
    """The plan of an engine that pre-allocates a KV pool of ``pool`` bytes in ``block_size``-
    token pages, as each engine's model computes its parts.

    A pool at or below zero is the engine's refusal to start (its ``start_error``), not a size:
    the plan holds an empty pool then. An engine that does not start serves nothing, so its
    capacity and concurrency are zero whatever the pool; otherwise they are :func:`kv_capacity`'s.
    """
    tokens, concurrency = (0, 0.0) if start_error else kv_capacity(pool, kv, block_size)
    return EnginePlan(
        gpu=gpu,
        engine=inf.engine,
        version=version,
        fraction=fraction,
        fraction_default=fraction_default,
        fraction_chosen=fraction_chosen,
        weights=weights,
        quant=quant,
        activations=activations,
        kv_pool=max(pool, 0),
        runtime=runtime,
        capacity_tokens=tokens,
        max_concurrency=concurrency,
        max_num_batched_tokens=max_num_batched_tokens,
        parameter_count=facts.parameter_count,
        kv_token_bytes=kv.token_bytes,
        block_size=block_size,
        start_error=start_error,
        runtime_error=runtime_error,
        engine_args=engine_args,
        notes=notes,
    )


class ClassInputs(NamedTuple):
    """What an engine's plan takes from the class besides its memory: the quantization metadata
    and memory beyond the budget of the FP8 path (:func:`fp8_weight_only`), the
    ``--kv-cache-dtype`` value and the KV shape it gives, and the notes saying why."""

    quant: int
    beyond: int
    kv_flag: str
    kv: KvDemand
    notes: tuple[str, ...]


def class_inputs(spec: GPUWorkloadSpec, facts: ServingFacts, gpu: GPUClass) -> ClassInputs:
    """:class:`ClassInputs` of ``spec`` on ``gpu``."""
    inf = spec.inference
    assert inf is not None
    quant, beyond, notes = fp8_weight_only(facts, gpu)
    kv_flag, kv_notes = kv_cache_dtype_flag(spec, gpu)
    kv = facts.kv if kv_flag == inf.kv_cache_dtype.value else facts.kv16
    return ClassInputs(quant, beyond, kv_flag, kv, (*notes, *kv_notes))


def kv_cache_dtype_flag(spec: GPUWorkloadSpec, gpu: GPUClass) -> tuple[str, list[str]]:
    """The ``--kv-cache-dtype`` value for ``gpu`` and a note when FP8 must fall back."""
    inf = spec.inference
    assert inf is not None
    if inf.kv_cache_dtype is KvCacheDtype.auto:
        return "auto", _NO_NOTES
    value = inf.kv_cache_dtype.value
    if not gpu.native_fp8:
        return "auto", [
            f"kvCacheDtype {value} on {gpu.name} (compute capability {gpu.compute_capability}, "
            "no FP8 tensor cores): sized as a 16-bit cache"
        ]
    return value, _NO_NOTES


def parallel_args(spec: GPUWorkloadSpec, tp_flag: str, pp_flag: str | None) -> dict[str, str]:
    """Tensor/pipeline-parallel flags, only those that differ from 1."""
    inf = spec.inference
    assert inf is not None
    out: dict[str, str] = {}
    if inf.tensor_parallel_size > 1:
        out[tp_flag] = str(inf.tensor_parallel_size)
    if pp_flag and inf.pipeline_parallel_size > 1:
        out[pp_flag] = str(inf.pipeline_parallel_size)
    return out
