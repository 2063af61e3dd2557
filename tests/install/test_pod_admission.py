"""Pod admission through the real API server: pods labelled ``gpusizer.dev/workload`` are sent
by the chart's MutatingWebhookConfiguration (objectSelector on the label, ``failurePolicy:
Ignore``) to the operator, which applies the GPUWorkload's recommendation or, under
``podEnforcement: Enforce``, refuses the pod; every other pod never reaches it.

The strict namespaces are those the install's platform rule (``podEnforcement: Enforce``)
matches; the others run the chart's default, ``Warn``. A Rejected GPUWorkload comes about as on a
cluster: the webhook admitted its estimate, and its measurement Job (created by the operator,
its pod created by the real Job controller and bound by the real scheduler, finished by the test
in the kubelet's place) measured a peak that leaves no headroom on the only class it allows.
"""

from __future__ import annotations

import json
from typing import Any

from tests.architectures import LLAMA_3_2_1B

from .harness import GIB, Install, eventually, kubelet_finishes, probe_success

POD_WEBHOOK = 'admission webhook "mutate.pods.gpusizer.dev" denied the request: '
L4_NVML_BYTES = 23034 << 20  # NVML's total of an L4 (GFD nvidia.com/gpu.memory 23034 MiB)


def workload(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """Llama-3.2-1B on vLLM: 4 sequences of 2k tokens, fits the smallest classes."""
    body: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.2-1B", "architecture": LLAMA_3_2_1B,
                  "dtype": "bfloat16"},
        "inference": {"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 4},
    }  # fmt: skip
    for key, value in spec.items():
        body[key] = {**body.get(key, {}), **value}
    return {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def pod(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.11.0"}]},
    }


def status(install: Install, name: str, namespace: str) -> dict[str, Any]:
    live = install.admin.json("gpuworkload", name, "-n", namespace)
    return dict((live or {}).get("status") or {})


def phase(install: Install, name: str, namespace: str, wanted: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        st = status(install, name, namespace)
        return st if st.get("phase") == wanted else None

    return eventually(reached, what=f"{namespace}/{name} phase {wanted}")


def service_account_ready(install: Install, namespace: str) -> None:
    """Pods need the namespace's ``default`` ServiceAccount (the controller makes it)."""
    eventually(
        lambda: install.admin.json("serviceaccount", "default", "-n", namespace),
        what=f"serviceaccount {namespace}/default",
    )


def rejected_by_its_measurement(install: Install, name: str, namespace: str) -> dict[str, Any]:
    """A GPUWorkload allowed only on an L4, admitted on its estimate, then Rejected because
    its measurement peaked at 22 GiB of the L4's 22.5 GiB: no headroom, no larger class."""
    # transformers allocates what it uses (vLLM would take a fixed fraction, and a high peak
    # would only lower the fraction it is told to take).
    install.admin.apply(
        workload(
            name, namespace, inference={"engine": "transformers"},
            placement={"gpuClasses": ["nvidia-l4"]},
        )
    )  # fmt: skip
    measuring = phase(install, name, namespace, "Measuring")
    job = measuring["measurement"]["jobName"]
    peak = probe_success(
        22 * GIB, device_name="NVIDIA L4", total_bytes=L4_NVML_BYTES, spec_hash=None
    )
    finished = kubelet_finishes(install.admin, namespace, job, peak)
    assert finished["spec"]["nodeName"] == "l4-1"  # the real scheduler, on the class's node
    return phase(install, name, namespace, "Rejected")


def test_enforce_denies_a_rejected_workloads_pod_and_applies_it_once_fixed(
    install: Install, strict_namespace: str
) -> None:
    ns = strict_namespace
    service_account_ready(install, ns)
    rejected = rejected_by_its_measurement(install, "llama", ns)
    assert rejected["measurement"]["peakDeviceUsedBytes"] == 22 * GIB
    labelled = pod("llama-0", ns, {"app": "llama", "gpusizer.dev/workload": "llama"})
    denied = install.admin.apply(labelled, check=False)
    assert denied.returncode != 0
    message = denied.stderr
    assert POD_WEBHOOK + "pod denied by gpu-sizer (podEnforcement Enforce): " in message, message
    assert f"GPUWorkload {ns}/llama is Rejected" in message and "Fix its spec" in message
    assert install.admin.json("pod", "llama-0", "-n", ns) is None

    # Fixed: a spec that fits anywhere, measurement disabled, so Ready rests on the estimate.
    install.admin.apply(workload("llama", ns, measurement={"mode": "Disabled"}))
    install.admin(
        "wait", "--for=condition=Ready", "gpuworkload/llama", "-n", ns, "--timeout=180s",
        timeout=200,
    )  # fmt: skip
    ready = status(install, "llama", ns)
    rec = ready["recommendation"]
    created = json.loads(
        install.admin("create", "-f", "-", "-o", "json", input=json.dumps(labelled)).stdout
    )
    required = created["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required == rec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert created["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": str(rec["gpuCount"])
    }
    annotations = created["metadata"]["annotations"]
    assert annotations == {
        "gpusizer.dev/gpu-class": rec["gpuClass"],
        "gpusizer.dev/basis": "Estimate",
        "gpusizer.dev/spec-hash": ready["specHash"],
    }


def test_a_controllers_pod_is_mutated_and_other_pods_never_reach_the_webhook(
    install: Install, strict_namespace: str
) -> None:
    """A pod a controller creates (here the real Job controller: ``generateName``, the namespace
    only in the request) gets the recommendation; an unlabelled pod is stored untouched even
    under Enforce, because the API server never sends it; a label naming a missing GPUWorkload
    is denied with the fix."""
    ns = strict_namespace
    service_account_ready(install, ns)
    install.admin.apply(workload("serve", ns, measurement={"mode": "Disabled"}))
    install.admin(
        "wait", "--for=condition=Ready", "gpuworkload/serve", "-n", ns, "--timeout=180s",
        timeout=200,
    )  # fmt: skip
    rec = status(install, "serve", ns)["recommendation"]
    template = pod("ignored", ns, {"gpusizer.dev/workload": "serve"})
    del template["apiVersion"], template["kind"]
    del template["metadata"]["name"], template["metadata"]["namespace"]
    template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch-serve", "namespace": ns},
        "spec": {"backoffLimit": 0, "template": template},
    }
    install.admin.apply(job)

    def job_pod() -> dict[str, Any] | None:
        pods = install.admin.json(
            "pods", "-n", ns, "-l", "batch.kubernetes.io/job-name=batch-serve"
        )
        items = (pods or {}).get("items") or []
        return items[0] if items else None

    made = eventually(job_pod, what="the Job controller's pod")
    assert made["metadata"]["generateName"] == "batch-serve-"
    assert made["metadata"]["annotations"]["gpusizer.dev/gpu-class"] == rec["gpuClass"]
    assert made["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(
        rec["gpuCount"]
    )
    assert "nodeAffinity" in made["spec"]["affinity"]

    plain = json.loads(
        install.admin(
            "create", "-f", "-", "-o", "json", input=json.dumps(pod("web", ns, {"app": "web"}))
        ).stdout
    )
    assert "affinity" not in plain["spec"] and not (plain["metadata"].get("annotations") or {})

    missing = install.admin.apply(pod("nope", ns, {"gpusizer.dev/workload": "nope"}), check=False)
    assert missing.returncode != 0 and POD_WEBHOOK in missing.stderr
    assert f"GPUWorkload {ns}/nope (label gpusizer.dev/workload) not found: create it" in (
        missing.stderr
    )


def test_warn_admits_the_pod_with_the_problems_as_warnings(
    install: Install, namespace: str
) -> None:
    """The chart's default ``podEnforcement: Warn``: the pod is created, kubectl prints the
    webhook's warnings."""
    service_account_ready(install, namespace)
    created = install.admin.apply(pod("orphan", namespace, {"gpusizer.dev/workload": "absent"}))
    assert "Warning: " in created.stderr and "not found: create it" in created.stderr
    assert "pod/orphan created" in created.stdout
