"""Offline parity: ``gpu-sizer estimate`` and the webhook give the same verdict and message.

Every example workload (and a few crafted ones) goes both ways: through the CLI in-process, and
as an AdmissionReview over HTTPS to the running webhook; the denial message must equal the
``Ready`` condition message the CLI writes, the spec errors the CLI's error lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_sizer.cli import main
from tests.architectures import LLAMA_3_8B
from tests.example_files import WORKLOAD_FILES

from .conftest import Webhook, admission_review

pytestmark = pytest.mark.asyncio(loop_scope="module")

EXAMPLES = WORKLOAD_FILES

CRAFTED: dict[str, dict[str, Any]] = {
    "too-many-seqs": {
        "model": {"revision": "x", "architecture": LLAMA_3_8B},
        "inference": {"maxModelLen": 8192, "maxNumSeqs": 512},
    },
    "unknown-class": {
        "model": {"revision": "x", "architecture": LLAMA_3_8B},
        "inference": {"maxModelLen": 8192, "maxNumSeqs": 4},
        "placement": {"gpuClasses": ["nvidia-h100-80gb", "nvidia-k80"]},
    },
    # issue 10: only a parameter count, so the KV cache is not counted (Incomplete)
    "bare-parameter-count": {
        "model": {"revision": "x", "parameterCount": 15_700_000_000},
        "inference": {"maxModelLen": 32768, "maxNumSeqs": 16},
    },
    # Above the API's maximum (0.5): the same field error both ways, whatever the policy.
    "too-much-headroom": {
        "model": {"revision": "x", "architecture": LLAMA_3_8B},
        "inference": {"maxModelLen": 8192, "maxNumSeqs": 4},
        "placement": {"minHeadroomFraction": 0.6},
    },
    "invalid": {
        "model": {"dtype": "bfloat17"},
        "inference": {"maxModelLen": 0, "maxNumSeqs": 8, "maxNumSeq": 1},
    },
}


def documents(tmp_path: Path) -> list[Path]:
    paths = list(EXAMPLES)
    for name, spec in CRAFTED.items():
        path = tmp_path / f"{name}.yaml"
        doc = {
            "apiVersion": "gpusizer.dev/v1alpha1",
            "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }
        path.write_text(yaml.safe_dump(doc))
        paths.append(path)
    return paths


async def test_webhook_and_estimate_agree(
    webhook: Webhook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = documents(tmp_path)
    assert len(paths) >= 10
    codes: set[int] = set()
    for path in paths:
        doc = yaml.safe_load(path.read_text())
        where = f"{doc['metadata'].get('namespace', 'default')}/{doc['metadata']['name']}"
        doc["metadata"]["namespace"] = "default"  # a namespace no policy rule restricts
        code = main(["estimate", str(path), "-o", "json"])
        codes.add(code)
        out, err = capsys.readouterr()
        resp = await webhook.validate(admission_review(doc))
        if code == 2:  # invalid: the CLI's error lines, without its "file: ns/name: " prefix
            prefix = f"{path}: {where}: "
            lines = [line.removeprefix(prefix) for line in err.splitlines() if line]
            assert resp["allowed"] is False, path.name
            assert resp["status"]["message"].splitlines() == lines, path.name
            continue
        printed = json.loads(out)
        obj = printed["items"][0] if printed.get("kind") == "List" else printed
        ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
        if code == 0:
            assert resp["allowed"] is True, (path.name, resp)
        elif code == 3:  # incomplete: admitted (policy Warn) with the Estimated message first
            estimated = next(c for c in obj["status"]["conditions"] if c["type"] == "Estimated")
            assert resp["allowed"] is True, (path.name, resp)
            assert resp["warnings"][0] == estimated["message"], path.name
        else:
            assert resp["allowed"] is False, path.name
            assert resp["status"]["message"] == ready["message"], path.name
    assert codes == {0, 1, 2, 3}  # fits, no safe headroom, invalid, incomplete all compared
