"""The chart renders, lints and validates, and wires the operator the way the project's contract
says (flags, object names, webhook rules, security settings)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpu_sizer import __version__
from gpu_sizer.catalog import load_catalog
from gpu_sizer.controller.options import add_operator_arguments
from gpu_sizer.policy.namespace import parse_policy

from .conftest import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    VALUE_FILES,
    Manifest,
    Render,
    by_kind,
    helm,
    load_values,
    one,
    operator_container,
    strip,
)

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
VALUE_IDS = [p.stem for p in VALUE_FILES]
ALL_FEATURES = load_values(Path(__file__).parent / "values" / "all-features.yaml")

# Kinds defined by CRDs, which kubernetes-validate has no schema for. ServiceMonitor, Certificate
# and Issuer are checked structurally in test_crd_kinds_are_well_formed; kopf's peering kinds
# against the CRD the chart ships.
CRD_KINDS = {"ServiceMonitor", "Certificate", "Issuer", "ClusterKopfPeering", "KopfPeering"}
# ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from Kubernetes 1.30.
VAP_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def args(docs: list[Manifest]) -> list[str]:
    result: list[str] = operator_container(docs)["args"]
    return result


def flag(docs: list[Manifest], name: str) -> str | None:
    """The value of ``--name=value`` in the operator's args (None when absent)."""
    for arg in args(docs):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


# --- Chart metadata and values -----------------------------------------------------------------


def test_app_version_is_the_package_version(chart: Any) -> None:
    assert chart.metadata["appVersion"] == __version__


def test_values_schema_is_a_valid_draft7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)


@pytest.mark.parametrize(
    "values_file", [CHART / "values.yaml", *VALUE_FILES], ids=["defaults", *VALUE_IDS]
)
def test_values_validate_against_schema(chart: Any, values_file: Path) -> None:
    values = load_values(values_file)
    jsonschema.validate(values, SCHEMA)
    # Helm's own validation (what `helm install` runs) on the merged values.
    chart.validate_schema(values)


@pytest.mark.parametrize(
    "bad",
    [
        {"replicaCount": -1},
        {"webhook": {"url": "http://127.0.0.1:9443"}},
        {"webhook": {"url": "https://127.0.0.1:9443/validate-gpuworkload"}},
        {"webhok": {"enabled": False}},
        {"webhook": {"failurePolicy": "Deny"}},
        {"webhook": {"timeoutSeconds": 31}},
        {"webhook": {"workers": -1}},
        {"webhook": {"workers": "2"}},
        {"defaultHeadroom": 1.0},
        {"measurement": {"backend": "docker"}},
        {"watch": {"allNamespaces": False, "namespaces": []}},
        {"catalog": {"classes": [{"displayName": "no name"}]}},
        {"webhook": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}},
        {"networkPolicy": {"apiServer": {"cidrs": ["10.0.0.1"]}}},
    ],
    ids=lambda v: json.dumps(v),
)
def test_schema_rejects_mistakes(chart: Any, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)


def test_every_default_value_is_documented() -> None:
    """values.yaml is documented line by line: every key has a comment right above it, or sits
    inside a block whose own comment starts with "# --" (documented as a whole, e.g. resources)."""
    undocumented = []
    stack: list[tuple[int, bool]] = []  # (indent, documents its whole block) of enclosing keys
    previous = first_comment = ""
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and not previous.startswith("#"):
            first_comment = stripped
        if stripped and not stripped.startswith(("#", "- ")) and ":" in stripped:
            indent = len(line) - len(line.lstrip())
            while stack and stack[-1][0] >= indent:
                stack.pop()
            commented = previous.startswith("#")
            covered = any(whole for _, whole in stack)
            if not (commented or covered):
                undocumented.append(stripped.split(":")[0])
            stack.append((indent, commented and first_comment.startswith("# --")))
        if stripped:
            previous = stripped
    assert undocumented == [], f"values.yaml keys without a comment: {undocumented}"


# --- Lint and validation ----------------------------------------------------------------------


@pytest.mark.parametrize("values_file", [None, *VALUE_FILES], ids=["defaults", *VALUE_IDS])
def test_helm_lint_has_no_errors(values_file: Path | None) -> None:
    values = load_values(values_file) if values_file else None
    report = helm.lint(
        CHART, values, namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}", strict=True
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


