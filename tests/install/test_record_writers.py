"""Only the operator writes GPUMeasurement records, on the real API server: the chart's
ValidatingAdmissionPolicy refuses a record from the cluster administrator (whom RBAC cannot
refuse) and admits the operator's ServiceAccount; deleting a record stays open (it only makes
its users measure again)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from .harness import Install, eventually

RECORDS = Path(__file__).resolve().parents[1] / "fleet" / "records" / "gpumeasurements.yaml"


def _record(name: str) -> dict[str, Any]:
    record = copy.deepcopy(yaml.safe_load(RECORDS.read_text())["items"][0])
    record["metadata"] = {"name": name}
    return record


def test_only_the_operators_service_account_writes_records(install: Install) -> None:
    forged = _record("gpum-forged-by-an-administrator")
    refused = install.admin.apply(forged, check=False)
    assert refused.returncode != 0
    assert "written by the gpu-sizer operator only" in refused.stderr, refused.stderr
    assert install.admin.json("gpumeasurements", forged["metadata"]["name"]) is None

    own = _record("gpum-written-by-the-operator")
    install.as_operator("create", "-f", "-", input=yaml.safe_dump(own))
    assert install.admin.json("gpumeasurements", own["metadata"]["name"]) is not None
    changed = install.admin(
        "patch",
        "gpumeasurements",
        own["metadata"]["name"],
        "--type=merge",
        "-p",
        '{"spec": {"expiresAt": "9991-01-01T00:00:00Z"}}',
        check=False,
    )
    assert changed.returncode != 0 and "operator only" in changed.stderr, changed.stderr
    install.admin("delete", "gpumeasurements", own["metadata"]["name"])

    def gone() -> bool:
        return install.admin.json("gpumeasurements", own["metadata"]["name"]) is None

    eventually(gone, what="the record deleted by the administrator")
