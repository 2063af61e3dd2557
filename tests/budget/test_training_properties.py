"""Properties of the training budget over generated specs (hypothesis), for every strategy,
precision, optimizer and fine-tuning method the generator draws:

- offloading optimizer state or parameters never needs more GPU memory (but for ZeRO-1/2's
  buffer of the largest parameter), and never less host memory;
- a chunked loss never needs more than the standard one, nor a fused one more than a chunked
  one (for vocabularies at least four times the model's width);
- no rank holding the full model (``MetaDevice``) never needs more at load than every GPU
  holding it (``GpuPerRank``);
- the Step phase's model states are never below the ZeRO paper's partitioning of the recipe's
  model states (the frameworks only add to it);
- ``perGpu`` is the larger phase, and ``phases`` lists both.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st
from test_budget_properties import SETTINGS, _estimate, training_specs

from gpu_sizer.api import EstimateStatus, parse_spec
from gpu_sizer.budget.estimate import stage_outer_params
from gpu_sizer.budget.params import layout, stage_layers
from gpu_sizer.budget.training import holdings
from gpu_sizer.budget.training_precision import recipe
from gpu_sizer.budget.training_sharding import partitioned, shard_degree

_STAGES = {"none": 0, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}


def _phase(est: EstimateStatus, name: str) -> int:
    return next(p.total_bytes for p in est.phases if p.name == name)


@SETTINGS
@given(training_specs())
def test_the_peak_phase_is_shown(doc: dict[str, Any]) -> None:
    est = _estimate(doc)
    assert {p.name for p in est.phases} == {"Load", "Step"}
    assert est.per_gpu.total_bytes == max(p.total_bytes for p in est.phases)
    assert est.per_gpu.total_bytes == _phase(est, est.peak_phase or "Step")
    assert est.host_bytes_per_node is not None and est.host_bytes_per_node >= 0


@SETTINGS
@given(
    training_specs(),
    st.sampled_from(["zero1", "zero2", "zero3", "fsdp-full-shard"]),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([("Cpu", "None"), ("Cpu", "Cpu"), ("Nvme", "None"), ("Nvme", "Nvme")]),
)
def test_offload_never_needs_more_gpu_memory(
    doc: dict[str, Any], strategy: str, dp: int, targets: tuple[str, str]
) -> None:
    par = doc["training"]["parallelism"]
    par.update(strategy=strategy, dataParallelSize=dp)
    optimizer, parameters = targets
    if strategy != "zero3":
        assume("Nvme" not in targets)
        parameters = optimizer if strategy == "fsdp-full-shard" else "None"
    base = _estimate(doc)
    doc["training"]["offload"] = {"optimizer": optimizer, "parameters": parameters}
    off = _estimate(doc)
    # ZeRO-1/2 offload streams gradients through a GPU buffer of the largest parameter
    # (stage_1_and_2.py temp_grad_buffer_for_gpu_offload), more than a tiny model's partition.
    lay = layout(parse_spec(doc).model.architecture)  # type: ignore[arg-type]
    largest = max(
        (lin.in_features * lin.out_features * lin.copies for lin in lay.linears), default=0
    )
    # 4 bytes of the largest parameter, plus the caching allocator's 10% reserve on it.
    buffer = max(largest, lay.embedding, lay.head)
    allowance = 5 * buffer if strategy in ("zero1", "zero2") else 0
    assert _phase(off, "Step") <= _phase(base, "Step") + allowance
    assert (off.host_bytes_per_node or 0) >= (base.host_bytes_per_node or 0) or optimizer == "Nvme"


@SETTINGS
@given(training_specs())
def test_fused_loss_never_needs_more_than_chunked_nor_chunked_more_than_standard(
    doc: dict[str, Any],
) -> None:
    """For vocabularies at least four times the model's width (Llama-2-70B's 32,000 / 8,192 is
    3.9, GPT-2's 65): below that, Liger's input gradient (T x H) and its power-of-two chunk
    can outweigh 16-bit logits, as they would in the kernel."""
    a = doc["model"]["architecture"]
    tp = doc["training"]["parallelism"]["tensorParallelSize"]
    assume(a["vocabSize"] // tp >= 4 * a["hiddenSize"])  # the vocabulary is split, not H
    steps = []
    for loss in ("fused", "chunked", "standard"):
        doc["training"]["loss"] = loss
        steps.append(_phase(_estimate(doc), "Step"))
    assert steps[0] <= steps[1] <= steps[2]


@SETTINGS
@given(training_specs())
def test_chunked_loss_never_needs_more_than_the_standard_one(doc: dict[str, Any]) -> None:
    steps = []
    for loss in ("chunked", "standard"):
        doc["training"]["loss"] = loss
        steps.append(_phase(_estimate(doc), "Step"))
    assert steps[0] <= steps[1]


@SETTINGS
@given(training_specs(), st.sampled_from(["fsdp-full-shard", "fsdp-hybrid-shard", "zero3"]))
def test_meta_device_loading_never_needs_more_than_loading_on_every_gpu(
    doc: dict[str, Any], strategy: str
) -> None:
    par = doc["training"]["parallelism"]
    par.update(strategy=strategy, dataParallelSize=8)
    loads = []
    for init in ("MetaDevice", "RankZeroCpu", "CpuPerRank", "GpuPerRank"):
        doc["training"]["initialization"] = init
        est = _estimate(doc)
        loads.append((_phase(est, "Load"), est.host_bytes_per_node or 0))
    meta, rank0, cpu, gpu = loads
    assert meta[0] <= gpu[0] and rank0[0] <= gpu[0] and cpu[0] <= gpu[0]
    assert meta[1] <= rank0[1] <= cpu[1]


@SETTINGS
@given(training_specs(), st.sampled_from(["none", "ddp", "zero1", "zero2", "zero3"]))
def test_frameworks_never_hold_less_than_the_papers_partitioning(
    doc: dict[str, Any], strategy: str
) -> None:
    """Whichever instant is the peak, weights + gradients + optimizer state + master weights on
    the GPU are at least the ZeRO paper's partition of the same recipe's states (ZeRO-3's
    working set and DeepSpeed's fp32 gradient copy only add)."""
    par = doc["training"]["parallelism"]
    par.update(strategy=strategy, dataParallelSize=1 if strategy == "none" else 4)
    try:
        spec = parse_spec(doc)
    except Exception:
        assume(False)
        raise
    assert spec.training is not None and spec.model.architecture is not None
    par_ = spec.training.parallelism
    a = spec.model.architecture
    lay = layout(a, par_.tensor_parallel_size, stage_layers(a, par_.pipeline_parallel_size))
    outer = stage_outer_params(
        lay, par_.pipeline_parallel_size, a.word_embed_proj_dim or a.hidden_size
    )
    h = holdings(spec, lay, outer)
    r = recipe(spec.training)
    paper = partitioned(
        h.weight_bytes,
        h.trainable * r.grad,
        h.optimizer_bytes,
        h.trainable * r.master,
        _STAGES[strategy],
        shard_degree(spec.training),
    )
    est = _estimate(doc)
    if est.peak_phase != "Step":
        return
    g = est.per_gpu
    states = g.weights_bytes + g.gradient_bytes + g.optimizer_state_bytes + g.master_weight_bytes
    # ZeRO-1/2 and the unsharded strategies keep weights whole at both instants; the optimizer
    # step frees nothing the paper counts except, for stage 1, other ranks' 16-bit gradients.
    slack = h.trainable * r.grad if strategy == "zero1" else 0
    assert states + slack >= sum(paper)
