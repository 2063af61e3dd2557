"""The operator's options: the ``gpu-sizer operator`` flags, each also read from an env var.

Every flag ``--some-flag`` defaults to env ``GPU_SIZER_SOME_FLAG`` (the chart sets these), then to
the built-in default. The operator's own namespace comes from env ``POD_NAMESPACE``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_sizer import __version__
from gpu_sizer.api.status import CalibrationMode
from gpu_sizer.argtypes import listen_address, nonnegative_int, port
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass, load_catalog_file

__all__ = [
    "DEFAULT_PROBE_IMAGE",
    "Options",
    "add_operator_arguments",
    "load_catalog",
    "options_from",
    "peering_priority",
]

#: The probe image built from docker/probe.Dockerfile (the chart's measurement.probeImage default).
DEFAULT_PROBE_IMAGE = f"ghcr.io/gpu-sizer/gpu-sizer-probe:{__version__}"


@dataclass(frozen=True)
class Options:
    """Parsed operator settings. Durations are seconds; ports are TCP ports (0 disables)."""

    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    standalone: bool = True
    peering: str | None = None
    priority: int = 0
    metrics_port: int = 8080
    health_port: int = 8081
    #: Addresses the /metrics and /healthz listeners bind (``--metrics-listen``,
    #: ``--health-listen``): ``0.0.0.0`` in a pod (Prometheus and the kubelet connect from
    #: outside it), ``127.0.0.1`` on a workstation.
    metrics_listen: str = "0.0.0.0"
    health_listen: str = "0.0.0.0"
    catalog_file: str | None = None
    policy_file: str | None = None
    probe_image: str = DEFAULT_PROBE_IMAGE
    default_headroom: float = 0.10
    measurement_backend: str = "kubernetes"
    unschedulable_timeout: float = 600.0
    poll_interval: float = 5.0  # ignored: measurement Jobs are followed from watch events
    local_probe_command: tuple[str, ...] = ()
    local_deadline_cap: float | None = None
    local_max_concurrency: int = 1
    #: Cluster-wide cap on measurement Jobs at once; 0: no cap.
    max_concurrent_measurements: int = 4
    #: Seconds a namespace whose ResourceQuota refused a measurement Job waits before the next try.
    quota_retry_seconds: float = 30.0
    #: ``priorityClassName`` of measurement pods; None: the cluster's default.
    measurement_priority_class: str | None = None
    probe_image_pull_secrets: tuple[str, ...] = ()
    #: Correction factors learned from measurements (gpu_sizer.records.calibration): Off, Report,
    #: Apply.
    calibration: CalibrationMode = CalibrationMode.Report
    #: Shared measurement records (GPUMeasurement) at all; when on, the namespace policy's
    #: ``measurementSharing`` decides per namespace.
    measurement_sharing: bool = True
    #: Seconds a shared GPUMeasurement record is reused after it was taken; then it is deleted.
    measurement_record_ttl: float = 30 * 86400.0
    #: Seconds after which a finished measurement is taken again (opt-in); None: never.
    measurement_revalidate_after: float | None = None
    #: Serve Kueue AdmissionChecks whose controllerName is ``gpusizer.dev/admission-check``.
    kueue_admission_check: bool = False
    webhook: bool = True
    webhook_port: int = 9443
    webhook_listen: str = "0.0.0.0"
    #: Worker processes the webhook computes verdicts in (0: threads of the operator's process);
    #: ``gpu_sizer.admission.workers.PROCESSES``.
    webhook_workers: int = 2
    webhook_cert_dir: str | None = None
    webhook_tls_secret: str | None = None
    webhook_config_name: str | None = None
    webhook_service: str | None = None
    #: Extra subject alternative names (IP addresses or DNS names) of the self-signed serving
    #: certificate: the hosts of ``url`` webhook client configs.
    webhook_cert_san: tuple[str, ...] = ()
    pod_namespace: str | None = None
    #: The operator's own namespace, where no tenant may write (``--operator-namespace``,
    #: default ``POD_NAMESPACE``): shareable measurements run there. None: measurements run in
    #: the workloads' namespaces and every record stays private to its namespace.
    operator_namespace: str | None = None
    #: The ConfigMap in ``operator_namespace`` holding each namespace's measurement GPU-seconds
    #: of the day (:mod:`gpu_sizer.measurement.ledger`), ``--measurement-ledger``.
    measurement_ledger: str = "gpu-sizer-ledger"
    catalog: tuple[GPUClass, ...] = field(default=DEFAULT_CATALOG)

    @property
    def watched_namespaces(self) -> tuple[str, ...]:
        """The namespaces kopf watches with ``--namespace``: the served ones and the operator's
        own (its shareable measurement Jobs run there). Cluster-wide (``--all-namespaces``, or
        no ``--namespace``) it is none: kopf takes either, never both."""
        if self.all_namespaces or not self.namespaces:
            return ()
        if self.operator_namespace and self.operator_namespace not in self.namespaces:
            return (*self.namespaces, self.operator_namespace)
        return self.namespaces


def _env(flag: str, default: Any) -> Any:
    return os.environ.get("GPU_SIZER_" + flag.upper().replace("-", "_"), default)


def _source(flag: str, spelled: str) -> str:
    """How a setting was given, for error messages: the flag, plus its env var when set."""
    var = "GPU_SIZER_" + flag.upper().replace("-", "_")
    value = os.environ.get(var)
    return f"{spelled} (env {var}={value})" if value else spelled


def _bool_env(flag: str) -> bool:
    return str(_env(flag, "")).lower() in ("1", "true", "yes", "on")


def add_operator_arguments(p: argparse.ArgumentParser) -> None:
    """The flags listed in the project's common brief (chart and operator agree on them)."""
    ns = _env("namespace", "")
    p.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[n for n in ns.split(",") if n],
        metavar="NS",
        help="namespace to serve (repeatable); env GPU_SIZER_NAMESPACE, comma-separated",
    )
    p.add_argument(
        "--all-namespaces",
        "-A",
        action="store_true",
        default=_bool_env("all-namespaces"),
        help="serve every namespace (cluster-wide)",
    )
    p.add_argument(
        "--standalone", action="store_true", default=_bool_env("standalone"), help="no peering"
    )
    p.add_argument("--peering", default=_env("peering", None), metavar="NAME")
    p.add_argument(
        "--priority",
        type=int,
        default=_env("priority", None),
        metavar="N",
        help="kopf peering priority; default derived from POD_NAME so replicas differ (kopf "
        "pauses every replica when two live ones share a priority)",
    )
    p.add_argument(
        "--metrics-port",
        type=port,
        default=_env("metrics-port", 8080),
        metavar="PORT",
        help="port of /metrics (default 8080; 0: not served)",
    )
    p.add_argument(
        "--metrics-listen",
        type=listen_address,
        default=_env("metrics-listen", "0.0.0.0"),
        metavar="ADDR",
        help="address /metrics listens on (default 0.0.0.0, every interface, as a pod needs; "
        "127.0.0.1 keeps it on the machine)",
    )
    p.add_argument(
        "--health-port",
        type=port,
        default=_env("health-port", 8081),
        metavar="PORT",
        help="port of /healthz, the liveness endpoint (default 8081; 0: not served)",
    )
    p.add_argument(
        "--health-listen",
        type=listen_address,
        default=_env("health-listen", "0.0.0.0"),
        metavar="ADDR",
        help="address /healthz listens on (default 0.0.0.0: the kubelet probes the pod's IP)",
    )
    p.add_argument("--catalog", default=_env("catalog", None), metavar="FILE")
    p.add_argument("--policy", default=_env("policy", None), metavar="FILE")
    p.add_argument("--probe-image", default=_env("probe-image", DEFAULT_PROBE_IMAGE))
    p.add_argument(
        "--probe-image-pull-secret",
        action="append",
        default=[n for n in str(_env("probe-image-pull-secret", "")).split(",") if n],
        metavar="NAME",
        help="Secret for pulling the probe image (repeatable); becomes the measurement Job's "
        "imagePullSecrets, so it must exist in each workload's namespace; env "
        "GPU_SIZER_PROBE_IMAGE_PULL_SECRET, comma-separated",
    )
    p.add_argument("--default-headroom", type=float, default=_env("default-headroom", 0.10))
    p.add_argument(
        "--measurement-backend",
        choices=["kubernetes", "local"],
        default=_env("measurement-backend", "kubernetes"),
    )
    p.add_argument(
        "--unschedulable-timeout",
        type=float,
        default=_env("unschedulable-timeout", 600),
        metavar="SECONDS",
        help="how long a measurement pod may stay unschedulable (seconds)",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=_env("poll-interval", 5),
        metavar="SECONDS",
        help="ignored (kept for existing deployments): measurement Jobs are followed from watch "
        "events, not polled",
    )
    p.add_argument(
        "--local-probe-command",
        default=_env("local-probe-command", ""),
        metavar="CMD",
        help="local backend: command replacing 'python -m gpu_sizer.probe' (space-separated)",
    )
    p.add_argument(
        "--local-deadline-cap",
        type=float,
        default=_env("local-deadline-cap", None),
        metavar="SECONDS",
        help="local backend: upper bound on a probe run, whatever the spec's timeout (seconds)",
    )
    p.add_argument(
        "--local-max-concurrency",
        type=int,
        default=_env("local-max-concurrency", 1),
        metavar="N",
        help="local backend: probes run at once (default 1: measurements sharing one GPU would "
        "spoil each other's peaks); the others wait their turn",
    )
    p.add_argument(
        "--max-concurrent-measurements",
        type=int,
        default=_env("max-concurrent-measurements", 4),
        metavar="N",
        help="measurement Jobs running at once, cluster-wide (default 4; 0: no cap); the "
        "others wait in a queue fair across namespaces (Measured=False, reason Queued)",
    )
    p.add_argument(
        "--quota-retry-seconds",
        type=float,
        default=_env("quota-retry-seconds", 30),
        metavar="SECONDS",
        help="after a ResourceQuota refused a measurement Job (403 exceeded quota), seconds "
        "before its namespace is offered a measurement slot again (default 30)",
    )
    p.add_argument(
        "--measurement-priority-class",
        default=_env("measurement-priority-class", None) or None,
        metavar="NAME",
        help="PriorityClass of measurement pods (their priorityClassName); default: none, the "
        "cluster's default priority",
    )
    p.add_argument(
        "--calibration",
        choices=["off", "report", "apply"],
        type=str.lower,
        default=_env("calibration", "report"),
        help="correction factors per (engine, GPU class, component) learned from the "
        "measurements in the cluster: off; report (default: shown in "
        "status.estimate.calibration, figures unchanged); apply (the figures, the verdict and "
        "the recommendation include them; factors are at least 1.0 and at most 1.5, from 5 "
        "records up)",
    )
    p.add_argument(
        "--measurement-sharing",
        choices=("Enabled", "Disabled"),
        default=_env("measurement-sharing", "Enabled"),
        help="shared measurement records (GPUMeasurement): Enabled (default; the namespace "
        "policy's measurementSharing can opt namespaces out) or Disabled cluster-wide",
    )
    p.add_argument(
        "--measurement-record-ttl",
        type=float,
        default=_env("measurement-record-ttl", 30 * 86400),
        metavar="SECONDS",
        help="seconds a shared measurement record (GPUMeasurement) is reused by workloads of "
        "the same measurement key (default 2592000, 30 days); expired records are deleted",
    )
    p.add_argument(
        "--measurement-revalidate-after",
        type=float,
        default=_env("measurement-revalidate-after", 0),
        metavar="SECONDS",
        help="measure a workload again once its measurement is older than this (opt-in "
        "periodic re-validation; default 0: never)",
    )
    p.add_argument(
        "--kueue-admission-check",
        action="store_true",
        default=_bool_env("kueue-admission-check"),
        help="serve Kueue AdmissionChecks with spec.controllerName gpusizer.dev/admission-check: "
        "a Kueue Workload whose pod sets carry the label gpusizer.dev/workload is admitted only "
        "when that GPUWorkload is Ready with headroom on the GPU of its assigned ResourceFlavor",
    )
    p.add_argument(
        "--webhook-port",
        type=port,
        default=_env("webhook-port", 9443),
        metavar="PORT",
        help="port of the admission webhooks (default 9443)",
    )
    p.add_argument(
        "--webhook-listen",
        type=listen_address,
        default=_env("webhook-listen", "0.0.0.0"),
        metavar="ADDR",
        help="address the admission webhooks listen on (default 0.0.0.0)",
    )
    p.add_argument(
        "--webhook-workers",
        type=nonnegative_int,
        default=_env("webhook-workers", 2),
        metavar="N",
        help="worker processes the admission webhook computes verdicts in, beside the "
        "operator's event loop (default 2; with their fork server about 97 MiB for 2); 0 "
        "computes them in threads of the operator's process, where a burst of reviews slows "
        "its event loop",
    )
    p.add_argument("--webhook-cert-dir", default=_env("webhook-cert-dir", None), metavar="DIR")
    p.add_argument("--webhook-tls-secret", default=_env("webhook-tls-secret", None))
    p.add_argument("--webhook-config-name", default=_env("webhook-config-name", None))
    p.add_argument("--webhook-service", default=_env("webhook-service", None))
    p.add_argument(
        "--webhook-cert-san",
        action="append",
        default=[n for n in str(_env("webhook-cert-san", "")).split(",") if n],
        metavar="HOST",
        help="self-signed mode: also issue the serving certificate for HOST (an IP address or a "
        "DNS name; repeatable), for webhook configurations that reach the operator by `url` "
        "rather than through the Service, e.g. 127.0.0.1 for an operator run outside the "
        "cluster (a loopback --webhook-listen address is added by itself); env "
        "GPU_SIZER_WEBHOOK_CERT_SAN, comma-separated",
    )
    p.add_argument("--no-webhook", action="store_true", default=_bool_env("no-webhook"))
    p.add_argument(
        "--operator-namespace",
        default=_env("operator-namespace", None),
        metavar="NS",
        help="the operator's own namespace, where no tenant may create pods or Jobs (default: "
        "env POD_NAMESPACE, which the chart sets): measurements that may be shared across "
        "namespaces (Synthetic mode, the operator's probe image) run there. Unset: every "
        "measurement runs "
        "in its workload's namespace and its record is reused by that namespace only (a result "
        "a tenant could have forged is never shared)",
    )
    p.add_argument(
        "--measurement-ledger",
        default=_env("measurement-ledger", "gpu-sizer-ledger"),
        metavar="NAME",
        help="the ConfigMap in --operator-namespace where each namespace's measurement "
        "GPU-seconds of the UTC day are kept (namespace policy measurementGpuSecondsPerDay): "
        "the charge outlives the workloads and operator restarts; default gpu-sizer-ledger "
        "(the chart: RELEASE-ledger). Without --operator-namespace the budget counts the live "
        "workloads' statuses only",
    )


