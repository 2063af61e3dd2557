"""The chart's RBAC is what the operator uses: nothing missing, nothing granted for nothing.

One run drives the operator, under the chart's ServiceAccount token, through its paths on the
real API server: measurement Jobs (created, replaced on a spec change, re-created after someone
deleted one), their pods, shared GPUMeasurement records (published, re-validated after a
``helm upgrade`` turned re-validation on, expired and deleted), Events, both webhooks (the
caBundle patched, the GPUWorkload a labelled pod names read, namespace labels read), the TLS
Secret (created, re-issued from a certificate an older release left), the measurement
GPU-seconds ledger ConfigMap (read, created, patched), DRA ResourceSlices and the
ResourceClaimTemplate a Job claims its GPU through, and the finalizer earlier versions left on a
GPUWorkload. Then the audit log (level Metadata: user, verb, resource, subresource) gives the
(apiGroup, resource, subresource, verb) set the operator used, compared with what the rendered
ClusterRole and Role grant:

* used but not granted would have been a 403, which fails every install test anyway;
* granted but never used fails, unless :data:`KEPT` names the path that needs it and that this
  run does not reach.

The run is self-contained (it does not rely on other tests having run in the same session), so
it holds however pytest-xdist spreads the tests.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_sizer.admission import certs
from gpu_sizer.api.record import record_name

from .harness import (
    GIB,
    Install,
    Manifest,
    audit_time,
    eventually,
    gpu_node,
    kubelet_finishes,
    probe_success,
)
from .test_pod_admission import phase, pod, service_account_ready, status, workload

Grant = tuple[str, str, str, str]  # apiGroup, resource, subresource, verb

#: Granted, needed, and not reached by this run, each with the path that needs it. Empty: this
#: run reaches every path of the defaults' rules (the other configurations' rules, peering,
#: listed namespaces and Kueue, are not audited here; tests/chart/test_rbac.py renders them).
KEPT: dict[Grant, str] = {}
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dra-resourceslices.yaml"
L4_NVML = 23034 << 20
A100_40_NVML = 40960 << 20


def granted(manifests: list[Manifest]) -> set[Grant]:
    """Every (apiGroup, resource, subresource, verb) the rendered ClusterRole and Roles grant."""
    out: set[Grant] = set()
    for doc in manifests:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    name, _, sub = resource.partition("/")
                    out |= {(group, name, sub, verb) for verb in rule["verbs"]}
    return out


def used(install: Install, since: float) -> dict[Grant, int]:
    """What the operator did on resources since ``since``, from the audit log (the tests' own
    ``kubectl auth`` calls with the operator's token, and discovery, left out)."""
    out: dict[Grant, int] = {}
    for event in install.plane.audit_events(install.username):
        ref = event.get("objectRef")
        agent = str(event.get("userAgent") or "")
        if not isinstance(ref, dict) or agent.startswith("kubectl") or audit_time(event) < since:
            continue
        key = (
            str(ref.get("apiGroup") or ""),
            str(ref.get("resource") or ""),
            str(ref.get("subresource") or ""),
            str(event.get("verb")),
        )
        out[key] = out.get(key, 0) + 1
    return out


def own(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with a context length of this run's own: its measurement key is then no other
    test's, so no shared record of another test is reused instead of measuring."""
    salt = int(doc["metadata"]["namespace"].removeprefix("t-"), 16) % 997
    doc["spec"]["inference"]["maxModelLen"] = 3000 + salt
    return doc


def job_of(install: Install, name: str, namespace: str, *, not_named: str = "") -> str:
    def measuring() -> str | None:
        st = status(install, name, namespace)
        job = ((st.get("measurement") or {}).get("jobName")) or ""
        return job if st.get("phase") == "Measuring" and job and job != not_named else None

    return eventually(measuring, what=f"{namespace}/{name} measuring with a new Job")


@pytest.fixture
def dra_node(install: Install) -> Iterator[None]:
    """A node whose GFD labels show its first GPU only (two A100 80 GB) and whose DRA
    ResourceSlices show an 80 GB and a 40 GB card, as NVIDIA's DRA driver publishes them."""
    node = gpu_node("mixed-80-40", "NVIDIA-A100-SXM4-80GB", 81920, count=2)
    install.admin.apply(node)
    install.admin("taint", "node", "mixed-80-40", "node.kubernetes.io/not-ready:NoSchedule-")
    slices = [d for d in yaml.safe_load_all(FIXTURE.read_text()) if d]
    for doc in slices:
        install.admin.apply(doc)
    yield
    for doc in slices:
        install.admin("delete", "resourceslice", doc["metadata"]["name"], check=False)
    install.admin("delete", "node", "mixed-80-40", check=False)


def older_releases_secret(install: Install) -> dict[str, Any]:
    """The TLS Secret as a release without IP SANs left it: its own CA, DNS names only."""
    names = certs.service_dns_names("gpu-sizer-webhook", install.namespace)
    bundle = certs.generate_bundle(names, dt.datetime.now(dt.UTC))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "gpu-sizer-webhook-tls", "namespace": install.namespace},
        "data": bundle.secret_data(),
    }


