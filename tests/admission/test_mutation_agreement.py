"""The mutating and the validating webhook agree (issue 13, item 9).

The API server runs the mutating webhook first and stores what the validating webhook then allows.
For every spec a user may write and every namespace policy:

* the defaulted object gets exactly the verdict (and message, and warnings) of the object as
  written: a spec the validator allows is still allowed once defaulted, and one it denies is
  denied for the same reason;
* every value the user set is kept as written (the patch only adds);
* defaulting twice adds nothing.

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

from gpu_sizer.admission.policy import EffectivePolicy, Policy
from gpu_sizer.admission.verdict import Outcome, defaulted_spec, review
from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG
from tests.architectures import LLAMA_3_8B

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


def test_engine_default_is_written_when_the_api_accepts_it() -> None:
    doc = {
        "model": {"architecture": LLAMA_3_8B},
        "inference": {"maxModelLen": 4096, "maxNumSeqs": 4},
    }
    stored = mutated(doc, OPEN)
    assert stored["inference"]["maxNumBatchedTokens"] == 8192  # vLLM's chunked-prefill default
    tgi = mutated({**doc, "inference": {**doc["inference"], "engine": "tgi"}}, OPEN)
    assert tgi["inference"]["maxNumBatchedTokens"] == 4096 + 50  # TGI's max_batch_prefill_tokens
