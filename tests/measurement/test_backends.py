"""The local-process backend: same spec in, same result format out, deadline enforced."""

from __future__ import annotations

import asyncio
import datetime
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpu_sizer.api import parse_spec, spec_hash
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.measurement.backends import JobView, LocalProcessBackend
from gpu_sizer.measurement.job import GIB, JobRequest, job_manifest
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind

SPEC = parse_spec(
    {
        "model": {"name": "m", "parameterCount": 1_000_000_000, "dtype": "bfloat16"},
        "inference": {"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 4},
        "measurement": {"timeoutSeconds": 30},
    }
)
NOW = datetime.datetime.now(datetime.UTC)

FAKE_PROBE = """
import json, os, signal, sys, time
mode = os.environ.get("FAKE_MODE", "ok")
# Signal handling first, before the slow imports: the deadline counts from the process start.
if mode == "graceful":  # the real probe's SIGTERM handling: a Timeout result, exit 0
    def on_term(*_):
        from gpu_sizer.measurement.result import ProbeResult
        print(ProbeResult(status="Timeout", mode="Synthetic", device="cpu",
                          message="terminated by SIGTERM").model_dump_json(by_alias=True))
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    time.sleep(300)
if mode == "stubborn":  # ignores SIGTERM: only SIGKILL stops it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(300)
from gpu_sizer.measurement.result import ProbeResult
spec = json.loads(os.environ["GPU_SIZER_SPEC"])
assert "--gpu-class" in sys.argv and "--termination-log" not in sys.argv
if mode == "sleep":
    time.sleep(300)
if mode == "crash":
    print("boom", file=sys.stderr); sys.exit(3)
if mode == "garbage":
    print("not json"); sys.exit(0)
peak = spec["model"]["parameterCount"] * 2
print("a log line")
print(ProbeResult(status="Succeeded", mode="Synthetic", device="cuda", peak_device_used_bytes=peak)
      .model_dump_json(by_alias=True))
"""


def observe(backend: LocalProcessBackend, name: str):
    (job,) = [j for j in backend.jobs("ns", "w") if j.name == name] or [
        JobView(name, "", "uid", workload="w")
    ]
    return backend.observe("ns", job, NOW)


def manifest(name: str) -> dict:
    req = JobRequest("ns", "w", "uid", spec_hash(SPEC), DEFAULT_CATALOG[0], 1, 4 * GIB, "img", name)
    return job_manifest(SPEC, req)


async def run(tmp_path: Path, mode: str, monkeypatch, cap: float | None = None):
    script = tmp_path / "fake_probe.py"
    script.write_text(FAKE_PROBE)
    monkeypatch.setenv("FAKE_MODE", mode)
    backend = LocalProcessBackend([sys.executable, str(script)], deadline_cap_seconds=cap)
    first, created = await backend.start(manifest("j1"))
    assert created is True
    again, created = await backend.start(manifest("j1"))
    assert created is False and again.uid == first.uid, "a second start adopts the first"
    return await _finished(lambda: observe(backend, "j1")), backend


#: Generous: these run Python processes on a shared, loaded machine; waits end when done.
PATIENCE = 120.0


async def _finished(look: Callable[[], Outcome]) -> Outcome:
    give_up = time.monotonic() + PATIENCE
    while time.monotonic() < give_up:
        out = look()
        if out.kind not in (OutcomeKind.Running, OutcomeKind.Pending):
            return out
        await asyncio.sleep(0.05)
    raise AssertionError(f"the probe did not finish in {PATIENCE} s")


async def test_success_reads_stdout_with_the_result_parser(tmp_path, monkeypatch) -> None:
    out, _ = await run(tmp_path, "ok", monkeypatch)
    assert out.kind is OutcomeKind.Succeeded and out.result is not None
    assert out.result.peak_device_used_bytes == 2_000_000_000  # from the spec it was given
    assert out.node_name and out.node_name.startswith("local/")


async def test_deadline_kills_the_process(tmp_path, monkeypatch) -> None:
    out, _ = await run(tmp_path, "sleep", monkeypatch, cap=0.5)
    assert out.kind is OutcomeKind.DeadlineExceeded and "deadline of 0.5 s" in out.message


async def test_a_probe_stopped_at_the_deadline_can_still_report(tmp_path, monkeypatch) -> None:
    # As the kubelet does: SIGTERM first, so the probe writes its Timeout result. (Its handler
    # is the script's first statement; 10 s leaves the interpreter ample time to get there.)
    out, _ = await run(tmp_path, "graceful", monkeypatch, cap=10.0)
    assert out.kind is OutcomeKind.Succeeded, out.message
    assert out.result is not None and out.result.status == "Timeout"


async def test_crash_and_garbage_are_failures(tmp_path, monkeypatch) -> None:
    crash, _ = await run(tmp_path, "crash", monkeypatch)
    assert (
        crash.kind is OutcomeKind.Failed and "code 3" in crash.message and "boom" in crash.message
    )
    garbage, _ = await run(tmp_path / "..", "garbage", monkeypatch)
    assert garbage.kind is OutcomeKind.Failed and "not JSON" in garbage.message


async def test_delete_and_missing(tmp_path, monkeypatch) -> None:
    _, backend = await run(tmp_path, "ok", monkeypatch)
    (job,) = backend.jobs("ns", "w")
    assert job.name == "j1" and job.owner_uid == "uid" and job.finished
    await backend.delete("ns", job)
    assert backend.jobs("ns", "w") == []
    assert backend.observe("ns", job, NOW).kind is OutcomeKind.Missing


async def test_a_probe_result_on_a_non_zero_exit_is_read(tmp_path, monkeypatch) -> None:
    # Command mode passes the command's own status through: a result document is on stdout
    # although the probe exits 3, exactly as the termination message carries it in a Job.
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", str(root / "operator"))
    spec = parse_spec(
        {
            "model": {"name": "m", "parameterCount": 1_000_000, "dtype": "bfloat16"},
            "inference": {"maxModelLen": 128, "maxNumSeqs": 1},
            "measurement": {
                "mode": "Command",
                "command": [sys.executable, "-c", "import sys; sys.exit(3)"],
                "timeoutSeconds": 60,
            },
        }
    )
    req = JobRequest("ns", "w", "uid", spec_hash(spec), DEFAULT_CATALOG[0], 1, 4 * GIB, "img", "j")
    backend = LocalProcessBackend()
    job, created = await backend.start(job_manifest(spec, req))
    assert created
    out = await _finished(lambda: backend.observe("ns", job, NOW))
    assert out.kind is OutcomeKind.Succeeded, out.message  # a result was read
    assert out.result is not None
    assert out.result.status == "Failed" and out.result.exit_code == 3
    assert out.result.spec_hash == spec_hash(spec)


async def _until(backend: LocalProcessBackend, name: str, kind: OutcomeKind) -> None:
    give_up = time.monotonic() + PATIENCE
    while time.monotonic() < give_up:
        if observe(backend, name).kind is kind:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never reached {kind} in {PATIENCE} s")


def _ignores_sigterm(pid: int) -> bool:
    """Whether the process has set SIGTERM to SIG_IGN (``SigIgn`` in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))


async def test_runs_beyond_the_concurrency_limit_wait_their_turn(tmp_path, monkeypatch) -> None:
    script = tmp_path / "fake_probe.py"
    script.write_text(FAKE_PROBE)
    monkeypatch.setenv("FAKE_MODE", "sleep")
    backend = LocalProcessBackend([sys.executable, str(script)], deadline_cap_seconds=1.0)
    assert await backend.start(manifest("j1")) and await backend.start(manifest("j2"))
    await _until(backend, "j1", OutcomeKind.Running)
    queued = observe(backend, "j2")
    assert queued.kind is OutcomeKind.Pending and queued.queued
    assert "at most 1 at once" in queued.message and "--local-max-concurrency" in queued.message
    await _until(backend, "j1", OutcomeKind.DeadlineExceeded)
    await _until(backend, "j2", OutcomeKind.Running)
    await backend.close()


async def test_close_stops_probes_promptly_even_if_they_ignore_sigterm(
    tmp_path, monkeypatch
) -> None:
    script = tmp_path / "fake_probe.py"
    script.write_text(FAKE_PROBE)
    monkeypatch.setenv("FAKE_MODE", "stubborn")
    backend = LocalProcessBackend(
        [sys.executable, str(script)], max_concurrency=2, stop_grace_seconds=0.5
    )
    await backend.start(manifest("j1"))
    await backend.start(manifest("j2"))
    await backend.start(manifest("j3"))  # queued: never started by close()
    await _until(backend, "j2", OutcomeKind.Running)
    give_up = time.monotonic() + PATIENCE
    while len(backend._procs) < 2 or not all(_ignores_sigterm(p.pid) for p in backend._procs):
        assert time.monotonic() < give_up, "the probes never set SIGTERM to SIG_IGN"
        await asyncio.sleep(0.05)
    procs = list(backend._procs)
    assert len(procs) == 2
    await backend.close()
    # They ignore SIGTERM and would sleep 300 s: only close()'s SIGKILL ends them.
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 2
    assert observe(backend, "j1").kind is OutcomeKind.Missing
