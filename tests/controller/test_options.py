"""`gpu-sizer operator` flags: the common brief's names, env GPU_SIZER_<FLAG> defaults."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.controller.options import add_operator_arguments, options_from


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_operator_arguments(p)
    return p.parse_args(list(argv))


def test_defaults_and_flags() -> None:
    opts = options_from(parse("-A", "--standalone", "--unschedulable-timeout", "30"))
    assert opts.all_namespaces and opts.standalone and opts.unschedulable_timeout == 30
    assert opts.metrics_port == 8080 and opts.health_port == 8081 and opts.webhook
    assert opts.measurement_backend == "kubernetes" and opts.catalog == DEFAULT_CATALOG
    assert opts.webhook_workers == 2


def test_webhook_workers_zero_computes_verdicts_in_threads_and_negative_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert options_from(parse("-A", "--webhook-workers", "0")).webhook_workers == 0
    with pytest.raises(SystemExit):
        parse("-A", "--webhook-workers", "-1")
    assert "--webhook-workers: must be >= 0, not -1" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^--webhook-workers must be at most 64"):
        options_from(parse("-A", "--webhook-workers", "65"))


def test_env_vars_are_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_SIZER_NAMESPACE", "a,b")
    monkeypatch.setenv("GPU_SIZER_METRICS_PORT", "9090")
    monkeypatch.setenv("GPU_SIZER_NO_WEBHOOK", "true")
    monkeypatch.setenv("GPU_SIZER_PEERING", "gpu-sizer")
    monkeypatch.setenv("POD_NAMESPACE", "gpu-sizer-system")
    opts = options_from(parse())
    assert opts.namespaces == ("a", "b") and opts.metrics_port == 9090
    assert not opts.webhook and opts.peering == "gpu-sizer" and not opts.standalone
    assert opts.pod_namespace == "gpu-sizer-system"


def test_all_namespaces_and_namespaces_conflict_names_both_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match=r"--all-namespaces/-A and --namespace/-n foo conflict"):
        options_from(parse("-A", "-n", "foo"))
    monkeypatch.setenv("GPU_SIZER_NAMESPACE", "foo")
    # Through the command: a usage error (exit 2) naming the env var, not a kopf traceback.
    from gpu_sizer.cli import main

    assert main(["operator", "-A", "--standalone"]) == 2
    err = capsys.readouterr().err
    assert "--all-namespaces/-A" in err and "GPU_SIZER_NAMESPACE=foo" in err
    assert "Traceback" not in err


def test_pull_secrets_and_local_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = options_from(
        parse("-A", "--probe-image-pull-secret", "a", "--probe-image-pull-secret", "b")
    )
    assert opts.probe_image_pull_secrets == ("a", "b") and opts.local_max_concurrency == 1
    monkeypatch.setenv("GPU_SIZER_PROBE_IMAGE_PULL_SECRET", "regcred,other")
    monkeypatch.setenv("GPU_SIZER_LOCAL_MAX_CONCURRENCY", "3")
    opts = options_from(parse("-A"))
    assert opts.probe_image_pull_secrets == ("regcred", "other") and opts.local_max_concurrency == 3
    with pytest.raises(ValueError, match="--local-max-concurrency"):
        options_from(parse("-A", "--local-max-concurrency", "0"))


def test_namespace_or_all_is_required() -> None:
    with pytest.raises(ValueError, match="--all-namespaces"):
        options_from(parse())


def test_catalog_file_overrides_by_name(tmp_path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("classes:\n  - name: nvidia-l4\n    rank: 1000\n")
    opts = options_from(parse("-A", "--catalog", str(path)))
    assert next(c for c in opts.catalog if c.name == "nvidia-l4").rank == 1000


def test_measurement_record_settings() -> None:
    opts = options_from(parse("-A"))
    assert opts.measurement_sharing and opts.measurement_record_ttl == 30 * 86400
    assert opts.measurement_revalidate_after is None
    opts = options_from(
        parse(
            "-A",
            "--measurement-sharing",
            "Disabled",
            "--measurement-record-ttl",
            "3600",
            "--measurement-revalidate-after",
            "604800",
        )
    )
    assert not opts.measurement_sharing and opts.measurement_record_ttl == 3600
    assert opts.measurement_revalidate_after == 604800
    with pytest.raises(ValueError, match="--measurement-record-ttl must be more than 0"):
        options_from(parse("-A", "--measurement-record-ttl", "0"))
    with pytest.raises(ValueError, match="--measurement-revalidate-after must be 0"):
        options_from(parse("-A", "--measurement-revalidate-after", "-1"))


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--default-headroom", "2", "--default-headroom must be between 0 and 0.5"),
        ("--default-headroom", "-0.1", "--default-headroom must be between 0 and 0.5"),
        ("--quota-retry-seconds", "-3", "--quota-retry-seconds must be more than 0 seconds"),
        ("--unschedulable-timeout", "-1", "--unschedulable-timeout must be more than 0 seconds"),
        ("--unschedulable-timeout", "0", "--unschedulable-timeout must be more than 0 seconds"),
    ],
)
def test_numeric_flags_out_of_range(flag: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        options_from(parse("-A", flag, value))


POLICY = """\
measurementGpuSecondsPerDay: -5
namespaceRules:
- namespaceSelector: {matchLabels: {a: b}}
  localQueue: "Bad Queue"