# Chart.yaml's kubeVersion floor, and the newest schemas kubernetes-validate ships.
_floor = re.search(
    r"(\d+)\.(\d+)", yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
)
assert _floor, "Chart.yaml has no kubeVersion floor"
KUBE_VERSIONS = [f"{_floor[1]}.{_floor[2]}.0", KUBE_VERSION]


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_file", [None, *VALUE_FILES], ids=["defaults", *VALUE_IDS])
def test_manifests_validate_against_kubernetes_schemas(
    render: Render, values_file: Path | None, kube_version: str
) -> None:
    """Strict schemas (unknown fields fail) of the oldest Kubernetes the chart claims to support
    and of a recent one."""
    docs = render(load_values(values_file) if values_file else None)
    validated = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        if doc["kind"] in VAP_KINDS and kube_version < "1.30":
            continue  # rendered only from Kubernetes 1.30 (record-writers.yaml), as GA there
        try:
            kubernetes_validate.validate(strip(doc), kube_version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = f"{doc['__template__']}: {doc['kind']} {doc['metadata']['name']}"
            pytest.fail(f"{where}: {e.message} at {list(e.path)}")
        validated += 1
    assert validated >= 5  # the smallest configuration (no webhook, no ServiceAccount) renders 5


def test_crd_kinds_are_well_formed(render: Render) -> None:
    """No offline schemas exist for cert-manager and prometheus-operator kinds: check the fields
    their controllers require, and kopf's peering objects against the CRD in crds/."""
    docs = render(ALL_FEATURES)
    cert = one(docs, "Certificate")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert set(cert["spec"]) >= {"secretName", "issuerRef", "dnsNames"}
    assert cert["spec"]["issuerRef"]["kind"] in {"Issuer", "ClusterIssuer"}
    issuer = one(docs, "Issuer")
    assert issuer["apiVersion"] == "cert-manager.io/v1" and issuer["spec"] == {"selfSigned": {}}
    assert cert["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    service = next(
        s for s in by_kind(docs, "Service") if s["metadata"]["name"].endswith("-metrics")
    )
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert service["spec"]["ports"][0]["name"] == "metrics"

    peering = one(docs, "ClusterKopfPeering")
    crd = yaml.safe_load((CHART / "crds" / "clusterkopfpeerings.kopf.dev.yaml").read_text())
    assert (
        crd["spec"]["names"]["kind"] == "ClusterKopfPeering" and crd["spec"]["scope"] == "Cluster"
    )
    assert peering["apiVersion"] == f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
    jsonschema.validate(strip(peering), crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


# --- What the defaults render -----------------------------------------------------------------


def test_defaults_render_the_expected_objects(render: Render) -> None:
    kinds = sorted(d["kind"] for d in render())
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "MutatingWebhookConfiguration",
            "Role",
            "RoleBinding",
            "Service",
            "Service",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        ]
    )


def test_all_features_render_the_optional_objects(render: Render) -> None:
    kinds = {d["kind"] for d in render(ALL_FEATURES)}
    assert kinds >= {
        "Certificate",
        "Issuer",
        "ServiceMonitor",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ClusterKopfPeering",
    }
    # cert-manager mode needs no Secret access: the release namespace's Role holds the
    # measurement ledger's ConfigMap rules only.
    (role,) = by_kind(render(ALL_FEATURES), "Role")
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"configmaps"}
    dashboards = [
        d
        for d in by_kind(render(ALL_FEATURES), "ConfigMap")
        if d["metadata"]["name"].endswith("-dashboard")
    ]
    assert len(dashboards) == 1
    assert dashboards[0]["metadata"]["namespace"] == "monitoring"
    assert dashboards[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboards[0]["data"]["gpu-sizer.json"])["uid"] == "gpu-sizer-overview"


