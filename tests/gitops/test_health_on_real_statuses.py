"""The Argo CD health check on statuses the operator's own pure core writes (gpu_sizer.lifecycle)
for every example: a workload that fits is Progressing while its measurement is pending and
Healthy when measurement is disabled; one with no safe headroom is Degraded."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_sizer.api import parse_workload, spec_hash
from gpu_sizer.lifecycle import estimated_status
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess
from tests.example_files import WORKLOAD_FILES

from .test_argocd_health import run_health

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = WORKLOAD_FILES


def with_status(doc: dict[str, Any], generation: int) -> dict[str, Any]:
    spec = parse_workload(doc)
    assessment = assess(spec)
    status = estimated_status(
        spec,
        assessment,
        spec_hash=spec_hash(spec),
        generation=generation,
        now="2026-01-01T00:00:00Z",
    )
    obj = copy.deepcopy(doc)
    obj["metadata"]["generation"] = generation
    obj["status"] = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    obj["__verdict__"] = assessment.verdict
    return obj


@pytest.mark.skipif(not EXAMPLES, reason="examples/ comes with the offline branch")
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize("mode", ["Synthetic", "Disabled"])
def test_health_of_operator_written_status(path: Path, mode: str) -> None:
    doc = yaml.safe_load(path.read_text())
    doc["spec"].setdefault("measurement", {})["mode"] = mode
    obj = with_status(doc, generation=2)
    verdict = obj.pop("__verdict__")
    hs = run_health(obj)
    if verdict is not Verdict.Fits:
        assert hs["status"] == "Degraded", hs
    elif mode == "Disabled":
        assert hs["status"] == "Healthy", hs
        assert obj["status"]["recommendation"]["gpuClass"] in hs["message"]
    else:
        assert hs["status"] == "Progressing", hs
    # The same status read after the user changed the spec (generation 3) is not current.
    obj["metadata"]["generation"] = 3
    assert run_health(obj)["status"] == "Progressing"


def test_examples_cover_both_verdicts() -> None:
    if not EXAMPLES:
        pytest.skip("examples/ comes with the offline branch")
    verdicts = {assess(parse_workload(yaml.safe_load(p.read_text()))).verdict for p in EXAMPLES}
    assert Verdict.Fits in verdicts and len(verdicts) >= 2
