"""The Kueue AdmissionCheck controller (``--kueue-admission-check``): the imperative shell around
:mod:`gpu_sizer.inventory.kueue_check`.

It keeps the AdmissionChecks, ResourceFlavors and Workloads of ``kueue.x-k8s.io`` it is told
about (kopf watches them in the version discovery prefers: Kueue serves ``v1beta1`` and, in
newer releases, ``v1beta2``; the fields read here, ``spec.podSets[].template``,
``status.admission.podSetAssignments[].flavors`` and ``status.admissionChecks``, are spelled the
same in ``apis/kueue/v1beta2/workload_types.go``), marks its own AdmissionChecks
``Active`` (Kueue keeps a ClusterQueue inactive while one of its checks is not), and sets its
check on each Workload whose state is ``Pending``: when the Workload changes, when an
AdmissionCheck or ResourceFlavor changes, and when a GPUWorkload a Workload names changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from gpu_sizer.catalog import GPUClass
from gpu_sizer.controller import kube
from gpu_sizer.inventory.kueue_check import (
    CONTROLLER_NAME,
    WORKLOAD_LABEL,
    check_names,
    decide_check,
    pending_checks,
    status_patch,
)

__all__ = ["KueueChecker"]

log = logging.getLogger("gpu_sizer.kueue")
GROUP = "kueue.x-k8s.io"
Key = tuple[str, str]


class KueueChecker:
    """What the controller knows of Kueue's objects, and the writes of its check states."""

    def __init__(
        self,
        catalog: tuple[GPUClass, ...],
        gpu_workload: Callable[[str, str], Mapping[str, Any] | None],
        now: Callable[[], str],
    ) -> None:
        self._catalog = catalog
        self._gpu_workload = gpu_workload
        self._now = now
        self._client: kube.Client | None = None
        self._checks: dict[str, Mapping[str, Any]] = {}
        self._flavors: dict[str, Mapping[str, Any]] = {}
        self._workloads: dict[Key, Mapping[str, Any]] = {}

    def attach(self, client: kube.Client) -> None:
        self._client = client

    # ------------------------------------------------------------------ events

    async def check_seen(self, name: str, body: Mapping[str, Any] | None) -> None:
        """An AdmissionCheck changed (None: deleted)."""
        if body is None:
            self._checks.pop(name, None)
            return
        self._checks[name] = body
        if (body.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
            return
        await self._activate(name, body)
        await self.recheck_all()

    async def flavor_seen(self, name: str, body: Mapping[str, Any] | None) -> None:
        """A ResourceFlavor changed (None: deleted)."""
        if body is None:
            self._flavors.pop(name, None)
        else:
            self._flavors[name] = body
        await self.recheck_all()

    async def workload_seen(self, key: Key, body: Mapping[str, Any] | None) -> None:
        """A Kueue Workload changed (None: deleted)."""
        if body is None:
            self._workloads.pop(key, None)
            return
        self._workloads[key] = body
        await self._evaluate(key)

    async def gpu_workload_changed(self, namespace: str, name: str) -> None:
        """A GPUWorkload changed: decide again the Workloads whose pod sets name it."""
        for key, body in list(self._workloads.items()):
            if key[0] != namespace:
                continue
            for ps in (body.get("spec") or {}).get("podSets") or ():
                labels = ((ps.get("template") or {}).get("metadata") or {}).get("labels") or {}
                if labels.get(WORKLOAD_LABEL) == name:
                    await self._evaluate(key)
                    break

    async def recheck_all(self) -> None:
        for key in list(self._workloads):
            await self._evaluate(key)

    # ------------------------------------------------------------------ writes

    async def _evaluate(self, key: Key) -> None:
        body = self._workloads.get(key)
        if body is None or self._client is None:
            return
        ours = check_names(list(self._checks.values()))
        for check in pending_checks(body, ours):
            verdict = decide_check(body, self._gpu_workload, self._flavors, self._catalog)
            if verdict is None:
                continue
            patch = status_patch(body, check, verdict, self._now())
            if patch is None:
                continue
            version = str(body.get("apiVersion") or f"{GROUP}/v1beta1").split("/", 1)[1]
            path = kube.object_path(GROUP, version, "workloads", key[0], key[1], "status")
            try:
                written = await self._client.merge_patch(path, patch)
            except kube.Conflict:
                return  # changed meanwhile: its watch event brings the new version back here
            except kube.ApiError as exc:
                log.warning("Kueue Workload %s/%s: check %s not set: %s", *key, check, exc)
                return
            log.info(
                "Kueue Workload %s/%s: admission check %s -> %s: %s",
                *key,
                check,
                verdict.state,
                verdict.message,
            )
            if isinstance(written, Mapping):
                self._workloads[key] = written
                body = written

    async def _activate(self, name: str, body: Mapping[str, Any]) -> None:
        """Mark our AdmissionCheck ``Active`` (once)."""
        if self._client is None:
            return
        for cond in (body.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "Active" and cond.get("status") == "True":
                return
        version = str(body.get("apiVersion") or f"{GROUP}/v1beta1").split("/", 1)[1]
        path = kube.object_path(GROUP, version, "admissionchecks", None, name, "status")
        condition = {
            "type": "Active",
            "status": "True",
            "reason": "Active",
            "message": "gpu-sizer sets this check from the GPUWorkloads pod sets name",
            "lastTransitionTime": self._now(),
            "observedGeneration": (body.get("metadata") or {}).get("generation") or 0,
        }
        try:
            await self._client.merge_patch(path, {"status": {"conditions": [condition]}})
        except kube.ApiError as exc:
            log.warning("AdmissionCheck %s not marked Active: %s", name, exc)
            return
        log.info("AdmissionCheck %s (controllerName %s) is Active", name, CONTROLLER_NAME)
