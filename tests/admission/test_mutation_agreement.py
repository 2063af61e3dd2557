"""The mutating and the validating webhook agree (issue 13, item 9).

The API server runs the mutating webhook first and stores what the validating webhook then allows.
For every spec a user may write and every namespace policy:

* the defaulted object gets exactly the verdict (and message, and warnings) of the object as
  written: a spec the validator allows is still allowed once defaulted, and one it denies is
  denied for the same reason;
* every value the user set is kept as written (the patch only adds);
* defaulting twice adds nothing;
* a later ``kubectl apply`` over the stored, defaulted object is judged like the user's new
  manifest alone: nothing the webhook filled in changes a later verdict (so defaults derived
  from other fields, like the engine's ``maxNumBatchedTokens``, are never written).

The patch is applied the way kopf builds it for the API server (``kopf.Patch.as_json_patch``
against the request's object, then RFC 6902), so this is the stored object.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import jsonpatch
import kopf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpu_sizer.admission.verdict import Outcome, defaulted_spec, review
from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.policy.namespace import EffectivePolicy, Policy
from tests.architectures import LLAMA_3_2_1B, LLAMA_3_8B

from .specs import effective_policies, spec_documents

OPEN = Policy().for_namespace({})


def mutated(doc: dict[str, Any], policy: EffectivePolicy) -> dict[str, Any]:
    """The ``.spec`` the API server stores after the mutating webhook's patch."""
    body = {"apiVersion": "gpusizer.dev/v1alpha1", "kind": "GPUWorkload", "spec": doc}
    wire = defaulted_spec(doc, policy=policy)
    assert wire is not None
    patch = kopf.Patch(body=kopf.Body(body))
    patch["spec"] = wire
    ops = patch.as_json_patch()
    assert all(op["op"] == "add" and op["path"].startswith("/spec/") for op in ops), ops
    stored: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(body), ops)
    return stored["spec"]  # type: ignore[no-any-return]


def leaves(doc: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) for every scalar and list the user wrote."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from leaves(value, (*path, key))
    else:
        yield path, doc


