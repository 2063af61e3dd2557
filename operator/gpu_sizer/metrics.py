"""Prometheus collectors (prometheus-client). Names are a contract with the chart's dashboard.

All sizes are bytes, durations seconds. Collectors live in a private registry so that tests and
several operators in one process do not collide; :func:`serve` exposes it over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

__all__ = [
    "ADMISSION_IN_FLIGHT",
    "ADMISSION_SHED",
    "ADMISSION_VERDICTS",
    "ESTIMATE_COMPONENTS",
    "MEASURED_KINDS",
    "MEASUREMENTS_RUNNING",
    "MEASUREMENT_DURATION",
    "MEASUREMENT_GPU_SECONDS",
    "MEASUREMENT_GPU_SECONDS_TODAY",
    "MEASUREMENT_OUTCOMES",
    "MEASUREMENT_QUEUE_LENGTH",
    "RECONCILE_ERRORS",
    "REGISTRY",
    "WORKLOADS",
    "WorkloadGauges",
    "serve",
]

REGISTRY = CollectorRegistry(auto_describe=True)

#: The ``component`` label values of ``gpusizer_estimated_bytes`` (perGpu's byte fields).
ESTIMATE_COMPONENTS = (
    "weights",
    "quantizationOverhead",
    "kvCache",
    "activation",
    "gradient",
    "optimizerState",
    "masterWeight",
    "communicationBuffer",
    "runtimeOverhead",
    "total",
)
#: The ``kind`` label values of ``gpusizer_measured_peak_bytes``.
MEASURED_KINDS = ("allocated", "reserved", "device")
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
    "(QueueFull: HTTP 429 at once; QueueTimeout: HTTP 503 after waiting half the timeout; "
    "Backlog: HTTP 429 at once, more work ahead in the worker processes than the latency budget; "
    "LoopLag: HTTP 429 unread, the event loop runs behind its requests; BodyBytes: HTTP 429, "
    "request bodies being received or waiting for room would hold more than 32 MiB; "
    "WorkerLost: HTTP 503, the worker process running the review ended).",
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


class WorkloadGauges:
    """The per-workload gauges (``gpusizer_estimated_bytes``, ``gpusizer_measured_peak_bytes``,
    ``gpusizer_recommendation_headroom_fraction``) as one custom collector over plain tuples,
    the shape prometheus-client documents for values kept elsewhere ("Custom Collectors",
    ``GaugeMetricFamily``). A labelled ``Gauge`` child costs about 850 bytes and a label
    validation per ``labels()`` call, and a workload has 11 to 14 series: kilobytes per
    workload and a large share of a settled workload's decision (figures: docs/benchmarks.md,
    "Operator").
    Samples, names and labels are those of the ``Gauge`` objects they replace.

    Written from the event loop, read by the metrics server's thread: :meth:`collect` copies
    each dict in one C-level call (``list(d.items())``) before walking it.
    """

    def __init__(self) -> None:
        #: (namespace, name) -> bytes per ESTIMATE_COMPONENTS entry (None: never set).
        self._estimated: dict[tuple[str, str], tuple[int | None, ...]] = {}
        #: (namespace, name) -> bytes per MEASURED_KINDS entry (None: never set).
        self._measured: dict[tuple[str, str], tuple[int | None, ...]] = {}
        #: (namespace, name) -> (gpu_class, basis, headroom fraction).
        self._headroom: dict[tuple[str, str], tuple[str, str, float]] = {}

    def estimated(self, namespace: str, name: str, values: Mapping[str, int]) -> None:
        """Set the estimate's components given in ``values`` (bytes); the others keep theirs."""
        _merge(self._estimated, (namespace, name), ESTIMATE_COMPONENTS, values)

    def measured(self, namespace: str, name: str, values: Mapping[str, int]) -> None:
        """Set the measured peaks given in ``values`` (bytes by kind); the others keep theirs."""
        _merge(self._measured, (namespace, name), MEASURED_KINDS, values)

    def headroom(self, namespace: str, name: str, value: tuple[str, str, float] | None) -> None:
        """The recommendation's (GPU class, basis, headroom fraction); None: no series."""
        if value is None:
            self._headroom.pop((namespace, name), None)
        else:
            self._headroom[(namespace, name)] = value

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series that names the workload (it was deleted)."""
        for store in (self._estimated, self._measured, self._headroom):
            store.pop((namespace, name), None)

    def series(self) -> int:
        """Workloads with at least one series (tests)."""
        return len(self._estimated.keys() | self._measured.keys() | self._headroom.keys())

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        yield from self._families(
            list(self._estimated.items()),
            list(self._measured.items()),
            list(self._headroom.items()),
        )

    @staticmethod
    def _families(
        estimated: Iterable[tuple[tuple[str, str], tuple[int | None, ...]]] = (),
        measured: Iterable[tuple[tuple[str, str], tuple[int | None, ...]]] = (),
        headroom: Iterable[tuple[tuple[str, str], tuple[str, str, float]]] = (),
    ) -> Iterator[Metric]:
        est = GaugeMetricFamily(
            "gpusizer_estimated_bytes",
            "Estimated bytes per GPU on the most loaded GPU, by budget component (total included).",
            labels=["namespace", "name", "component"],
        )
        yield _per_label(est, estimated, ESTIMATE_COMPONENTS)
        peak = GaugeMetricFamily(
            "gpusizer_measured_peak_bytes",
            "Measured peak bytes per GPU: kind is allocated, reserved (PyTorch) or device (NVML).",
            labels=["namespace", "name", "kind"],
        )
        yield _per_label(peak, measured, MEASURED_KINDS)
        room = GaugeMetricFamily(
            "gpusizer_recommendation_headroom_fraction",
            "Headroom fraction left on the recommended GPU class (0..1).",
            labels=["namespace", "name", "gpu_class", "basis"],
        )
        for (namespace, name), (gpu_class, basis, fraction) in headroom:
            room.add_metric([namespace, name, gpu_class, basis], fraction)
        yield room


def _merge(
    store: dict[tuple[str, str], tuple[int | None, ...]],
    key: tuple[str, str],
    labels: Sequence[str],
    values: Mapping[str, int],
) -> None:
    """Set the entries of ``store[key]`` named in ``values``; the others keep theirs."""
    old = store.get(key) or (None,) * len(labels)
    store[key] = tuple(values.get(label, o) for label, o in zip(labels, old, strict=True))


def _per_label(
    family: GaugeMetricFamily,
    rows: Iterable[tuple[tuple[str, str], tuple[int | None, ...]]],
    labels: Sequence[str],
) -> GaugeMetricFamily:
    """``family`` with one sample per workload and set entry, its label the entry's name."""
    for (namespace, name), values in rows:
        for label, value in zip(labels, values, strict=True):
            if value is not None:
                family.add_metric([namespace, name, label], value)
    return family


#: The per-workload gauges: ``gpusizer_estimated_bytes``, ``gpusizer_measured_peak_bytes`` and
#: ``gpusizer_recommendation_headroom_fraction``.
WORKLOADS = WorkloadGauges()
REGISTRY.register(WORKLOADS)
