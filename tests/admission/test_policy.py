"""Namespace policy: parsing with clear errors, and how matching rules combine."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.policy.namespace import (
    IncompleteEstimates,
    Policy,
    PolicyError,
    load_policy,
    parse_policy,
)


def test_empty_policy_reproduces_the_api_default() -> None:
    effective = parse_policy(None).for_namespace({"any": "label"})
    assert effective.allowed_classes is None
    assert effective.default_min_headroom_fraction == 0.10
    assert effective.min_headroom_fraction_floor == 0.0
    assert effective.max_min_headroom_fraction == 0.5


def test_first_matching_rule_wins_and_floors_only_rise() -> None:
    policy = parse_policy(
        {
            "minHeadroomFractionFloor": 0.05,
            "namespaceRules": [
                {
                    "namespaceSelector": {"matchLabels": {"team": "research", "tier": "prod"}},
                    "defaultMinHeadroomFraction": 0.25,
                },
                {
                    "namespaceSelector": {"matchLabels": {"team": "research"}},
                    "allowedGpuClasses": ["nvidia-l4", "nvidia-h100-80gb"],
                    "minHeadroomFractionFloor": 0.12,
                    "defaultMinHeadroomFraction": 0.2,
                },
                {"allowedGpuClasses": ["nvidia-l4"], "minHeadroomFractionFloor": 0.01},
            ],
        },
        default_headroom=0.08,
    )
    assert policy.uses_labels
    research = policy.for_namespace({"team": "research"})
    assert research.allowed_classes == {"nvidia-l4", "nvidia-h100-80gb"}
    assert research.min_headroom_fraction_floor == 0.12
    assert research.default_min_headroom_fraction == 0.2
    assert research.matched_rule == 1
    prod = policy.for_namespace({"team": "research", "tier": "prod", "x": "y"})
    assert prod.matched_rule == 0
    assert prod.allowed_classes is None
    assert prod.default_min_headroom_fraction == 0.25
    other = policy.for_namespace({"team": "web"})  # the catch-all
    assert other.matched_rule == 2
    assert other.allowed_classes == {"nvidia-l4"}
    assert other.min_headroom_fraction_floor == 0.05  # a rule cannot lower the floor
    assert other.default_min_headroom_fraction == 0.08  # --default-headroom


def test_null_default_means_the_operator_default() -> None:
    policy = parse_policy({"defaultMinHeadroomFraction": None}, default_headroom=0.15)
    assert policy.for_namespace({}).default_min_headroom_fraction == 0.15
    assert parse_policy(None).for_namespace({}).matched_rule is None


def test_invalid_policy_names_every_key_path() -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(
            {
                "defaultMinHeadroomFraction": 0.02,
                "minHeadroomFractionFloor": 0.05,
                "namespaceRules": [
                    {"allowedGpuClasses": [], "namespaceSelector": {"matchLabel": {}}},
                ],
            },
            "policy.yaml",
        )
    assert str(err.value) == (
        "policy.yaml: invalid policy:\n"
        "namespaceRules[0].namespaceSelector.matchLabel: unknown field; did you mean "
        "matchLabels? allowed: matchLabels"
    )
    with pytest.raises(PolicyError) as err:
        parse_policy(
            {
                "defaultMinHeadroomFraction": 0.02,
                "minHeadroomFractionFloor": 0.05,
                "namespaceRules": [{"allowedGpuClasses": []}],
            },
            "policy.yaml",
        )
    assert err.value.problems == [
        "defaultMinHeadroomFraction: 0.02 must lie between minHeadroomFractionFloor (0.05) and "
        "maxMinHeadroomFraction (0.5)",
        "namespaceRules.0.allowedGpuClasses: an empty list would reject every workload; omit "
        "the key to allow every class",
    ]


def test_unknown_classes_and_unreadable_files_are_reported(tmp_path: Path) -> None:
    policy = Policy.model_validate({"namespaceRules": [{"allowedGpuClasses": ["nvidia-x9000"]}]})
    [line] = policy.unknown_classes(DEFAULT_CATALOG)
    assert line.startswith("namespaceRules[0].allowedGpuClasses: unknown class 'nvidia-x9000'")
    bad = tmp_path / "policy.yaml"
    bad.write_text("namespaceRules: [\n")
    with pytest.raises(PolicyError, match=r"policy\.yaml: invalid policy"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="No such file"):
        load_policy(tmp_path / "missing.yaml")


def test_policy_files_share_the_project_yaml_rules(tmp_path: Path) -> None:
    """Not UTF-8, duplicate keys and alias bombs fail with one line, as in the CLI."""
    junk = tmp_path / "junk.yaml"
    junk.write_bytes(bytes(range(256)))
    with pytest.raises(PolicyError, match="cannot read: not UTF-8"):
        load_policy(junk)
    dup = tmp_path / "dup.yaml"
    dup.write_text("defaultMinHeadroomFraction: 0.1\ndefaultMinHeadroomFraction: 0.2\n")
    with pytest.raises(PolicyError, match="line 2: duplicate key defaultMinHeadroomFraction"):
        load_policy(dup)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(
        "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10))
    )
    with pytest.raises(PolicyError, match="aliases"):
        load_policy(bomb)


def test_policy_fractions_are_numbers_not_strings() -> None:
    with pytest.raises(
        PolicyError, match=r"defaultMinHeadroomFraction: must be a number, not '0\.2'"
    ):
        parse_policy({"defaultMinHeadroomFraction": "0.2"}, "policy.yaml")
    assert parse_policy({"maxMinHeadroomFraction": 0.5}, "p").max_min_headroom_fraction == 0.5


def test_policy_fractions_must_be_finite() -> None:
    # YAML's .nan and .inf load as floats; a NaN floor would make every comparison false.
    with pytest.raises(PolicyError) as caught:
        parse_policy(
            {"minHeadroomFractionFloor": float("nan"), "maxMinHeadroomFraction": float("inf")},
            "policy.yaml",
        )
    assert caught.value.problems == [
        "minHeadroomFractionFloor: must be a finite number",
        "maxMinHeadroomFraction: must be a finite number",
    ]


def test_incomplete_estimates_default_to_warn_and_rules_may_deny() -> None:
    policy = parse_policy(
        {
            "namespaceRules": [
                {"namespaceSelector": {"matchLabels": {"tier": "prod"}},
                 "incompleteEstimates": "Deny"},
                {"namespaceSelector": {"matchLabels": {"tier": "dev"}}},
            ]
        }
    )  # fmt: skip
    assert policy.for_namespace({}).incomplete_estimates is IncompleteEstimates.Warn
    assert policy.for_namespace({"tier": "prod"}).incomplete_estimates is IncompleteEstimates.Deny
    assert policy.for_namespace({"tier": "dev"}).incomplete_estimates is IncompleteEstimates.Warn
    strict = parse_policy({"incompleteEstimates": "Deny"})
    assert strict.for_namespace({}).incomplete_estimates is IncompleteEstimates.Deny
    with pytest.raises(PolicyError) as err:
        parse_policy({"incompleteEstimates": "warn"})
    assert err.value.problems[0].startswith("incompleteEstimates: ")


def test_without_a_policy_file_the_webhook_accepts_what_estimate_accepts() -> None:
    # Issue 13: without a policy file the webhook capped minHeadroomFraction at 0.5 while
    # `gpu-sizer estimate` accepted up to 1.0. The bound is the API's, one constant for both.
    from gpu_sizer.admission.verdict import Outcome, review
    from gpu_sizer.api import InvalidWorkload, parse_spec
    from gpu_sizer.api.spec import MAX_MIN_HEADROOM_FRACTION
    from tests.architectures import LLAMA_3_8B

    default = parse_policy(None).for_namespace({})
    assert default.max_min_headroom_fraction == MAX_MIN_HEADROOM_FRACTION
    for room in (0.0, 0.3, MAX_MIN_HEADROOM_FRACTION, 0.5000001, 0.6, 0.95):
        doc = {
            "model": {"revision": "x", "architecture": LLAMA_3_8B},
            "inference": {"maxModelLen": 1024, "maxNumSeqs": 1},
            "placement": {"minHeadroomFraction": room},
        }
        answer = review(doc, namespace="ns", policy=default, catalog=DEFAULT_CATALOG)
        try:
            parse_spec(doc)
        except InvalidWorkload as exc:
            assert answer.outcome is Outcome.Invalid, room
            assert answer.message == "\n".join(str(p) for p in exc.problems)
        else:
            assert answer.allowed, (room, answer)


def test_a_policy_can_only_lower_the_api_maximum() -> None:
    assert parse_policy({"maxMinHeadroomFraction": 0.3}).max_min_headroom_fraction == 0.3
    with pytest.raises(PolicyError) as caught:
        parse_policy({"maxMinHeadroomFraction": 0.6}, "policy.yaml")
    assert caught.value.problems == ["maxMinHeadroomFraction: must be <= 0.5, not 0.6"]
