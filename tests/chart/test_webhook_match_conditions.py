"""The webhook configurations send only new specs to the webhook (matchConditions, CEL).

The expression is evaluated here with cel-python on the AdmissionRequest variables the API server
binds (``request``, ``object``, ``oldObject``), for the writes that must never be judged: kopf's
or a GitOps tool's metadata updates, and the removal of the last finalizer of an object being
deleted (issue 13, item 1).
"""

from __future__ import annotations

from typing import Any

import celpy
import pytest

from .conftest import Render

KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def _hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPUWorkload webhooks (the pod webhook has no spec to compare: pods are CREATE only)."""
    return [
        hook
        for d in docs
        if d["kind"] in KINDS
        for hook in d["webhooks"]
        if hook["name"].endswith(".gpuworkloads.gpusizer.dev")
    ]


def _matches(expression: str, operation: str, old: Any, new: Any) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    activation = {
        "request": celpy.json_to_cel({"operation": operation}),
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
    }
    return bool(program.evaluate(activation))


def _obj(spec: Any = None, **meta: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"metadata": {"name": "w", "namespace": "ml", **meta}}
    if spec is not None:
        doc["spec"] = spec
    return doc


SPEC = {"model": {"parameterCount": 8_000_000_000, "dtype": "bfloat16"}, "inference": {}}
CASES = [
    ("create", "CREATE", None, _obj(SPEC), True),
    ("spec change", "UPDATE", _obj(SPEC), _obj({**SPEC, "inference": {"maxNumSeqs": 4}}), True),
    ("spec added", "UPDATE", _obj(), _obj(SPEC), True),
    ("finalizer added", "UPDATE", _obj(SPEC), _obj(SPEC, finalizers=["gpusizer.dev/f"]), False),
    ("label added", "UPDATE", _obj(SPEC), _obj(SPEC, labels={"argocd": "app"}), False),
    (
        "last finalizer removed while deleting",
        "UPDATE",
        _obj(SPEC, deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["x"]),
        _obj(SPEC, deletionTimestamp="2026-01-01T00:00:00Z"),
        False,
    ),
    (
        "spec changed while deleting",
        "UPDATE",
        _obj(SPEC, deletionTimestamp="2026-01-01T00:00:00Z"),
        _obj({"model": {}}, deletionTimestamp="2026-01-01T00:00:00Z"),
        False,
    ),
]


@pytest.mark.parametrize(
    ("operation", "old", "new", "sent"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_only_new_specs_reach_the_webhooks(
    render: Render, operation: str, old: Any, new: Any, sent: bool
) -> None:
    hooks = _hooks(render())
    assert len(hooks) == 2
    for hook in hooks:
        (condition,) = hook["matchConditions"]
        assert _matches(condition["expression"], operation, old, new) is sent
