"""Computed fixes are listed by what they cost the user, and each one that claims to fit does.

The order (``gpu_sizer.sizing.fix_cost``): an engine flag, then an FP8 KV cache, then a shorter
context, then a larger class, then more GPUs. The issue's example: Llama-3-8B on SGLang restricted
to an L4 is refused at SGLang's own default ``--mem-fraction-static`` (0.687 there) and was told to
go to tensor parallelism 2, while raising the flag serves it with headroom to spare.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.budget.engines.sglang import default_mem_fraction_static
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.sizing.assessment import Fix, Verdict
from gpu_sizer.sizing.fix_cost import fix_cost
from gpu_sizer.sizing.verdict import assess
from tests.architectures import LLAMA_3_8B

BY_NAME = {c.name: c for c in DEFAULT_CATALOG}


def _doc(engine: str, classes: list[str], **inference: Any) -> dict[str, Any]:
    return {
        "model": {"architecture": LLAMA_3_8B},
        "inference": {"engine": engine, "maxModelLen": 8192, "maxNumSeqs": 16, **inference},
        "placement": {"gpuClasses": classes},
    }


_PATHS = {
    "spec.inference.gpuMemoryUtilization": ("inference", "gpuMemoryUtilization"),
    "spec.inference.kvCacheDtype": ("inference", "kvCacheDtype"),
    "spec.inference.maxModelLen": ("inference", "maxModelLen"),
    "spec.inference.maxNumSeqs": ("inference", "maxNumSeqs"),
    "spec.inference.targetConcurrency": ("inference", "targetConcurrency"),
    "spec.inference.tensorParallelSize": ("inference", "tensorParallelSize"),
    "spec.placement.gpuClasses": ("placement", "gpuClasses"),
    "spec.placement.minHeadroomFraction": ("placement", "minHeadroomFraction"),
}


def _applied(doc: dict[str, Any], fix: Fix) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    part, key = _PATHS[fix.field]
    out.setdefault(part, {})[key] = fix.value
    return out


def test_sglang_on_an_l4_is_told_to_raise_its_fraction_first() -> None:
    doc = _doc("sglang", ["nvidia-l4"])
    spec = parse_spec(copy.deepcopy(doc))
    a = assess(spec)
    assert a.verdict is Verdict.NoSafeHeadroom
    first = a.fixes[0]
    assert first.field == "spec.inference.gpuMemoryUtilization" and first.fits
    default = default_mem_fraction_static(spec, BY_NAME["nvidia-l4"])
    assert default < first.value <= 0.99
    assert a.message.index("gpuMemoryUtilization") < a.message.index("tensorParallelSize")
    fixed = assess(parse_spec(_applied(doc, first)))
    assert fixed.verdict is Verdict.Fits, fixed.message
    rec = fixed.recommendation
    assert rec is not None and rec.gpu_class == "nvidia-l4" and rec.gpu_count == 1
    assert rec.headroom_fraction >= 0.10
    assert fixed.estimate.max_concurrency >= 1  # the fix holds one maxModelLen request


@pytest.mark.parametrize(
    "doc",
    [
        _doc("sglang", ["nvidia-l4"]),
        _doc("vllm", ["nvidia-l4"], gpuMemoryUtilization=0.95),
        _doc("vllm", ["nvidia-l4"], targetConcurrency=6),
        _doc("tgi", ["nvidia-l4"], targetConcurrency=6),
        _doc("sglang", ["nvidia-l4", "nvidia-a10g"], targetConcurrency=4),
        _doc("transformers", ["nvidia-l4"], maxNumSeqs=64),
    ],
    ids=["sglang-l4", "vllm-fraction-too-high", "vllm-concurrency", "tgi-concurrency",
         "sglang-two-classes", "transformers"],
)  # fmt: skip
def test_fixes_are_cheapest_first_and_each_that_fits_does(doc: dict[str, Any]) -> None:
    a = assess(parse_spec(copy.deepcopy(doc)))
    assert a.verdict is Verdict.NoSafeHeadroom and a.fixes
    costs = [fix_cost(f.field) for f in a.fixes]
    assert costs == sorted(costs), [f.field for f in a.fixes]
    for fix in a.fixes:
        if fix.field not in _PATHS:
            continue
        again = assess(parse_spec(_applied(doc, fix)))
        assert (again.verdict is Verdict.Fits) == fix.fits, (str(fix), again.message)


def test_a_fraction_above_the_policy_is_lowered_to_the_nearest_that_serves() -> None:
    doc = _doc("vllm", ["nvidia-l4"], gpuMemoryUtilization=0.95)
    a = assess(parse_spec(copy.deepcopy(doc)))
    flag = next(f for f in a.fixes if f.field == "spec.inference.gpuMemoryUtilization")
    assert flag.fits and flag.value < 0.95
    above = _applied(doc, flag)
    above["inference"]["gpuMemoryUtilization"] = round(flag.value + 0.01, 2)
    assert assess(parse_spec(above)).verdict is Verdict.NoSafeHeadroom


def test_a_larger_class_is_offered_only_when_the_spec_restricts_classes() -> None:
    restricted = assess(parse_spec(_doc("vllm", ["nvidia-l4"], targetConcurrency=6)))
    assert any(f.field == "spec.placement.gpuClasses" for f in restricted.fixes)
    anywhere = _doc("vllm", [], targetConcurrency=400, maxNumSeqs=512, maxModelLen=8192)
    assert all(f.field != "spec.placement.gpuClasses" for f in assess(parse_spec(anywhere)).fixes)
