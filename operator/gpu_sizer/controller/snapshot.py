"""What the operator knows of one workload, read into a decision's snapshot.

Everything a decision rests on is read here, before deciding: the spec (parsed, hashed and
assessed against the catalog, the present classes and the calibration), the stored status,
the namespace policy's settings, whether the world changed under a finished measurement, and
where the workload's own Jobs stand. The decision itself is then pure.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpu_sizer.api import GPUWorkloadStatus, InvalidWorkload, Phase, parse_spec, spec_hash
from gpu_sizer.api.times import now_rfc3339
from gpu_sizer.controller.calibration_cache import CalibrationCache
from gpu_sizer.controller.events import Said
from gpu_sizer.controller.inventory_cache import InventoryCache
from gpu_sizer.controller.jobs import JobActuator
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.policy_cache import PolicyCache
from gpu_sizer.controller.record_store import RecordStore
from gpu_sizer.controller.workloads import Key
from gpu_sizer.lifecycle import Config
from gpu_sizer.lifecycle.step import Snapshot
from gpu_sizer.measurement.job import host_memory_bytes, job_name
from gpu_sizer.sizing.verdict import assess

__all__ = ["SnapshotReader"]

log = logging.getLogger("gpu_sizer.controller")


class SnapshotReader:
    """Reads a workload's :class:`~gpu_sizer.lifecycle.step.Snapshot` from the collaborators
    that hold the operator's state."""

    def __init__(
        self,
        opts: Options,
        config: Config,
        said: Said,
        nodes: InventoryCache,
        policy: PolicyCache,
        records: RecordStore,
        calibrations: CalibrationCache,
        jobs: JobActuator,
    ) -> None:
        self._opts = opts
        self._config = config
        self._said = said
        self._nodes = nodes
        self._policy = policy
        self._records = records
        self._calibrations = calibrations
        self._jobs = jobs

    async def read(
        self, key: Key, body: Mapping[str, Any], stored: Mapping[str, Any]
    ) -> tuple[Snapshot, dict[str, str]]:
        """What the operator knows of the workload ``body`` (its stored status ``stored``) now,
        and the uids of its live Jobs by name."""
        namespace, name = key
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        generation = meta.get("generation")
        prev = self.previous(key, stored)
        now = now_rfc3339()
        at = datetime.datetime.now(datetime.UTC)
        base = Snapshot(
            name,
            namespace,
            generation,
            None,
            None,
            prev,
            self._config,
            now,
            at,
            record_ttl_seconds=self._opts.measurement_record_ttl,
        )
        try:
            spec = parse_spec(body.get("spec"))
        except InvalidWorkload as exc:
            problems = tuple(str(p) for p in exc.problems)
            if self._said.say(key, "spec", "; ".join(problems)):
                log.warning(
                    "%s/%s: invalid spec (stored without the webhook?): %s",
                    namespace,
                    name,
                    "; ".join(problems),
                )
            return replace(base, problems=problems), {}
        self._said.unsay(key, "spec")
        hash_ = spec_hash(spec)
        present = self._nodes.present()
        assessment = assess(
            spec,
            self._config.catalog,
            present=present,
            calibration=self._calibrations.for_workload(prev, hash_, namespace),
            capacity=self._nodes.inventory().capacity() if spec.gpu_count > 1 else None,
            host_memory=self._nodes.inventory().host_memory(),
        )
        weights = host = 0
        if assessment.estimate is not None:
            weights = assessment.estimate.per_gpu.weights_bytes * assessment.estimate.gpu_count
            host = assessment.estimate.host_bytes_per_node or 0
        # The namespace's measurement settings (its limits, queue, sharing) are read before a
        # decision that may start a measurement or publish one rests on them.
        await self._policy.read(namespace)
        sharing = self._policy.sharing(namespace)
        # Re-measure when the world changed under a finished measurement (its record gone,
        # another driver on the class's nodes, the re-validation interval passed).
        why = None
        old_m = prev.measurement if prev is not None else None
        if (
            prev is not None
            and old_m is not None
            and prev.phase is not Phase.Measuring
            and prev.spec_hash == hash_
            and old_m.spec_hash == hash_
            and old_m.key_fields is not None
        ):
            why = self._records.stale(old_m, spec, namespace, sharing)
        outcomes, uids = self._jobs.outcomes(key, uid)

        def namer(gpu_class: str, mem: int, retry: int) -> str:
            return job_name(name, hash_, gpu_class, mem, retry, namespace=namespace, uid=uid)

        return replace(
            base,
            spec=spec,
            spec_hash=hash_,
            stale=why,
            assessment=assessment,
            present=present,
            memory_bytes=host_memory_bytes(spec, weights, host),
            job_name=namer,
            outcomes=outcomes,
            sharing=sharing,
        ), uids

    def previous(self, key: Key, status: Mapping[str, Any]) -> GPUWorkloadStatus | None:
        """The stored status, validated (None: none yet, or unreadable: decided from scratch,
        said once)."""
        if not status or not status.get("phase"):
            return None
        try:
            previous = GPUWorkloadStatus.model_validate(status)
        except ValueError as exc:
            if self._said.say(key, "status", "unreadable"):
                log.warning(
                    "%s/%s: stored status unreadable, deciding from scratch: %s",
                    *key,
                    str(exc).splitlines()[0],
                )
            return None
        self._said.unsay(key, "status")
        return previous