def test_operator_flags_with_defaults(render: Render) -> None:
    docs = render()
    container = operator_container(docs)
    assert container["command"] == ["gpu-sizer"]
    assert args(docs)[0] == "operator"
    assert "--all-namespaces" in args(docs) and "--standalone" in args(docs)
    assert flag(docs, "metrics-port") == "8080"
    assert flag(docs, "health-port") == "8081"
    assert flag(docs, "catalog") == "/etc/gpu-sizer/catalog.yaml"
    assert flag(docs, "policy") == "/etc/gpu-sizer/policy.yaml"
    assert flag(docs, "probe-image") == f"ghcr.io/gpu-sizer/gpu-sizer-probe:{__version__}"
    assert float(flag(docs, "default-headroom") or "nan") == pytest.approx(0.10)
    assert flag(docs, "measurement-backend") == "kubernetes"
    assert flag(docs, "unschedulable-timeout") == "600"
    assert flag(docs, "webhook-port") == "9443"
    assert flag(docs, "webhook-listen") == "0.0.0.0"
    assert flag(docs, "webhook-workers") == "2"
    assert flag(docs, "webhook-tls-secret") == "gs-gpu-sizer-webhook-tls"
    assert flag(docs, "webhook-config-name") == "gs-gpu-sizer-webhook"
    assert flag(docs, "webhook-service") == "gs-gpu-sizer-webhook"
    assert flag(docs, "webhook-cert-dir") is None
    assert container["image"] == f"ghcr.io/gpu-sizer/gpu-sizer:{__version__}"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_probe_image_pull_secrets_become_flags(render: Render) -> None:
    assert not [a for a in args(render()) if a.startswith("--probe-image-pull-secret")]
    docs = render({"measurement": {"probeImage": {"pullSecrets": ["regcred", "mirror"]}}})
    given = [a for a in args(docs) if a.startswith("--probe-image-pull-secret=")]
    assert given == ["--probe-image-pull-secret=regcred", "--probe-image-pull-secret=mirror"]
    parser = argparse.ArgumentParser()
    add_operator_arguments(parser)
    assert parser.parse_args(given).probe_image_pull_secret == ["regcred", "mirror"]


def test_named_objects_match_the_flags(render: Render) -> None:
    """The names the operator is given are the names of the objects the chart creates."""
    docs = render()
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Service", flag(docs, "webhook-service")) in names
    assert ("Service", "gs-gpu-sizer-metrics") in names
    assert ("ValidatingWebhookConfiguration", flag(docs, "webhook-config-name")) in names
    assert ("MutatingWebhookConfiguration", flag(docs, "webhook-config-name")) in names
    assert ("ConfigMap", "gs-gpu-sizer-config") in names


def test_security_and_probes(render: Render) -> None:
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = operator_container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert (
        mounts["/tmp"] == "tmp"
        and {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    )
    assert mounts["/etc/gpu-sizer"] == "config"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    # Ready when the webhook listens, not when kopf's /healthz does (a second earlier).
    assert container["readinessProbe"]["tcpSocket"] == {"port": "webhook"}
    assert "httpGet" not in container["readinessProbe"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081, "webhook": 9443}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    spread = pod["topologySpreadConstraints"][0]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert (
        spread["labelSelector"]["matchLabels"]
        == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    )
    assert one(docs, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}


def test_services(render: Render) -> None:
    services = {s["metadata"]["name"]: s["spec"] for s in by_kind(render(), "Service")}
    assert services["gs-gpu-sizer-webhook"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    assert services["gs-gpu-sizer-metrics"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]


# --- Webhooks ---------------------------------------------------------------------------------


def webhooks(docs: list[Manifest]) -> dict[str, dict[str, Any]]:
    """The GPUWorkload webhook of each configuration."""
    found = {}
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        (hook,) = [
            h
            for h in one(docs, kind)["webhooks"]
            if h["name"].endswith(".gpuworkloads.gpusizer.dev")
        ]
        found[kind] = hook
    return found


def pod_webhooks(docs: list[Manifest]) -> list[dict[str, Any]]:
    return [
        h
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        for h in one(docs, kind)["webhooks"]
        if h["name"] == "mutate.pods.gpusizer.dev"
    ]


@pytest.mark.parametrize("values", [{}, ALL_FEATURES], ids=["defaults", "all-features"])
def test_pod_webhook_sees_only_labelled_pods_and_never_blocks(
    render: Render, values: dict[str, Any]
) -> None:
    """Issue 16: a pod without gpusizer.dev/workload never reaches the webhook (objectSelector),
    and the webhook being down never blocks a pod (failurePolicy Ignore), whatever the
    GPUWorkload webhooks' failurePolicy is."""
    docs = render(values)
    (hook,) = pod_webhooks(docs)
    assert hook["objectSelector"] == {
        "matchExpressions": [
            {"key": "gpusizer.dev/workload", "operator": "Exists"},
            # The operator's own measurement pods (labelled with their workload too).
            {"key": "app.kubernetes.io/managed-by", "operator": "NotIn", "values": ["gpu-sizer"]},
        ]
    }
    assert hook["failurePolicy"] == "Ignore"
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "operations": ["CREATE"],
            "scope": "Namespaced",
        }
    ]
    assert hook["clientConfig"]["service"]["path"] == "/mutate-pod"
    assert hook["sideEffects"] == "None" and hook["reinvocationPolicy"] == "Never"
    assert 1 <= hook["timeoutSeconds"] <= 10
    excluded = [
        e
        for e in hook["namespaceSelector"]["matchExpressions"]
        if e["key"] == "kubernetes.io/metadata.name"
    ]
    assert {NAMESPACE, "kube-system"} <= set(excluded[0]["values"])
    # An unlabelled pod fails the Exists expression: the API server never calls the webhook.
    unlabelled: dict[str, str] = {"app": "web"}
    assert hook["objectSelector"]["matchExpressions"][0]["key"] not in unlabelled
    assert not pod_webhooks(render({**values, "webhook": {"pods": {"enabled": False}}}))


