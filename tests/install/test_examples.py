"""``kubectl apply -f examples/`` on the install: each example ends where ``gpu-sizer estimate``
says, through the real admission chain.

The examples are applied as a user would apply the directory (its ``00-namespaces.yaml`` first,
in kubectl's name order), with ``spec.measurement.mode: Disabled`` so that none waits for a GPU:
``Fits`` is Ready on the estimate, ``NoSafeHeadroom`` is denied at ``kubectl apply`` with the
webhook's message, which is the Ready condition message ``gpu-sizer estimate -o json`` writes
(docs/admission.md, "Offline parity"), and ``Incomplete`` is admitted with that message as a
warning and never Ready (no example is Incomplete today; tests/install/test_admission.py covers
it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.example_files import EXAMPLES_DIR, NAMESPACES_FILE, WORKLOAD_FILES

from .harness import Install

DENIED = 'admission webhook "validate.gpuworkloads.gpusizer.dev" denied the request: '


def measurement_disabled(directory: Path) -> Path:
    """A copy of examples/ whose workloads have measurement disabled (the namespaces as is)."""
    out = directory / "examples"
    out.mkdir()
    shutil.copy(NAMESPACES_FILE, out / NAMESPACES_FILE.name)
    for path in WORKLOAD_FILES:
        doc = yaml.safe_load(path.read_text())
        doc["spec"].setdefault("measurement", {})["mode"] = "Disabled"
        (out / path.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def estimate(directory: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """``gpu-sizer estimate DIR``: namespace/name -> (verdict of the table, status of -o json)."""
    cli = [sys.executable, "-m", "gpu_sizer.cli", "estimate", str(directory)]
    table = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert table.returncode in (0, 1, 3), table.stderr
    verdicts = {line.split()[0]: line.split()[-1] for line in table.stdout.splitlines()[1:]}
    listed = subprocess.run([*cli, "-o", "json"], capture_output=True, text=True, check=False)
    statuses = {
        f"{item['metadata']['namespace']}/{item['metadata']['name']}": item["status"]
        for item in json.loads(listed.stdout)["items"]
    }
    assert set(verdicts) == set(statuses)
    return {key: (verdicts[key], statuses[key]) for key in verdicts}


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status["conditions"] if c["type"] == type_)
    return found


def test_kubectl_apply_of_the_examples_ends_where_estimate_says(
    install: Install, tmp_path: Path
) -> None:
    examples = measurement_disabled(tmp_path)
    expected = estimate(examples)
    assert len(expected) == len(WORKLOAD_FILES) and EXAMPLES_DIR.is_dir()
    applied = install.admin("apply", "-f", str(examples), check=False, timeout=300)
    out, err = applied.stdout, applied.stderr
    denied = {key for key, (verdict, _) in expected.items() if verdict == "NoSafeHeadroom"}
    assert denied, "examples/ has workloads without safe headroom on purpose"
    assert applied.returncode == (1 if denied else 0), out + err
    for name in ("inference", "training", "images", "video"):
        assert f"namespace/{name} " in out, out
    for key, (verdict, status) in sorted(expected.items()):
        namespace, name = key.split("/")
        if verdict == "NoSafeHeadroom":
            # Denied at apply: the API server prints the webhook's answer, which is the Ready
            # message gpu-sizer estimate writes; nothing is stored.
            assert DENIED + condition(status, "Ready")["message"] in err, (key, err)
            assert install.admin.json("gpuworkload", name, "-n", namespace) is None, key
            continue
        assert f"gpuworkload.gpusizer.dev/{name} created" in out, (key, out)
        if verdict == "Fits":
            install.admin(
                "wait", "--for=condition=Ready", f"gpuworkload/{name}", "-n", namespace,
                "--timeout=180s", timeout=200,
            )  # fmt: skip
        live = install.admin.json("gpuworkload", name, "-n", namespace)
        st = live["status"]
        assert st["estimate"]["parameterCount"] == status["estimate"]["parameterCount"], key
        assert st["estimate"]["gpuCount"] == status["estimate"]["gpuCount"], key
        if verdict == "Fits":
            assert st["phase"] == "Ready" == status["phase"], key
            ready = condition(st, "Ready")
            assert (ready["status"], ready["reason"]) == ("True", "EstimateOnly"), key
            assert st["recommendation"]["basis"] == "Estimate", key
            # The operator prefers classes with nodes in the cluster (l4, a100-80gb, h100 here);
            # the CLI knows no cluster. The GPU count per replica is the spec's either way.
            assert st["recommendation"]["gpuCount"] == status["recommendation"]["gpuCount"], key
        else:  # Incomplete: admitted (policy Warn) with the message, never Ready on an estimate
            assert condition(status, "Estimated")["message"] in err, (key, err)
            assert st["phase"] != "Ready" and condition(st, "Ready")["status"] != "True", key


def test_the_estimate_only_event_says_why_it_is_ready(install: Install, namespace: str) -> None:
    """On the real server the EstimateOnly Event of a workload Ready on its estimate carries the
    Ready condition's message (it used to carry the empty message of the last condition)."""
    doc = yaml.safe_load((EXAMPLES_DIR / "qwen3-8b-vllm.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    doc["spec"].setdefault("measurement", {})["mode"] = "Disabled"
    install.admin.apply(doc)
    name = doc["metadata"]["name"]
    install.admin(
        "wait", "--for=condition=Ready", f"gpuworkload/{name}", "-n", namespace, "--timeout=180s",
        timeout=200,
    )  # fmt: skip
    ready = condition(install.admin.json("gpuworkload", name, "-n", namespace)["status"], "Ready")

    def event() -> dict[str, Any] | None:
        events = install.admin.json(
            "events", "-n", namespace, "--field-selector",
            f"reason=EstimateOnly,involvedObject.name={name}",
        )  # fmt: skip
        items = (events or {}).get("items") or []
        return items[0] if items else None

    from .harness import eventually

    posted = eventually(event, what="the EstimateOnly Event")
    assert posted["type"] == "Normal" and posted["involvedObject"]["kind"] == "GPUWorkload"
    assert posted["message"] and ready["message"].startswith(posted["message"])
    assert posted["message"].startswith("ready on the estimate alone (measurement disabled): ")
