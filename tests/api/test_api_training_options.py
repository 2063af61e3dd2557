"""The training options of the API: precision recipes, offload, loss, initialization, sharding
options. Each invalid combination fails at the offending field with a message saying what fits."""

from __future__ import annotations

from typing import Any

import pytest
from test_api_validation import only

from gpu_sizer.api import (
    DEEPSPEED_DEFAULTS,
    DeepSpeedOptions,
    Initialization,
    Loss,
    OffloadTarget,
    PrecisionRecipe,
    parse_workload,
    spec_to_wire,
)


def _with(doc: dict[str, Any], **training: Any) -> dict[str, Any]:
    doc["spec"]["training"].update(training)
    return doc


def test_defaults(train_doc: dict[str, Any]) -> None:
    tr = parse_workload(train_doc).training
    assert tr is not None
    assert tr.precision_recipe is PrecisionRecipe.Auto
    assert tr.loss is Loss.standard
    assert tr.initialization is Initialization.Auto
    assert tr.offload is None and tr.gradient_dtype is None and tr.optimizer_state_dtype is None
    assert tr.parallelism.context_parallel_size == 1


def test_deepspeed_defaults_are_deepspeeds() -> None:
    """DeepSpeed 0.19.5 ``DeepSpeedZeroConfig``: reduce and all-gather buckets 5e8 elements,
    stage-3 prefetch 5e7, max live parameters and reuse distance 1e9, persistence 1e5,
    sub-group 1e9; the wire names are DeepSpeed's, camelCased."""
    wire = DeepSpeedOptions().model_dump(by_alias=True)
    assert {k: wire[k] for k in DEEPSPEED_DEFAULTS} == DEEPSPEED_DEFAULTS
    assert wire["overlapComm"] is None


def test_new_fields_round_trip_on_the_wire(train_doc: dict[str, Any]) -> None:
    options = {
        "precisionRecipe": "MasterWeights",
        "gradientDtype": "float32",
        "loss": "fused",
        "initialization": "MetaDevice",
        "offload": {"optimizer": "Cpu", "parameters": "Nvme"},
    }
    doc = _with(train_doc, **options)
    doc["spec"]["training"]["parallelism"] = {
        "strategy": "zero3",
        "dataParallelSize": 8,
        "contextParallelSize": 2,
        "deepspeed": {"reduceBucketSize": 200_000_000},
    }
    spec = parse_workload(doc)
    wire = spec_to_wire(spec)["training"]
    assert {k: wire[k] for k in options} == options
    assert wire["parallelism"]["deepspeed"]["reduceBucketSize"] == 200_000_000
    assert spec.gpu_count == 16
    assert spec.training is not None
    assert spec.training.offload is not None
    assert spec.training.offload.parameters is OffloadTarget.Nvme


@pytest.mark.parametrize(
    ("training", "path", "words"),
    [
        ({"precisionRecipe": "Float32"}, "precisionRecipe", "set precision fp32"),
        ({"precision": "fp32", "precisionRecipe": "Autocast"}, "precisionRecipe", "Float32"),
        (
            {"precision": "bf16-true", "precisionRecipe": "Autocast"},
            "precisionRecipe",
            "bf16-mixed",
        ),
        ({"gradientDtype": "float16"}, "gradientDtype", "float32 or bfloat16"),
        ({"precision": "fp32", "optimizerStateDtype": "bfloat16"}, "optimizerStateDtype", "16-bit"),
        (
            {"optimizer": "adamw-8bit", "optimizerStateDtype": "float32"},
            "optimizerStateDtype",
            "8 bits",
        ),
        ({"offload": {"optimizer": "Cpu"}}, "offload", "set both"),
        ({"offload": {"parameters": "Nvme", "optimizer": "Nvme"}}, "offload", "zero3"),
        ({"sequenceLength": 4095, "parallelism": {"contextParallelSize": 2}}, "x", "divide"),
    ],
)
def test_invalid_training_options_name_their_field(
    train_doc: dict[str, Any], training: dict[str, Any], path: str, words: str
) -> None:
    if "parallelism" in training:
        training["parallelism"] = {
            **train_doc["spec"]["training"]["parallelism"],
            **training["parallelism"],
        }
        path = "parallelism.contextParallelSize"
    message = only(_with(train_doc, **training), f"spec.training.{path}")
    assert words in message


def test_offload_needs_a_sharding_strategy(train_doc: dict[str, Any]) -> None:
    doc = _with(train_doc, offload={"optimizer": "Cpu"})
    doc["spec"]["training"]["parallelism"] = {"strategy": "ddp", "dataParallelSize": 2}
    assert "zero2 with dataParallelSize 1" in only(doc, "spec.training.offload.optimizer")
    doc["spec"]["training"]["offload"] = {"parameters": "Cpu", "optimizer": "Cpu"}
    doc["spec"]["training"]["parallelism"] = {"strategy": "zero2", "dataParallelSize": 2}
    assert "zero3 or fsdp-*" in only(doc, "spec.training.offload.parameters")


@pytest.mark.parametrize(
    ("strategy", "options", "field"),
    [
        ("fsdp-full-shard", {"ddp": {"gradientAsBucketView": True}}, "ddp"),
        ("ddp", {"fsdp": {"version": 2}}, "fsdp"),
        ("fsdp-full-shard", {"deepspeed": {}}, "deepspeed"),
        ("fsdp-full-shard", {"fsdp": {"shardGroupSize": 8}}, "fsdp.shardGroupSize"),
        ("ddp", {"sequenceParallel": True}, "sequenceParallel"),
    ],
)
def test_framework_options_belong_to_their_strategy(
    train_doc: dict[str, Any], strategy: str, options: dict[str, Any], field: str
) -> None:
    train_doc["spec"]["training"]["parallelism"] = {
        "strategy": strategy,
        "dataParallelSize": 2,
        **options,
    }
    assert only(train_doc, f"spec.training.parallelism.{field}")


def test_fsdp_version_is_1_or_2(train_doc: dict[str, Any]) -> None:
    train_doc["spec"]["training"]["parallelism"]["fsdp"] = {"version": 3}
    assert only(train_doc, "spec.training.parallelism.fsdp.version")
