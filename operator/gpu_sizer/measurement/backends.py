"""Where measurement Jobs run: Kubernetes Jobs, or a local process. Same results either way.

A backend starts a Job from its manifest (:func:`gpu_sizer.measurement.job.job_manifest`), deletes
it, and reports an :class:`~gpu_sizer.measurement.outcome.Outcome`. Starting is idempotent: a Job
that already exists under the deterministic name is adopted, never duplicated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from gpu_sizer.measurement.job import adoptable
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind, classify
from gpu_sizer.measurement.result import ImplausibleResult, InvalidResult, parse_result

__all__ = [
    "Backend",
    "BackendError",
    "JobConflict",
    "KubernetesJobBackend",
    "LocalProcessBackend",
]


class BackendError(RuntimeError):
    """The API or the process could not be reached; the caller retries later."""


class JobConflict(BackendError):
    """A Job of the wanted name exists but is not ours (another owner, spec hash or manager).

    Never adopted: the caller reports it (the message names the Job and its owner).
    """


class Backend(Protocol):
    """What the controller needs from a place that runs measurement Jobs."""

    async def start(self, manifest: Mapping[str, Any]) -> bool:
        """Start the Job; ``False`` when a Job of that name already existed (adopted)."""

    async def delete(self, namespace: str, name: str) -> None:
        """Delete the Job and its pods; a missing Job is fine."""

    def observe(
        self,
        namespace: str,
        name: str,
        *,
        job: Mapping[str, Any] | None,
        pods: Sequence[Mapping[str, Any]],
        now: datetime,
    ) -> Outcome:
        """Where the Job stands; ``job`` and ``pods`` are what the operator's watch saw."""


