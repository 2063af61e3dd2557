"""kopf handlers: thin adapters from watch events to the pure core and back.

- ``reconcile`` (on create, on spec change, on resume): validate, estimate, decide
  (:func:`gpu_sizer.reconcile.plan_spec`), run the plan's actions, write the status.
- ``measurement`` (a timer while ``status.phase`` is Measuring): observe the Job of the current
  spec hash and decide (:func:`gpu_sizer.reconcile.plan_outcome`).
- indexes of GPU nodes, measurement Jobs and their pods (what the decisions read).
- ``forget`` (on the GPUWorkload's DELETED event): delete its Jobs (a real API server's garbage
  collector also does it through ownerReferences) and drop its metrics.

Nothing here decides anything; a failing API call raises :class:`kopf.TemporaryError` and the
status is not written, so the whole decision is retried from the last written status.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from gpu_sizer import metrics
from gpu_sizer.api import (
    GROUP,
    PLURAL,
    VERSION,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    InvalidWorkload,
    parse_spec,
    spec_hash,
)
from gpu_sizer.controller.options import Options
from gpu_sizer.inventory import GpuNode, IgnoredNode, Inventory, parse_node
from gpu_sizer.measurement.backends import Backend, BackendError, JobConflict
from gpu_sizer.measurement.job import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    JobRequest,
    host_memory_bytes,
    job_manifest,
    job_name,
    owner_uid,
)
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind, parse_time
from gpu_sizer.reconcile import (
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
    invalid_plan,
    measured_peak,
    plan_outcome,
    plan_spec,
)
from gpu_sizer.sizing import assess

__all__ = ["merge_patch", "register"]

log = logging.getLogger("gpu_sizer.controller")
MANAGED = {LABEL_MANAGED_BY: MANAGED_BY}
_COMPONENTS = (
    "weights",
    "quantizationOverhead",
    "kvCache",
    "activation",
    "gradient",
    "optimizerState",
    "masterWeight",
    "runtimeOverhead",
    "total",
)


def now_rfc3339() -> str:
    """Current UTC time, second precision, ``Z`` suffix (metav1.Time)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning ``old`` into ``new``: removed keys become None."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif before != value or key not in old:
            patch[key] = value
    return patch


def _slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the outcome classifier reads of a Job or pod (keeps the indexes small)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": _plain(list(meta.get("ownerReferences") or [])),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "activeDeadlineSeconds": spec.get("activeDeadlineSeconds"),
        },
        "status": _plain(body.get("status") or {}),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _raw_spec(body: Mapping[str, Any]) -> Any:
    """The stored ``spec`` as plain data, whatever its type.

    Read from the body, not through kopf's ``spec`` kwarg: that is a mapping view which raises
    ``TypeError`` when the stored spec is a string, a list or null (possible when the object was
    stored without the CRD's schema or the webhook). :func:`parse_spec` turns those into
    ``spec: must be an object``.
    """
    return _plain(body.get("spec"))


def _previous(status: Mapping[str, Any]) -> GPUWorkloadStatus | None:
    if not status or not status.get("phase"):
        return None
    try:
        return GPUWorkloadStatus.model_validate(_plain(status))
    except ValueError:
        log.warning("unreadable status ignored: %s", dict(status))
        return None


def _dump(status: GPUWorkloadStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, mode="json", exclude_none=True)


def _inventory(index: Any) -> Inventory:
    nodes: list[GpuNode] = []
    ignored: list[IgnoredNode] = []
    for item in index.get("all", []):
        if isinstance(item, GpuNode):
            nodes.append(item)
        elif isinstance(item, IgnoredNode):
            ignored.append(item)
    return Inventory(tuple(nodes), tuple(ignored))


def _present(index: Any) -> frozenset[str]:
    return _inventory(index).present_classes()


