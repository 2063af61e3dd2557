"""Prometheus collectors (prometheus-client). Names are a contract with the chart's dashboard.

All sizes are bytes, durations seconds. Collectors live in a private registry so that tests and
several operators in one process do not collide; :func:`serve` exposes it over HTTP.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = [
    "ADMISSION_IN_FLIGHT",
    "ADMISSION_SHED",
    "ADMISSION_VERDICTS",
    "ESTIMATED_BYTES",
    "MEASURED_PEAK_BYTES",
    "MEASUREMENTS_RUNNING",
    "MEASUREMENT_DURATION",
    "MEASUREMENT_GPU_SECONDS",
    "MEASUREMENT_GPU_SECONDS_TODAY",
    "MEASUREMENT_OUTCOMES",
    "MEASUREMENT_QUEUE_LENGTH",
    "RECOMMENDATION_HEADROOM",
    "RECONCILE_ERRORS",
    "REGISTRY",
    "serve",
]

REGISTRY = CollectorRegistry(auto_describe=True)

ESTIMATED_BYTES = Gauge(
    "gpusizer_estimated_bytes",
    "Estimated bytes per GPU on the most loaded GPU, by budget component (total included).",
    ["namespace", "name", "component"],
    registry=REGISTRY,
)
MEASURED_PEAK_BYTES = Gauge(
    "gpusizer_measured_peak_bytes",
    "Measured peak bytes per GPU: kind is allocated, reserved (PyTorch) or device (NVML).",
    ["namespace", "name", "kind"],
    registry=REGISTRY,
)
RECOMMENDATION_HEADROOM = Gauge(
    "gpusizer_recommendation_headroom_fraction",
    "Headroom fraction left on the recommended GPU class (0..1).",
    ["namespace", "name", "gpu_class", "basis"],
    registry=REGISTRY,
)
MEASUREMENT_DURATION = Histogram(
    "gpusizer_measurement_duration_seconds",
    "Wall time of measurement Jobs from creation to result, by outcome.",
    ["outcome"],
    buckets=(5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600),
    registry=REGISTRY,
)
MEASUREMENT_OUTCOMES = Counter(
    "gpusizer_measurement_outcomes_total",
    "Finished measurements by reason (Succeeded, OutOfMemory, DeadlineExceeded, ...).",
    ["reason"],
    registry=REGISTRY,
)
MEASUREMENT_QUEUE_LENGTH = Gauge(
    "gpusizer_measurement_queue_length",
    "Measurements waiting for a slot (--max-concurrent-measurements, namespace limits, quota), "
    "by namespace.",
    ["namespace"],
    registry=REGISTRY,
)
MEASUREMENTS_RUNNING = Gauge(
    "gpusizer_measurement_jobs_running",
    "Measurement Jobs holding a slot (not finished, not being deleted), by namespace.",
    ["namespace"],
    registry=REGISTRY,
)
MEASUREMENT_GPU_SECONDS = Counter(
    "gpusizer_measurement_gpu_seconds_total",
    "GPU-seconds spent by finished measurements (GPUs of one replica x seconds from the Job's "
    "start to its result), by namespace.",
    ["namespace"],
    registry=REGISTRY,
)
MEASUREMENT_GPU_SECONDS_TODAY = Gauge(
    "gpusizer_measurement_gpu_seconds_today",
    "GPU-seconds charged to the namespace's daily measurement budget (namespace policy "
    "measurementGpuSecondsPerDay) on the current UTC day, running measurements included; set "
    "for namespaces with a budget and measurements waiting.",
    ["namespace"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "gpusizer_reconcile_errors_total",
    "Errors raised in reconcile handlers, by handler.",
    ["handler"],
    registry=REGISTRY,
)
ADMISSION_VERDICTS = Counter(
    "gpusizer_admission_verdicts_total",
    "Admission webhook answers by operation (CREATE/UPDATE) and verdict (Allowed, "
    "AllowedWithWarnings, AllowedIncomplete, NoSafeHeadroom, Incomplete, Invalid, "
    "UnknownGpuClass, PolicyViolation, PolicyUnavailable, SizingFailed; pods: PodApplied, "
    "PodAllowed, PodDenied).",
    ["operation", "verdict"],
    registry=REGISTRY,
)
ADMISSION_SHED = Counter(
    "gpusizer_admission_shed_total",
    "Admission reviews refused unanswered because the webhook was overloaded, by reason "
    "(QueueFull: HTTP 429 at once; QueueTimeout: HTTP 503 after waiting half the timeout).",
    ["reason"],
    registry=REGISTRY,
)
ADMISSION_IN_FLIGHT = Gauge(
    "gpusizer_admission_in_flight",
    "Admission reviews being worked on now.",
    registry=REGISTRY,
)


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` from :data:`REGISTRY` on ``addr:port`` in a daemon thread."""
    start_http_server(port, addr=addr, registry=REGISTRY)
