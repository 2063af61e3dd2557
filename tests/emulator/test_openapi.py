"""OpenAPI v3 documents: what kubectl apply reads to decide on server-side field validation,
and what kubectl explain reads."""

from __future__ import annotations

from gpu_sizer_testbed.emulator import crd_document
from gpu_sizer_testbed.openapi import (
    ServedResource,
    group_version_document,
    index_document,
    schema_name,
)

from gpu_sizer.api import GROUP, KIND, PLURAL, VERSION

CRD_SCHEMA = crd_document()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
GPUW = ServedResource(
    GROUP,
    VERSION,
    PLURAL,
    KIND,
    namespaced=True,
    verbs=frozenset({"get", "list", "watch", "create", "update", "patch", "delete"}),
    subresources=frozenset({"status"}),
    schema=CRD_SCHEMA,
)
NODES = ServedResource(
    "", "v1", "nodes", "Node", namespaced=False, verbs=frozenset({"get", "list"})
)


def test_schema_names_follow_kube_apiserver() -> None:
    assert (
        schema_name("gpusizer.dev", "v1alpha1", "GPUWorkload")
        == "dev.gpusizer.v1alpha1.GPUWorkload"
    )
    assert schema_name("", "v1", "Node") == "io.k8s.api.core.v1.Node"
    assert schema_name("batch", "v1", "Job") == "io.k8s.api.batch.v1.Job"


def test_patch_declares_field_validation_for_the_kind() -> None:
    """client-go's QueryParamVerifierV3 looks for the PATCH operation tagged with the object's
    group-version-kind and a fieldValidation parameter; then kubectl sends Strict."""
    doc = group_version_document([GPUW])
    item = doc["paths"]["/apis/gpusizer.dev/v1alpha1/namespaces/{namespace}/gpuworkloads/{name}"]
    patch = item["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "gpusizer.dev",
        "version": "v1alpha1",
        "kind": "GPUWorkload",
    }
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert set(item) == {"get", "put", "patch", "delete"}
    collection = doc["paths"]["/apis/gpusizer.dev/v1alpha1/namespaces/{namespace}/gpuworkloads"]
    assert set(collection) == {"get", "post"}
    assert "/apis/gpusizer.dev/v1alpha1/gpuworkloads" in doc["paths"]  # list across namespaces
    assert (
        "patch"
        in doc["paths"][
            "/apis/gpusizer.dev/v1alpha1/namespaces/{namespace}/gpuworkloads/{name}/status"
        ]
    )


def test_the_kind_schema_is_the_crds_with_object_meta() -> None:
    doc = group_version_document([GPUW])
    schema = doc["components"]["schemas"]["dev.gpusizer.v1alpha1.GPUWorkload"]
    assert schema["properties"]["spec"] == CRD_SCHEMA["properties"]["spec"]
    assert schema["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in doc["components"]["schemas"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "gpusizer.dev", "version": "v1alpha1", "kind": "GPUWorkload"}
    ]
    assert "metadata" in CRD_SCHEMA["properties"]  # the CRD itself is left as it was


def test_cluster_scoped_builtin_without_a_schema() -> None:
    doc = group_version_document([NODES])
    assert set(doc["paths"]) == {"/api/v1/nodes", "/api/v1/nodes/{name}"}
    node = doc["components"]["schemas"]["io.k8s.api.core.v1.Node"]
    assert node["x-kubernetes-preserve-unknown-fields"] is True


def test_index_lists_each_group_version_with_a_content_hash() -> None:
    docs = {
        "api/v1": group_version_document([NODES]),
        "apis/gpusizer.dev/v1alpha1": group_version_document([GPUW]),
    }
    index = index_document(docs)
    assert set(index["paths"]) == {"api/v1", "apis/gpusizer.dev/v1alpha1"}
    url = index["paths"]["apis/gpusizer.dev/v1alpha1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/gpusizer.dev/v1alpha1?hash=")
    changed = index_document({**docs, "api/v1": group_version_document([NODES, GPUW])})
    assert changed["paths"]["api/v1"] != index["paths"]["api/v1"]
    assert (
        changed["paths"]["apis/gpusizer.dev/v1alpha1"]
        == index["paths"]["apis/gpusizer.dev/v1alpha1"]
    )