def register(registry: kopf.OperatorRegistry, opts: Options, backend: Backend) -> None:
    """Register every handler of the operator on ``registry`` (closures over the options)."""
    runner = "local probe" if opts.measurement_backend == "local" else "Job"
    config = Config(
        catalog=opts.catalog,
        unschedulable_timeout_seconds=opts.unschedulable_timeout,
        runner=runner,
    )
    headroom_labels: dict[tuple[str, str], tuple[str, str]] = {}

    def record_metrics(namespace: str, name: str, status: GPUWorkloadStatus) -> None:
        if status.estimate is not None:
            wire = status.estimate.per_gpu.model_dump(by_alias=True)
            for component in _COMPONENTS:
                # Byte fields only: perGpu also carries display-only figures (totalGiB).
                value = wire.get(f"{component}Bytes")
                if isinstance(value, int):
                    metrics.ESTIMATED_BYTES.labels(namespace, name, component).set(value)
        m = status.measurement
        if m is not None and m.completed_at and m.device == "cuda":
            for kind, value in (
                ("allocated", m.peak_allocated_bytes),
                ("reserved", m.peak_reserved_bytes),
                ("device", m.peak_device_used_bytes),
            ):
                if value is not None:
                    metrics.MEASURED_PEAK_BYTES.labels(namespace, name, kind).set(value)
        old = headroom_labels.pop((namespace, name), None)
        if old is not None:
            metrics.RECOMMENDATION_HEADROOM.remove(namespace, name, *old)
        rec = status.recommendation
        if rec is not None:
            labels = (rec.gpu_class, str(rec.basis))
            metrics.RECOMMENDATION_HEADROOM.labels(namespace, name, *labels).set(
                rec.headroom_fraction
            )
            headroom_labels[(namespace, name)] = labels

    def forget_metrics(namespace: str, name: str) -> None:
        for component in _COMPONENTS:
            with contextlib.suppress(KeyError):
                metrics.ESTIMATED_BYTES.remove(namespace, name, component)
        for kind in ("allocated", "reserved", "device"):
            with contextlib.suppress(KeyError):
                metrics.MEASURED_PEAK_BYTES.remove(namespace, name, kind)
        old = headroom_labels.pop((namespace, name), None)
        if old is not None:
            metrics.RECOMMENDATION_HEADROOM.remove(namespace, name, *old)

    async def apply(
        plan: Plan,
        *,
        body: kopf.Body,
        spec: GPUWorkloadSpec | None,
        hash_: str | None,
        status: Mapping[str, Any],
        patch: kopf.Patch,
        logger: kopf.Logger,
    ) -> None:
        meta = body.get("metadata") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        for action in plan.actions:
            try:
                if isinstance(action, DeleteJob):
                    await backend.delete(namespace, action.name)
                elif isinstance(action, StartJob):
                    assert spec is not None and hash_ is not None
                    req = JobRequest(
                        namespace=namespace,
                        workload=name,
                        workload_uid=str(meta.get("uid") or ""),
                        spec_hash=hash_,
                        gpu_class=action.gpu_class,
                        gpus=action.gpus,
                        memory_bytes=action.memory_bytes,
                        image=spec.measurement.image or opts.probe_image,
                        name=action.name,
                        image_pull_secrets=opts.probe_image_pull_secrets,
                    )
                    created = await backend.start(job_manifest(spec, req))
                    verb = ("created" if created else "adopted existing") + " Job"
                    if runner != "Job":
                        verb = ("started" if created else "found running") + f" {runner}"
                    log.info(
                        "%s/%s: %s %s on class %s",
                        namespace,
                        name,
                        verb,
                        action.name,
                        action.gpu_class.name,
                    )
                elif isinstance(action, Emit):
                    kopf.event(
                        body, type=action.type_, reason=action.reason, message=action.message[:1000]
                    )
            except JobConflict as exc:
                # Never adopt another object's Job; say so where the user looks, retry slowly
                # (the other Job may be on its way out, e.g. a deleted workload's).
                logger.error("%s; not adopting it", exc)
                kopf.warn(body, reason="JobNameConflict", message=f"{exc}; not adopting it")
                raise kopf.TemporaryError(str(exc), delay=60) from exc
            except BackendError as exc:
                raise kopf.TemporaryError(str(exc), delay=min(opts.poll_interval, 5.0)) from exc
        old_phase = (status or {}).get("phase")
        if old_phase != plan.status.phase:
            ready = next((c for c in plan.status.conditions if c.type == "Ready"), None)
            log.info(
                "%s/%s: %s -> %s: %s",
                namespace,
                name,
                old_phase or "(new)",
                plan.status.phase,
                ready.message if ready else "",
            )
        new = _dump(plan.status)
        diff = merge_patch(_plain(status), new)
        for key, value in diff.items():
            patch.status[key] = value
        record_metrics(namespace, name, plan.status)

    async def reconcile(
        body: kopf.Body,
        status: Mapping[str, Any],
        meta: Mapping[str, Any],
        patch: kopf.Patch,
        logger: kopf.Logger,
        gpu_nodes: kopf.Index[str, Any],
        **_: Any,
    ) -> None:
        generation = meta.get("generation")
        prev = _previous(status)
        now = now_rfc3339()
        try:
            parsed = parse_spec(_raw_spec(body))
        except InvalidWorkload as exc:
            problems = [str(p) for p in exc.problems]
            logger.warning("invalid spec (stored without the webhook?): %s", "; ".join(problems))
            plan = invalid_plan(problems, generation=generation, now=now, previous=prev)
            await apply(
                plan, body=body, spec=None, hash_=None, status=status, patch=patch, logger=logger
            )
            return
        hash_ = spec_hash(parsed)
        present = _present(gpu_nodes)
        assessment = assess(parsed, config.catalog, present=present)
        weights = 0
        if assessment.estimate is not None:
            weights = assessment.estimate.per_gpu.weights_bytes * assessment.estimate.gpu_count
        memory = host_memory_bytes(parsed, weights)
        wl = Workload(
            str(meta.get("name")), str(meta.get("namespace")), generation, parsed, hash_, prev
        )
        name = wl.name
        uid = str(meta.get("uid") or "")

        def namer(gpu_class: str, mem: int, retry: int) -> str:
            return job_name(name, hash_, gpu_class, mem, retry, namespace=wl.namespace, uid=uid)

        plan = plan_spec(
            wl,
            assessment,
            config,
            present=present,
            now=now,
            job_name=namer,
            memory_bytes=memory,
        )
        await apply(
            plan, body=body, spec=parsed, hash_=hash_, status=status, patch=patch, logger=logger
        )

    for decorator, hid in (
        (kopf.on.create, "create"),
        (kopf.on.resume, "resume"),
    ):
        decorator(GROUP, VERSION, PLURAL, id=hid, registry=registry)(
            _counted(hid, _serialized(reconcile))
        )
    kopf.on.update(GROUP, VERSION, PLURAL, id="update", field="spec", registry=registry)(
        _counted("update", _serialized(reconcile))
    )

    def awaiting_nodes(status: Mapping[str, Any], **_: Any) -> bool:
        measurement = (status or {}).get("measurement") or {}
        return bool(status) and measurement.get("reason") == "NoNodeOfClass"

    # A measurement that found no node of its class is started again once the inventory has
    # such a node (plan_spec decides; this only re-runs it now and then).
    kopf.timer(
        GROUP,
        VERSION,
        PLURAL,
        id="await-nodes",
        interval=min(300.0, max(opts.poll_interval, opts.unschedulable_timeout / 4)),
        when=awaiting_nodes,
        registry=registry,
    )(_counted("await-nodes", _serialized(reconcile)))

    def measuring(status: Mapping[str, Any], **_: Any) -> bool:
        return bool(status) and status.get("phase") == "Measuring"

    async def measurement(
        body: kopf.Body,
        status: Mapping[str, Any],
        meta: Mapping[str, Any],
        patch: kopf.Patch,
        logger: kopf.Logger,
        memo: kopf.Memo,
        gpu_nodes: kopf.Index[str, Any],
        gpu_jobs: kopf.Index[tuple[str, str], Any],
        gpu_pods: kopf.Index[tuple[str, str], Any],
        **_: Any,
    ) -> None:
        prev = _previous(status)
        if prev is None or prev.measurement is None or not prev.measurement.job_name:
            return
        try:
            parsed = parse_spec(_raw_spec(body))
        except InvalidWorkload:
            return  # the spec handler turns this into Stalled
        hash_ = spec_hash(parsed)
        m = prev.measurement
        job_name_ = m.job_name or ""
        if m.spec_hash != hash_:
            return  # a spec change is pending; its handler deletes this Job and starts another
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        job_list = list(gpu_jobs.get((namespace, job_name_), []))
        pods = list(gpu_pods.get((namespace, job_name_), []))
        now_dt = datetime.datetime.now(datetime.UTC)
        outcome = backend.observe(
            namespace, job_name_, job=job_list[-1] if job_list else None, pods=pods, now=now_dt
        )
        # The same observation is not acted on twice while our status patch travels back
        # through the watch (the timer may fire again before the new status arrives).
        key = (hash_, job_name_, str(outcome.kind), str(m.recreated))
        acted: set[tuple[str, str, str, str]] = memo.setdefault("acted", set())
        if (outcome.finished or outcome.kind is OutcomeKind.Missing) and key in acted:
            return  # already decided; our status patch has not come back through the watch
        if outcome.kind is OutcomeKind.Missing and _just_started(m.started_at, now_dt, opts):
            return  # the watch has not shown our own new Job yet
        wl = Workload(name, namespace, meta.get("generation"), parsed, hash_, prev)
        uid = str(meta.get("uid") or "")

        def namer(gpu_class: str, mem: int, retry: int) -> str:
            return job_name(name, hash_, gpu_class, mem, retry, namespace=wl.namespace, uid=uid)

        plan = plan_outcome(
            wl, outcome, config, present=_present(gpu_nodes), now=now_rfc3339(), job_name=namer
        )
        if plan.status == prev and not plan.actions:
            return
        await apply(
            plan, body=body, spec=parsed, hash_=hash_, status=status, patch=patch, logger=logger
        )
        if _spec_changed(body, hash_):
            # The spec changed while we acted on the old spec's Job (the body of a timer is
            # live): drop our status and any Job we just started; the spec handler decides.
            patch.pop("status", None)
            for action in plan.actions:
                if isinstance(action, StartJob):
                    await backend.delete(namespace, action.name)
            return
        if outcome.finished or outcome.kind is OutcomeKind.Missing:
            acted.add(key)
        _observe_outcome(outcome, plan, m.started_at, now_dt)

    kopf.timer(
        GROUP,
        VERSION,
        PLURAL,
        id="measurement",
        interval=opts.poll_interval,
        when=measuring,
        registry=registry,
    )(_counted("measurement", _serialized(measurement)))

    async def forget(
        name: str | None,
        namespace: str | None,
        meta: Mapping[str, Any],
        gpu_jobs: kopf.Index[tuple[str, str], Any],
        **_: Any,
    ) -> None:
        """On deletion: delete this workload's Jobs (the API server's garbage collector would,
        through ownerReferences; doing it here also covers clusters and emulators without one)."""
        if not name or not namespace:
            return
        forget_metrics(namespace, name)
        # Snapshot first: deleting a Job changes the index while we would iterate it.
        uid = str(meta.get("uid") or "")
        owned = [
            (ns, job)
            for (ns, job), items in list(gpu_jobs.items())
            for item in list(items)
            if ns == namespace
            and ((item.get("metadata") or {}).get("annotations") or {}).get(
                "gpusizer.dev/workload-name"
            )
            == name
            and owner_uid(item) in (uid, None)  # only this object's Jobs, never a namesake's
        ]
        for ns, job in owned:
            try:
                await backend.delete(ns, job)
            except BackendError as exc:
                raise kopf.TemporaryError(str(exc), delay=1) from exc

    kopf.on.delete(GROUP, VERSION, PLURAL, id="forget", registry=registry)(
        _counted("forget", forget)
    )

    def index_node(body: kopf.Body, logger: kopf.Logger, **_: Any) -> dict[str, Any] | None:
        parsed = parse_node(_plain(body), config.catalog)
        if isinstance(parsed, IgnoredNode):
            logger.warning("GPU node ignored: %s", parsed.reason)
        elif isinstance(parsed, GpuNode):
            logger.info(
                "GPU node: %d x %s (%s)", parsed.gpu_count, parsed.gpu_class, parsed.product
            )
        return None if parsed is None else {"all": parsed}

    def index_job(body: kopf.Body, name: str, namespace: str, **_: Any) -> dict[Any, Any]:
        return {(namespace, name): _slim(body)}

    def index_pod(body: kopf.Body, namespace: str, **_: Any) -> dict[Any, Any] | None:
        for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "Job":
                return {(namespace, ref.get("name")): _slim(body)}
        job = ((body.get("metadata") or {}).get("labels") or {}).get("batch.kubernetes.io/job-name")
        return {(namespace, job): _slim(body)} if job else None

    kopf.index("", "v1", "nodes", id="gpu_nodes", registry=registry)(index_node)
    kopf.index("batch", "v1", "jobs", id="gpu_jobs", labels=MANAGED, registry=registry)(
        index_job  # type: ignore[arg-type]
    )
    kopf.index("", "v1", "pods", id="gpu_pods", labels=MANAGED, registry=registry)(
        index_pod  # type: ignore[arg-type]
    )


