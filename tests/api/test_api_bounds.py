"""Every list and string of the spec is bounded, and so is the work and text of a bad spec.

Issue 13, item 10: lists had no maxItems, and a 1.5 MiB review (100,000 loraTargetModules) took
13 s to validate and produced a 27 MB denial. The bounds are in the pydantic models, hence in
the CRD (the API server refuses such objects before the validating webhook) and in the Python
parser (the mutating webhook and ``gpu-sizer estimate`` see unvalidated input).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from tests.architectures import LLAMA_3_8B

from gpu_sizer.api import InvalidWorkload, parse_spec
from gpu_sizer.api.crd import build_crd
from gpu_sizer.api.errors import MAX_PROBLEMS
from gpu_sizer.api.spec import LENGTHS
from gpu_sizer.api.workload import MAX_SPEC_VALUES


def nodes(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def spec_schema() -> dict[str, Any]:
    [version] = build_crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]  # type: ignore[no-any-return]


def test_every_list_string_and_map_of_the_spec_has_an_upper_bound() -> None:
    unbounded = []
    for path, node in nodes(spec_schema(), "spec"):
        kind = node.get("type")
        if kind == "array" and "maxItems" not in node:
            unbounded.append(f"{path}: array without maxItems")
        if kind == "string" and "maxLength" not in node and "enum" not in node:
            unbounded.append(f"{path}: string without maxLength or enum")
        if kind == "object" and "additionalProperties" in node and "maxProperties" not in node:
            unbounded.append(f"{path}: map without maxProperties")
    assert unbounded == []


def inference_spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"architecture": copy.deepcopy(LLAMA_3_8B)},
        "inference": {"maxModelLen": 4096, "maxNumSeqs": 16},
    }
    spec.update(changes)
    return spec


def problems(spec: Any) -> list[str]:
    with pytest.raises(InvalidWorkload) as caught:
        parse_spec(spec)
    return [str(p) for p in caught.value.problems]


def test_a_list_beyond_its_bound_is_one_problem() -> None:
    classes = [f"c{i}" for i in range(1000)]
    assert problems(inference_spec(placement={"gpuClasses": classes})) == [
        f"spec.placement.gpuClasses: must have at most {LENGTHS['gpuClasses']} items, not 1000"
    ]
    name = "x" * 1000
    assert problems(inference_spec(placement={"gpuClasses": [name]})) == [
        f"spec.placement.gpuClasses[0]: must be at most {LENGTHS['gpuClass']} characters long, "
        "not 1000"
    ]


def test_a_spec_with_thousands_of_values_is_refused_whole() -> None:
    training = {
        "microBatchSize": 1,
        "sequenceLength": 128,
        "finetuning": {"method": "lora", "loraTargetModules": [f"m{i}" for i in range(100_000)]},
    }
    [line] = problems({"model": {"architecture": LLAMA_3_8B}, "training": training})
    assert line.startswith(f"spec: holds more than {MAX_SPEC_VALUES} fields and list items")
    spec = inference_spec()
    spec["inference"].update({f"k{i}": 1 for i in range(50_000)})
    assert problems(spec) == [line]


def test_the_problem_list_is_cut_after_the_first_ones() -> None:
    spec = inference_spec()
    spec["inference"].update({f"unknown{i}" + "x" * 200: 1 for i in range(100)})
    lines = problems(spec)
    assert len(lines) == MAX_PROBLEMS + 1
    assert lines[-1] == "spec: 80 more problems not shown; fix the ones above first"
    # A user's key is shown cut to 64 characters, not as long as it is.
    assert lines[0].startswith("spec.inference." + "unknown0" + "x" * 53 + "...: unknown field")


def test_quantization_module_lists_hold_a_real_checkpoint_and_no_more() -> None:
    """Llama-3.1-405B-FP8 names 511 modules in modules_to_not_convert (config.json of
    meta-llama/Llama-3.1-405B-Instruct-FP8); the bound leaves room for four times that."""
    real = [f"model.layers.{i}.self_attn.{m}" for i in range(126) for m in "qkvo"]
    quant = {"method": "fp8", "perChannelScales": True, "modulesToNotConvert": real}
    spec = inference_spec()
    spec["model"]["quantization"] = quant
    parse_spec(spec)
    too_many = [f"m{i}" for i in range(LENGTHS["moduleNames"] + 1)]
    spec["model"]["quantization"] = {**quant, "modulesToNotConvert": too_many}
    assert problems(spec) == [
        f"spec.model.quantization.modulesToNotConvert: must have at most "
        f"{LENGTHS['moduleNames']} items, not {len(too_many)}"
    ]
