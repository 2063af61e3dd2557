"""Label and field selectors as the loopback API server applies them (apimachinery's grammar)."""

from __future__ import annotations

import pytest
from gpu_sizer_testbed.selector import InvalidSelector, field_selector, label_selector

POD = {
    "metadata": {"name": "p1", "namespace": "ml", "labels": {"app": "probe", "tier": "gpu"}},
    "involvedObject": {"kind": "GPUWorkload", "name": "llm", "uid": "u-1"},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=probe", True),
        ("app==probe", True),
        ("app!=probe", False),
        ("app=probe,tier=gpu", True),
        ("app=probe,tier=cpu", False),
        ("app in (probe, web)", True),
        ("app notin (probe,web)", False),
        ("tier", True),
        ("!tier", False),
        ("!missing", True),
        ("missing", False),
        ("missing!=x", True),  # an absent label is not equal to x
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert label_selector(selector)(POD) is matches


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name!=p1", False),
        ("metadata.name=p1,metadata.namespace=ml", True),
        ("metadata.namespace=other", False),
        # kubectl describe finds an object's Events this way
        ("involvedObject.name=llm,involvedObject.kind=GPUWorkload,involvedObject.uid=u-1", True),
        ("involvedObject.uid=u-2", False),
        ("status.phase=Running", True),
        ("spec.nodeName=", True),  # absent fields compare as the empty string
        (r"metadata.name=p\,1", False),
    ],
)
def test_field_selector(selector: str, matches: bool) -> None:
    assert field_selector(selector)(POD) is matches


def test_escaped_comma_is_part_of_the_value() -> None:
    obj = {"metadata": {"name": "a,b"}}
    assert field_selector(r"metadata.name=a\,b")(obj)


@pytest.mark.parametrize("bad", ["app in probe", "a b", "=x"])
def test_unparsable_label_selectors_are_errors(bad: str) -> None:
    with pytest.raises(InvalidSelector):
        label_selector(bad)


def test_field_selector_without_an_operator_is_an_error() -> None:
    with pytest.raises(InvalidSelector, match=r"metadata\.name"):
        field_selector("metadata.name")