def ip_sans(install: Install) -> list[str]:
    from cryptography import x509

    secret = install.admin.json("secret", "gpu-sizer-webhook-tls", "-n", install.namespace)
    cert = x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["tls.crt"]))[0]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]


def test_the_operator_uses_every_verb_it_is_granted(
    install: Install, namespace: str, dra_node: None
) -> None:
    since = time.time() - 1
    ns = namespace
    service_account_ready(install, ns)

    # Startup: kopf lists and watches everything it serves; self-signed TLS creates its Secret
    # on a first start, re-issues an older release's DNS-only certificate (update), and patches
    # the new CA into both caBundles each time.
    # An older release's Secret holds a DNS-only certificate: it is re-issued from the same CA
    # with 127.0.0.1 (the webhook.url host), and the API server's calls through url work.
    # Other tests of the session may have charged GPU-seconds already: the ledger ConfigMap is
    # removed so that this run's first charge creates it (the restarts below read it: get).
    install.admin(
        "delete", "configmap", "gpu-sizer-ledger", "-n", install.namespace, "--ignore-not-found"
    )
    for secret in (None, older_releases_secret(install)):
        install.operator.stop()
        if secret is None:
            install.admin("delete", "secret", "gpu-sizer-webhook-tls", "-n", install.namespace)
        else:
            install.admin.apply(secret)
            assert ip_sans(install) == []
        install.restart_operator()
        assert ip_sans(install) == ["127.0.0.1"]
        ca = install.admin.json("secret", "gpu-sizer-webhook-tls", "-n", install.namespace)
        if secret is not None:
            assert ca["data"]["ca.crt"] == secret["data"]["ca.crt"]  # re-issued, same CA
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            hooks = install.admin.json(kind, "gpu-sizer-webhook")["webhooks"]
            assert {h["clientConfig"]["caBundle"] for h in hooks} == {ca["data"]["ca.crt"]}
        check = workload("tls-check", ns, measurement={"mode": "Disabled"})
        install.admin("apply", "--dry-run=server", "-f", "-", input=json.dumps(check))

    # Synthetic runs of the operator's probe image may be shared: they run in the operator's
    # own namespace (the release namespace), where no tenant creates pods.
    jns = install.namespace
    # A measured workload: Job created, its pod watched, a GPU success published as a record.
    install.admin.apply(own(workload("measured", ns)))
    job = job_of(install, "measured", ns)
    kubelet_finishes(install.admin, ns, job, probe_success(6 * GIB, device_name="NVIDIA L4",
                                                           total_bytes=L4_NVML))  # fmt: skip
    done = phase(install, "measured", ns, "Ready")
    assert done["recommendation"]["basis"] == "Measurement"
    record = record_name(done["measurement"]["measurementKey"])
    assert install.admin.json("gpumeasurement", record) is not None
    # Its GPU-seconds are charged to the namespace in the ledger ConfigMap of the operator's
    # namespace: read on start (get), created at the first charge (create); the re-measurement
    # after the upgrade below patches it.
    ledger = eventually(
        lambda: install.admin.json("configmap", "gpu-sizer-ledger", "-n", install.namespace),
        what="the GPU-seconds ledger ConfigMap",
    )
    assert json.loads(ledger["data"][ns])["gpuSeconds"] >= 1

    # A spec change while measuring: the old Job is deleted, a new one created.
    install.admin.apply(own(workload("changed", ns, inference={"engine": "transformers"})))
    first = job_of(install, "changed", ns)
    install.admin.apply(
        own(workload("changed", ns, inference={"engine": "transformers", "maxNumSeqs": 2}))
    )
    second = job_of(install, "changed", ns, not_named=first)
    eventually(
        lambda: install.admin.json("job", first, "-n", jns) is None, what=f"Job {first} gone"
    )
    assert second != first
    # Someone deletes the running Job in the foreground: it stays, terminating, until its pod
    # is gone. The operator's re-creation finds the name taken, reads the Job (terminating)
    # and waits; once the kubelet removed the pod, the Job is created again.
    eventually(
        lambda: [
            p
            for p in install.admin.json("pods", "-n", jns, "-l",
                                        f"batch.kubernetes.io/job-name={second}")["items"]
            if p["spec"].get("nodeName")
        ],
        what=f"the pod of Job {second} bound",
    )  # fmt: skip
    install.admin("delete", "job", second, "-n", jns, "--cascade=foreground", "--wait=false")
    eventually(
        lambda: ("batch", "jobs", "", "get") in used(install, since),
        what="the operator reading the terminating Job",
    )
    install.admin(  # the kubelet, once the container stopped
        "delete", "pods", "-n", jns, "-l", f"batch.kubernetes.io/job-name={second}",
        "--grace-period=0", "--force",
    )  # fmt: skip

    def recreated_changed() -> bool:
        st = status(install, "changed", ns)
        measured = next((c for c in st.get("conditions") or [] if c["type"] == "Measured"), {})
        job = install.admin.json("job", second, "-n", jns)
        alive = bool(job) and not job["metadata"].get("deletionTimestamp")
        return measured.get("reason") == "JobRecreated" and alive

    eventually(recreated_changed, what=f"Job {second} created again")

    # A labelled pod: the pod webhook reads the GPUWorkload it names (and the namespace labels).
    created = install.admin.apply(pod("server", ns, {"gpusizer.dev/workload": "measured"}))
    assert "pod/server created" in created.stdout

    # A GPUWorkload an earlier version left its finalizer on: kopf removes it.
    old = workload("from-before", ns, measurement={"mode": "Disabled"})
    old["metadata"]["finalizers"] = ["gpusizer.dev/finalizer"]
    install.admin.apply(old)
    eventually(
        lambda: (
            not install.admin.json("gpuworkload", "from-before", "-n", ns)["metadata"].get(
                "finalizers"
            )
        ),
        what="kopf removing the old finalizer",
    )

    # DRA: a class only the ResourceSlices show; the Job claims it through a template owned by
    # the workload. Someone deletes the Job: it is created again, and its template (still
    # there) is read and adopted; a spec change deletes the Job and its template.
    install.admin.apply(own(workload("forty", ns, placement={"gpuClasses": ["nvidia-a100-40gb"]})))
    claimed = job_of(install, "forty", ns)
    template = install.admin.json("resourceclaimtemplate", claimed, "-n", jns)
    # In the operator's namespace no owner reference can name the workload (they do not cross
    # namespaces): the template names it in annotations, as its Job does.
    assert template["metadata"]["annotations"]["gpusizer.dev/workload-name"] == "forty"
    install.admin("delete", "job", claimed, "-n", jns)

    def recreated() -> bool:
        again = install.admin.json("job", claimed, "-n", jns)
        return bool(again) and not again["metadata"].get("deletionTimestamp")

    eventually(recreated, what=f"Job {claimed} created again")
    eventually(
        lambda: (
            install.operator.logged(f"{ns}/forty: created Job {claimed}")
            and len(install.operator.log.read_text().split(f"{ns}/forty: created Job {claimed}"))
            > 2
        ),
        what="the second creation of the Job",
    )
    install.admin.apply(
        own(workload("forty", ns, inference={"maxNumSeqs": 2},
                     placement={"gpuClasses": ["nvidia-a100-40gb"]}))
    )  # fmt: skip
    eventually(
        lambda: install.admin.json("resourceclaimtemplate", claimed, "-n", jns) is None,
        what=f"ResourceClaimTemplate {claimed} deleted with its Job",
    )

    # helm upgrade: re-validation on (1 s). The measured workload is measured again; its record
    # is patched with the newer measurement. A second upgrade keeps records 5 s: the record
    # expires (the TTL counts from its recordedAt, whatever expiry it states) and is deleted.
    # Then the release goes back to its values.
    base = install.values
    try:
        install.upgrade(
            {**base, "measurement": {"revalidateAfterSeconds": 1, "recordTTLSeconds": 3600}}
        )
        again = job_of(install, "measured", ns, not_named=job)
        kubelet_finishes(install.admin, ns, again, probe_success(
            7 * GIB, device_name="NVIDIA L4", total_bytes=L4_NVML))  # fmt: skip

        def patched() -> bool:
            rec = install.admin.json("gpumeasurement", record) or {}
            peak = ((rec.get("spec") or {}).get("result") or {}).get("peakDeviceUsedBytes")
            return peak == 7 * GIB

        eventually(patched, what=f"record {record} patched with the newer measurement")

        def charged_twice() -> bool:
            cm = install.admin.json("configmap", "gpu-sizer-ledger", "-n", install.namespace)
            return len(json.loads(cm["data"][ns])["jobs"]) >= 2

        eventually(charged_twice, what="the re-measurement charged to the ledger (patch)")
        install.upgrade({**base, "measurement": {"recordTTLSeconds": 5}})
        eventually(
            lambda: install.admin.json("gpumeasurement", record) is None,
            what=f"record {record} expired and deleted",
        )
    finally:
        install.upgrade(base)

    usage = used(install, since)
    print("\n".join(f"{'/'.join(k[:3]).strip('/')} {k[3]}: {n}" for k, n in sorted(usage.items())))
    grants = granted(install.manifests)
    assert set(usage) <= grants, f"used without a grant: {set(usage) - grants}"
    unused = grants - set(usage) - set(KEPT)
    assert unused == set(), f"granted but never used: {sorted(unused)}"
    assert set(KEPT) <= grants, "KEPT names a verb the chart does not grant"
