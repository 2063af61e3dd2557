"""The loopback API server answers what kubectl asks for (over HTTP, as kubectl calls it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from gpu_sizer_testbed.emulator import LoopbackCluster, crd_document

GW = ("gpusizer.dev", "v1alpha1", "gpuworkloads")
JOBS = ("batch", "v1", "jobs")
CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
SPEC = {
    "model": {"name": "m", "parameterCount": 1_000_000_000, "dtype": "bfloat16"},
    "inference": {"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 4},
}


def workload(name: str, namespace: str = "ml", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": SPEC,
    }


@pytest.fixture
async def cluster() -> AsyncIterator[LoopbackCluster]:
    async with LoopbackCluster() as c:
        await c.create(CRDS, crd_document())
        yield c


async def call(
    cluster: LoopbackCluster, method: str, path: str, body: Any = None, **headers: str
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method,
            cluster.url + path,
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": "application/json", **headers},
        ) as resp,
    ):
        text = await resp.text()
        return resp.status, json.loads(text) if text else None


async def test_discovery_core_group_and_subresources(cluster: LoopbackCluster) -> None:
    _, core = await call(cluster, "GET", "/api/v1")
    assert core["groupVersion"] == "v1"  # kmock 0.8 says "/v1": kubectl then sees no nodes
    names = {r["name"] for r in core["resources"]}
    assert {"nodes", "namespaces", "pods", "events"} <= names
    _, gv = await call(cluster, "GET", "/apis/gpusizer.dev/v1alpha1")
    by_name = {r["name"]: r for r in gv["resources"]}
    assert by_name["gpuworkloads"]["shortNames"] == ["gpuw"]
    assert by_name["gpuworkloads"]["kind"] == "GPUWorkload"
    status = by_name["gpuworkloads/status"]
    assert status["verbs"] == ["get", "patch", "update"] and "shortNames" not in status


async def test_lists_have_a_kind_an_order_and_selectors(cluster: LoopbackCluster) -> None:
    await cluster.create(GW, workload("b", team="x"))
    await cluster.create(GW, workload("a", team="y"))
    await cluster.create(GW, workload("c", namespace="another", team="x"))
    _, doc = await call(cluster, "GET", "/apis/gpusizer.dev/v1alpha1/gpuworkloads")
    assert doc["kind"] == "GPUWorkloadList" and doc["apiVersion"] == "gpusizer.dev/v1alpha1"
    assert doc["metadata"]["resourceVersion"].isdigit()
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in doc["items"]] == [
        ("another", "c"),
        ("ml", "a"),
        ("ml", "b"),
    ]
    _, doc = await call(
        cluster, "GET", "/apis/gpusizer.dev/v1alpha1/gpuworkloads?labelSelector=team%3Dx"
    )
    assert [i["metadata"]["name"] for i in doc["items"]] == ["c", "b"]
    _, doc = await call(
        cluster,
        "GET",
        "/apis/gpusizer.dev/v1alpha1/namespaces/ml/gpuworkloads?fieldSelector=metadata.name%3Da",
    )
    assert [i["metadata"]["name"] for i in doc["items"]] == ["a"]
    status, doc = await call(
        cluster, "GET", "/apis/gpusizer.dev/v1alpha1/gpuworkloads?labelSelector=a+in+b"
    )
    assert status == 400 and doc["reason"] == "BadRequest"


async def test_tables_use_the_crds_printer_columns(cluster: LoopbackCluster) -> None:
    await cluster.create(GW, workload("a"))
    await cluster.patch(GW, "ml", "a", {"status": {"phase": "Ready"}}, subresource="status")
    _, doc = await call(cluster, "GET", "/apis/gpusizer.dev/v1alpha1/gpuworkloads", Accept=TABLE)
    assert doc["kind"] == "Table"
    names = [c["name"] for c in doc["columnDefinitions"]]
    assert names[:3] == ["Name", "Phase", "Model"]
    assert doc["rows"][0]["cells"][:3] == ["a", "Ready", "m"]
    _, one = await call(
        cluster, "GET", "/apis/gpusizer.dev/v1alpha1/namespaces/ml/gpuworkloads/a", Accept=TABLE
    )
    assert one["kind"] == "Table" and len(one["rows"]) == 1
    _, plain = await call(
        cluster, "GET", "/apis/gpusizer.dev/v1alpha1/namespaces/ml/gpuworkloads/a"
    )
    assert plain["kind"] == "GPUWorkload"


async def test_namespaces_are_served(cluster: LoopbackCluster) -> None:
    status, created = await call(
        cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}}
    )
    assert status < 300 and created["status"] == {"phase": "Active"}
    assert created["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team"}
    _, doc = await call(cluster, "GET", "/api/v1/namespaces")
    assert doc["kind"] == "NamespaceList" and [i["metadata"]["name"] for i in doc["items"]] == [
        "team"
    ]
    status, _ = await call(cluster, "GET", "/api/v1/namespaces/team")
    assert status == 200
    status, _ = await call(cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert status == 409
    await call(cluster, "DELETE", "/api/v1/namespaces/team")
    status, _ = await call(cluster, "GET", "/api/v1/namespaces/team")
    assert status == 404


async def test_kubectl_create_namespace_in_protobuf(cluster: LoopbackCluster) -> None:
    from tests.emulator.test_protobuf import KUBECTL_CREATE_NAMESPACE_FOO

    async with (
        aiohttp.ClientSession() as http,
        http.post(
            cluster.url + "/api/v1/namespaces?fieldManager=kubectl-create&fieldValidation=Strict",
            data=KUBECTL_CREATE_NAMESPACE_FOO,
            headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
        ) as resp,
    ):
        assert resp.status < 300, await resp.text()
    assert (await cluster.get(("", "v1", "namespaces"), None, "foo")) is not None


async def test_openapi_v3(cluster: LoopbackCluster) -> None:
    _, index = await call(cluster, "GET", "/openapi/v3")
    url = index["paths"]["apis/gpusizer.dev/v1alpha1"]["serverRelativeURL"]
    _, doc = await call(cluster, "GET", url)
    assert "dev.gpusizer.v1alpha1.GPUWorkload" in doc["components"]["schemas"]
    assert "api/v1" in index["paths"] and "apis/batch/v1" in index["paths"]
    status, _ = await call(cluster, "GET", "/openapi/v3/apis/nothing/v1")
    assert status == 404
    # kubectl asks for v2 only for a kind no v3 document has; an empty protobuf Document
    # lets it go on to "no matches for kind", as against a cluster.
    async with aiohttp.ClientSession() as http, http.get(cluster.url + "/openapi/v2") as resp:
        assert resp.status == 200 and await resp.read() == b""
        assert "proto-openapi.spec.v2" in resp.headers["Content-Type"]


async def test_strict_field_validation_and_schema_checks(cluster: LoopbackCluster) -> None:
    path = "/apis/gpusizer.dev/v1alpha1/namespaces/ml/gpuworkloads?fieldValidation=Strict"
    typo = workload("typo")
    typo["spec"] = {**SPEC, "inference": {**SPEC["inference"], "maxNumSeq": 4}}
    status, doc = await call(cluster, "POST", path, typo)
    assert status == 400
    assert 'strict decoding error: unknown field "spec.inference.maxNumSeq"' in doc["message"]
    bad = workload("bad")
    bad["spec"] = {**SPEC, "model": {**SPEC["model"], "dtype": "float7"}}
    status, doc = await call(cluster, "POST", path, bad)
    assert status == 422 and doc["reason"] == "Invalid"
    assert doc["details"]["causes"][0]["field"] == "spec.model.dtype"
    assert (
        await cluster.get(GW, "ml", "bad") is None and await cluster.get(GW, "ml", "typo") is None
    )
    # Without fieldValidation (the operator's and the test harness's writes) nothing is checked.
    await cluster.create(GW, bad)
    assert await cluster.get(GW, "ml", "bad") is not None


async def test_watch_is_json_starts_without_a_gap_and_ends_initial_events(
    cluster: LoopbackCluster,
) -> None:
    await cluster.create(GW, workload("old"))
    async with aiohttp.ClientSession() as http:
        url = (
            cluster.url + "/apis/gpusizer.dev/v1alpha1/namespaces/ml/gpuworkloads"
            "?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
            "&fieldSelector=metadata.name%21%3Dignored"
        )
        async with http.get(url) as resp:
            assert resp.headers["Content-Type"].startswith("application/json")
            await cluster.create(GW, workload("new"))
            await cluster.create(GW, workload("ignored"))
            await cluster.create(GW, workload("elsewhere", namespace="other"))
            await cluster.create(GW, workload("last"))
            events = []
            async with asyncio.timeout(60):
                async for line in resp.content:
                    if line.strip():
                        events.append(json.loads(line))
                    if events and events[-1]["object"]["metadata"].get("name") == "last":
                        break
    seen = [(e["type"], e["object"]["metadata"].get("name")) for e in events]
    assert seen == [("ADDED", "old"), ("BOOKMARK", None), ("ADDED", "new"), ("ADDED", "last")]
    bookmark = events[1]["object"]["metadata"]["annotations"]
    assert bookmark == {"k8s.io/initial-events-end": "true"}


async def _events(url: str, until: str, **headers: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
        async with asyncio.timeout(60):
            async for line in resp.content:
                if line.strip():
                    events.append(json.loads(line))
                    if until in line.decode():
                        break
    return events


async def test_a_watch_from_a_lists_resource_version_replays_only_later_changes(
    cluster: LoopbackCluster,
) -> None:
    await cluster.create(GW, workload("before"))
    _, listed = await call(cluster, "GET", "/apis/gpusizer.dev/v1alpha1/namespaces/ml/gpuworkloads")
    await cluster.create(GW, workload("after"))
    rv = listed["metadata"]["resourceVersion"]
    url = (
        f"{cluster.url}/apis/gpusizer.dev/v1alpha1/namespaces/ml/gpuworkloads"
        f"?watch=true&resourceVersion={rv}"
    )
    events = await _events(url, '"after"')
    assert [e["object"]["metadata"]["name"] for e in events] == ["after"]


async def test_watch_events_are_table_rows_when_kubectl_get_w_asks(
    cluster: LoopbackCluster,
) -> None:
    await cluster.create(GW, workload("row"))
    url = f"{cluster.url}/apis/gpusizer.dev/v1alpha1/namespaces/ml/gpuworkloads?watch=true"
    (event,) = await _events(url, '"row"', Accept=TABLE)
    assert event["type"] == "ADDED" and event["object"]["kind"] == "Table"
    assert event["object"]["rows"][0]["cells"][0] == "row"
