"""The JSON nesting guard: the bracket count it starts with never changes its answer."""

from __future__ import annotations

import gc
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_sizer.admission.server import MAX_JSON_DEPTH, decode_review, json_depth_exceeds

from .conftest import admission_review, workload
from .test_webhook import inference


def depth(value: Any) -> int:
    """Levels of arrays and objects in a decoded document (the reference)."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def nested(levels: int) -> Any:
    doc: Any = "x"
    for i in range(levels):
        doc = [doc] if i % 2 else {"k": doc}
    return doc


def test_the_limit_itself_passes_and_one_level_more_does_not() -> None:
    assert not json_depth_exceeds(json.dumps(nested(MAX_JSON_DEPTH)))
    assert json_depth_exceeds(json.dumps(nested(MAX_JSON_DEPTH + 1)))


def test_brackets_in_strings_are_not_nesting() -> None:
    text = json.dumps({"a": "[" * 500 + "{" * 500, "b": ['\\"[[[', "]]]"]})
    assert not json_depth_exceeds(text)
    # Many brackets, all shallow: past the count, the walk decides.
    assert not json_depth_exceeds(json.dumps([{} for _ in range(1000)]))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ax', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(doc=JSON, limit=st.integers(0, 12))
def test_the_answer_is_the_documents_depth_against_the_limit(doc: Any, limit: int) -> None:
    assert json_depth_exceeds(json.dumps(doc), limit) is (depth(doc) > limit)


def test_decoding_a_body_runs_no_garbage_collection() -> None:
    """A tester's finding: a 7 MiB body of tiny values stalled the event loop while it was
    decoded (in a thread, but the decoder holds the interpreter lock throughout). For 7 MiB of
    empty lists most of that was the cyclic collector, triggered every 700 new containers and
    traversing them all again: 1.6 s, 0.12 s without it. A decoded JSON document holds no
    reference cycles, so those collections free nothing: decoding pauses the collector."""
    review = admission_review(workload(inference()))
    review["request"]["object"]["spec"]["model"]["extra"] = [[] for _ in range(20_000)]
    raw = json.dumps(review).encode()
    runs: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(phase)

    assert gc.isenabled()
    gc.callbacks.append(count)
    try:
        decode_review(raw)
    finally:
        gc.callbacks.remove(count)
    assert runs == []
    assert gc.isenabled()


def test_a_paused_collector_stays_paused_after_decoding() -> None:
    gc.disable()
    try:
        decode_review(json.dumps(admission_review(workload(inference()))).encode())
        assert not gc.isenabled()
    finally:
        gc.enable()
