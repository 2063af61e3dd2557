"""Assemble the per-GPU memory budget of a spec. Pure.

:func:`estimate` is the memory model's single entry point: the webhook, the CLI and the controller
all read their figures from it (through ``gpu_sizer.sizing.verdict.assess``). It adds up independent
components on the most loaded GPU of one replica:

- inference: weights (+ quantization metadata), KV cache, activations of the largest forward pass,
  runtime overhead (CUDA context, cuBLAS, CUDA graph pool, NCCL, allocator reserve);
- training: weights, gradients, optimizer state, master weights, activations and logits, runtime
  overhead.

``gpuCount`` counts only the parallelism the spec declares (tensor x pipeline for inference;
data x tensor x pipeline for training): the model never invents sharding.

Without ``spec.model.architecture`` only ``parameterCount`` is known: weights are exact for
unquantized dtypes, model states are exact for full training, but the KV cache and activations
depend on the shape: they are reported as 0 and listed in ``missingComponents``
(``budget.missing``), which makes the estimate a lower bound that never reads as a fit; quantized
weights are approximated (metadata as for 4096-wide rows) and tensor/pipeline splits are taken as
even (both in ``notes``).

A ``modelType`` without a parameter layout here (any model ``transformers`` builds; ``gpu-sizer
import-hf-config`` writes its geometry and counts its parameters on the meta device) comes with
``parameterCount``: weights and model states as above, and the KV cache and activations from the
architecture's attention geometry, as for a known family (``budget.families.GENERIC``). Nothing
is missing then; the weights' split and a quantized format's metadata are approximate (``notes``).
All figures are bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpu_sizer.api import (
    DTYPE_BYTES,
    Architecture,
    Engine,
    EstimateStatus,
    FinetuningMethod,
    GPUWorkloadSpec,
    Inference,
    Initialization,
    MissingComponent,
    Optimizer,
    ParallelStrategy,
    PeakPhase,
    PerGpuBreakdown,
    PhaseEstimate,
    TrainingFramework,
)
from gpu_sizer.budget import engines
from gpu_sizer.budget.activations import (
    activation_token_elements,
    inference_activation_bytes,
    prefill_tokens,
)
from gpu_sizer.budget.diffusion import diffusion_estimate
from gpu_sizer.budget.engines import EnginePlan, ServingFacts, models_pool, serving_facts
from gpu_sizer.budget.engines.common import COMM_GROUP_BYTES, generic_serving_facts
from gpu_sizer.budget.families import FAMILIES
from gpu_sizer.budget.generic_weights import serving_weight_bytes
from gpu_sizer.budget.kv_cache import (
    kv_cache_bytes,
    kv_element_bytes,
    kv_geometry,
    state_element_bytes,
)
from gpu_sizer.budget.missing import missing_without_architecture
from gpu_sizer.budget.params import Layout, geometry_layout, layout, stage_layers
from gpu_sizer.budget.runtime import (
    CUDA_GRAPH_BASE_BYTES,
    allocator_reserve_bytes,
    base_overhead_bytes,
    cuda_graph_batch,
)
from gpu_sizer.budget.training import (
    TrainingBudget,
    autocast_copy_bytes,
    flat_holdings,
    phases,
    step_activation_bytes,
    trainable_parameter_count,
    training_budget,
)
from gpu_sizer.budget.training_hf import version_notes
from gpu_sizer.budget.training_load import either_hf_fsdp_path
from gpu_sizer.budget.weights import (
    dequantization_workspace_bytes,
    flat_weight_bytes,
    weight_bytes,
)
from gpu_sizer.catalog import GPUClass

__all__ = [
    "engine_planner",
    "engine_plans",
    "estimate",
    "expert_split",
    "parallel_groups",
    "plan_estimate",
    "stage_outer_params",
]

GIB = 1 << 30

_NO_ARCH = "without spec.model.architecture"


def stage_outer_params(lay: Layout, pp: int, proj: int) -> int:
    """Parameters outside the decoder layers on the most loaded pipeline stage.

    One stage holds everything; with stages, the first holds the embedding, the last lm_head and
    the final norm, and a tied lm_head is a copy of the embedding there (vLLM and Megatron-LM
    keep a separate output matrix on the last stage). A vision encoder is on every stage (vLLM
    builds it on each).

    :param proj: lm_head input width (``wordEmbedProjDim`` for OPT, else ``hiddenSize``).
    """
    if pp == 1:
        return lay.embedding + lay.head + lay.encoder
    last = lay.head + (lay.vocab * proj if lay.tied else 0)
    return max(lay.embedding, last) + lay.encoder


def _rank_layout(spec: GPUWorkloadSpec) -> tuple[Layout, Layout, int]:
    """(whole model, the most loaded rank's layout, its parameters outside the layers)."""
    arch = spec.model.architecture
    assert arch is not None
    inf = spec.inference
    if inf is not None:
        tp, pp = inf.tensor_parallel_size, inf.pipeline_parallel_size
    else:
        assert spec.training is not None
        par = spec.training.parallelism
        tp, pp = par.tensor_parallel_size, par.pipeline_parallel_size
    whole = layout(arch)
    split = expert_split(spec)
    if tp == 1 and pp == 1 and split is None:
        lay = whole
    else:
        lay = layout(arch, tp, stage_layers(arch, pp), split)
    outer = stage_outer_params(lay, pp, arch.word_embed_proj_dim or arch.hidden_size)
    return whole, lay, outer


def expert_split(spec: GPUWorkloadSpec) -> tuple[int, int] | None:
    """How an inference spec's routed experts are split (see
    :func:`gpu_sizer.budget.params.layout`): vLLM's expert group spans the data x tensor
    parallel ranks (``FusedMoE``: ``ep_size = dp x tp`` with --enable-expert-parallel, else each
    expert's width over them); SGLang's ``--dp`` replicas each hold tensor-parallel experts
    (``--ep-size`` = ``--tp`` with expert parallelism). ``None``: plain tensor parallelism."""
    inf = spec.inference
    arch = spec.model.architecture
    if inf is None or arch is None or arch.experts is None:
        return None
    if inf.data_parallel_size == 1 and not inf.enable_expert_parallel:
        return None
    ranks = inf.tensor_parallel_size
    if inf.engine is Engine.vllm:
        ranks *= inf.data_parallel_size
    return (1, ranks) if inf.enable_expert_parallel else (ranks, 1)


def engine_planner(spec: GPUWorkloadSpec, headroom: float) -> engines.Planner:
    """What the spec's pre-allocating engine holds on one GPU of a class, as a function of the
    class and, for the fix search, of the engine's fraction (:class:`engines.Planner`; the
    model's figures are computed once).

    ``headroom`` is the share of usable memory the engine's fraction must leave free when the spec
    leaves ``gpuMemoryUtilization`` unset. Requires ``spec.model.architecture`` and a
    pre-allocating engine (:func:`gpu_sizer.budget.engines.is_pre_allocating`).
    """
    return engines.planner(spec, _serving_facts(spec), headroom)


#: Serving facts by (model, inference), both frozen: the verdict plans the same spec on many
#: classes and its fixes re-plan variants of it. Bounded: cleared when full.
_FACTS: dict[tuple[object, object], ServingFacts] = {}
_FACTS_MAX = 1024


def _serving_facts(spec: GPUWorkloadSpec) -> ServingFacts:
    key = (spec.model, spec.inference)
    facts = _FACTS.get(key)
    if facts is None:
        arch = spec.model.architecture
        inf = spec.inference
        assert arch is not None and inf is not None
        if arch.model_type in FAMILIES:
            whole, lay, outer = _rank_layout(spec)
            facts = serving_facts(spec, lay, outer, whole.total)
        else:
            tp, pp = inf.tensor_parallel_size, inf.pipeline_parallel_size
            facts = generic_serving_facts(spec, *serving_weight_bytes(spec.model, arch, tp, pp))
        if len(_FACTS) >= _FACTS_MAX:
            _FACTS.clear()
        _FACTS[key] = facts
    return facts


def engine_plans(
    spec: GPUWorkloadSpec, classes: Sequence[GPUClass], headroom: float
) -> list[EnginePlan]:
    """:func:`engine_planner` on each class of ``classes``, in order."""
    on = engine_planner(spec, headroom)
    return [on(cls) for cls in classes]


def plan_estimate(spec: GPUWorkloadSpec, plan: EnginePlan) -> EstimateStatus:
    """``status.estimate`` for a pre-allocating engine on ``plan.gpu``: what the engine holds
    (the KV pool as the KV cache), its KV capacity and concurrency."""
    inf = spec.inference
    assert inf is not None
    params = plan.parameter_count
    notes = list(plan.notes)
    arch = spec.model.architecture
    if arch is not None and arch.model_type not in FAMILIES:
        if inf.pipeline_parallel_size > 1:
            notes.insert(0, _generic_stage_note(arch, inf.pipeline_parallel_size))
        notes.insert(0, _generic_note(arch.model_type))
    if spec.model.parameter_count is not None and spec.model.parameter_count != params:
        notes.insert(0, _count_note(spec.model.parameter_count, params))
    if plan.fraction_chosen:
        notes.append(
            f"gpuMemoryUtilization unset: {plan.fraction:g} on {plan.gpu.name} (the engine's "
            f"default {plan.fraction_default:g} would leave less than "
            f"{spec.placement.min_headroom_fraction:.0%} of it free); see "
            "status.recommendation.engineArgs"
        )
    return EstimateStatus(
        parameter_count=params,
        gpu_count=spec.gpu_count,
        kv_cache_bytes_per_token=plan.kv_token_bytes,
        kv_cache_tokens=plan.capacity_tokens,
        kv_cache_capacity_tokens=plan.capacity_tokens,
        max_concurrency=round(plan.max_concurrency, 2),
        gpu_class=plan.gpu.name,
        engine_version=f"{inf.engine.value} {plan.version}",
        per_gpu=_breakdown(
            plan.weights, plan.quant, plan.kv_pool, plan.activations, 0, 0, 0, plan.runtime
        ),
        notes=notes,
    )


def estimate(spec: GPUWorkloadSpec, gpu_class: GPUClass | None = None) -> EstimateStatus:
    """Per-GPU memory budget of ``spec`` in bytes, on the most loaded GPU of one replica.

    Every ``PerGpuBreakdown`` field is filled and ``totalBytes`` is their sum; a component the
    spec does not give enough to count is 0 and named in ``missingComponents``. Never raises for
    a spec that passed validation.

    Pre-allocating serving engines (vLLM, SGLang, TGI) hold what their fraction of the GPU allows:
    with ``gpu_class`` the figures are the engine's on that class (:func:`plan_estimate`); without
    it, the class-independent demand: what serving ``targetConcurrency`` requests of
    ``maxModelLen`` tokens needs (the smallest pool the verdict accepts). Image and video
    generation (``spec.generation``) is sized phase by phase in
    :mod:`gpu_sizer.budget.diffusion`, the same on every class.
    """
    if spec.generation is not None:
        return diffusion_estimate(spec)
    arch = spec.model.architecture
    inf = spec.inference
    if gpu_class is not None and models_pool(spec):
        headroom = spec.placement.min_headroom_fraction
        return plan_estimate(spec, engine_plans(spec, [gpu_class], headroom)[0])
    if arch is None or arch.model_type not in FAMILIES:
        return _estimate_from_parameter_count(spec, arch)
    whole, lay, outer = _rank_layout(spec)
    if inf is not None:
        tp, pp = inf.tensor_parallel_size, inf.pipeline_parallel_size
    else:
        assert spec.training is not None
        par = spec.training.parallelism
        tp, pp = par.tensor_parallel_size, par.pipeline_parallel_size
    notes: list[str] = []
    params = whole.total
    if spec.model.parameter_count is not None and spec.model.parameter_count != params:
        notes.append(_count_note(spec.model.parameter_count, params))
    if inf is not None:
        weights, quant = weight_bytes(lay, spec.model, outer)
        per_token, kv, kv_tokens = _kv_cache(spec, inf, arch, tp, pp)
        act_bytes = max(2, DTYPE_BYTES[spec.model.dtype])
        acts = inference_activation_bytes(
            arch, inf, act_bytes, prefill_tokens(inf), inf.max_num_seqs
        ) + dequantization_workspace_bytes(lay, spec.model.quantization, training=False)
        batch = cuda_graph_batch(inf.engine, inf.max_num_seqs, inf.enforce_eager)
        graphs = _graph_pool_bytes(arch, tp, act_bytes, batch)
        groups = (tp > 1) + (pp > 1)
        comm = groups * COMM_GROUP_BYTES
        runtime = base_overhead_bytes(0) + comm + graphs + allocator_reserve_bytes(acts)
        breakdown = _breakdown(weights, quant, kv, acts, 0, 0, 0, runtime)
        return EstimateStatus(
            parameter_count=params,
            gpu_count=spec.gpu_count,
            kv_cache_bytes_per_token=per_token,
            kv_cache_tokens=kv_tokens,
            per_gpu=breakdown,
            notes=notes,
        )
    tr = spec.training
    assert tr is not None
    if spec.model.quantization is not None and tr.finetuning.method is FinetuningMethod.full:
        notes.append(
            "full fine-tuning trains dense weights: spec.model.quantization is ignored "
            "(use lora or qlora to train adapters on a quantized base)"
        )
    tb = training_budget(spec, lay, outer)
    return _training_estimate(spec, tb, params, trainable_parameter_count(whole, tr), notes)


def _kv_cache(
    spec: GPUWorkloadSpec, inf: Inference, arch: Architecture, tp: int, pp: int
) -> tuple[int, int, int]:
    """The KV cache of the most loaded GPU, before any GPU class is known: (bytes per token,
    bytes, tokens).

    An engine that pre-allocates a pool (:func:`models_pool`) sizes the pool per class; what the
    workload demands of it, whatever the class, is ``targetConcurrency`` requests of
    ``maxModelLen`` tokens. Otherwise the cache grows with the batch: ``maxNumSeqs`` sequences of
    ``maxModelLen`` tokens (:func:`gpu_sizer.budget.kv_cache.kv_cache_bytes`).
    """
    element = kv_element_bytes(spec.model, inf)
    geometry = kv_geometry(arch, element, tp, pp, state_element_bytes(spec.model))
    if models_pool(spec):
        request, _ = kv_cache_bytes(geometry, inf.max_model_len, 1)
        kv = math.ceil((inf.target_concurrency or 1.0) * request)
        kv_tokens = math.ceil((inf.target_concurrency or 1.0) * inf.max_model_len)
    else:
        kv, kv_tokens = kv_cache_bytes(geometry, inf.max_model_len, inf.max_num_seqs)
    return geometry.bytes_per_token, kv, kv_tokens


def _graph_pool_bytes(arch: Architecture, tp: int, act_bytes: int, batch: int) -> int:
    """Bytes of the CUDA graph pool captured up to ``batch`` sequences (0: no graphs): the base
    pool plus one decode token's activations per captured sequence."""
    if not batch:
        return 0
    return CUDA_GRAPH_BASE_BYTES + batch * activation_token_elements(arch, tp) * act_bytes


def _generic_note(model_type: str) -> str:
    return (
        f"model type {model_type!r} has no parameter layout here: weights come from "
        "spec.model.parameterCount, the KV cache and activations from the architecture's "
        "attention geometry (layerTypes, slidingWindow, kvLoraRank; MLP taken as gated)"
    )


def _generic_stage_note(arch: Architecture, pp: int) -> str:
    """How a family without a layout is split over pipeline stages (``generic_weights``)."""
    stage = -(-arch.num_hidden_layers // pp)
    return (
        f"weights of the most loaded of {pp} pipeline stages, an upper bound: {stage} of "
        f"{arch.num_hidden_layers} layers' share of parameterCount plus a whole embedding "
        "table (vocabSize x hiddenSize)"
    )


def _count_note(given: int, counted: int) -> str:
    return (
        f"spec.model.parameterCount {given} differs from the {counted} parameters of "
        "spec.model.architecture; the architecture's count is used"
    )


def _breakdown(
    weights: int,
    quant: int,
    kv: int,
    acts: int,
    grads: int,
    opt: int,
    master: int,
    runtime: int,
    comm: int = 0,
) -> PerGpuBreakdown:
    return PerGpuBreakdown(
        weights_bytes=weights,
        quantization_overhead_bytes=quant,
        kv_cache_bytes=kv,
        activation_bytes=acts,
        gradient_bytes=grads,
        optimizer_state_bytes=opt,
        master_weight_bytes=master,
        communication_buffer_bytes=comm,
        runtime_overhead_bytes=runtime,
        total_bytes=weights + quant + kv + acts + grads + opt + master + comm + runtime,
    )


def _estimate_from_parameter_count(
    spec: GPUWorkloadSpec, arch: Architecture | None
) -> EstimateStatus:
    """Weights and model states from ``parameterCount``; the KV cache and activations from
    ``arch``'s attention geometry when there is one (a family without a parameter layout), else
    listed in ``missingComponents`` (see the module docstring)."""
    params = spec.model.parameter_count
    assert params is not None
    why = _NO_ARCH if arch is None else f"for model type {arch.model_type!r}"
    notes: list[str] = []
    if arch is not None:
        notes.append(_generic_note(arch.model_type))
    if spec.model.quantization is not None:
        notes.append(
            f"quantized weights are approximate {why}: every parameter is taken as "
            "quantized (embeddings, lm_head and norms stay 16-bit in real checkpoints)"
            if arch is None or spec.inference is None
            else f"quantized weights are approximate {why}: the embedding and lm_head "
            "(vocabSize x hiddenSize each, one if tieWordEmbeddings) are counted at "
            f"{spec.model.dtype.value}, every other parameter as quantized"
        )
    missing = missing_without_architecture(spec) if arch is None else []
    inf = spec.inference
    if inf is not None:
        tp, pp = inf.tensor_parallel_size, inf.pipeline_parallel_size
        if arch is None:
            weights, quant = flat_weight_bytes(-(-params // (tp * pp)), spec.model)
            if tp * pp > 1:
                notes.append(f"weights split evenly over {tp * pp} GPUs {why}")
        else:
            weights, quant = serving_weight_bytes(spec.model, arch, tp, pp)
            if pp > 1:
                notes.append(_generic_stage_note(arch, pp))
        batch = cuda_graph_batch(inf.engine, inf.max_num_seqs, inf.enforce_eager)
        # non-torch memory of each parallel group: NCCL communicators and all-reduce buffers
        # (engines.common.COMM_GROUP_BYTES)
        comm = ((tp > 1) + (pp > 1)) * COMM_GROUP_BYTES
        if arch is None:
            runtime = base_overhead_bytes(0) + comm + (CUDA_GRAPH_BASE_BYTES if batch else 0)
            return EstimateStatus(
                parameter_count=params,
                gpu_count=spec.gpu_count,
                kv_cache_bytes_per_token=0,
                kv_cache_tokens=0,
                per_gpu=_breakdown(weights, quant, 0, 0, 0, 0, 0, runtime),
                notes=notes,
                missing_components=missing,
            )
        per_token, kv, kv_tokens = _kv_cache(spec, inf, arch, tp, pp)
        act_bytes = max(2, DTYPE_BYTES[spec.model.dtype])
        acts = inference_activation_bytes(
            arch, inf, act_bytes, prefill_tokens(inf), inf.max_num_seqs
        )
        graphs = _graph_pool_bytes(arch, tp, act_bytes, batch)
        runtime = base_overhead_bytes(0) + comm + graphs + allocator_reserve_bytes(acts)
        return EstimateStatus(
            parameter_count=params,
            gpu_count=spec.gpu_count,
            kv_cache_bytes_per_token=per_token,
            kv_cache_tokens=kv_tokens,
            per_gpu=_breakdown(weights, quant, kv, acts, 0, 0, 0, runtime),
            notes=notes,
        )
    tr = spec.training
    assert tr is not None
    par = tr.parallelism
    tp, pp = par.tensor_parallel_size, par.pipeline_parallel_size
    shard = -(-params // (tp * pp))
    if tr.finetuning.method is not FinetuningMethod.full:
        notes.append(
            f"{tr.finetuning.method.value} adapters are not laid out {why}: every parameter is "
            "counted as trained (gradients and optimizer state), an upper bound"
        )
    if tr.optimizer is Optimizer.adafactor:
        notes.append(f"Adafactor's factored state taken as unfactored {why}")
    if tp * pp > 1:
        notes.append(f"parameters split evenly over {tp * pp} model-parallel GPUs {why}")
    if par.strategy in _GATHERING:
        notes.append(f"the units {par.strategy.value} gathers for compute are not computed {why}")
    acts = 0
    if arch is not None:
        stage = geometry_layout(arch, tp, range(-(-arch.num_hidden_layers // pp)))
        outer = stage_outer_params(stage, pp, arch.word_embed_proj_dim or arch.hidden_size)
        acts = step_activation_bytes(spec, arch, stage, outer) + autocast_copy_bytes(
            spec, stage, outer
        )
    tb = phases(spec, flat_holdings(spec, shard), acts)
    return _training_estimate(spec, tb, params, params, notes, missing)


#: Strategies whose gathered working set needs the layout (ZeRO-3 is bounded by its
#: ``stage3_max_live_parameters`` and is computed without it).
_GATHERING = frozenset(
    {
        ParallelStrategy.fsdp_full_shard,
        ParallelStrategy.fsdp_shard_grad_op,
        ParallelStrategy.fsdp_hybrid_shard,
    }
)


def parallel_groups(spec: GPUWorkloadSpec) -> int:
    """NCCL communicators a training rank joins: data (and, for hybrid sharding, replica),
    tensor, pipeline and context parallel groups of more than one rank."""
    assert spec.training is not None
    par = spec.training.parallelism
    data = par.strategy is not ParallelStrategy.none and par.data_parallel_size > 1
    hybrid = par.strategy is ParallelStrategy.fsdp_hybrid_shard and data
    return (
        data
        + hybrid
        + (par.tensor_parallel_size > 1)
        + (par.pipeline_parallel_size > 1)
        + (par.context_parallel_size > 1)
    )


def _training_estimate(
    spec: GPUWorkloadSpec,
    tb: TrainingBudget,
    params: int,
    trainable: int,
    notes: list[str],
    missing: list[MissingComponent] | None = None,
) -> EstimateStatus:
    """The status of a training budget: the larger phase in ``perGpu``, both in ``phases``."""
    assert spec.training is not None
    notes = [*notes, *version_notes(spec.training)]
    tr = spec.training
    if tr.framework is TrainingFramework.custom and tr.initialization is Initialization.Auto:
        notes.append(
            "framework custom: its loading path is not modelled; the Load phase is taken at its "
            "worst (every rank materialises the model on its GPU), an upper bound: set "
            "spec.training.initialization to what the loop does"
        )
    q = spec.model.quantization
    if either_hf_fsdp_path(tr) and not (
        q is not None and q.method.value.startswith("bitsandbytes")
    ):
        notes.append(
            "transformers + FSDP, initialization Auto: the Load phase counts both loading paths "
            "(TRL's trainers given a model name load it with device_map 'auto', a whole copy per "
            "process over the node's GPUs; the Trainer given a model loads one copy per process "
            "into host memory): set spec.training.initialization to CpuPerRank, RankZeroCpu "
            "(fsdp_cpu_ram_efficient_loading) or MetaDevice for the path the job takes"
        )
    base = base_overhead_bytes(parallel_groups(spec))
    step, load = tb.step, tb.load
    step_runtime = base + allocator_reserve_bytes(step.transient)
    step_total = step.total + step_runtime
    load_total = load.total + base
    peak, phase, runtime = (step, PeakPhase.Step, step_runtime)
    if load_total > step_total:
        peak, phase, runtime = (load, PeakPhase.Load, base)
        notes.append(
            f"the Load phase needs {load_total / GIB:.1f} GiB per GPU, more than the step's "
            f"{step_total / GIB:.1f} GiB: set spec.training.initialization to RankZeroCpu or "
            "MetaDevice so that no rank holds the unsharded model"
        )
    elif tb.step_instant != "backward":
        notes.append(
            f"the step peaks at the {tb.step_instant} ({step_total / GIB:.1f} GiB per GPU: "
            "the optimizer's gradient copies and temporaries), not during backward"
        )
    breakdown = _breakdown(
        peak.weights,
        peak.quant,
        0,
        peak.activations,
        peak.gradients,
        peak.optimizer,
        peak.master,
        runtime,
        peak.communication,
    )
    return EstimateStatus(
        parameter_count=params,
        gpu_count=spec.gpu_count,
        kv_cache_bytes_per_token=0,
        per_gpu=breakdown,
        trainable_parameter_count=trainable,
        peak_phase=phase,
        phases=[
            PhaseEstimate(name=PeakPhase.Load, total_bytes=load_total),
            PhaseEstimate(name=PeakPhase.Step, total_bytes=step_total),
        ],
        host_bytes_per_node=tb.host_per_node,
        notes=notes,
        missing_components=missing or [],
    )