def _spec_changed(body: kopf.Body, hash_: str) -> bool:
    """Whether the live body's spec no longer hashes to ``hash_`` (invalid counts as changed)."""
    try:
        return spec_hash(parse_spec(_raw_spec(body))) != hash_
    except InvalidWorkload:
        return True


def _just_started(started_at: str | None, now: datetime.datetime, opts: Options) -> bool:
    started = parse_time(started_at)
    return started is not None and (now - started).total_seconds() < max(
        2.0, 2 * opts.poll_interval
    )


def _observe_outcome(
    outcome: Outcome, plan: Plan, started_at: str | None, now: datetime.datetime
) -> None:
    if not outcome.finished and outcome.kind not in (
        OutcomeKind.Unschedulable,
        OutcomeKind.Missing,
    ):
        return
    m = plan.status.measurement
    reason = (m.reason if m and m.completed_at and m.reason else None) or (
        "OutOfMemory"
        if outcome.result is not None and outcome.result.out_of_memory
        else str(outcome.kind)
    )
    if outcome.kind is OutcomeKind.Unschedulable and not (m and m.reason == "NoNodeOfClass"):
        return
    metrics.MEASUREMENT_OUTCOMES.labels(reason).inc()
    started = parse_time(started_at)
    if started is not None:
        metrics.MEASUREMENT_DURATION.labels(reason).observe(
            max(0.0, (now - started).total_seconds())
        )
    if m is not None and m.completed_at and m.reason is None:
        log.info("measured peak %s bytes", measured_peak(m))


def _serialized(fn: Any) -> Any:
    """Run the spec handlers and the measurement timer of one object one at a time.

    kopf runs timers beside change handlers; both read the status and act on Jobs, so they
    take a per-object lock kept in kopf's per-object ``memo``.
    """
    import functools

    @functools.wraps(fn)
    async def wrapper(**kwargs: Any) -> Any:
        memo = kwargs["memo"]
        lock = memo.get("gpu_sizer_lock") if hasattr(memo, "get") else None
        if lock is None:
            lock = asyncio.Lock()
            memo["gpu_sizer_lock"] = lock
        async with lock:
            return await fn(**kwargs)

    return wrapper


def _counted(handler: str, fn: Any) -> Any:
    """Count every exception a handler raises in ``gpusizer_reconcile_errors_total``."""
    import functools

    @functools.wraps(fn)
    async def wrapper(**kwargs: Any) -> Any:
        try:
            return await fn(**kwargs)
        except Exception:
            metrics.RECONCILE_ERRORS.labels(handler).inc()
            raise

    return wrapper
