"""Writes checked against the GPUWorkload CRD's structural schema, as an API server does."""

from __future__ import annotations

import copy
from typing import Any

from gpu_sizer_testbed.emulator import crd_document
from gpu_sizer_testbed.validation import check

SCHEMA = crd_document()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def workload(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"name": "m", "parameterCount": 1_000_000_000, "dtype": "bfloat16"},
        "inference": {"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 4},
    }
    body.update(spec)
    return {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": "w", "namespace": "ml", "annotations": {"anything": "goes"}},
        "spec": body,
    }


def test_a_valid_object_has_no_problems() -> None:
    problems = check(SCHEMA, workload(), patch=False)
    assert problems.unknown == [] and problems.invalid == []


def test_unknown_fields_anywhere_are_named_by_path() -> None:
    obj = workload()
    obj["spce"] = {}
    obj["spec"]["inference"]["maxNumSeq"] = 4
    problems = check(SCHEMA, obj, patch=False)
    assert sorted(problems.unknown) == ["spce", "spec.inference.maxNumSeq"]


def test_types_enums_bounds_and_required() -> None:
    obj = workload()
    obj["spec"]["model"]["dtype"] = "float7"
    obj["spec"]["inference"]["maxNumSeqs"] = 0
    del obj["spec"]["inference"]["maxModelLen"]
    obj["spec"]["inference"]["maxNumBatchedTokens"] = "2048"
    invalid = dict(check(SCHEMA, obj, patch=False).invalid)
    assert invalid["spec.model.dtype"].startswith('Unsupported value: "float7": supported values: ')
    assert invalid["spec.inference.maxNumSeqs"] == (
        "Invalid value: 0: spec.inference.maxNumSeqs in body should be greater than or equal to 1"
    )
    assert invalid["spec.inference.maxNumBatchedTokens"] == (
        'Invalid value: "string": spec.inference.maxNumBatchedTokens in body must be of type '
        'integer: "string"'
    )
    assert invalid["spec.inference.maxModelLen"] == "Required value"


def test_booleans_are_not_integers() -> None:
    obj = workload()
    obj["spec"]["inference"]["maxNumSeqs"] = True
    (problem,) = check(SCHEMA, obj, patch=False).invalid
    assert problem[0] == "spec.inference.maxNumSeqs" and "must be of type integer" in problem[1]


def test_a_merge_patch_may_omit_required_fields_and_delete_with_null() -> None:
    patch = {
        "metadata": {"annotations": {"x": None}},
        "spec": {"inference": {"maxNumSeqs": 8, "kvCacheDtype": None}},
    }
    problems = check(SCHEMA, patch, patch=True)
    assert problems.unknown == [] and problems.invalid == []
    bad = copy.deepcopy(patch)
    bad["spec"]["inference"]["maxNumSeqz"] = 8
    assert check(SCHEMA, bad, patch=True).unknown == ["spec.inference.maxNumSeqz"]
