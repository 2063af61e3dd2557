"""What a fresh user's mistakes turn into: the wire format is strict, bounded and explicit.

Each test names the defect it pins (types coerced, snake_case keys, no upper bounds, MoE fields,
qlora without a 4-bit base, LoRA targets, training pipeline stages, group size, metadata).
"""

from __future__ import annotations

from typing import Any

import pytest
from api_docs import inference_doc, training_doc

from gpu_sizer.api import (
    LIMITS,
    Inference,
    InvalidWorkload,
    Problem,
    parse_workload,
)


def problems(doc: dict[str, Any]) -> list[Problem]:
    with pytest.raises(InvalidWorkload) as info:
        parse_workload(doc)
    return info.value.problems


def only(doc: dict[str, Any], path: str) -> str:
    found = problems(doc)
    assert [p.path for p in found] == [path], found
    return found[0].message


ARCH = "spec.model.architecture"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "must be an integer, not True"),
        ("32", "must be an integer, not '32': write 32"),
        (32.0, "must be an integer, not 32.0: write 32"),
    ],
)
def test_integers_are_not_coerced(value: Any, expected: str) -> None:
    doc = inference_doc()
    doc["spec"]["model"]["architecture"]["numHiddenLayers"] = value
    assert only(doc, f"{ARCH}.numHiddenLayers") == expected


def test_booleans_are_not_coerced() -> None:
    doc = inference_doc()
    doc["spec"]["inference"]["enforceEager"] = "yes"
    assert only(doc, "spec.inference.enforceEager") == "must be true or false, not 'yes'"


def test_fractions_take_integers_but_not_strings() -> None:
    doc = inference_doc()
    doc["spec"]["placement"] = {"minHeadroomFraction": 0}
    assert parse_workload(doc).placement.min_headroom_fraction == 0.0
    doc["spec"]["placement"] = {"minHeadroomFraction": "0.1"}
    assert only(doc, "spec.placement.minHeadroomFraction") == "must be a number, not '0.1'"


def test_snake_case_keys_are_unknown_on_the_wire() -> None:
    doc = inference_doc()
    arch = doc["spec"]["model"]["architecture"]
    arch["num_hidden_layers"] = arch.pop("numHiddenLayers")
    found = {p.path: p.message for p in problems(doc)}
    assert found[f"{ARCH}.num_hidden_layers"].startswith(
        "unknown field; did you mean numHiddenLayers?"
    )
    assert found[f"{ARCH}.numHiddenLayers"] == "required field is missing"


def test_python_names_still_build_models_in_code() -> None:
    assert Inference(max_model_len=4096, max_num_seqs=8).max_num_seqs == 8


@pytest.mark.parametrize(
    ("field", "limit"),
    [
        ("numHiddenLayers", LIMITS["layers"]),
        ("hiddenSize", LIMITS["width"]),
        ("vocabSize", LIMITS["vocab"]),
        ("maxPositionEmbeddings", LIMITS["tokens"]),
    ],
)
def test_architecture_sizes_have_maxima(field: str, limit: int) -> None:
    doc = inference_doc()
    doc["spec"]["model"]["architecture"][field] = 10**12
    assert f"must be <= {limit}, not 1000000000000" in {
        p.message for p in problems(doc) if p.path == f"{ARCH}.{field}"
    }


def test_size_fields_have_maxima() -> None:
    doc = inference_doc()
    doc["spec"]["inference"]["maxNumSeqs"] = 100_000
    assert only(doc, "spec.inference.maxNumSeqs") == "must be <= 65536, not 100000"
    doc = training_doc()
    doc["spec"]["training"]["microBatchSize"] = 10**6
    assert only(doc, "spec.training.microBatchSize") == "must be <= 65536, not 1000000"
    doc = inference_doc()
    del doc["spec"]["model"]["architecture"]
    doc["spec"]["model"]["parameterCount"] = 10**30
    assert only(doc, "spec.model.parameterCount").startswith("must be <= 100000000000000")


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe"])
def test_moe_families_need_their_expert_counts(family: str) -> None:
    doc = inference_doc()
    doc["spec"]["model"]["architecture"]["modelType"] = family
    message = only(doc, f"{ARCH}.numLocalExperts")
    assert "mixture-of-experts" in message and "numExpertsPerTok" in message