"""


@pytest.mark.parametrize("webhook", [[], ["--no-webhook"]])
def test_invalid_policy_stops_the_operator_with_or_without_webhook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], webhook: list[str]
) -> None:
    from gpu_sizer.cli import main

    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    assert main(["operator", "-A", "--policy", str(path), *webhook]) == 2
    err = capsys.readouterr().err
    assert f"{path}: invalid policy" in err
    assert "measurementGpuSecondsPerDay: must be >" in err
    assert "namespaceRules[0].localQueue: must be a Kubernetes object name (DNS-1123" in err
    assert "pattern" not in err
    assert "Traceback" not in err


def test_malformed_policy_yaml(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("a: {b: c\n  d: [\n")
    with pytest.raises(ValueError, match="invalid YAML"):
        options_from(parse("-A", "--policy", str(path), "--no-webhook"))


def test_bad_env_value_is_a_usage_error_of_the_operator_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed GPU_SIZER_* value fails `gpu-sizer operator` as argparse does for the flag
    (exit 2), and no other command (they build the operator's parser too)."""
    from gpu_sizer.cli import main

    monkeypatch.setenv("GPU_SIZER_DEFAULT_HEADROOM", "abc")
    assert main(["catalog"]) == 0
    with pytest.raises(SystemExit) as exit_:
        main(["operator", "-A"])
    assert exit_.value.code == 2
    assert "argument --default-headroom: invalid float value: 'abc'" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--metrics-port", "--health-port", "--webhook-port"])
@pytest.mark.parametrize("value", ["99999", "-1", "http"])
def test_ports_outside_0_to_65535_stop_the_operator_at_once(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port the socket call cannot take is a usage error naming the flag (exit 2), before
    anything starts: not a start-up traceback kopf retries every 60 s for ever."""
    from gpu_sizer.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["operator", "-A", flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be a TCP port" in err and "Traceback" not in err


def test_port_from_the_environment_is_checked_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpu_sizer.cli import main

    monkeypatch.setenv("GPU_SIZER_METRICS_PORT", "70000")
    with pytest.raises(SystemExit) as exit_:
        main(["operator", "-A"])
    assert exit_.value.code == 2
    assert "--metrics-port: must be a TCP port from 0 to 65535, not 70000" in (
        capsys.readouterr().err
    )


def test_metrics_and_health_listen_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_sizer.controller.running import _liveness_url

    opts = options_from(parse("-A"))
    assert (opts.metrics_listen, opts.health_listen) == ("0.0.0.0", "0.0.0.0")
    assert _liveness_url(opts) == "http://0.0.0.0:8081/healthz"
    monkeypatch.setenv("GPU_SIZER_HEALTH_LISTEN", "::1")
    opts = options_from(parse("-A", "--metrics-listen", "127.0.0.1", "--health-port", "9000"))
    assert opts.metrics_listen == "127.0.0.1" and opts.health_listen == "::1"
    assert _liveness_url(opts) == "http://[::1]:9000/healthz"
    assert _liveness_url(options_from(parse("-A", "--health-port", "0"))) is None
    with pytest.raises(SystemExit):
        parse("-A", "--metrics-listen", "not an address")


def test_the_operators_namespace_is_watched_only_beside_listed_namespaces() -> None:
    """kopf serves either every namespace or listed ones, never both: the operator's own
    namespace (its shareable measurement Jobs) is added to listed namespaces only."""
    from gpu_sizer.controller.options import Options

    listed = Options(namespaces=("team-a",), operator_namespace="gpu-sizer")
    assert listed.watched_namespaces == ("team-a", "gpu-sizer")
    assert Options(
        namespaces=("gpu-sizer",), operator_namespace="gpu-sizer"
    ).watched_namespaces == ("gpu-sizer",)
    everywhere = Options(all_namespaces=True, operator_namespace="gpu-sizer")
    assert everywhere.watched_namespaces == ()


def test_the_measurement_ledger_name_is_a_configmap_name() -> None:
    assert options_from(parse("-A")).measurement_ledger == "gpu-sizer-ledger"
    assert options_from(parse("-A", "--measurement-ledger", "gs-ledger")).measurement_ledger == (
        "gs-ledger"
    )
    with pytest.raises(ValueError, match="--measurement-ledger must be a ConfigMap name"):
        options_from(parse("-A", "--measurement-ledger", "Not_A_Name"))
