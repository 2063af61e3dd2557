"""Only the operator's ServiceAccount may create or update GPUMeasurement records: the chart
renders a ValidatingAdmissionPolicy and its binding (a record decides other namespaces'
verdicts, and RBAC cannot take a right away from cluster-admin)."""

from __future__ import annotations

from .conftest import NAMESPACE, Render, by_kind, one

FULLNAME = "gs-gpu-sizer"


def test_the_policy_admits_the_operators_service_account_only(render: Render) -> None:
    docs = render({})
    policy = one(docs, "ValidatingAdmissionPolicy")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert policy["metadata"]["name"] == f"{FULLNAME}-records"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["gpusizer.dev"] and rule["resources"] == ["gpumeasurements"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}  # a deletion only re-measures
    sa = one(docs, "ServiceAccount")["metadata"]["name"]
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"] == (
        f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{sa}'"
    )


def test_an_existing_service_account_is_the_one_admitted(render: Render) -> None:
    docs = render({"serviceAccount": {"create": False, "name": "platform-sa"}})
    (validation,) = one(docs, "ValidatingAdmissionPolicy")["spec"]["validations"]
    assert f"system:serviceaccount:{NAMESPACE}:platform-sa'" in validation["expression"]


def test_no_policy_when_rbac_is_left_to_the_platform(render: Render) -> None:
    docs = render({"rbac": {"create": False}})
    assert not by_kind(docs, "ValidatingAdmissionPolicy")
    assert not by_kind(docs, "ValidatingAdmissionPolicyBinding")