class KubernetesJobBackend:
    """``batch/v1`` Jobs through the official kubernetes client (its calls run in threads).

    Observation uses the Job and pods the operator already watches (kopf indexes), so that
    polling costs no API calls.
    """

    def __init__(self, batch_api: Any) -> None:
        self._batch = batch_api

    async def start(self, manifest: Mapping[str, Any]) -> bool:
        from kubernetes.client.exceptions import ApiException

        meta = manifest["metadata"]
        try:
            await asyncio.to_thread(
                self._batch.create_namespaced_job, meta["namespace"], dict(manifest)
            )
        except ApiException as exc:
            if exc.status != 409:
                raise BackendError(
                    f"creating Job {meta['name']}: HTTP {exc.status} {exc.reason}"
                ) from exc
        else:
            return True
        try:
            existing = await asyncio.to_thread(
                self._batch.read_namespaced_job, meta["name"], meta["namespace"]
            )
        except ApiException as exc:
            raise BackendError(
                f"reading existing Job {meta['name']}: HTTP {exc.status} {exc.reason}"
            ) from exc
        if not isinstance(existing, Mapping):
            existing = self._batch.api_client.sanitize_for_serialization(existing)
        why = adoptable(existing, manifest)
        if why is not None:
            raise JobConflict(why)
        return False

    async def delete(self, namespace: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            await asyncio.to_thread(
                self._batch.delete_namespaced_job,
                name,
                namespace,
                propagation_policy="Background",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise BackendError(f"deleting Job {name}: HTTP {exc.status} {exc.reason}") from exc

    def observe(
        self,
        namespace: str,
        name: str,
        *,
        job: Mapping[str, Any] | None,
        pods: Sequence[Mapping[str, Any]],
        now: datetime,
    ) -> Outcome:
        del namespace, name
        return classify(job, pods, now)


@dataclass
class _Run:
    task: asyncio.Task[Outcome]
    manifest: Mapping[str, Any]
    started: float = field(default_factory=time.monotonic)
    #: True once the run holds a concurrency slot and its process was started.
    running: bool = False


class LocalProcessBackend:
    """Runs the probe as a local process (a workstation with a GPU, or the embedded demo).

    ``probe_command`` replaces ``python -m gpu_sizer.probe`` (tests point it at a fake probe).
    The spec travels the same way as in the Job (env ``GPU_SIZER_SPEC``); the result is read
    from the process's stdout with the same parser, whatever the exit status (as the Kubernetes
    path reads the termination message); only a run without a result document is ``Failed``.
    ``activeDeadlineSeconds`` is enforced as the kubelet does: SIGTERM, then SIGKILL after
    ``grace_seconds`` (``terminationGracePeriodSeconds``, 30 by default), so that the probe can
    still write its ``Timeout`` result, which is then read like any other.
    """

    def __init__(
        self,
        probe_command: Sequence[str] | None = None,
        *,
        deadline_cap_seconds: float | None = None,
        grace_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        max_concurrency: int = 1,
        stop_grace_seconds: float = 3.0,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        self._command = list(probe_command or [sys.executable, "-m", "gpu_sizer.probe"])
        self._runs: dict[tuple[str, str], _Run] = {}
        self._max = max_concurrency
        self._slots: asyncio.Semaphore | None = None  # made in the running loop
        self._stop_grace = stop_grace_seconds
        self._procs: set[asyncio.subprocess.Process] = set()
        self._cap = deadline_cap_seconds
        self._grace = grace_seconds
        self._node = f"local/{socket.gethostname()}"
        self._clock = clock

    async def start(self, manifest: Mapping[str, Any]) -> bool:
        meta = manifest["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        if key in self._runs:
            why = adoptable(self._runs[key].manifest, manifest)
            if why is not None:
                raise JobConflict(why)
            return False
        container = manifest["spec"]["template"]["spec"]["containers"][0]
        argv = list(container["command"])
        args = argv[3:] if argv[:3] == ["python", "-m", "gpu_sizer.probe"] else argv
        # The Job writes the result to /dev/termination-log; locally stdout carries it.
        if "--termination-log" in args:
            i = args.index("--termination-log")
            del args[i : i + 2]
        env = dict(os.environ)
        env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
        if "HOME" in os.environ:  # the Job's HOME=/tmp is for a read-only root filesystem
            env["HOME"] = os.environ["HOME"]
        deadline = float(manifest["spec"].get("activeDeadlineSeconds") or 900)
        if self._cap is not None:
            deadline = min(deadline, self._cap)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max)
        self._runs[key] = _Run(
            asyncio.create_task(self._queued(key, [*self._command, *args], env, deadline)),
            manifest,
        )
        return True

    async def _queued(
        self, key: tuple[str, str], argv: list[str], env: dict[str, str], deadline: float
    ) -> Outcome:
        """Wait for a slot: probes sharing one GPU would spoil each other's peaks."""
        assert self._slots is not None
        async with self._slots:
            run = self._runs.get(key)
            if run is not None:
                run.running = True
            return await self._run(argv, env, deadline)

    async def _run(self, argv: list[str], env: dict[str, str], deadline: float) -> Outcome:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        self._procs.add(proc)
        try:
            return await self._talk(proc, deadline)
        finally:
            self._procs.discard(proc)

    async def _talk(self, proc: asyncio.subprocess.Process, deadline: float) -> Outcome:
        # Not wait_for: cancelling communicate() would drop what it had read so far.
        talk = asyncio.ensure_future(proc.communicate())
        stopped = False
        try:
            done, _ = await asyncio.wait({talk}, timeout=deadline)
            if not done:
                stopped = True
                proc.terminate()
                done, _ = await asyncio.wait({talk}, timeout=self._grace)
                if not done:
                    proc.kill()
            out, err = await talk
        except asyncio.CancelledError:
            if proc.returncode is None:
                proc.kill()
            talk.cancel()
            await proc.wait()
            raise
        text = out.decode(errors="replace").strip()
        if stopped:
            try:
                result = parse_result(_last_json(text))
            except InvalidResult:
                return Outcome(
                    OutcomeKind.DeadlineExceeded,
                    f"the local probe ran past its deadline of {deadline:g} s and was stopped "
                    "without a result",
                    node_name=self._node,
                )
            return Outcome(
                OutcomeKind.Succeeded, result.status, result=result, node_name=self._node
            )
        # As with the termination message in a Job, a result document decides whatever the exit
        # status: Command mode passes the command's own status through (124 at the deadline).
        try:
            result = parse_result(_last_json(text))
        except ImplausibleResult as exc:
            return Outcome(OutcomeKind.Failed, str(exc), node_name=self._node)
        except InvalidResult as exc:
            if proc.returncode == 0:
                return Outcome(
                    OutcomeKind.Failed, f"probe exited 0 but {exc}", node_name=self._node
                )
        else:
            return Outcome(
                OutcomeKind.Succeeded, result.status, result=result, node_name=self._node
            )
        tail = (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1][:300]
        return Outcome(
            OutcomeKind.Failed,
            f"local probe exited with code {proc.returncode}: {tail}",
            node_name=self._node,
        )

    async def delete(self, namespace: str, name: str) -> None:
        run = self._runs.pop((namespace, name), None)
        if run is not None and not run.task.done():
            run.task.cancel()

    def observe(
        self,
        namespace: str,
        name: str,
        *,
        job: Mapping[str, Any] | None,
        pods: Sequence[Mapping[str, Any]],
        now: datetime,
    ) -> Outcome:
        del job, pods, now
        run = self._runs.get((namespace, name))
        if run is None:
            return Outcome(OutcomeKind.Missing, "no local probe process for this Job")
        if not run.task.done() and not run.running:
            ahead = sum(1 for r in self._runs.values() if not r.task.done() and r.running)
            return Outcome(
                OutcomeKind.Pending,
                f"queued: {ahead} local probe(s) running, at most {self._max} at once "
                "(--local-max-concurrency); measurements sharing one GPU would spoil each "
                "other's peaks",
                queued=True,
            )
        if not run.task.done():
            return Outcome(OutcomeKind.Running, "local probe running", node_name=self._node)
        if run.task.cancelled():
            return Outcome(OutcomeKind.Missing, "the local probe process was cancelled")
        exc = run.task.exception()
        if exc is not None:
            return Outcome(OutcomeKind.Failed, f"local probe could not run: {exc}")
        return run.task.result()

    async def close(self) -> None:
        """Stop every probe promptly (operator shutdown): SIGTERM, then SIGKILL after
        ``stop_grace_seconds``; queued runs never start. Returns once the processes are gone."""
        procs = [p for p in self._procs if p.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        if procs:
            waits = [asyncio.ensure_future(p.wait()) for p in procs]
            _, pending = await asyncio.wait(waits, timeout=self._stop_grace)
            for proc in procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            if pending:
                await asyncio.wait(pending, timeout=self._stop_grace)
        tasks = [run.task for run in self._runs.values()]
        for task in tasks:
            task.cancel()
        self._runs.clear()
        if tasks:
            await asyncio.wait(tasks, timeout=self._stop_grace)


def _last_json(text: str) -> str:
    """The probe prints one JSON document; tolerate log lines before it."""
    text = text.strip()
    if text.startswith("{"):
        try:
            json.loads(text)
            return text
        except json.JSONDecodeError:
            pass
    for line in reversed(text.splitlines()):
        if line.strip().startswith("{"):
            return line.strip()
    return text
