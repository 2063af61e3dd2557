"""The pure admission verdict: offline parity with sizing.assess, and defaulting."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.admission.policy import Policy
from gpu_sizer.admission.verdict import Outcome, defaulted_spec, review
from gpu_sizer.api import parse_spec
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.sizing import Verdict, assess

from .conftest import LLAMA3_8B

OPEN = Policy().for_namespace({})


def spec(seqs: int, length: int = 8192, **placement: Any) -> dict[str, Any]:
    return {
        "model": {"revision": "abc", "architecture": LLAMA3_8B},
        "inference": {"maxModelLen": length, "maxNumSeqs": seqs},
        "placement": placement,
    }


@pytest.mark.parametrize("seqs", [1, 4, 16, 64, 128, 256, 1024, 4096])
@pytest.mark.parametrize("classes", [[], ["nvidia-l4"], ["nvidia-h100-80gb", "nvidia-h200"]])
def test_verdict_and_message_match_assess(seqs: int, classes: list[str]) -> None:
    doc = spec(seqs, gpuClasses=classes)
    assessment = assess(parse_spec(doc), DEFAULT_CATALOG)
    answer = review(doc, namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG)
    if assessment.verdict is Verdict.NoSafeHeadroom:
        assert answer.outcome is Outcome.NoSafeHeadroom
        assert answer.message == assessment.message
        assert answer.code == 422
    else:
        assert answer.allowed
        assert answer.message == ""
        assert set(assessment.warnings) <= set(answer.warnings)


def test_defaulting_does_not_change_the_verdict_and_is_idempotent() -> None:
    for seqs in (1, 16, 256, 4096):
        doc = spec(seqs)
        doc.pop("placement")
        explicit = defaulted_spec(doc, policy=OPEN)
        assert explicit is not None
        assert explicit["placement"]["minHeadroomFraction"] == 0.10
        assert defaulted_spec(explicit, policy=OPEN) == explicit
        before = assess(parse_spec(doc))
        after = assess(parse_spec(explicit))
        assert (before.verdict, before.message) == (after.verdict, after.message)


def test_defaults_follow_the_namespace_policy() -> None:
    policy = Policy.model_validate(
        {
            "namespaceRules": [
                {
                    "namespaceSelector": {"matchLabels": {"t": "r"}},
                    "defaultMinHeadroomFraction": 0.2,
                }
            ]
        }
    ).for_namespace({"t": "r"})
    explicit = defaulted_spec({k: v for k, v in spec(4).items() if k != "placement"}, policy=policy)
    assert explicit is not None and explicit["placement"]["minHeadroomFraction"] == 0.2
    assert defaulted_spec({"model": {}}, policy=policy) is None
    assert defaulted_spec("not a mapping", policy=policy) is None
