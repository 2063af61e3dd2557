"""The measurement Job manifest: DESIGN.md's protocol, checked against the official kubernetes
client models and kubernetes-validate's OpenAPI schemas."""

from __future__ import annotations

import json
from dataclasses import replace

import kubernetes_validate
import pytest
from kubernetes import client

from gpu_sizer.api import GPUWorkloadSpec, parse_spec, spec_hash
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.measurement.job import (
    GIB,
    JobRequest,
    adoptable,
    host_memory_bytes,
    job_manifest,
    job_name,
    owner_uid,
)

SPEC = parse_spec(
    {
        "model": {"name": "m", "parameterCount": 8_000_000_000, "dtype": "bfloat16"},
        "inference": {"engine": "vllm", "maxModelLen": 4096, "maxNumSeqs": 8},
        "measurement": {"timeoutSeconds": 600},
    }
)
H100 = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-h100-80gb")


def manifest(name: str = "llama", pull_secrets: tuple[str, ...] = ("regcred",)) -> dict:
    h = spec_hash(SPEC)
    req = JobRequest(
        namespace="ml",
        workload=name,
        workload_uid="0b7e-uid",
        spec_hash=h,
        gpu_class=H100,
        gpus=2,
        memory_bytes=18 * GIB,
        image="registry.example/gpu-sizer:1",
        name=job_name(name, h, H100.name, 18 * GIB),
        image_pull_secrets=pull_secrets,
    )
    return job_manifest(SPEC, req)


