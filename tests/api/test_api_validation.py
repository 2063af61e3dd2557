"""Every cross-field rule of the GPUWorkload API, and the shape of its error messages.

Each invalid document must fail with a problem whose path names the offending field (not its
parent) and whose message says what is allowed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from api_docs import inference_doc, training_doc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_sizer.api import InvalidWorkload, Problem, parse_workload

Mutation = Callable[[dict[str, Any]], None]


def problems(doc: dict[str, Any]) -> list[Problem]:
    with pytest.raises(InvalidWorkload) as info:
        parse_workload(doc)
    return info.value.problems


def only(doc: dict[str, Any], path: str) -> str:
    """The message of the single problem at ``path`` (and assert there is no other)."""
    found = problems(doc)
    assert [p.path for p in found] == [path], found
    return found[0].message


def test_valid_inference_and_training_parse(doc: dict[str, Any], train_doc: dict[str, Any]) -> None:
    assert parse_workload(doc).inference is not None
    assert parse_workload(train_doc).training is not None


# --- exactly one of inference / training ------------------------------------------------------


def test_both_inference_and_training(doc: dict[str, Any]) -> None:
    doc["spec"]["training"] = training_doc()["spec"]["training"]
    message = only(doc, "spec.training")
    assert "both set" in message and "exactly one" in message


def test_neither_inference_nor_training(doc: dict[str, Any]) -> None:
    del doc["spec"]["inference"]
    message = only(doc, "spec.inference")
    assert "spec.inference" in message and "spec.training" in message


# --- heads ------------------------------------------------------------------------------------


def test_heads_must_be_divisible_by_kv_heads(doc: dict[str, Any]) -> None:
    doc["spec"]["model"]["architecture"]["numKeyValueHeads"] = 7
    message = only(doc, "spec.model.architecture.numKeyValueHeads")
    assert "(32)" in message and "(7)" in message and "divisible" in message


def test_kv_heads_default_to_heads(doc: dict[str, Any]) -> None:
    del doc["spec"]["model"]["architecture"]["numKeyValueHeads"]
    assert parse_workload(doc).model.architecture is not None


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16, 32])
def test_tensor_parallel_dividing_heads_is_accepted(doc: dict[str, Any], tp: int) -> None:
    # 32 heads, 8 KV heads: TP 16 and 32 replicate KV heads (TP a multiple of 8), as vLLM does.
    doc["spec"]["inference"]["tensorParallelSize"] = tp
    assert parse_workload(doc).gpu_count == tp


def test_tensor_parallel_must_divide_heads(doc: dict[str, Any]) -> None:
    doc["spec"]["inference"]["tensorParallelSize"] = 3
    found = problems(doc)
    assert {p.path for p in found} == {"spec.inference.tensorParallelSize"}
    assert any("must divide numAttentionHeads (32)" in p.message for p in found)


def test_tensor_parallel_must_divide_or_replicate_kv_heads(doc: dict[str, Any]) -> None:
    arch = doc["spec"]["model"]["architecture"]
    arch.update(numAttentionHeads=48, hiddenSize=6144)  # 48 % 12 == 0, but 8 and 12 don't nest
    doc["spec"]["inference"]["tensorParallelSize"] = 12
    message = only(doc, "spec.inference.tensorParallelSize")
    assert "numKeyValueHeads (8)" in message and "multiple" in message


@pytest.mark.parametrize(
    ("heads", "groups", "tp", "accepted"),
    [(128, 8, 8, True), (128, 1, 16, True), (8, 8, 16, False), (128, 8, 16, False)],
)
def test_tensor_parallel_must_split_mamba2_heads_and_groups(
    doc: dict[str, Any], heads: int, groups: int, tp: int, accepted: bool
) -> None:
    # vLLM mamba_mixer2.py MambaMixer2.__init__: TP divides the Mamba heads, and the B/C groups
    # unless there is a single group (replicated to every rank).
    doc["spec"]["model"]["architecture"] = {
        "modelType": "nemotron_h",
        "numHiddenLayers": 4,
        "hiddenSize": 512,
        "intermediateSize": 1024,
        "numAttentionHeads": 32,
        "numKeyValueHeads": 8,
        "vocabSize": 1000,
        "maxPositionEmbeddings": 131072,
        "hybridOverridePattern": "M*M-",
        "mambaNumHeads": heads,
        "mambaHeadDim": 4,
        "ssmStateSize": 16,
        "nGroups": groups,
    }
    doc["spec"]["inference"]["tensorParallelSize"] = tp
    if accepted:
        assert parse_workload(doc).gpu_count == tp
    else:
        found = problems(doc)
        assert {p.path for p in found} == {"spec.inference.tensorParallelSize"}
        assert any("mambaNumHeads" in p.message or "nGroups" in p.message for p in found)


def test_training_tensor_parallel_is_checked_too(train_doc: dict[str, Any]) -> None:
    train_doc["spec"]["training"]["parallelism"]["tensorParallelSize"] = 5
    found = problems(train_doc)
    assert {p.path for p in found} == {"spec.training.parallelism.tensorParallelSize"}


# --- context length ---------------------------------------------------------------------------


def test_max_model_len_above_context(doc: dict[str, Any]) -> None:
    doc["spec"]["inference"]["maxModelLen"] = 8193
    message = only(doc, "spec.inference.maxModelLen")
    assert "8193" in message and "8192" in message and "ropeScaling" in message


def test_rope_scaling_extends_the_context(doc: dict[str, Any]) -> None:
    doc["spec"]["model"]["architecture"]["ropeScaling"] = {"ropeType": "linear", "factor": 4.0}
    doc["spec"]["inference"]["maxModelLen"] = 32768
    assert parse_workload(doc).inference is not None
    doc["spec"]["inference"]["maxModelLen"] = 32769
    assert "32768 tokens" in only(doc, "spec.inference.maxModelLen")


def test_rope_scaling_uses_original_context(doc: dict[str, Any]) -> None:
    # Llama-3.1 style: original 8192 x factor 8 = 65536, maxPositionEmbeddings says 131072.
    arch = doc["spec"]["model"]["architecture"]
    arch["maxPositionEmbeddings"] = 131072
    arch["ropeScaling"] = {
        "ropeType": "llama3",
        "factor": 8.0,
        "originalMaxPositionEmbeddings": 8192,
    }
    doc["spec"]["inference"]["maxModelLen"] = 131072
    assert parse_workload(doc).inference is not None


def test_training_sequence_length_above_context(train_doc: dict[str, Any]) -> None:
    train_doc["spec"]["training"]["sequenceLength"] = 10000
    assert "10000" in only(train_doc, "spec.training.sequenceLength")


# --- quantization -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "bits", "ok"),
    [
        ("gptq", 2, True),
        ("gptq", 3, True),
        ("gptq", 4, True),
        ("gptq", 8, True),
        ("gptq", 5, False),
        ("awq", 4, True),
        ("awq", 8, False),
        ("fp8", 8, True),
        ("fp8", 4, False),
        ("bitsandbytes-nf4", 4, True),
        ("bitsandbytes-nf4", 8, False),
        ("bitsandbytes-int8", 8, True),
        ("bitsandbytes-int8", 4, False),
    ],
)
def test_quantization_bits_per_method(
    doc: dict[str, Any], method: str, bits: int, ok: bool
) -> None:
    doc["spec"]["model"]["quantization"] = {"method": method, "bits": bits}
    if ok:
        assert parse_workload(doc).model.quantization is not None
    else:
        message = only(doc, "spec.model.quantization.bits")
        assert method in message and f"not {bits}" in message and "supports bits" in message


def test_unknown_quantization_method_lists_the_known_ones(doc: dict[str, Any]) -> None:
    doc["spec"]["model"]["quantization"] = {"method": "int3"}
    message = only(doc, "spec.model.quantization.method")
    for known in ("gptq", "awq", "fp8", "bitsandbytes-nf4", "bitsandbytes-int8", "'int3'"):
        assert known in message


def test_qlora_needs_an_nf4_base(train_doc: dict[str, Any]) -> None:
    train_doc["spec"]["training"]["finetuning"] = {"method": "qlora"}
    train_doc["spec"]["model"]["quantization"] = {"method": "awq", "bits": 4}
    assert "bitsandbytes-nf4" in only(train_doc, "spec.training.finetuning.method")


# --- parameterCount / architecture, measurement -----------------------------------------------


def test_parameter_count_required_without_architecture(doc: dict[str, Any]) -> None:
    del doc["spec"]["model"]["architecture"]
    message = only(doc, "spec.model.parameterCount")
    assert "architecture" in message and "parameterCount" in message
    doc["spec"]["model"]["parameterCount"] = 8_030_261_248
    assert parse_workload(doc).model.parameter_count == 8_030_261_248


def test_command_mode_needs_a_command(doc: dict[str, Any]) -> None:
    doc["spec"]["measurement"] = {"mode": "Command"}
    assert "non-empty command" in only(doc, "spec.measurement.command")
    doc["spec"]["measurement"]["command"] = ["python", "serve.py"]
    assert parse_workload(doc).measurement.command == ["python", "serve.py"]


def test_data_parallel_needs_a_strategy(train_doc: dict[str, Any]) -> None:
    train_doc["spec"]["training"]["parallelism"]["strategy"] = "none"
    assert "dataParallelSize 8" in only(train_doc, "spec.training.parallelism.strategy")


# --- message shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "path", "expected"),
    [
        (lambda d: d["spec"]["inference"].update(maxNumSeqs=0), "spec.inference.maxNumSeqs",
         "must be >= 1, not 0"),
        (lambda d: d["spec"]["inference"].update(maxNumSeqs="many"), "spec.inference.maxNumSeqs",
         "must be an integer, not 'many'"),
        (lambda d: d["spec"]["inference"].update(engine="trt"), "spec.inference.engine",
         "must be one of 'vllm', 'transformers', 'tgi' or 'sglang', not 'trt'"),
        (lambda d: d["spec"].update(placement={"minHeadroomFraction": 1.5}),
         "spec.placement.minHeadroomFraction", "must be <= 0.5, not 1.5"),
        (lambda d: d["spec"].update(placement={"gpuClasses": "nvidia-l4"}),
         "spec.placement.gpuClasses", "must be a list"),
        (
            lambda d: d["spec"].update(model=[{"name": "x"}]),
            "spec.model",
            "not a list; remove the '-' before its first field",
        ),
        (lambda d: d["spec"].update(model=[]), "spec.model", "must be an object"),
        (lambda d: d["spec"]["model"].update(dtype="fp16"), "spec.model.dtype", "'bfloat16'"),
        (lambda d: d["spec"]["model"].update(dtype="bf16"), "spec.model.dtype",
         "not 'bf16'; did you mean 'bfloat16'?"),
        (lambda d: d["spec"]["model"].update(dtype="fp16"), "spec.model.dtype",
         "did you mean 'float16'?"),
        (lambda d: d["spec"]["inference"].update(engine="vLLM"), "spec.inference.engine",
         "not 'vLLM'; did you mean 'vllm'?"),
        (lambda d: d["spec"]["model"]["architecture"].update(modelType="gpt2"),
         "spec.model.architecture.modelType", "(those with one: llama, "),
    ],
)  # fmt: skip
def test_messages_say_what_is_allowed(
    doc: dict[str, Any], mutate: Mutation, path: str, expected: str
) -> None:
    mutate(doc)
    assert expected in only(doc, path)


def test_unknown_field_suggests_the_right_name(doc: dict[str, Any]) -> None:
    doc["spec"]["inference"]["maxNumSeq"] = 4
    message = only(doc, "spec.inference.maxNumSeq")
    assert "unknown field" in message and "did you mean maxNumSeqs?" in message
    assert "maxModelLen" in message  # the allowed names of that object


def test_every_problem_is_reported_at_once(doc: dict[str, Any]) -> None:
    doc["apiVersion"] = "v1"
    doc["spec"]["inference"]["maxNumSeqs"] = 0
    doc["spec"]["model"]["dtype"] = "fp16"
    paths = {p.path for p in problems(doc)}
    assert paths == {"apiVersion", "spec.inference.maxNumSeqs", "spec.model.dtype"}


def test_document_level_problems() -> None:
    assert [p.path for p in problems([])] == ["(document)"]  # type: ignore[arg-type]
    found = problems({"apiVersion": "gpusizer.dev/v1alpha1", "kind": "GPUWorkload"})
    assert {p.path for p in found} == {"metadata.name", "spec"}


# --- no input crashes the parser --------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_arbitrary_json_only_raises_invalid_workload(value: Any) -> None:
    try:
        parse_workload(value)
    except InvalidWorkload as exc:
        assert exc.problems and all(p.path and p.message for p in exc.problems)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_valid_documents_only_raise_invalid_workload(data: st.DataObject) -> None:
    """Replace one node of a valid document by a random value: parse or InvalidWorkload."""
    base = data.draw(st.sampled_from([inference_doc(), training_doc()]))
    doc = copy.deepcopy(base)
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    value = data.draw(json_values | st.integers(-(2**70), 2**70))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        parse_workload(doc)
    except InvalidWorkload as exc:
        assert all(p.path for p in exc.problems)
