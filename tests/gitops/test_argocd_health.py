"""The Argo CD health check (hack/argocd-health.lua) under Lua 5.1, the dialect of gopher-lua that
Argo CD embeds. Each case in health_cases.yaml is a GPUWorkload and the health it must get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

lua51 = pytest.importorskip("lupa.lua51")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (ROOT / "hack" / "argocd-health.lua").read_text()
CASES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "health_cases.yaml").read_text()
)


def run_health(obj: dict[str, Any]) -> dict[str, str]:
    """Run the script as Argo CD does: a global ``obj``, the script's return value is ``hs``."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    # Argo CD loads the script as a chunk; a chunk's top-level `return` is its result.
    hs = lua.execute(SCRIPT)
    return {"status": hs["status"], "message": hs["message"]}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_health(case: dict[str, Any]) -> None:
    hs = run_health(case["object"])
    assert hs["status"] == case["expect"]["status"], hs
    assert case["expect"]["message"] in hs["message"], hs


def test_every_argo_status_is_covered() -> None:
    """The cases exercise the three healths the operator's statuses map to."""
    assert {c["expect"]["status"] for c in CASES} == {"Healthy", "Progressing", "Degraded"}


def test_unknown_fields_and_empty_conditions_do_not_break_the_script() -> None:
    hs = run_health(
        {
            "metadata": {"generation": 1},
            "status": {"observedGeneration": 1, "conditions": [], "futureField": {"x": 1}},
        }
    )
    assert hs == {"status": "Progressing", "message": "Waiting for the Ready condition"}