def test_qlora_needs_an_explicit_nf4_base() -> None:
    doc = training_doc()
    doc["spec"]["training"]["finetuning"] = {"method": "qlora"}
    message = only(doc, "spec.model.quantization")
    assert "bitsandbytes-nf4" in message and "lora" in message
    doc["spec"]["model"]["quantization"] = {"method": "bitsandbytes-nf4", "bits": 4}
    assert parse_workload(doc).model.quantization is not None


def test_lora_targets_are_known_names() -> None:
    doc = training_doc()
    doc["spec"]["training"]["finetuning"] = {"method": "lora", "loraTargetModules": ["q_porj"]}
    message = only(doc, "spec.training.finetuning.loraTargetModules[0]")
    assert message.startswith("unknown module 'q_porj'; did you mean q_proj?")


def test_lora_needs_a_target() -> None:
    doc = training_doc()
    doc["spec"]["training"]["finetuning"] = {"method": "lora", "loraTargetModules": []}
    assert "nothing trains" in only(doc, "spec.training.finetuning.loraTargetModules")


def test_training_pipeline_stages_cannot_exceed_layers() -> None:
    doc = training_doc()
    doc["spec"]["training"]["parallelism"] = {"strategy": "none", "pipelineParallelSize": 64}
    assert only(doc, "spec.training.parallelism.pipelineParallelSize") == (
        "pipelineParallelSize 64 exceeds the 32 layers"
    )


def test_group_size_must_divide_the_input_features() -> None:
    doc = inference_doc()
    doc["spec"]["model"]["quantization"] = {"method": "gptq", "bits": 4, "groupSize": 100}
    message = only(doc, "spec.model.quantization.groupSize")
    assert "hiddenSize (4096)" in message and "intermediateSize (14336)" in message
    doc["spec"]["model"]["quantization"]["groupSize"] = 128
    parse_workload(doc)


def test_measurement_command_has_no_empty_arguments() -> None:
    doc = inference_doc()
    doc["spec"]["measurement"] = {"mode": "Command", "command": [""]}
    assert only(doc, "spec.measurement.command[0]") == "must not be an empty string"


def test_concurrency_levels_cannot_exceed_max_num_seqs() -> None:
    doc = inference_doc()
    doc["spec"]["measurement"] = {"concurrencyLevels": [1, 32]}
    message = only(doc, "spec.measurement.concurrencyLevels[1]")
    assert "32" in message and "inference.maxNumSeqs (16)" in message


def test_rope_type_is_known_and_accepts_the_legacy_key() -> None:
    doc = inference_doc()
    arch = doc["spec"]["model"]["architecture"]
    arch["ropeScaling"] = {"ropeType": "yarnn", "factor": 4.0}
    assert only(doc, f"{ARCH}.ropeScaling.ropeType").startswith("unknown rope type 'yarnn'")
    arch["ropeScaling"] = {"type": "yarn", "factor": 4.0}
    spec = parse_workload(doc)
    assert spec.model.architecture is not None
    rope = spec.model.architecture.rope_scaling
    assert rope is not None and rope.rope_type == "yarn"
    assert "type" not in spec.model_dump(by_alias=True)["model"]["architecture"]["ropeScaling"]


@pytest.mark.parametrize(
    ("metadata", "path"),
    [
        ({"name": "Bad Name"}, "metadata.name"),
        ({"name": "ok", "namespace": "Bad_NS"}, "metadata.namespace"),
        ("x", "metadata"),
    ],
)
def test_metadata_follows_the_api_server_rules(metadata: Any, path: str) -> None:
    doc = inference_doc()
    doc["metadata"] = metadata
    message = only(doc, path)
    assert message == "must be an object, not 'x'" if path == "metadata" else "DNS-1123" in message


def test_legacy_rope_key_survives_api_server_defaulting() -> None:
    """The CRD stores no ropeType default, so `type: yarn` is not joined by `ropeType: linear`."""
    from gpu_sizer.api.crd import build_crd

    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    arch = schema["properties"]["spec"]["properties"]["model"]["properties"]["architecture"]
    rope = arch["properties"]["ropeScaling"]["properties"]
    assert "default" not in rope["ropeType"] and "type" in rope