@pytest.mark.parametrize("values", [{}, ALL_FEATURES], ids=["defaults", "all-features"])
def test_webhooks_cover_only_gpuworkloads(render: Render, values: dict[str, Any]) -> None:
    docs = render(values)
    paths = {
        "ValidatingWebhookConfiguration": "/validate-gpuworkload",
        "MutatingWebhookConfiguration": "/mutate-gpuworkload",
    }
    for kind, hook in webhooks(docs).items():
        assert hook["rules"] == [
            {
                "apiGroups": ["gpusizer.dev"],
                "apiVersions": ["v1alpha1"],
                "resources": ["gpuworkloads"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ]
        assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
        assert hook["clientConfig"]["service"] == {
            "name": "gs-gpu-sizer-webhook",
            "namespace": NAMESPACE,
            "path": paths[kind],
            "port": 443,
        }
        excluded = [
            e
            for e in hook["namespaceSelector"]["matchExpressions"]
            if e["key"] == "kubernetes.io/metadata.name"
        ]
        assert excluded[0]["operator"] == "NotIn"
        assert {NAMESPACE, "kube-system"} <= set(excluded[0]["values"])


def test_webhook_values_are_applied(render: Render) -> None:
    for hook in webhooks(render(ALL_FEATURES)).values():
        assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 5
        assert hook["namespaceSelector"]["matchLabels"] == {"gpusizer.dev/admission": "enabled"}
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["values"] == [NAMESPACE, "kube-system", "monitoring"]
    for hook in webhooks(render()).values():
        assert hook["failurePolicy"] == "Fail" and hook["timeoutSeconds"] == 10


OUT_OF_CLUSTER = load_values(Path(__file__).parent / "values" / "out-of-cluster.yaml")


def test_webhook_url_replaces_the_service_in_every_client_config(render: Render) -> None:
    """webhook.url: every webhook (the pod webhook too) is called at URL + its own path, the
    self-signed certificate covers URL's host, and no operator pod runs (replicaCount 0)."""
    docs = render(OUT_OF_CLUSTER)
    kinds = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    hooks = [h for kind in kinds for h in one(docs, kind)["webhooks"]]
    assert {h["name"]: h["clientConfig"] for h in hooks} == {
        "validate.gpuworkloads.gpusizer.dev": {
            "url": "https://127.0.0.1:9555/validate-gpuworkload"
        },
        "mutate.gpuworkloads.gpusizer.dev": {"url": "https://127.0.0.1:9555/mutate-gpuworkload"},
        "mutate.pods.gpusizer.dev": {"url": "https://127.0.0.1:9555/mutate-pod"},
    }
    # Everything else as with the Service: only the client config differs.
    plain = render()
    default = {h["name"]: h for kind in kinds for h in one(plain, kind)["webhooks"]}
    for hook in hooks:
        assert {k: v for k, v in hook.items() if k != "clientConfig"} == {
            k: v for k, v in default[hook["name"]].items() if k != "clientConfig"
        }
    assert flag(docs, "webhook-cert-san") == "127.0.0.1"
    assert flag(docs, "webhook-port") == "9555"
    assert one(docs, "Deployment")["spec"]["replicas"] == 0
    assert flag(render(), "webhook-cert-san") is None
    # cert-manager mode: the Certificate covers the URL's host (an IP address or a DNS name).
    by_ip = render(
        {
            **OUT_OF_CLUSTER,
            "webhook": {**OUT_OF_CLUSTER["webhook"], "certManager": {"enabled": True}},
        }
    )
    assert one(by_ip, "Certificate")["spec"]["ipAddresses"] == ["127.0.0.1"]
    by_name = render(
        {"webhook": {"url": "https://gpu-sizer.example.com", "certManager": {"enabled": True}}}
    )
    assert "gpu-sizer.example.com" in one(by_name, "Certificate")["spec"]["dnsNames"]
    assert "ipAddresses" not in one(by_name, "Certificate")["spec"]


def test_release_namespace_is_always_excluded(render: Render) -> None:
    for hook in webhooks(render(namespace="platform")).values():
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["values"] == ["platform", "kube-system"]


def test_cert_manager_mode(render: Render) -> None:
    docs = render(ALL_FEATURES)
    assert flag(docs, "webhook-cert-dir") == "/etc/gpu-sizer/webhook-tls"
    for absent in ("webhook-tls-secret", "webhook-config-name", "webhook-service"):
        assert flag(docs, absent) is None
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        annotations = one(docs, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/gs-gpu-sizer-webhook"
    assert one(docs, "Certificate")["metadata"]["name"] == "gs-gpu-sizer-webhook"
    assert one(docs, "Certificate")["spec"]["secretName"] == "gs-gpu-sizer-webhook-tls"
    assert "gs-gpu-sizer-webhook.gpu-sizer.svc" in one(docs, "Certificate")["spec"]["dnsNames"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "webhook-tls")
    assert volume["secret"]["secretName"] == "gs-gpu-sizer-webhook-tls"


def test_existing_cluster_issuer(render: Render) -> None:
    docs = render(
        load_values(Path(__file__).parent / "values" / "cert-manager-cluster-issuer.yaml")
    )
    assert not by_kind(docs, "Issuer")
    assert one(docs, "Certificate")["spec"]["issuerRef"] == {
        "name": "internal-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }


def test_webhook_disabled(render: Render) -> None:
    docs = render({"webhook": {"enabled": False}})
    kinds = {d["kind"] for d in docs}
    assert not kinds & {
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "Certificate",
    }
    # No Secret access without a webhook: the Role holds the ledger's ConfigMap rules only.
    (role,) = by_kind(docs, "Role")
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"configmaps"}
    assert "--no-webhook" in args(docs)
    assert not [a for a in args(docs) if a.startswith("--webhook")]
    assert [s["metadata"]["name"] for s in by_kind(docs, "Service")] == ["gs-gpu-sizer-metrics"]
    probe = operator_container(docs)["readinessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "health"} and "tcpSocket" not in probe


# --- Replicas, peering, PDB, namespaces -------------------------------------------------------


def test_replicas_switch_to_peering_and_add_a_pdb(render: Render) -> None:
    docs = render({"replicaCount": 2})
    assert "--standalone" not in args(docs)
    assert flag(docs, "peering") == "gs-gpu-sizer"
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == "gs-gpu-sizer"
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert one(docs, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"
    assert not by_kind(render(), "PodDisruptionBudget")
    assert one(render({"podDisruptionBudget": {"enabled": True}}), "PodDisruptionBudget")


def test_namespaced_watch_with_forced_peering(render: Render) -> None:
    docs = render(load_values(Path(__file__).parent / "values" / "namespaced-peering.yaml"))
    assert "--all-namespaces" not in args(docs)
    assert [a for a in args(docs) if a.startswith("--namespace=")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    assert flag(docs, "peering") == "gpu-sizer-peering"
    peerings = by_kind(docs, "KopfPeering")
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in peerings] == [
        ("team-a", "gpu-sizer-peering"),
        ("team-b", "gpu-sizer-peering"),
    ]
    assert not by_kind(docs, "ClusterKopfPeering")
    assert operator_container(docs)["image"] == "registry.example.com/gpu-sizer:0.1.0-rc1"
    assert flag(docs, "probe-image") == "registry.example.com/gpu-sizer-probe:0.1.0-cuda12"
    assert float(flag(docs, "default-headroom") or "nan") == pytest.approx(0.2)


def test_namespaced_watch_needs_namespaces(render: Render) -> None:
    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)):
        render({"watch": {"allNamespaces": False}})


# --- ConfigMap ---------------------------------------------------------------------------------


def config(docs: list[Manifest]) -> tuple[dict[str, Any], dict[str, Any]]:
    cm = next(
        d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "gs-gpu-sizer-config"
    )
    return yaml.safe_load(cm["data"]["catalog.yaml"]), yaml.safe_load(cm["data"]["policy.yaml"])


def test_config_defaults(render: Render) -> None:
    catalog, policy = config(render())
    assert catalog == {"replaceDefaults": False, "classes": []}
    assert policy == {
        "defaultMinHeadroomFraction": DEFAULTS["defaultHeadroom"],
        "minHeadroomFractionFloor": 0.05,
        "maxMinHeadroomFraction": 0.5,
        "incompleteEstimates": "Warn",
        "podEnforcement": "Warn",
        "namespaceRules": [],
    }


def test_config_from_values_keeps_exact_integers(render: Render) -> None:
    catalog, policy = config(render(ALL_FEATURES))
    assert catalog["classes"] == ALL_FEATURES["catalog"]["classes"]
    assert isinstance(catalog["classes"][0]["memoryBytes"], int)
    assert policy["defaultMinHeadroomFraction"] == 0.15
    assert policy["namespaceRules"] == ALL_FEATURES["policy"]["namespaceRules"]


def test_config_change_rolls_the_pods(render: Render) -> None:
    def checksum(values: dict[str, Any]) -> str:
        annotations = one(render(values), "Deployment")["spec"]["template"]["metadata"][
            "annotations"
        ]
        value: str = annotations["checksum/config"]
        return value

    assert checksum({}) != checksum({"policy": {"minHeadroomFractionFloor": 0.07}})


# --- NetworkPolicy ----------------------------------------------------------------------------


def test_network_policy(render: Render) -> None:
    policy = one(render(ALL_FEATURES), "NetworkPolicy")["spec"]
    webhook_in, metrics_in = policy["ingress"]
    assert webhook_in["ports"] == [{"port": 9443, "protocol": "TCP"}]
    assert [p["ipBlock"]["cidr"] for p in webhook_in["from"]] == ["172.18.0.2/32", "10.96.0.1/32"]
    assert metrics_in["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert metrics_in["from"][0]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "prometheus"}
    }
    api_out, dns_out = policy["egress"]
    assert [p["port"] for p in api_out["ports"]] == [443, 6443]
    assert {p["protocol"] for p in dns_out["ports"]} == {"UDP", "TCP"}
    assert dns_out["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}


# --- NOTES.txt --------------------------------------------------------------------------------


def test_notes_tell_how_to_apply_and_wait(render_raw: Any) -> None:
    notes = render_raw()["gpu-sizer/templates/NOTES.txt"]
    assert "kubectl apply" in notes
    assert "kubectl wait" in notes and "--for=condition=Ready gpuworkload/" in notes
    assert "deployment/gs-gpu-sizer" in notes


# --- The operator's own parsers accept what the chart renders ---------------------------------


@pytest.mark.parametrize("values_file", [None, *VALUE_FILES], ids=["defaults", *VALUE_IDS])
def test_operator_reads_the_rendered_catalog(render: Render, values_file: Path | None) -> None:
    catalog, _ = config(render(load_values(values_file) if values_file else None))
    classes = {c.name for c in load_catalog(catalog)}
    for entry in catalog["classes"]:
        assert entry["name"] in classes


@pytest.mark.parametrize("values_file", [None, *VALUE_FILES], ids=["defaults", *VALUE_IDS])
def test_admission_reads_the_rendered_policy(render: Render, values_file: Path | None) -> None:
    _, policy = config(render(load_values(values_file) if values_file else None))
    parsed = parse_policy(policy, "policy.yaml")
    assert parsed.default_min_headroom_fraction == policy["defaultMinHeadroomFraction"]


def test_packaged_chart_keeps_every_file(tmp_path: Path) -> None:
    """`helm package` honours .helmignore: the archive must still carry the dashboard, the CRDs
    and the schema, and render the same objects as the directory."""
    archive = helm.package(CHART, destination=tmp_path)
    with helm.Chart.load(archive) as packaged:
        assert {c["filename"].rsplit("/", 1)[-1] for c in packaged.crds} == {
            p.name for p in (CHART / "crds").glob("*.yaml")
        }
        assert packaged.schema == SCHEMA
        rendered = packaged.render(ALL_FEATURES, name="gs", namespace=NAMESPACE)
    dashboard = yaml.safe_load(rendered["gpu-sizer/templates/dashboard.yaml"])
    assert json.loads(dashboard["data"]["gpu-sizer.json"])["panels"]


@pytest.mark.parametrize("values", [{"replicaCount": 2}, ALL_FEATURES], ids=["self-signed", "all"])
def test_long_release_names_give_valid_object_names(render: Render, values: dict[str, Any]) -> None:
    """Helm allows 53-character release names; every name and label value must stay a valid
    DNS label / label value (63 characters) after the chart's suffixes."""
    release = "a-very-long-release-name-for-the-gpu-sizer-operator-x"
    assert len(release) == 53
    docs = render(values, name=release)
    dns_label = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    for doc in docs:
        name = doc["metadata"]["name"]
        assert len(name) <= 63 and dns_label.match(name), name
        for value in doc["metadata"].get("labels", {}).values():
            assert len(value) <= 63, value
    args = operator_container(docs)["args"]
    names = {d["metadata"]["name"] for d in docs}
    for arg in args:
        if arg.startswith(("--webhook-service=", "--webhook-config-name=", "--peering=")):
            assert arg.split("=", 1)[1] in names, arg


@pytest.mark.parametrize("values_file", [None, *VALUE_FILES], ids=["defaults", *VALUE_IDS])
def test_operator_cli_accepts_the_rendered_args(render: Render, values_file: Path | None) -> None:
    """The real `gpu-sizer operator` parser takes every flag the chart passes, with its value."""
    parser = argparse.ArgumentParser(prog="gpu-sizer operator", exit_on_error=False)
    add_operator_arguments(parser)
    docs = render(load_values(values_file) if values_file else None)
    rendered = args(docs)
    assert rendered[0] == "operator"
    parsed = parser.parse_args(rendered[1:])
    assert parsed.metrics_port == 8080 and parsed.health_port == 8081
    assert parsed.catalog == "/etc/gpu-sizer/catalog.yaml"
    assert parsed.probe_image == flag(docs, "probe-image")


def test_measurement_cap_and_priority_class_become_flags(render: Render) -> None:
    docs = render()
    assert flag(docs, "max-concurrent-measurements") == "4"
    assert flag(docs, "measurement-priority-class") is None
    docs = render({"measurement": {"maxConcurrent": 2, "priorityClassName": "gpu-low"}})
    assert flag(docs, "max-concurrent-measurements") == "2"
    assert flag(docs, "measurement-priority-class") == "gpu-low"
    parser = argparse.ArgumentParser()
    add_operator_arguments(parser)
    given = [a for a in args(docs) if "measurement" in a and a.startswith("--max")]
    assert parser.parse_args(given).max_concurrent_measurements == 2


def test_measurement_policy_renders_and_parses(render: Render) -> None:
    values = {
        "policy": {
            "maxConcurrentMeasurements": 2,
            "measurementGpuSecondsPerDay": 36000,
            "namespaceRules": [
                {
                    "namespaceSelector": {"matchLabels": {"team": "a"}},
                    "maxConcurrentMeasurements": 1,
                    "measurementGpuSecondsPerDay": 3600,
                    "localQueue": "team-a-gpus",
                }
            ],
        }
    }
    _, policy = config(render(values))
    parsed = parse_policy(policy, "policy.yaml")
    team = parsed.for_namespace({"team": "a"})
    assert (team.max_concurrent_measurements, team.local_queue) == (1, "team-a-gpus")
    assert parsed.for_namespace({}).max_concurrent_measurements == 2
    assert team.measurement_gpu_seconds_per_day == 3600
    assert parsed.for_namespace({}).measurement_gpu_seconds_per_day == 36000


def test_calibration_value_becomes_the_flag(render: Render) -> None:
    assert flag(render(), "calibration") == "report"
    docs = render({"measurement": {"calibration": "apply"}})
    assert flag(docs, "calibration") == "apply"
    parser = argparse.ArgumentParser()
    add_operator_arguments(parser)
    parsed = parser.parse_args(["--calibration", flag(docs, "calibration") or ""])
    assert parsed.calibration == "apply"


def test_the_ledger_flag_names_the_configmap_the_role_lets_the_operator_patch(
    render: Render,
) -> None:
    docs = render()
    name = flag(docs, "measurement-ledger")
    assert name == "gs-gpu-sizer-ledger"
    (role,) = by_kind(docs, "Role")
    named = [r for r in role["rules"] if r["resources"] == ["configmaps"] and "resourceNames" in r]
    assert named == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [name],
            "verbs": ["get", "patch"],
        }
    ]
