"""Minimal reproductions of kmock 0.8 behaviours that break real clients (plain kmock only).

``python hack/kmock_repro.py`` prints one line per finding; gpu-sizer's loopback API server
works around each (testbed/gpu_sizer_testbed/kubectl.py). For reports upstream.

1. Core-group discovery says ``groupVersion: /v1``: kubectl then finds no nodes or namespaces.
2. Subresources are listed with the main resource's verbs, short names and singular name:
   kubectl warns that the short name could mean ``widgets/status``.
3. ``/api/v1/namespaces`` does not parse (ValueError, HTTP 500): no namespace can be listed,
   read or created.
4. Lists carry no ``kind`` / ``apiVersion``: client-go fails with "Object 'Kind' is missing".
5. Watches are ``application/octet-stream``: client-go has no stream decoder for it.
6. ``labelSelector`` (and ``fieldSelector``) are ignored.
7. PUT (replace) is not an action: 404.

Not shown here (they need a race or a second client): a watch sends the existing objects
before it subscribes to changes (``KubernetesEmulator._serve_watch``), so a change in between is
lost; and it ignores ``resourceVersion``, replaying every object as ADDED.
"""

from __future__ import annotations

import asyncio

import kmock


async def main() -> None:
    k = kmock.KubernetesEmulator()
    k.resources["v1/nodes"] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs={"list"})
    k.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"list", "get", "create"}
    )
    k.resources["example.dev/v1/widgets"] = kmock.ResourceInfo(
        kind="Widget",
        singular="widget",
        namespaced=True,
        shortnames={"wd"},
        subresources={"status"},
        verbs={"list", "get", "create", "patch", "watch"},
    )
    widgets = "/apis/example.dev/v1/namespaces/a/widgets"
    async with k, kmock.Server(k) as srv:
        c = srv.client
        async with c.get("/api/v1") as r:
            print("1. core discovery groupVersion:", (await r.json())["groupVersion"])
        async with c.get("/apis/example.dev/v1") as r:
            subs = [x for x in (await r.json())["resources"] if "/" in x["name"]]
            print("2. subresource entry:", subs)
        async with c.get("/api/v1/namespaces") as r:
            print("3. GET /api/v1/namespaces:", r.status, (await r.json()).get("message"))
        async with c.post(widgets, json={"metadata": {"name": "w", "labels": {"app": "x"}}}):
            pass
        async with c.get(widgets) as r:
            print("4. list keys:", sorted(await r.json()))
        async with c.get(f"{widgets}?watch=true") as r:
            print("5. watch Content-Type:", r.headers["Content-Type"])
        async with c.get(f"{widgets}?labelSelector=app%3Dnone") as r:
            print("6. items matching app=none:", len((await r.json())["items"]))
        async with c.put(f"{widgets}/w", json={"metadata": {"name": "w"}, "spec": {}}) as r:
            print("7. PUT:", r.status)


if __name__ == "__main__":
    asyncio.run(main())
