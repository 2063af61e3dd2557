"""The JSON nesting guard: the bracket count it starts with never changes its answer."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_sizer.admission.server import MAX_JSON_DEPTH, json_depth_exceeds


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
