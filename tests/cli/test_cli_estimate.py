"""`gpu-sizer estimate`, `crd` and `catalog`: outputs, exit codes, problems without tracebacks."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.example_files import WORKLOAD_FILES

from gpu_sizer.api.crd import crd_yaml, record_crd_yaml
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FITS = EXAMPLES / "llama-3-8b-vllm-bf16.yaml"
TOO_BIG = EXAMPLES / "llama-3-8b-too-big-for-l4.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_table_over_the_examples_directory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "estimate", str(EXAMPLES))
    assert code == 1  # one example has no safe headroom on purpose
    lines = out.splitlines()
    header = lines[0].split()
    assert header[:2] == ["NAMESPACE/NAME", "CLASS"]
    assert header[-5:] == ["TOTAL/GPU", "KV-TOKENS", "MAX-CONC", "HEADROOM", "VERDICT"]
    assert "WEIGHTS" in header and "RUNTIME" in header
    files = WORKLOAD_FILES
    assert len(lines) == 1 + len(files)
    # The examples' own Namespaces (00-namespaces.yaml, for `kubectl apply -f examples/`) are
    # skipped without a warning; any other kind still gets one (test_cli_bad_input.py).
    assert "Namespace" not in err
    assert any(line.startswith("inference/llama-3-8b-on-l4 ") and "NoSafeHeadroom" in line
               for line in lines)  # fmt: skip
    assert "inference/llama-3-8b-on-l4: on the largest allowed class, nvidia-l4" in err
    assert "fewer than spec.inference.targetConcurrency 16" in err
    assert "Fits with any of:" in err
    # pre-allocating engines show their pool in tokens and its concurrency; others a dash
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    chat = rows["inference/llama-3-8b-chat"]  # ... KV-TOKENS MAX-CONC HEADROOM VERDICT
    assert chat[-4].replace(",", "").isdigit() and chat[-3].endswith("x")
    lora = rows["training/llama-2-13b-lora"]
    assert lora[-4] == lora[-3] == "-"


def test_fitting_file_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", str(FITS))
    assert code == 0
    row = out.splitlines()[1]
    assert row.startswith("inference/llama-3-8b-chat ") and row.rstrip().endswith("Fits")
    assert " GiB " in row and "%" in row


def test_json_is_the_object_with_the_operator_status(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", "-o", "json", str(FITS))
    assert code == 0
    obj = json.loads(out)
    source = yaml.safe_load(FITS.read_text())
    assert {k: obj[k] for k in source} == source
    status = obj["status"]
    assert status["phase"] == "Estimated"
    assert len(status["specHash"]) == 16
    assert status["recommendation"]["basis"] == "Estimate"
    assert status["estimate"]["perGpu"]["totalBytes"] > 0
    assert {c["type"] for c in status["conditions"]} >= {"Ready", "Estimated", "Reconciling"}


def test_several_documents_make_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", "-o", "yaml", str(FITS), str(TOO_BIG))
    assert code == 1
    doc = yaml.safe_load(out)
    assert doc["kind"] == "List" and len(doc["items"]) == 2
    assert [i["status"]["phase"] for i in doc["items"]] == ["Estimated", "Rejected"]


def _bare(tmp_path: Path) -> Path:
    """DeepSeek-V2-Lite with only its parameter count at 16 x 32k (issue 10): Incomplete."""
    doc = yaml.safe_load(FITS.read_text())
    doc["metadata"]["name"] = "deepseek-v2-lite"
    doc["spec"]["model"] = {"name": "deepseek-ai/DeepSeek-V2-Lite", "revision": "x",
                            "parameterCount": 15_700_000_000}  # fmt: skip
    doc["spec"]["inference"] = {"maxModelLen": 32768, "maxNumSeqs": 16}
    path = tmp_path / "bare.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_incomplete_exits_3_and_never_says_fits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bare = _bare(tmp_path)
    code, out, err = run(capsys, "estimate", str(bare))
    assert code == 3
    row = out.splitlines()[1]
    assert row.rstrip().endswith("Incomplete") and "Fits" not in row
    assert "inference/deepseek-v2-lite: incomplete estimate: KV cache not counted" in err
    code, out, _ = run(capsys, "estimate", "-o", "json", str(bare))
    status = json.loads(out)["status"]
    assert code == 3 and status["phase"] == "Estimated" and "recommendation" not in status
    missing = status["estimate"]["missingComponents"]
    assert [m["component"] for m in missing] == ["kvCacheBytes", "activationBytes"]
    assert "spec.model.architecture.numHiddenLayers" in missing[0]["fields"]
    estimated = next(c for c in status["conditions"] if c["type"] == "Estimated")
    assert estimated["reason"] == "Incomplete"


def test_exit_status_precedence_invalid_then_no_headroom_then_incomplete(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A definite rejection (1) is stronger than an incomplete estimate (3); invalid input (2)
    is stronger than both."""
    bare = str(_bare(tmp_path))
    assert run(capsys, "estimate", bare, str(FITS))[0] == 3
    assert run(capsys, "estimate", bare, str(TOO_BIG))[0] == 1
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: GPUWorkload\nspec: 3\n")
    assert run(capsys, "estimate", bare, str(broken))[0] == 2