def load_catalog(path: str | None) -> tuple[GPUClass, ...]:
    """The catalog: the defaults, merged with the catalog YAML when given.

    :raises gpu_sizer.catalog.InvalidCatalog: the file is unreadable or invalid (names the field).
    """
    if not path:
        return DEFAULT_CATALOG
    return tuple(load_catalog_file(path))


def peering_priority(explicit: int | str | None, pod_name: str | None) -> int:
    """The kopf peering priority of this replica.

    kopf lets the highest-priority live peer run and pauses the others; when two live peers share
    the top priority it pauses *all* of them (kopf docs, "Peering": "operators with the same
    priority ... all of them pause"). So replicas must differ: an explicit ``--priority`` wins,
    else a stable value in 1..2^20 from the pod name (replicas of a Deployment have distinct
    names), else a random one for this process.
    """
    if explicit not in (None, ""):
        return int(explicit)
    if pod_name:
        return zlib.crc32(pod_name.encode()) % (1 << 20) + 1
    return random.randint(1, 1 << 20)


def _check_ranges(args: argparse.Namespace) -> None:
    """Numeric flags outside their range, named with the flag (and its env var when set).

    :raises ValueError: the first flag out of range.
    """
    from gpu_sizer.api.spec import MAX_MIN_HEADROOM_FRACTION

    headroom = float(args.default_headroom)
    if not 0.0 <= headroom <= MAX_MIN_HEADROOM_FRACTION:
        raise ValueError(
            f"{_source('default-headroom', '--default-headroom')} must be between 0 and "
            f"{MAX_MIN_HEADROOM_FRACTION} (a fraction of the GPU's memory, like "
            f"spec.placement.minHeadroomFraction), not {headroom:g}"
        )
    for flag, value in (
        ("unschedulable-timeout", args.unschedulable_timeout),
        ("quota-retry-seconds", args.quota_retry_seconds),
    ):
        if not float(value) > 0:
            raise ValueError(
                f"{_source(flag, '--' + flag)} must be more than 0 seconds, not {float(value):g}"
            )