def test_image_pull_secrets_only_when_given() -> None:
    pod = manifest()["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert "imagePullSecrets" not in manifest(pull_secrets=())["spec"]["template"]["spec"]


def test_deserializes_into_the_official_models_without_loss() -> None:
    doc = manifest()
    api = client.ApiClient()
    job = api._ApiClient__deserialize(json.loads(json.dumps(doc)), "V1Job")
    assert isinstance(job, client.V1Job)
    assert api.sanitize_for_serialization(job) == doc


@pytest.mark.parametrize("version", ["1.30", "1.31"])
def test_valid_against_the_kubernetes_openapi_schema(version: str) -> None:
    kubernetes_validate.validate(manifest(), version, strict=True)


def test_protocol_fields() -> None:
    doc = manifest()
    meta, spec = doc["metadata"], doc["spec"]
    assert meta["namespace"] == "ml"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "gpusizer.dev/v1alpha1",
            "kind": "GPUWorkload",
            "name": "llama",
            "uid": "0b7e-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] >= 600
    assert spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    expr = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][0]
    assert expr == {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": sorted(H100.products),
    }
    (ctr,) = pod["containers"]
    assert ctr["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert ctr["resources"]["limits"]["memory"] == str(18 * GIB)
    assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert ctr["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {e["name"]: e["value"] for e in ctr["env"]}
    assert parse_spec(json.loads(env["GPU_SIZER_SPEC"])) == SPEC


def test_name_is_deterministic_short_and_changes_with_what_is_measured() -> None:
    h = spec_hash(SPEC)
    long = "x" * 253
    assert job_name("a", h, "nvidia-l4", GIB) == job_name("a", h, "nvidia-l4", GIB)
    assert len(job_name(long, h, "nvidia-l4", GIB)) <= 63
    assert job_name("My.Workload", h, "nvidia-l4", GIB).startswith("gpusizer-my-workload-")
    names = {
        job_name("a", h, "nvidia-l4", GIB),
        job_name("a", h, "nvidia-h100-80gb", GIB),
        job_name("a", h, "nvidia-l4", 2 * GIB),
        job_name("a", h, "nvidia-l4", GIB, retry=1),
        job_name("a", "0" * 16, "nvidia-l4", GIB),
    }
    assert len(names) == 5


def test_name_digest_covers_full_name_namespace_and_uid() -> None:
    # Two names equal in their first 42 characters once shared a Job (and its deletion).
    h = spec_hash(SPEC)
    one, two = "x" * 44 + "-team-one", "x" * 44 + "-team-two"
    names = {
        job_name(one, h, "nvidia-l4", GIB, namespace="ml", uid="u1"),
        job_name(two, h, "nvidia-l4", GIB, namespace="ml", uid="u1"),
        job_name(one, h, "nvidia-l4", GIB, namespace="other", uid="u1"),
        job_name(one, h, "nvidia-l4", GIB, namespace="ml", uid="u2"),
    }
    assert len(names) == 4


def test_adoption_requires_same_owner_uid_manager_and_spec_hash() -> None:
    req = JobRequest(
        namespace="ml",
        workload="w",
        workload_uid="uid-1",
        spec_hash=spec_hash(SPEC),
        gpu_class=H100,
        gpus=1,
        memory_bytes=4 * GIB,
        image="probe:1",
        name="gpusizer-w-0123456789",
    )
    ours = job_manifest(SPEC, req)
    assert owner_uid(ours) == "uid-1"
    assert adoptable(ours, ours) is None
    theirs = job_manifest(SPEC, replace(req, workload_uid="uid-2"))
    why = adoptable(theirs, ours)
    assert why is not None and "uid-2" in why and "gpusizer-w-0123456789" in why
    other_hash = job_manifest(SPEC, replace(req, spec_hash="0" * 16))
    assert "gpusizer.dev/spec-hash" in (adoptable(other_hash, ours) or "")
    unowned = {**ours, "metadata": {**ours["metadata"], "ownerReferences": []}}
    assert adoptable(unowned, ours) is not None


def test_host_memory_synthetic_is_the_runtime_command_adds_the_weights() -> None:
    assert host_memory_bytes(SPEC, 16 * GIB) == 4 * GIB  # weights are created on the GPU
    wire = SPEC.model_dump(by_alias=True, mode="json", exclude_none=True)
    command = parse_spec({**wire, "measurement": {"mode": "Command", "command": ["serve"]}})
    assert host_memory_bytes(command, 16 * GIB) == 20 * GIB
    assert host_memory_bytes(command, 16 * GIB + 1) == 21 * GIB  # rounded up to a GiB
    assert host_memory_bytes(command, 10_000 * GIB) == 512 * GIB  # capped


def _training_spec(**parallelism: object) -> GPUWorkloadSpec:
    return parse_spec(
        {
            "model": {"name": "m", "parameterCount": 7_000_000_000},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 2048,
                "parallelism": parallelism,
            },
        }
    )


def test_data_parallel_training_requests_the_nodes_gpus() -> None:
    """One process per GPU of one node (gpu_sizer.probe.launch): a replica of 4 ranks gets 4
    GPUs; one of 16 ranks gets the node's 8 (the probe then reports multi-node Unsupported)."""
    four = _training_spec(strategy="zero2", dataParallelSize=4)
    sixteen = _training_spec(strategy="zero2", dataParallelSize=16)
    for spec, gpus in ((four, "4"), (sixteen, "8")):
        req = JobRequest(
            namespace="ml",
            workload="t",
            workload_uid="u",
            spec_hash=spec_hash(spec),
            gpu_class=H100,
            gpus=int(gpus) * 2,
            memory_bytes=8 * GIB,
            image="probe:1",
            name="gpusizer-t-0123456789",
        )
        resources = job_manifest(spec, req)["spec"]["template"]["spec"]["containers"][0][
            "resources"
        ]
        assert resources["limits"]["nvidia.com/gpu"] == gpus
        assert resources["requests"]["nvidia.com/gpu"] == gpus


def test_host_memory_follows_the_training_host_bytes() -> None:
    """4 GiB of runtime per rank on the node plus status.estimate.hostBytesPerNode (offloaded
    state, the model staged for loading)."""
    spec = _training_spec(strategy="zero2", dataParallelSize=4)
    assert host_memory_bytes(spec, 0, 0) == 4 * 4 * GIB
    assert host_memory_bytes(spec, 0, 30 * GIB) == 46 * GIB
    single = _training_spec(strategy="none")
    assert host_memory_bytes(single, 0, 10 * GIB) == 14 * GIB


def test_mig_slice_job_follows_the_nodes_mig_strategy() -> None:
    # NVIDIA k8s-device-plugin README, "MIG strategies": single exposes a slice as
    # nvidia.com/gpu on nodes labelled <product>-MIG-<profile>; mixed as nvidia.com/mig-<profile>
    # on nodes of the whole GPU's product, with GFD's nvidia.com/mig-<profile>.count label.
    mig = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-a100-80gb-mig-1g.10gb")
    h = spec_hash(SPEC)
    base = JobRequest(
        namespace="ml",
        workload="small",
        workload_uid="u",
        spec_hash=h,
        gpu_class=mig,
        gpus=1,
        memory_bytes=4 * GIB,
        image="i",
        name=job_name("small", h, mig.name, 4 * GIB),
    )
    for strategy, resource, expressions in (
        (
            "single",
            "nvidia.com/gpu",
            [
                {
                    "key": "nvidia.com/gpu.product",
                    "operator": "In",
                    "values": [
                        "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb",
                        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
                    ],
                }
            ],
        ),
        (
            "mixed",
            "nvidia.com/mig-1g.10gb",
            [
                {
                    "key": "nvidia.com/gpu.product",
                    "operator": "In",
                    "values": ["NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB"],
                },
                {"key": "nvidia.com/mig-1g.10gb.count", "operator": "Gt", "values": ["0"]},
            ],
        ),
    ):
        job = job_manifest(SPEC, replace(base, mig_strategy=strategy))  # type: ignore[arg-type]
        kubernetes_validate.validate(job, "1.31", strict=True)
        pod = job["spec"]["template"]["spec"]
        res = pod["containers"][0]["resources"]
        assert res["limits"][resource] == res["requests"][resource] == "1"
        assert {k for k in res["limits"] if k.startswith("nvidia.com/")} == {resource}
        required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required["nodeSelectorTerms"] == [{"matchExpressions": expressions}]
        # The device plugin's taint stays keyed nvidia.com/gpu for MIG slices too.
        assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu"}


def test_dra_job_claims_its_gpu_through_the_template() -> None:
    # DRA: no extended resource, a pod resourceClaim from the template, the container using it;
    # no product node affinity (the scheduler places the pod where the claim is allocatable).
    from gpu_sizer.inventory.dra import claim_template

    h = spec_hash(SPEC)
    name = job_name("llama", h, H100.name, 18 * GIB)
    req = JobRequest(
        namespace="ml",
        workload="llama",
        workload_uid="0b7e-uid",
        spec_hash=h,
        gpu_class=H100,
        gpus=2,
        memory_bytes=18 * GIB,
        image="i",
        name=name,
        claim_template=name,
    )
    job = job_manifest(SPEC, req)
    kubernetes_validate.validate(job, "1.34", strict=True)
    pod = job["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": name}]
    res = pod["containers"][0]["resources"]
    assert res["claims"] == [{"name": "gpu"}]
    assert not any(
        k.startswith("nvidia.com/") for part in ("limits", "requests") for k in res[part]
    )
    assert "affinity" not in pod
    owner = job["metadata"]["ownerReferences"][0]
    for version, k8s in (
        ("resource.k8s.io/v1", "1.34"),
        ("resource.k8s.io/v1beta2", "1.33"),
        ("resource.k8s.io/v1beta1", "1.32"),
    ):
        template = claim_template(version, name, "ml", owner, H100, 2, ["NVIDIA H100 80GB HBM3"])
        kubernetes_validate.validate(template, k8s, strict=True)
