"""The cache of validation answers: the same answer as a fresh review, normalized keys, bounded
memory, and one computation for a burst of the same spec."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from gpu_sizer.admission import handlers
from gpu_sizer.admission.answers import MAX_KEY_CHARS, AnswerCache, AnswerKey, spec_key
from gpu_sizer.admission.verdict import Answer, Outcome, review
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.policy.namespace import EffectivePolicy, Policy
from tests.example_files import WORKLOAD_FILES

from .specs import effective_policies, spec_documents

OPEN = Policy().for_namespace({})
EXAMPLES = WORKLOAD_FILES


def key(text: str, namespace: str = "ns", policy: EffectivePolicy = OPEN) -> AnswerKey:
    return (text, namespace, policy)


def test_the_key_is_the_canonical_json_of_the_spec() -> None:
    assert spec_key({"b": 1, "a": {"d": [1, 2], "c": True}}) == '{"a":{"c":true,"d":[1,2]},"b":1}'
    # Equal documents, whatever the order of their keys, share a key ...
    assert spec_key({"a": 1, "b": 2}) == spec_key({"b": 2, "a": 1})
    # ... and whatever the validator can tell apart, the key tells apart too (the API's
    # strict types refuse 1.0 or true where an integer is due).
    assert len({spec_key({"n": 1}), spec_key({"n": 1.0}), spec_key({"n": True})}) == 3
    assert spec_key({"s": "é"}) != spec_key({"s": "e"})
    assert spec_key({"s": "x" * MAX_KEY_CHARS}) is None  # too long to keep
    assert spec_key({"s": {1, 2}}) is None  # not JSON data: never from a decoded review


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=spec_documents(), policy=effective_policies())
def test_a_stored_answer_is_the_answer_a_fresh_review_gives(
    doc: dict[str, Any], policy: EffectivePolicy
) -> None:
    cache = AnswerCache()
    text = spec_key(doc)
    assert text is not None
    first = review(doc, namespace="team", policy=policy, catalog=DEFAULT_CATALOG)
    cache.put(key(text, "team", policy), first)
    stored = cache.get(key(text, "team", policy))
    again = review(doc, namespace="team", policy=policy, catalog=DEFAULT_CATALOG)
    assert stored in (first, None)  # None only for the outcomes never stored
    assert again == first
    if stored is None:
        assert first.outcome in (Outcome.SizingFailed, Outcome.PolicyUnavailable)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_is_answered_from_the_cache_as_reviewed(path: Path) -> None:
    spec = yaml.safe_load(path.read_text())["spec"]
    answer = review(spec, namespace="default", policy=OPEN, catalog=DEFAULT_CATALOG)
    cache = AnswerCache()
    text = spec_key(spec)
    assert text is not None
    cache.put(key(text, "default"), answer)
    # The document decoded again (a new object, as every review decodes its own body).
    again = yaml.safe_load(path.read_text())["spec"]
    assert cache.get(key(spec_key(again) or "", "default")) == answer


def test_the_namespace_and_the_policy_are_part_of_the_key() -> None:
    cache = AnswerCache()
    strict = dataclasses.replace(OPEN, min_headroom_fraction_floor=0.2)
    cache.put(key("{}", "a"), Answer(Outcome.Allowed))
    assert cache.get(key("{}", "b")) is None
    assert cache.get(key("{}", "a", strict)) is None
    assert cache.get(key("{}", "a")) == Answer(Outcome.Allowed)


def test_the_least_recently_used_answers_go_first_beyond_the_entry_bound() -> None:
    cache = AnswerCache(max_entries=3)
    for name in "abc":
        cache.put(key(name), Answer(Outcome.Allowed))
    assert cache.get(key("a")) is not None  # now the most recently used
    cache.put(key("d"), Answer(Outcome.Allowed))
    assert [cache.get(key(n)) is not None for n in "abcd"] == [True, False, True, True]
    assert len(cache) == 3


def test_memory_is_bounded_by_the_characters_held() -> None:
    cache = AnswerCache(max_chars=1000)
    denial = Answer(Outcome.NoSafeHeadroom, "m" * 300, ("w" * 100,))
    for i in range(10):
        cache.put(key(f"{i:0>96}"), denial)  # 96 + 2 + 300 + 100 = 498 characters each
    assert len(cache) == 2
    assert cache.chars == 2 * 498 <= 1000
    cache.put(key("x"), Answer(Outcome.Invalid, "m" * 2000))  # larger than the whole budget
    assert cache.get(key("x")) is None and len(cache) == 2
    cache.put(key(f"{9:0>96}"), Answer(Outcome.Allowed))  # replaced: its old size is given back
    assert cache.chars == 498 + 98
    cache.clear()
    assert (len(cache), cache.chars) == (0, 0)


def test_answers_that_depend_on_more_than_the_spec_are_never_stored() -> None:
    cache = AnswerCache()
    cache.put(key("a"), Answer(Outcome.SizingFailed, "a bug"))
    cache.put(key("b"), Answer(Outcome.PolicyUnavailable, "retry"))
    assert len(cache) == 0


async def test_a_burst_of_one_spec_is_judged_once() -> None:
    cache = AnswerCache()
    release = asyncio.Event()
    calls = 0

    async def judge() -> Answer:
        nonlocal calls
        calls += 1
        await release.wait()
        return Answer(Outcome.Allowed, "", ("w",))

    burst = [asyncio.create_task(cache.answer(key("s"), judge)) for _ in range(50)]
    await asyncio.sleep(0)
    release.set()
    answers = await asyncio.gather(*burst)
    assert calls == 1
    assert set(answers) == {Answer(Outcome.Allowed, "", ("w",))}
    assert await cache.answer(key("s"), judge) == answers[0] and calls == 1  # stored


async def test_reviews_waiting_on_a_failed_computation_compute_their_own() -> None:
    cache = AnswerCache()
    release = asyncio.Event()
    calls = 0

    async def judge() -> Answer:
        nonlocal calls
        calls += 1
        if calls == 1:
            await release.wait()
            raise RuntimeError("shed")
        return Answer(Outcome.Allowed)

    first = asyncio.create_task(cache.answer(key("s"), judge))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(cache.answer(key("s"), judge))
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(RuntimeError):
        await first
    assert await waiting == Answer(Outcome.Allowed)
    assert calls == 2


async def test_a_spec_that_cannot_be_keyed_is_judged_every_time() -> None:
    cache = AnswerCache()
    calls = 0

    async def judge() -> Answer:
        nonlocal calls
        calls += 1
        return Answer(Outcome.Allowed)

    await cache.answer(None, judge)
    await cache.answer(None, judge)
    assert calls == 2 and len(cache) == 0


def test_a_config_made_from_another_starts_with_its_own_answers() -> None:
    # The catalog is not in the key: a config with another catalog must not see old answers.
    config = handlers.AdmissionConfig(namespaces=handlers._config.namespaces)
    config.answers.put(key("s"), Answer(Outcome.Allowed))
    other = dataclasses.replace(config, catalog=DEFAULT_CATALOG[:3])
    assert other.answers is not config.answers and len(other.answers) == 0


def test_the_effective_policy_is_worked_out_once_per_label_set() -> None:
    policy = Policy.model_validate(
        {"namespaceRules": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}
    )
    config = handlers.AdmissionConfig(policy=policy, namespaces=handlers._config.namespaces)
    first = config.effective_policy({"team": "a", "x": "1"})
    assert config.effective_policy({"x": "1", "team": "a"}) is first
    assert first == policy.for_namespace({"team": "a"})
    assert config.effective_policy({"team": "b"}) == policy.for_namespace({})
    for i in range(handlers.MAX_LABEL_SETS + 5):  # bounded: starts over when full
        config.effective_policy({"n": str(i)})
    assert len(config._effective) <= handlers.MAX_LABEL_SETS