def _check_policy(path: str, default_headroom: float, catalog: Sequence[GPUClass]) -> None:
    """Load the namespace policy file once at startup, whether or not the webhook is served:
    the operator reads its measurement settings too, and docs/admission.md promises that it
    refuses to start on an invalid policy.

    :raises gpu_sizer.policy.namespace.PolicyError: a ValueError naming each key path.
    """
    from gpu_sizer.policy.namespace import PolicyError, load_policy

    policy = load_policy(path, default_headroom=default_headroom)
    unknown = policy.unknown_classes(catalog)
    if unknown:
        raise PolicyError(path, unknown)


def options_from(
    args: argparse.Namespace, argv_catalog: Sequence[GPUClass] | None = None
) -> Options:
    """Options from parsed flags.

    :raises ValueError: inconsistent flags (e.g. no namespace and no ``-A``).
    """
    if not args.all_namespaces and not args.namespace:
        raise ValueError("give --namespace NS (repeatable) or --all-namespaces/-A")
    if args.all_namespaces and args.namespace:
        raise ValueError(
            f"{_source('all-namespaces', '--all-namespaces/-A')} and "
            f"{_source('namespace', '--namespace/-n ' + ','.join(args.namespace))} conflict: "
            "serve either every namespace or the listed ones (unset one of them)"
        )
    if args.local_max_concurrency < 1:
        raise ValueError(
            f"--local-max-concurrency must be at least 1, not {args.local_max_concurrency}"
        )
    if args.max_concurrent_measurements < 0:
        raise ValueError(
            f"{_source('max-concurrent-measurements', '--max-concurrent-measurements')} must be "
            f"0 (no cap) or more, not {args.max_concurrent_measurements}"
        )
    if args.webhook_workers > 64:
        raise ValueError(
            f"{_source('webhook-workers', '--webhook-workers')} must be at most 64 (the chart's "
            f"limit too), not {args.webhook_workers}"
        )
    if args.measurement_record_ttl <= 0:
        raise ValueError(
            f"{_source('measurement-record-ttl', '--measurement-record-ttl')} must be more than "
            f"0 seconds, not {args.measurement_record_ttl:g}"
        )
    if args.measurement_revalidate_after < 0:
        raise ValueError(
            f"{_source('measurement-revalidate-after', '--measurement-revalidate-after')} must "
            f"be 0 (off) or more seconds, not {args.measurement_revalidate_after:g}"
        )
    _check_ranges(args)
    catalog = tuple(argv_catalog) if argv_catalog is not None else load_catalog(args.catalog)
    if args.policy:
        _check_policy(args.policy, float(args.default_headroom), catalog)
    cap = args.local_deadline_cap
    operator_namespace = args.operator_namespace or os.environ.get("POD_NAMESPACE") or None
    if operator_namespace is not None:
        from gpu_sizer.api.workload import validate_namespace

        if validate_namespace(operator_namespace) is not None:
            raise ValueError(
                f"{_source('operator-namespace', '--operator-namespace')} must be a namespace "
                f"name (DNS-1123 label), not {operator_namespace!r}"
            )
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", args.measurement_ledger or ""):
        raise ValueError(
            f"{_source('measurement-ledger', '--measurement-ledger')} must be a ConfigMap name "
            f"(DNS-1123 subdomain), not {args.measurement_ledger!r}"
        )
    return Options(
        namespaces=tuple(args.namespace),
        all_namespaces=bool(args.all_namespaces),
        standalone=bool(args.standalone) or not args.peering,
        peering=args.peering,
        priority=peering_priority(args.priority, os.environ.get("POD_NAME")),
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        metrics_listen=args.metrics_listen,
        health_listen=args.health_listen,
        catalog_file=args.catalog,
        policy_file=args.policy,
        probe_image=args.probe_image,
        default_headroom=args.default_headroom,
        measurement_backend=args.measurement_backend,
        unschedulable_timeout=args.unschedulable_timeout,
        poll_interval=args.poll_interval,
        local_probe_command=tuple(args.local_probe_command.split()),
        local_deadline_cap=float(cap) if cap not in (None, "") else None,
        local_max_concurrency=int(args.local_max_concurrency),
        max_concurrent_measurements=int(args.max_concurrent_measurements),
        measurement_priority_class=args.measurement_priority_class or None,
        quota_retry_seconds=float(args.quota_retry_seconds),
        probe_image_pull_secrets=tuple(args.probe_image_pull_secret),
        calibration=CalibrationMode(str(args.calibration).capitalize()),
        measurement_sharing=args.measurement_sharing == "Enabled",
        measurement_record_ttl=float(args.measurement_record_ttl),
        measurement_revalidate_after=float(args.measurement_revalidate_after) or None,
        kueue_admission_check=bool(args.kueue_admission_check),
        webhook=not args.no_webhook,
        webhook_port=args.webhook_port,
        webhook_listen=args.webhook_listen,
        webhook_workers=int(args.webhook_workers),
        webhook_cert_dir=args.webhook_cert_dir,
        webhook_tls_secret=args.webhook_tls_secret,
        webhook_config_name=args.webhook_config_name,
        webhook_service=args.webhook_service,
        webhook_cert_san=tuple(args.webhook_cert_san),
        pod_namespace=os.environ.get("POD_NAMESPACE"),
        operator_namespace=operator_namespace,
        measurement_ledger=args.measurement_ledger,
        catalog=catalog,
    )
