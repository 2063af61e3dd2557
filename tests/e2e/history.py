"""What happened to a test's objects, on either backend: every stored version of an object and
every Job created, from kmock's histories on the emulator and from the watches of
:class:`~tests.e2e.real_cluster.RealCluster` on a real API server.

A watch delivers a little after the write: each reader here first waits until the watch has
seen the object's current ``resourceVersion`` (or every Job that exists now), so that a count is
never short by an event still on its way.
"""

from __future__ import annotations

from typing import Any

import kmock

from tests.e2e.real_cluster import RealCluster
from tests.e2e.waiting import eventually

__all__ = ["job_creations", "status_writes", "versions"]

NS = "ml-team"
GW = ("gpusizer.dev", "v1alpha1", "gpuworkloads")
JOBS = ("batch", "v1", "jobs")
ANNOTATION_WORKLOAD = "gpusizer.dev/workload-name"


async def versions(
    cluster: Any, resource: tuple[str, str, str], name: str, namespace: str = NS
) -> list[dict[str, Any]]:
    """Every stored version of the object, oldest first (deletions left out)."""
    plural = resource[2]
    if isinstance(cluster, RealCluster):
        current = await cluster.get(resource, namespace, name)
        key = (plural, namespace, name)
        if current is not None:
            rv = current["metadata"]["resourceVersion"]

            async def seen() -> bool:
                return any(
                    v["metadata"].get("resourceVersion") == rv for v in cluster.history.get(key, ())
                )

            await eventually(seen, what=f"the watch to see {plural} {name} at {rv}")
        return list(cluster.history.get(key, ()))
    for (res, ns, obj_name), obj in list(cluster.emulator.objects.items()):
        if getattr(res, "plural", None) == plural and (ns, obj_name) == (namespace, name):
            return [v for v in obj.history if v is not None]
    return []


async def status_writes(cluster: Any, name: str, namespace: str = NS) -> int:
    """How many stored versions of a GPUWorkload carried a status that differs from the
    version before (writes of the status)."""
    statuses = [v.get("status") for v in await versions(cluster, GW, name, namespace)]
    return sum(1 for a, b in zip([None, *statuses], statuses, strict=False) if a != b)


async def job_creations(cluster: Any, workload_name: str, namespace: str = NS) -> list[str]:
    """Names of the Jobs created for ``workload_name``, in order (a name used twice, for two
    Jobs, counts twice): the emulator's POSTs, or each new Job uid the watch saw."""
    if isinstance(cluster, RealCluster):
        existing = {
            j["metadata"]["uid"]
            for j in await cluster.list(JOBS, namespace)
            if (j["metadata"].get("annotations") or {}).get(ANNOTATION_WORKLOAD) == workload_name
        }

        async def caught_up() -> bool:
            return existing <= {uid for *_, uid in cluster.arrivals}

        await eventually(caught_up, what=f"the watch to see every Job of {workload_name}")
        names = []
        for plural, ns, name, uid in cluster.arrivals:
            versions_ = cluster.history.get((plural, ns, name), ())
            first = next((v for v in versions_ if v["metadata"].get("uid") == uid), {})
            annotations = (first.get("metadata") or {}).get("annotations") or {}
            if (plural, ns) == ("jobs", namespace) and (
                annotations.get(ANNOTATION_WORKLOAD) == workload_name
            ):
                names.append(name)
        return names
    names = []
    for request in cluster.emulator:
        resource = getattr(request, "resource", None)
        if getattr(resource, "plural", None) != "jobs" or request.action != kmock.action.CREATE:
            continue
        meta = (request.data or {}).get("metadata") or {}
        if (meta.get("annotations") or {}).get(ANNOTATION_WORKLOAD) == workload_name:
            names.append(meta.get("name"))
    return names
