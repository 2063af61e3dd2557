"""The rendered RBAC grants exactly the documented rules: every rendered rule is in RBAC_TABLE,
RBAC_TABLE is the chart README's table, and each condition ("When") renders its rules and no
others."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .conftest import CHART, NAMESPACE, VALUES_DIR, Manifest, Render, by_kind, load_values, one

FULLNAME = "gs-gpu-sizer"

ALWAYS = "always"
ALL_NS = "all namespaces"
LISTED_NS = "listed namespaces"
WATCHED_NS = "each watched namespace"
SELF_SIGNED = "self-signed webhook TLS"
PEERING_ALL = "peering, all namespaces"
PEERING_LISTED = "peering, listed namespaces"
KUEUE = "Kueue admission check"
CLUSTER = "cluster"
RELEASE_NS = "release namespace"
GET_LIST_WATCH = "get, list, watch"
LIST_WATCH = "list, watch"

Row = tuple[str, str, str, frozenset[str], str, str]


def row(scope: str, group: str, resource: str, verbs: str, names: str, when: str) -> Row:
    return (scope, group, resource, frozenset(v.strip() for v in verbs.split(",")), names, when)


# (scope, apiGroup, resource, verbs, resourceNames, when): mirrors the chart README's table.
# "when" names the configurations the rule belongs to (see CONDITIONS below).
RBAC_TABLE: list[Row] = [
    row(CLUSTER, "gpusizer.dev", "gpuworkloads", "get, list, watch, patch", "", ALWAYS),
    row(CLUSTER, "gpusizer.dev", "gpuworkloads/status", "patch", "", ALWAYS),
    row(
        CLUSTER, "gpusizer.dev", "gpumeasurements", "list, watch, create, patch, delete", "", ALWAYS
    ),
    row(CLUSTER, "batch", "jobs", "get, list, watch, create, delete", "", ALL_NS),
    row(CLUSTER, "", "pods", LIST_WATCH, "", ALL_NS),
    row(WATCHED_NS, "batch", "jobs", "get, list, watch, create, delete", "", LISTED_NS),
    row(WATCHED_NS, "", "pods", LIST_WATCH, "", LISTED_NS),
    row(CLUSTER, "", "events", "create", "", ALWAYS),
    row(CLUSTER, "", "nodes", LIST_WATCH, "", ALWAYS),
    row(CLUSTER, "resource.k8s.io", "resourceslices", LIST_WATCH, "", ALWAYS),
    row(CLUSTER, "resource.k8s.io", "resourceclaimtemplates", "get, create, delete", "", ALL_NS),
    row(
        WATCHED_NS,
        "resource.k8s.io",
        "resourceclaimtemplates",
        "get, create, delete",
        "",
        LISTED_NS,
    ),
    row(CLUSTER, "", "namespaces", "get", "", ALWAYS),
    row(CLUSTER, "", "namespaces", LIST_WATCH, "", LISTED_NS),
    row(CLUSTER, "apiextensions.k8s.io", "customresourcedefinitions", LIST_WATCH, "", ALWAYS),
    row(
        CLUSTER,
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "get, patch",
        "<fullname>-webhook",
        SELF_SIGNED,
    ),
    row(
        CLUSTER,
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "get, patch",
        "<fullname>-webhook",
        SELF_SIGNED,
    ),
    row(CLUSTER, "kopf.dev", "clusterkopfpeerings", "get, list, watch, patch", "", PEERING_ALL),
    row(CLUSTER, "kopf.dev", "kopfpeerings", "get, list, watch, patch", "", PEERING_LISTED),
    row(CLUSTER, "kueue.x-k8s.io", "workloads", GET_LIST_WATCH, "", KUEUE),
    row(CLUSTER, "kueue.x-k8s.io", "admissionchecks", GET_LIST_WATCH, "", KUEUE),
    row(CLUSTER, "kueue.x-k8s.io", "resourceflavors", GET_LIST_WATCH, "", KUEUE),
    row(CLUSTER, "kueue.x-k8s.io", "workloads/status", "patch", "", KUEUE),
    row(CLUSTER, "kueue.x-k8s.io", "admissionchecks/status", "patch", "", KUEUE),
    row(RELEASE_NS, "", "secrets", "create", "", SELF_SIGNED),
    row(RELEASE_NS, "", "secrets", "get, update", "<fullname>-webhook-tls", SELF_SIGNED),
    row(RELEASE_NS, "", "configmaps", "create", "", ALWAYS),
    row(RELEASE_NS, "", "configmaps", "get, patch", "<fullname>-ledger", ALWAYS),
]

# Which "when" conditions hold for each test configuration.
CONDITIONS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "defaults": ({}, {ALWAYS, ALL_NS, SELF_SIGNED}),
    "ha": ({"replicaCount": 3}, {ALWAYS, ALL_NS, SELF_SIGNED, PEERING_ALL}),
    "all-features": (load_values(VALUES_DIR / "all-features.yaml"), {ALWAYS, ALL_NS, PEERING_ALL}),
    "namespaced-peering": (
        load_values(VALUES_DIR / "namespaced-peering.yaml"),
        {ALWAYS, LISTED_NS, SELF_SIGNED, PEERING_LISTED},
    ),
    "no-webhook": (load_values(VALUES_DIR / "no-webhook.yaml"), {ALWAYS, ALL_NS}),
    "kueue-admission-check": (
        load_values(VALUES_DIR / "kueue-admission-check.yaml"),
        {ALWAYS, ALL_NS, SELF_SIGNED, KUEUE},
    ),
    "cert-manager-cluster-issuer": (
        load_values(VALUES_DIR / "cert-manager-cluster-issuer.yaml"),
        {ALWAYS, ALL_NS},
    ),
}

Grant = tuple[str, str, str, str, str]  # scope, apiGroup, resource, verb, resourceName


def expand_table(conditions: set[str]) -> set[Grant]:
    grants = set()
    for scope, group, resource, verbs, names, when in RBAC_TABLE:
        if when in conditions:
            name = names.replace("<fullname>", FULLNAME)
            grants |= {(scope, group, resource, verb, name) for verb in verbs}
    return grants


def expand_rules(docs: list[Manifest]) -> set[Grant]:
    """Every (scope, group, resource, verb, name) the rendered Roles and ClusterRoles grant."""
    grants = set()
    for kind in ("ClusterRole", "Role"):
        for role in by_kind(docs, kind):
            scope = CLUSTER
            if kind == "Role":
                is_measurement = role["metadata"]["name"].endswith("-measurement")
                scope = WATCHED_NS if is_measurement else RELEASE_NS
                if not is_measurement:
                    assert role["metadata"]["namespace"] == NAMESPACE
            for rule in role["rules"]:
                assert "nonResourceURLs" not in rule
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(field, []), f"wildcard in {kind} rule {rule}"
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            for name in rule.get("resourceNames") or [""]:
                                grants.add((scope, group, resource, verb, name))
    return grants


@pytest.mark.parametrize("config", list(CONDITIONS))
def test_rendered_rbac_is_exactly_the_documented_rules(render: Render, config: str) -> None:
    values, conditions = CONDITIONS[config]
    rendered = expand_rules(render(values))
    expected = expand_table(conditions)
    assert rendered - expected == set(), "granted but not documented"
    assert expected - rendered == set(), "documented for this configuration but not granted"


def test_listed_namespaces_get_job_rules_in_those_namespaces_only(render: Render) -> None:
    values, _ = CONDITIONS["namespaced-peering"]
    docs = render(values)
    # The release namespace too: measurements other namespaces may reuse run there.
    listed = {*values["watch"]["namespaces"], NAMESPACE}
    roles = [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-measurement")]
    bindings = [
        b for b in by_kind(docs, "RoleBinding") if b["metadata"]["name"].endswith("-measurement")
    ]
    assert {r["metadata"]["namespace"] for r in roles} == listed and len(roles) == len(listed)
    assert {b["metadata"]["namespace"] for b in bindings} == listed
    for b in bindings:
        assert b["roleRef"]["name"] == f"{FULLNAME}-measurement"
        assert b["subjects"][0]["namespace"] == NAMESPACE
    cluster_resources = {
        res for rule in one(docs, "ClusterRole")["rules"] for res in rule["resources"]
    }
    assert not cluster_resources & {"jobs", "pods"}


def test_bindings_point_at_the_roles_and_service_account(render: Render) -> None:
    docs = render()
    sa = one(docs, "ServiceAccount")["metadata"]["name"]
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = one(docs, binding_kind)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": one(docs, role_kind)["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}
        ]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa


def test_existing_service_account_is_bound(render: Render) -> None:
    docs = render(load_values(VALUES_DIR / "no-webhook.yaml"))
    assert not by_kind(docs, "ServiceAccount")
    assert one(docs, "ClusterRoleBinding")["subjects"][0]["name"] == "platform-operators"
    assert (
        one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        == "platform-operators"
    )


def test_rbac_can_be_left_to_the_platform(render: Render) -> None:
    kinds = {d["kind"] for d in render({"rbac": {"create": False}})}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def test_resource_names_are_the_objects_the_chart_makes(render: Render) -> None:
    docs = render()
    webhook_names = {
        one(docs, kind)["metadata"]["name"]
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    }
    assert webhook_names == {f"{FULLNAME}-webhook"}
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--webhook-tls-secret={FULLNAME}-webhook-tls" in args


def readme_table() -> set[Row]:
    """Rows of the README's "RBAC: every permission and why" table."""
    text = (CHART / "README.md").read_text()
    section = text.split("## RBAC: every permission and why", 1)[1].split("\n## ", 1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or cells[0] in {"Scope", ""} or set(cells[0]) <= {"-"}:
            continue
        scope, group, resource, verbs, names, when, _why = cells
        group = "" if group == "core" else group
        rows.add(row(scope, group, resource, verbs, re.sub(r"`", "", names), when))
    return rows


def test_readme_table_is_the_test_table() -> None:
    assert readme_table() == set(RBAC_TABLE)


def test_every_documented_rule_is_rendered_somewhere(render: Render) -> None:
    rendered = set().union(*(expand_rules(render(v)) for v, _ in CONDITIONS.values()))
    assert expand_table({row[5] for row in RBAC_TABLE}) <= rendered
