"""GPUWorkload admission through the real API server: what ``kubectl apply`` prints for an
incomplete estimate (admitted with a warning, or denied where the platform's rule says so), a
spec with errors, the defaults the mutating webhook writes, and the failure policies while the
operator is down (docs/admission.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import yaml

from .harness import Install, eventually
from .test_pod_admission import pod, service_account_ready, status, workload

DENIED = 'admission webhook "validate.gpuworkloads.gpusizer.dev" denied the request: '


def parameter_count_only(name: str, namespace: str) -> dict[str, Any]:
    """DeepSeek-V2-Lite given only its parameter count (15.7 B): the KV cache and activations
    cannot be counted, so the estimate is a lower bound, Incomplete (docs/admission.md)."""
    doc = workload(name, namespace, measurement={"mode": "Disabled"})
    doc["spec"]["model"] = {"name": "deepseek-ai/DeepSeek-V2-Lite-Chat",
                            "parameterCount": 15_706_484_224, "dtype": "bfloat16"}  # fmt: skip
    doc["spec"]["inference"] = {"engine": "vllm", "maxModelLen": 32768, "maxNumSeqs": 16}
    return doc


def estimated_message(doc: dict[str, Any]) -> str:
    """The Estimated condition message ``gpu-sizer estimate -o json`` writes for ``doc``."""
    cli = [sys.executable, "-m", "gpu_sizer.cli", "estimate", "-", "-o", "json"]
    out = subprocess.run(cli, input=yaml.safe_dump(doc), capture_output=True, text=True)
    assert out.returncode == 3, out.stderr  # Incomplete
    conditions = json.loads(out.stdout)["status"]["conditions"]
    message: str = next(c for c in conditions if c["type"] == "Estimated")["message"]
    return message


def test_an_incomplete_estimate_is_admitted_with_a_warning_and_never_ready(
    install: Install, namespace: str
) -> None:
    doc = parameter_count_only("dsv2", namespace)
    expected = estimated_message(doc)
    applied = install.admin.apply(doc)
    assert "gpuworkload.gpusizer.dev/dsv2 created" in applied.stdout
    assert f"Warning: {expected}" in applied.stderr, applied.stderr

    def decided() -> dict[str, Any] | None:
        st = status(install, "dsv2", namespace)
        return st if st.get("phase") else None

    st = eventually(decided, what="the operator's status of dsv2")
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert st["phase"] != "Ready" and ready["status"] != "True", st
    missing = {m["component"] for m in st["estimate"]["missingComponents"]}
    assert {"kvCacheBytes", "activationBytes"} <= missing, missing


def test_an_incomplete_estimate_is_denied_where_the_platform_rule_says_deny(
    install: Install, strict_namespace: str
) -> None:
    doc = parameter_count_only("dsv2", strict_namespace)
    expected = estimated_message(doc)
    denied = install.admin.apply(doc, check=False)
    assert denied.returncode != 0
    assert DENIED + expected in denied.stderr, denied.stderr
    assert (
        f"namespace '{strict_namespace}' admits only complete estimates "
        "(policy incompleteEstimates: Deny)"
    ) in denied.stderr
    assert install.admin.json("gpuworkload", "dsv2", "-n", strict_namespace) is None


def test_spec_errors_the_schema_cannot_express_are_the_webhooks(
    install: Install, namespace: str
) -> None:
    """The API server refuses first what the CRD schema says (enums, minimums, its CEL rules:
    schema validation runs before validating webhooks) and kubectl's strict field validation
    refuses unknown fields; the webhook denies, one line per field, the errors only the memory
    model knows."""
    bad_enum = workload("bad", namespace)
    bad_enum["spec"]["model"]["dtype"] = "bfloat17"
    schema = install.admin.apply(bad_enum, check=False)
    assert schema.returncode != 0 and DENIED not in schema.stderr
    assert 'spec.model.dtype: Unsupported value: "bfloat17"' in schema.stderr, schema.stderr
    typo = workload("bad", namespace)
    typo["spec"]["inference"]["maxNumSeq"] = 8
    strict = install.admin.apply(typo, check=False)
    assert 'strict decoding error: unknown field "spec.inference.maxNumSeq"' in strict.stderr
    cross = workload(
        "bad", namespace, inference={"targetConcurrency": 8, "pipelineParallelSize": 17}
    )
    denied = install.admin.apply(cross, check=False)
    assert denied.returncode != 0 and DENIED in denied.stderr, denied.stderr
    assert "spec.inference.pipelineParallelSize: pipelineParallelSize 17 exceeds the 16 layers" in (
        denied.stderr
    )
    assert "spec.inference.targetConcurrency: targetConcurrency (8) exceeds maxNumSeqs (4)" in (
        denied.stderr
    )
    assert install.admin.json("gpuworkload", "bad", "-n", namespace) is None


def test_the_mutating_webhook_writes_every_default(install: Install, namespace: str) -> None:
    """What is stored says what is sized: the defaults are in the spec, not implicit."""
    doc = workload("defaults", namespace, measurement={"mode": "Disabled"})
    install.admin.apply(doc)
    spec = install.admin.json("gpuworkload", "defaults", "-n", namespace)["spec"]
    assert spec["placement"]["minHeadroomFraction"] == 0.1  # the policy's default
    assert spec["inference"]["tensorParallelSize"] == 1
    assert spec["inference"]["kvCacheDtype"] == "auto"
    assert spec["measurement"]["timeoutSeconds"] == 900


def test_while_the_operator_is_down_workloads_wait_and_pods_pass(
    install: Install, strict_namespace: str
) -> None:
    """failurePolicy Fail for GPUWorkloads (nothing unchecked is stored), Ignore for pods (the
    operator never blocks a pod, even under Enforce, which is then not enforced)."""
    service_account_ready(install, strict_namespace)
    install.operator.stop()
    try:
        refused = install.admin.apply(workload("later", strict_namespace), check=False)
        assert refused.returncode != 0
        assert 'failed calling webhook "mutate.gpuworkloads.gpusizer.dev"' in refused.stderr, (
            refused.stderr
        )
        admitted = install.admin.apply(
            pod("unchecked", strict_namespace, {"gpusizer.dev/workload": "missing"})
        )
        assert "pod/unchecked created" in admitted.stdout
        stored = install.admin.json("pod", "unchecked", "-n", strict_namespace)
        assert not [k for k in stored["metadata"].get("annotations") or {} if "gpusizer" in k]
        assert "affinity" not in stored["spec"]
    finally:
        install.restart_operator()
    install.admin.apply(workload("later", strict_namespace, measurement={"mode": "Disabled"}))
