"""The pure admission verdict: offline parity with sizing.assess, and defaulting."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_sizer.admission.handlers import MAX_LOGGED_DENIAL_CHARS, DenialLogFilter
from gpu_sizer.admission.verdict import (
    MAX_MESSAGE_CHARS,
    Outcome,
    bounded,
    defaulted_spec,
    review,
)
from gpu_sizer.api import parse_spec
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.policy.namespace import Policy
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess
from tests.architectures import LLAMA_3_8B

OPEN = Policy().for_namespace({})


def spec(seqs: int, length: int = 8192, **placement: Any) -> dict[str, Any]:
    return {
        "model": {"revision": "abc", "architecture": LLAMA_3_8B},
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


def test_policy_violations_are_all_reported_in_one_answer() -> None:
    policy = Policy.model_validate(
        {
            "minHeadroomFractionFloor": 0.05,
            "namespaceRules": [
                {
                    "namespaceSelector": {"matchLabels": {"team": "research"}},
                    "allowedGpuClasses": ["nvidia-l4", "nvidia-a100-40gb"],
                }
            ],
        }
    ).for_namespace({"team": "research"})
    doc = spec(
        4,
        gpuClasses=["nvidia-l4", "nvidia-h100-80gb", "nvidia-h200"],
        minHeadroomFraction=0.02,
    )
    answer = review(doc, namespace="research", policy=policy, catalog=DEFAULT_CATALOG)
    assert answer.outcome is Outcome.PolicyViolation
    assert answer.code == 403
    assert answer.message == (
        "spec.placement.minHeadroomFraction: 0.02 is below the floor of 0.05 that the policy "
        "sets for namespace 'research'; raise it to at least 0.05\n"
        "spec.placement.gpuClasses: namespace 'research' allows only nvidia-a100-40gb, "
        "nvidia-l4; remove nvidia-h100-80gb, nvidia-h200"
    )


def test_unset_headroom_takes_the_namespace_default() -> None:
    strict = Policy.model_validate({"defaultMinHeadroomFraction": 0.45}).for_namespace({})
    doc = spec(1, 1024)
    doc.pop("placement")
    explicit = {**doc, "placement": {"minHeadroomFraction": 0.45}}
    answer = review(doc, namespace="ns", policy=strict, catalog=DEFAULT_CATALOG)
    same = review(explicit, namespace="ns", policy=strict, catalog=DEFAULT_CATALOG)
    assert answer == same
    assert assess(parse_spec(explicit)).recommendation != assess(parse_spec(doc)).recommendation


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
near_specs = st.fixed_dictionaries(
    {},
    optional={
        "model": st.fixed_dictionaries(
            {}, optional={"architecture": st.just(LLAMA_3_8B), "parameterCount": json_values}
        ),
        "inference": st.dictionaries(
            st.sampled_from(["maxModelLen", "maxNumSeqs", "engine", "kvCacheDtype", "x"]),
            json_values,
        ),
        "placement": st.dictionaries(
            st.sampled_from(["gpuClasses", "minHeadroomFraction"]), json_values
        ),
    },
)


@settings(max_examples=150, deadline=None)
@given(doc=json_values | near_specs)
def test_any_document_gets_an_answer_never_an_exception(doc: Any) -> None:
    answer = review(doc, namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG)
    assert answer.allowed or answer.message
    explicit = defaulted_spec(doc, policy=OPEN)
    if explicit is not None:
        assert review(explicit, namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG) == answer


@pytest.mark.parametrize(
    "exc",
    [
        OverflowError("integer division result too large for a float"),
        TypeError("unhashable type: 'dict'"),
        KeyError("sliding_window"),
    ],
)
def test_a_failure_in_sizing_is_a_named_denial_never_a_500(
    monkeypatch: pytest.MonkeyPatch, exc: Exception
) -> None:
    """Any exception inside the memory model (forced here) is the verdict SizingFailed: a
    422 denial naming the cause, the same verdict the CLI and the operator get."""
    import gpu_sizer.sizing.verdict as sizing

    def fail(*_: Any, **__: Any) -> None:
        raise exc

    monkeypatch.setattr(sizing, "assess_or_raise", fail)
    answer = review(spec(4), namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG)
    assert answer.outcome is Outcome.SizingFailed
    assert not answer.allowed
    assert answer.code == 422
    assert answer.message == (
        f"gpu-sizer could not size this spec ({type(exc).__name__}: {exc}); the spec passed "
        "validation, so this is a gpu-sizer bug: please report it with the spec"
    )


def test_denials_are_bounded_in_the_answer_and_in_the_log() -> None:
    text = "x" * 100_000
    assert len(bounded(text)) == MAX_MESSAGE_CHARS
    assert bounded(text).endswith(f"({100_000 - MAX_MESSAGE_CHARS} more characters not shown)")
    record = logging.LogRecord(
        "kopf.objects",
        logging.ERROR,
        __file__,
        1,
        "Webhook 'validate-gpuworkload' failed permanently: %s",
        (text,),
        None,
    )
    DenialLogFilter().filter(record)
    assert record.levelname == "INFO"
    assert len(record.getMessage()) == len("Admission denied: ") + MAX_LOGGED_DENIAL_CHARS
    # A labelled pod denied under podEnforcement Enforce is a denial too, not an operator fault
    # (kopf logged it at ERROR on a real API server); a handler crash keeps its ERROR.
    for message, level in (
        ("Webhook 'mutate-pod' failed permanently: pod denied by gpu-sizer", "INFO"),
        ("Webhook 'mutate-pod' failed with an exception. Will retry.", "ERROR"),
    ):
        record = logging.LogRecord("kopf.objects", logging.ERROR, __file__, 1, message, (), None)
        DenialLogFilter().filter(record)
        assert record.levelname == level, message