def test_multi_document_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    text = FITS.read_text() + "\n---\n" + TOO_BIG.read_text() + "\n---\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, out, _ = run(capsys, "estimate", "-")
    assert code == 1 and len(out.splitlines()) == 3


def test_list_documents_expand(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    items = [yaml.safe_load(FITS.read_text()), yaml.safe_load(FITS.read_text())]
    items[1]["metadata"]["name"] = "second"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    code, out, _ = run(capsys, "estimate", str(path))
    assert code == 0 and "inference/second" in out


def test_invalid_document_gives_one_line_per_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(FITS.read_text())
    doc["spec"]["inference"]["maxNumSeqs"] = 0
    doc["spec"]["model"]["architecture"]["numKeyValueHeads"] = 7
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc) + "---\n" + FITS.read_text())
    code, out, err = run(capsys, "estimate", str(path))
    assert code == 2
    problems = sorted(line for line in err.splitlines() if line.startswith(str(path)))
    assert problems == [
        f"{path}: inference/llama-3-8b-chat: spec.inference.maxNumSeqs: must be >= 1, not 0",
        f"{path}: inference/llama-3-8b-chat: spec.model.architecture.numKeyValueHeads: "
        "numAttentionHeads (32) must be divisible by numKeyValueHeads (7)",
    ]
    assert "llama-3-8b-chat" in out  # the valid document is still estimated


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"spec: [\n", "invalid YAML"),
        (b"\xff\xfe\x00garbage", "cannot read"),
        (b"- 1\n- 2\n", "(document 1): (document): must be a YAML/JSON object"),
        (b"apiVersion: v1\nkind: GPUWorkload\nmetadata: {name: p}\n", "p: apiVersion: must be"),
    ],
)
def test_unusable_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_bytes(content)
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2 and expected in err
    assert all(line.startswith(str(path)) for line in err.splitlines())


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "estimate", str(tmp_path / "nope.yaml"))
    assert (
        code == 2
        and err.strip() == f"{tmp_path / 'nope.yaml'}: cannot read: No such file or directory"
    )


def test_unknown_gpu_class_is_invalid_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(FITS.read_text())
    doc["spec"]["placement"] = {"gpuClasses": ["nvidia-h100"]}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2
    assert "spec.placement.gpuClasses: unknown GPU class 'nvidia-h100'" in err


def test_catalog_override_changes_the_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(yaml.safe_dump({"replaceDefaults": True, "classes": [
        {"name": "tiny", "memoryBytes": 8 << 30, "products": ["TINY"]}]}))  # fmt: skip
    code, out, _ = run(capsys, "estimate", "--catalog", str(catalog), str(FITS))
    assert code == 1 and "NoSafeHeadroom" in out
    catalog.write_text("classes: [{name: tiny}]\n")
    code, _, err = run(capsys, "estimate", "--catalog", str(catalog), str(FITS))
    assert code == 2 and f"{catalog}: classes[0].memoryBytes" in err


@settings(max_examples=100, deadline=None)
@given(
    st.text(max_size=200) | st.sampled_from(["spec: {", "a: *x", "!!python/object:os.system {}"])
)
def test_no_input_makes_a_traceback(text: str) -> None:
    stdin, stdout, stderr = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(text), io.StringIO(), io.StringIO()
    try:
        code = main(["estimate", "-"])
        err = sys.stderr.getvalue()
    finally:
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    assert code in (0, 1, 2) and "Traceback" not in err


def test_console_entry_point_runs_out_of_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_sizer.cli", "estimate", str(TOO_BIG), "/nonexistent.yaml"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(ROOT / "operator"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "/nonexistent.yaml: cannot read" in proc.stderr
    assert "NoSafeHeadroom" in proc.stdout


def test_crd_command_prints_both_generated_crds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "crd")
    assert code == 0 and out == crd_yaml() + "---\n" + record_crd_yaml()
    kinds = [d["spec"]["names"]["kind"] for d in yaml.safe_load_all(out)]
    assert kinds == ["GPUWorkload", "GPUMeasurement"]


def test_catalog_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["NAME", "NVML", "USABLE", "CC", "RANK"]
    assert [line.split()[0] for line in lines[1:]] == [c.name for c in DEFAULT_CATALOG]
    h100 = next(line for line in lines if line.startswith("nvidia-h100-80gb ")).split()
    assert h100[1:6] == ["79.65", "GiB", "79.22", "GiB", "9.0"]
    code, out, _ = run(capsys, "catalog", "-o", "yaml")
    data = yaml.safe_load(out)
    assert data["replaceDefaults"] is True and len(data["classes"]) == len(DEFAULT_CATALOG)