def at(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


#: TGI prefills maxModelLen + 50 tokens per batch: 250, below the 256 sequences, which the API
#: refuses as an explicit maxNumBatchedTokens (issue 13: every such TGI spec was denied after
#: defaulting).
TGI_SHORT_CONTEXT = {
    "model": {"architecture": LLAMA_3_8B},
    "inference": {"engine": "tgi", "maxModelLen": 200, "maxNumSeqs": 256},
}
#: A user's maxNumBatchedTokens above maxNumSeqs x maxModelLen (8192): the budget caps what it
#: assumes, but the user's value must stay as written (issue 13: 100000 became 8192).
USER_BATCHED_TOKENS = {
    "model": {"architecture": LLAMA_3_8B},
    "inference": {"maxModelLen": 512, "maxNumSeqs": 16, "maxNumBatchedTokens": 100_000},
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=spec_documents(), policy=effective_policies())
@example(doc=TGI_SHORT_CONTEXT, policy=OPEN)
@example(doc=USER_BATCHED_TOKENS, policy=OPEN)
def test_defaulted_object_gets_the_same_verdict_and_keeps_user_values(
    doc: dict[str, Any], policy: EffectivePolicy
) -> None:
    before = review(doc, namespace="ns", policy=policy, catalog=DEFAULT_CATALOG)
    if before.outcome is Outcome.Invalid:
        assert defaulted_spec(doc, policy=policy) is None  # left for the validator to deny
        return
    stored = mutated(doc, policy)
    after = review(stored, namespace="ns", policy=policy, catalog=DEFAULT_CATALOG)
    assert after == before
    for path, value in leaves(doc):
        assert at(stored, path) == value, path
    assert mutated(stored, policy) == stored


@settings(max_examples=150, deadline=None)
@given(doc=spec_documents())
def test_defaulted_object_is_sized_exactly_like_the_original(doc: dict[str, Any]) -> None:
    if review(doc, namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG).outcome is Outcome.Invalid:
        return
    assert estimate(parse_spec(mutated(doc, OPEN))) == estimate(parse_spec(doc))


def test_tgi_default_below_max_num_seqs_is_not_written() -> None:
    assert review(TGI_SHORT_CONTEXT, namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG).allowed
    stored = mutated(TGI_SHORT_CONTEXT, OPEN)
    assert "maxNumBatchedTokens" not in stored["inference"]
    assert review(stored, namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG).allowed


def test_user_max_num_batched_tokens_is_kept() -> None:
    assert mutated(USER_BATCHED_TOKENS, OPEN)["inference"]["maxNumBatchedTokens"] == 100_000


def test_engine_defaults_derived_from_other_fields_stay_implicit() -> None:
    # Found by the property above when the webhook still wrote maxNumBatchedTokens: TGI with
    # maxModelLen 720 got 770 written, and the denial's computed fixes (maxModelLen 655) were
    # then sized with 770 frozen, unlike `gpu-sizer estimate` on the same file.
    doc = {
        "model": {"architecture": LLAMA_3_8B},
        "inference": {"maxModelLen": 720, "maxNumSeqs": 16},
    }
    for engine in ("vllm", "sglang", "tgi"):
        stored = mutated({**doc, "inference": {**doc["inference"], "engine": engine}}, OPEN)
        assert "maxNumBatchedTokens" not in stored["inference"]


def test_a_later_edit_of_other_fields_is_judged_as_if_never_defaulted() -> None:
    # A frozen vLLM default of max(8192, maxNumSeqs) = 8192 would make the validator deny a later
    # `kubectl apply` that raises maxNumSeqs to 10000, for a field the user never set.
    first = {
        "model": {"architecture": LLAMA_3_2_1B},
        "inference": {"maxModelLen": 128, "maxNumSeqs": 16},
    }
    stored = mutated(first, OPEN)
    edited = copy.deepcopy(stored)  # kubectl apply keeps the fields it did not set
    edited["inference"]["maxNumSeqs"] = 10_000
    fresh = {**first, "inference": {**first["inference"], "maxNumSeqs": 10_000}}
    answer = review(edited, namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG)
    assert answer == review(fresh, namespace="ns", policy=OPEN, catalog=DEFAULT_CATALOG)
    assert answer.outcome is not Outcome.Invalid, answer


@st.composite
def edits(draw: st.DrawFn, first: dict[str, Any]) -> dict[str, Any]:
    """The user's next manifest: usually the first with a few sizing fields changed, sometimes
    another spec altogether."""
    if draw(st.integers(0, 4)) == 0:
        return draw(spec_documents())
    second = copy.deepcopy(first)
    part = second.get("inference") or second["training"]
    if "inference" in second:
        for key, values in (
            ("maxNumSeqs", st.integers(1, 20_000)),
            ("maxModelLen", st.integers(1, 8192)),
            ("engine", st.sampled_from(["vllm", "tgi", "sglang", "transformers"])),
        ):
            if draw(st.booleans()):
                part[key] = draw(values)
    elif draw(st.booleans()):
        part["microBatchSize"] = draw(st.integers(1, 64))
    if draw(st.booleans()):
        second.pop("placement", None)
    return second


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=spec_documents(), data=st.data(), policy=effective_policies())
def test_an_update_of_a_defaulted_object_is_judged_like_the_users_own_spec(
    first: dict[str, Any], data: st.DataObject, policy: EffectivePolicy
) -> None:
    """kubectl apply's merge: the user's new manifest over the stored (defaulted) object, where
    fields the user never set keep their stored values. The result must be judged like the
    user's new manifest alone: what the webhook filled in must not change any verdict later."""
    if review(first, namespace="ns", policy=policy, catalog=DEFAULT_CATALOG).outcome in (
        Outcome.Invalid,
        Outcome.PolicyViolation,
    ):
        return
    second = data.draw(edits(first))
    stored = mutated(first, policy)
    merged = merge(stored, second, first)
    expected = review(second, namespace="ns", policy=policy, catalog=DEFAULT_CATALOG)
    if expected.outcome is Outcome.Invalid:
        return  # which fields it names can differ; it stays invalid either way
    again = review(mutated(merged, policy), namespace="ns", policy=policy, catalog=DEFAULT_CATALOG)
    assert (again.outcome, again.message, again.warnings) == (
        expected.outcome,
        expected.message,
        expected.warnings,
    )


def merge(stored: Any, new: Any, last_applied: Any) -> Any:
    """kubectl apply's three-way merge for plain objects and lists: the new manifest's values
    win; fields in the last applied manifest but not in the new one are removed; fields only the
    webhook (or anyone else) wrote are kept."""
    if not (isinstance(stored, dict) and isinstance(new, dict)):
        return copy.deepcopy(new)
    last = last_applied if isinstance(last_applied, dict) else {}
    out = {k: copy.deepcopy(v) for k, v in stored.items() if k in new or k not in last}
    for key, value in new.items():
        out[key] = merge(stored.get(key), value, last.get(key))
    return out
