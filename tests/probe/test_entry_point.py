"""The invocation contract: spec sources, termination log handling, invalid input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_sizer.api import parse_spec, spec_hash, spec_to_wire

from .conftest import ROOT, inference_spec, run_probe


def test_spec_from_environment_and_gpu_class_recorded(tmp_path: Path) -> None:
    spec = inference_spec()
    # Exactly what the measurement Job puts in GPU_SIZER_SPEC: spec_to_wire, compact, sorted.
    wire = json.dumps(spec_to_wire(parse_spec(spec)), separators=(",", ":"), sort_keys=True)
    log = tmp_path / "log"
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "gpu_sizer.probe",
            "--termination-log",
            str(log),
            "--gpu-class",
            "nvidia-l4-24gb",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT / "operator"),
            "GPU_SIZER_SPEC": wire,
        },
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["gpuClass"] == "nvidia-l4-24gb"
    assert result["specHash"] == spec_hash(parse_spec(spec))
    assert json.loads(log.read_text())["status"] == "Succeeded"


def test_gpu_sizer_probe_subcommand_reads_stdin(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "gpu_sizer.cli",
            "probe",
            "--spec",
            "-",
            "--termination-log",
            str(tmp_path / "log"),
        ],
        input=json.dumps(inference_spec()),
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "Succeeded"


def test_unwritable_termination_log_is_skipped_with_a_note(tmp_path: Path) -> None:
    code, result, _, _ = run_probe(
        inference_spec(),
        "--termination-log",
        "/nonexistent-dir/termination-log",
        tmp_path=tmp_path,
    )
    assert code == 0
    assert any("not writable" in note for note in result["notes"])


def test_invalid_spec_is_a_failed_result_naming_the_field(tmp_path: Path) -> None:
    spec = inference_spec(maxNumSeqs=0)
    code, result, log, _ = run_probe(spec, tmp_path=tmp_path)
    assert code == 2
    assert result["status"] == "Failed"
    assert "spec.inference.maxNumSeqs" in result["message"]
    assert json.loads(log)["status"] == "Failed"


def test_importing_the_probe_package_does_not_import_torch() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, gpu_sizer.probe.command, gpu_sizer.probe.command_mode, "
            "gpu_sizer.cli; print('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
    )
    assert proc.stdout.strip() == "False", proc.stderr


def test_device_cuda_without_a_gpu_fails_with_the_reason(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():  # pragma: no cover - GPU machine
        return
    code, result, _, proc = run_probe(inference_spec(), "--device", "cuda", tmp_path=tmp_path)
    assert code == 1
    assert result["status"] == "Failed" and "sees no CUDA device" in result["message"]
    assert "Traceback" not in proc.stderr


def _run_raw(
    argv: list[str], tmp_path: Path, *, stdin: str | None = None, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, object], str]:
    """Run the probe with ``argv`` (after the module or subcommand); (process, stdout result,
    termination log text)."""
    log = tmp_path / "termination-log"
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", *argv, "--termination-log", str(log)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator"), **(env or {})},
    )
    result = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc, result, log.read_text() if log.exists() else ""


ENTRY_POINTS = [["-m", "gpu_sizer.probe"], ["-m", "gpu_sizer.cli", "probe"]]


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=["module", "subcommand"])
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (bytes([0xAC, 0x00, 0xFF, 0x13]) * 64, "not UTF-8"),
        (b"{ this is: [neither json", "neither JSON nor YAML"),
        (b"[1, 2, 3]", "spec: must be an object"),
        (b'{"model": {"parameterCount": "lots"}}', "spec.model.parameterCount"),
        (b'{"model": {"parameterCount": ' + b"9" * 5000 + b"}}", "an integer of 5000 digits"),
        (b"model:\n  parameterCount: " + b"9" * 5000, "an integer of 5000 digits"),
        (b"[" * 200_000 + b"]" * 200_000, "nested too deep"),
    ],
    ids=[
        "binary",
        "not-json-or-yaml",
        "not-an-object",
        "invalid-field",
        "long-json-integer",
        "long-yaml-integer",
        "deep-json",
    ],
)
def test_unreadable_spec_is_a_failed_result_not_a_traceback(
    tmp_path: Path, entry: list[str], content: bytes, expected: str
) -> None:
    junk = tmp_path / "junk.yaml"
    junk.write_bytes(content)
    proc, result, log = _run_raw([*entry, "--spec", str(junk), "--device", "cpu"], tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2  # the documented status for an invalid spec
    assert result["status"] == "Failed"
    assert expected in str(result["message"]), result["message"]
    assert str(junk) in str(result["message"]) or expected.startswith("spec")
    assert json.loads(log)["status"] == "Failed"


def test_a_gpuworkload_yaml_file_is_accepted(tmp_path: Path) -> None:
    import yaml

    doc = {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": "tiny"},
        "spec": inference_spec(),
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc, result, _ = _run_raw(["-m", "gpu_sizer.probe", "--spec", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "Succeeded"
    assert result["specHash"] == spec_hash(parse_spec(inference_spec()))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--deadline-seconds", "-5"),
        ("--deadline-seconds", "0"),
        ("--deadline-seconds", "nan"),
        ("--sampler-hz", "-1"),
        ("--sampler-hz", "inf"),
        ("--memory-limit-bytes", "0"),
        ("--memory-limit-bytes", "-1000"),
        ("--cpu-max-bytes", "0"),
    ],
)
def test_out_of_range_arguments_are_usage_errors(tmp_path: Path, option: str, value: str) -> None:
    from gpu_sizer.probe.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["--spec", "-", option, value, "--termination-log", str(tmp_path / "log")])
    assert exc.value.code == 2


def test_usage_error_message_names_the_option_and_bound(tmp_path: Path) -> None:
    proc, _, _ = _run_raw(["-m", "gpu_sizer.cli", "probe", "--deadline-seconds", "-5"], tmp_path)
    assert proc.returncode == 2
    assert "--deadline-seconds" in proc.stderr and "greater than 0" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_sampler_hz_zero_still_disables_the_sampler(tmp_path: Path) -> None:
    code, result, _, proc = run_probe(inference_spec(), "--sampler-hz", "0", tmp_path=tmp_path)
    assert code == 0, proc.stderr
    assert result["status"] == "Succeeded"


def test_an_error_before_measuring_is_a_failed_result(tmp_path: Path) -> None:
    # A probe image whose torch cannot be imported (here: a module named torch that raises).
    fake = tmp_path / "fake-site"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('libcudart.so.12: missing')\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(inference_spec()))
    proc, result, log = _run_raw(
        ["-m", "gpu_sizer.probe", "--spec", str(spec)],
        tmp_path,
        env={"PYTHONPATH": f"{fake}{os.pathsep}{ROOT / 'operator'}"},
    )
    assert proc.returncode == 1
    assert result["status"] == "Failed" and "libcudart.so.12" in str(result["message"])
    assert json.loads(log)["status"] == "Failed"


def _wait_until_reading_stdin(pid: int) -> None:
    """Until the probe blocks in read(2) on fd 0, i.e. past its imports and into read_spec
    (``/proc/PID/syscall``: syscall number, then arguments); a fixed wait where unavailable."""
    import platform
    import time

    read = {"x86_64": "0", "aarch64": "63"}.get(platform.machine())
    give_up = time.monotonic() + 60
    while read is not None and time.monotonic() < give_up:
        try:
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            break
        if fields[:2] == [read, "0x0"]:
            return
        time.sleep(0.05)
    time.sleep(3)


def test_sigterm_before_the_model_is_built_is_a_timeout_result(tmp_path: Path) -> None:
    import signal

    log = tmp_path / "log"
    # The spec comes from stdin, which stays open: the probe is still reading when SIGTERM comes.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "gpu_sizer.probe",
            "--spec",
            "-",
            "--termination-log",
            str(log),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
    )
    _wait_until_reading_stdin(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(json.dumps(inference_spec()), timeout=240)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["status"] == "Timeout" and "SIGTERM" in result["message"], result
    assert result["phases"] == [] or all("interrupted" in p["name"] for p in result["phases"])
    assert json.loads(log.read_text())["status"] == "Timeout"


def test_keyboard_interrupt_is_a_failed_result(tmp_path: Path) -> None:
    import signal

    log = tmp_path / "log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "gpu_sizer.probe",
            "--spec",
            "-",
            "--termination-log",
            str(log),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
        # Ctrl-C as in a terminal: SIGINT's default disposition. A pytest-xdist worker ignores
        # SIGINT, and a child inherits SIG_IGN (Python then keeps it: no KeyboardInterrupt).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_until_reading_stdin(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    result = json.loads(out)
    assert result["status"] == "Failed" and "SIGINT" in result["message"], result
    assert json.loads(log.read_text())["status"] == "Failed"
