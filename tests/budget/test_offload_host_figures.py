"""Host memory of DeepSpeed offload against DeepSpeed's own estimators' published rows.

The estimators are ``estimate_zero2_model_states_mem_needs`` (``deepspeed/runtime/zero/
stage_1_and_2.py``) and ``estimate_zero3_model_states_mem_needs`` (``stage3.py``), DeepSpeed
0.16 to 0.19 unchanged: per node, ZeRO-3 with parameter and optimizer offload and ``zero.Init``
18 bytes per parameter over the nodes, optimizer offload alone 16, ZeRO-2 with offload
``max(4 x GPUs, 16)`` bytes, without offload 4 bytes x GPUs per node (every rank loads the fp32
model), each times ``additional_buffer_factor`` 1.5. Their published outputs:

- DeepSpeed docs, "Memory Requirements" (deepspeed.readthedocs.io, ``memory.html``),
  bigscience/T0_3B on 1 node x 8 GPUs, "2851M total params": ZeRO-3 ``offload_param=cpu,
  offload_optimizer=cpu, zero_init=1`` 71.71GB per CPU; ZeRO-2 ``offload_optimizer=cpu``
  127.48GB per CPU and 5.31GB per GPU; ZeRO-2 without offload 127.48GB per CPU.
- Hugging Face transformers docs, "DeepSpeed" (v4.50, "Memory requirements"), T0_3B on
  1 GPU, "2783M total params, 65M largest layer params": 70.00GB (offload both, zero_init=1),
  62.23GB (optimizer offload, zero_init=1), 15.56GB (no offload, zero_init=0).

Both print ``bytes / 2**30`` with "GB": GiB here.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate

GIB = 1 << 30


def _spec(params: int, strategy: str, gpus: int, offload: dict[str, str] | None, init: str) -> Any:
    training: dict[str, Any] = {
        "microBatchSize": 1,
        "sequenceLength": 512,
        "framework": "deepspeed",
        "initialization": init,
        "parallelism": {"strategy": strategy, "dataParallelSize": gpus},
    }
    if offload:
        training["offload"] = offload
    return parse_spec(
        {"model": {"parameterCount": params, "dtype": "float32"}, "training": training}
    )


@pytest.mark.parametrize(
    ("params", "strategy", "gpus", "offload", "init", "published_gib"),
    [
        # DeepSpeed docs, T0_3B, 1 node x 8 GPUs.
        (2_851_000_000, "zero3", 8, {"optimizer": "Cpu", "parameters": "Cpu"}, "MetaDevice", 71.71),
        (2_851_000_000, "zero2", 8, {"optimizer": "Cpu"}, "CpuPerRank", 127.48),
        (2_851_000_000, "zero2", 8, None, "CpuPerRank", 127.48),
        # transformers docs, T0_3B, 1 GPU.
        (2_783_000_000, "zero3", 1, {"optimizer": "Cpu", "parameters": "Cpu"}, "MetaDevice", 70.00),
        (2_783_000_000, "zero3", 1, {"optimizer": "Cpu"}, "MetaDevice", 62.23),
        (2_783_000_000, "zero3", 1, None, "CpuPerRank", 15.56),
    ],
)
def test_host_memory_per_node_matches_deepspeeds_estimator(
    params: int,
    strategy: str,
    gpus: int,
    offload: dict[str, str] | None,
    init: str,
    published_gib: float,
) -> None:
    host = estimate(_spec(params, strategy, gpus, offload, init)).host_bytes_per_node
    assert host is not None
    # The published figures are rounded to 0.01 GiB from the given (rounded) parameter counts.
    assert host / GIB == pytest.approx(published_gib, rel=0.002)


def test_zero2_offload_keeps_the_16_bit_model_on_the_gpu() -> None:
    """DeepSpeed docs, T0_3B ZeRO-2 ``offload_optimizer=cpu``: 5.31GB per GPU, the 16-bit
    parameters (2 bytes each, ``gpu_mem = 2 * total_params``)."""
    spec = _spec(2_851_000_000, "zero2", 8, {"optimizer": "Cpu"}, "CpuPerRank")
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"dtype": "bfloat16"})})
    g = estimate(spec).per_gpu
    assert g.weights_bytes / GIB == pytest.approx(5.31, rel=0.002)
    assert g.optimizer_state_bytes == g.master_weight_bytes == 0


def test_zero3_without_offload_model_states_match_the_estimators_gpu_column() -> None:
    """transformers docs, T0_3B on 1 GPU without offload: 46.91GB per GPU (``18 x params / GPUs
    + 4 x largest layer``). Here: 16-bit partition and gradients, fp32 master and Adam state
    (16 bytes), one optimizer sub-group's fp32 gradient and the gathered live parameters; the
    estimator's 18 bytes count the fp32 gradient of every parameter instead."""
    spec = _spec(2_783_000_000, "zero3", 1, None, "MetaDevice")
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"dtype": "bfloat16"})})
    est = estimate(spec)
    step = next(p for p in est.phases if p.name == "Step")
    states = step.total_bytes - est.per_gpu.runtime_overhead_bytes
    assert states / GIB == pytest.approx(46.91, rel=0.05)
