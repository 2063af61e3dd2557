"""Shared measurement records: the cluster-scoped ``GPUMeasurement`` kind.

A GPU measurement is a property of *what* ran (the memory-relevant part of a spec), *where*
(GPU class, node driver), *with what* (probe image, engine and its version) and *against which
catalog entry* it was judged, not of the namespace or the name of the GPUWorkload that asked for
it. A ``GPUMeasurement`` holds one finished measurement under that **measurement key**, so that
a second workload of the same key, in any namespace, reuses it
(``status.measurement.reusedFrom``) instead of starting a Job.

**Scope: who could have written the result.** A result is only as trustworthy as the place it
came from. A tenant who may create pods in a namespace can create one there that names any Job
as its owner (with ``controller: true`` and the Job controller's labels), run it on a GPU node
and have it print any result; one who may exec into pods or patch their image can rewrite the
real probe's; a spec's own image or Command-mode command prints what it likes. So a record is
``scope: Cluster`` (any namespace that shares may reuse it, and cluster-wide calibration learns
from it) only when nothing of it was in a tenant's hands: a ``Synthetic`` measurement with the
operator's own probe image, run by the operator in its own namespace (``--operator-namespace``,
where no tenant may write) or as a local process. Every other measurement of a namespace that
shares is recorded ``scope: Namespace``: reused by workloads of that namespace only, and
learned from by that namespace's own calibration only. A tenant can then fool nobody but
itself. Who may write records at all is the operator alone: the chart's RBAC grants no one
else, and its ValidatingAdmissionPolicy refuses a create or update by any other identity
(cluster administrators included); docs/admission.md keeps the threat model.

The object (``gpusizer.dev/v1alpha1``, cluster-scoped, no status subresource: a record is
written once and never changes; it is deleted when it expires or to force a re-measure)::

    metadata:
      name: gpum-<first 40 hex of the key>        # scope Cluster: one record per key
      #     gpum-<first 40 hex of the key>-<ns>   # scope Namespace: one per key and namespace
      labels:
        gpusizer.dev/measurement-key: <first 40 hex of the key>
        gpusizer.dev/workload-kind: Inference     # Inference | Training | Generation
        gpusizer.dev/engine: vllm                 # vllm | ... | pytorch | diffusers
        gpusizer.dev/model-family: llama          # HF model_type, or the diffusers pipeline class
        gpusizer.dev/gpu-class: nvidia-h100-80gb
        gpusizer.dev/scope: Cluster               # Cluster | Namespace
        gpusizer.dev/source-namespace: <namespace of the measured workload>
    spec:
      scope: Cluster                              # Cluster | Namespace (see above)
      namespace: <for scope Namespace: the only namespace that may reuse it>
      key: <sha256 hex of keyFields>
      keyFields: {specDigest, gpuClass, probeImage, engine, engineVersion, driverMajor,
                  catalogDigest}
      workloadKind, engine, modelFamily, gpuClass, modelName
      estimate: {perGpu: {...Bytes, totalBytes}, gpuCount, parameterCount, verdict}
      result: {the fields of status.measurement, plus sourceNamespace, sourceName}
      recordedAt: <RFC 3339>
      expiresAt: <RFC 3339>                       # never later than recordedAt + the TTL

Pure: no API calls; the controller reads and writes these objects.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, Final

from pydantic import Field, ValidationError

from gpu_sizer.api.spec import GPUWorkloadSpec, MeasurementMode
from gpu_sizer.api.status import (
    CalibrationStatus,
    MeasurementKey,
    MeasurementStatus,
    PerGpuBreakdown,
    _Status,
)
from gpu_sizer.api.times import parse_time, rfc3339
from gpu_sizer.api.workload import API_VERSION, CATEGORY, GROUP, VERSION

__all__ = [
    "DRIVER_MAJOR_LABELS",
    "KEY_LABEL",
    "LABEL_ENGINE",
    "LABEL_FAMILY",
    "LABEL_GPU_CLASS",
    "LABEL_KIND",
    "RECORD_API_VERSION",
    "RECORD_KIND",
    "RECORD_PLURAL",
    "RECORD_SHORT_NAME",
    "RECORD_SINGULAR",
    "SCOPE_LABEL",
    "SOURCE_NAMESPACE_LABEL",
    "GPUMeasurement",
    "GPUMeasurementSpec",
    "MeasurementKey",
    "RecordEstimate",
    "RecordResult",
    "RecordScope",
    "WorkloadKind",
    "build_record",
    "catalog_digest",
    "describe",
    "driver_major",
    "effective_expiry",
    "is_fresh",
    "key_label",
    "measurement_key",
    "memory_spec_digest",
    "parse_record",
    "record_name",
    "record_names",
    "reusable_by",
    "shareable",
]

RECORD_KIND: Final = "GPUMeasurement"
RECORD_PLURAL: Final = "gpumeasurements"
RECORD_SINGULAR: Final = "gpumeasurement"
RECORD_SHORT_NAME: Final = "gpum"
RECORD_API_VERSION: Final = API_VERSION
RECORD_GROUP: Final = GROUP
RECORD_VERSION: Final = VERSION
RECORD_CATEGORY: Final = CATEGORY

#: Label holding the first :data:`KEY_LABEL_LENGTH` hex digits of the key (label values are at
#: most 63 characters; 160 bits leave no practical room for collisions, and the full key in
#: ``spec.key`` is compared before any reuse). Measurement Jobs carry it too, so that a restarted
#: operator finds a shared measurement in flight from the cluster alone.
KEY_LABEL: Final = f"{GROUP}/measurement-key"
KEY_LABEL_LENGTH: Final = 40
LABEL_KIND: Final = f"{GROUP}/workload-kind"
LABEL_ENGINE: Final = f"{GROUP}/engine"
LABEL_FAMILY: Final = f"{GROUP}/model-family"
LABEL_GPU_CLASS: Final = f"{GROUP}/gpu-class"
SCOPE_LABEL: Final = f"{GROUP}/scope"
SOURCE_NAMESPACE_LABEL: Final = f"{GROUP}/source-namespace"
#: Seconds a record's ``recordedAt`` may lie ahead of the reader's clock (clock skew between the
#: operator's replicas and nodes); beyond it the record is not trusted.
CLOCK_SKEW_SECONDS: Final = 300.0

#: GPU Feature Discovery's driver major version labels, newest name first. Both are written by
#: ``newVersionLabeler`` in NVIDIA/k8s-device-plugin ``internal/lm/nvml.go`` (GFD v0.15+ under
#: the device plugin): ``nvidia.com/cuda.driver-version.major`` ("New labels") and the
#: deprecated ``nvidia.com/cuda.driver.major``, which older GFD releases write alone.
DRIVER_MAJOR_LABELS: Final = (
    "nvidia.com/cuda.driver-version.major",
    "nvidia.com/cuda.driver.major",
)

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class RecordScope(StrEnum):
    """Who may reuse a record (see the module docstring)."""

    Cluster = "Cluster"
    Namespace = "Namespace"


class WorkloadKind(StrEnum):
    """What a workload does on the GPU."""

    Inference = "Inference"
    Training = "Training"
    Generation = "Generation"


# ----------------------------------------------------------------------------- the key


def _digest(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def memory_spec_digest(spec: GPUWorkloadSpec) -> str:
    """SHA-256 (64 hex) of the parts of a normalized spec that change the measured memory.

    Defaults are filled by the model before hashing, so an omitted field and its default hash
    alike. Left out, because they do not change what the probe allocates:

    - ``placement`` (allowed classes, ``minHeadroomFraction``): they change the verdict and the
      recommendation, not the memory; the class measured on is its own key field;
    - ``measurement.timeoutSeconds``: the Job's deadline;
    - ``measurement.image``: the *effective* probe image (this field or the operator's default)
      is its own key field, so a spec naming the default image and one leaving it out share;
    - ``model.name`` and ``model.revision`` in ``Synthetic`` mode: the probe builds a synthetic
      model of the same architecture, dtype and quantization and downloads nothing, so two Hub
      ids of the same shape allocate the same. In ``Command`` mode they stay in: the workload's
      own command loads that checkpoint.

    Everything else counts: the architecture (or parameter count, or pipeline), dtype and
    quantization; the whole ``inference`` / ``training`` / ``generation`` section (engine and
    engine version, context, batch, KV cache dtype, parallelism, optimizer, offload...);
    ``measurement.mode``, ``command`` and ``concurrencyLevels``.

    This differs from :func:`gpu_sizer.api.workload.spec_hash`, which keeps the informational
    and measurement-settings fields (a change to them is a new spec for *that* workload) and is
    truncated to 64 bits for Job names; records are shared across namespaces, so the full digest.
    """
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"placement"})
    measurement = data.get("measurement", {})
    measurement.pop("timeoutSeconds", None)
    measurement.pop("image", None)
    if spec.measurement.mode is not MeasurementMode.Command:
        model = data.get("model", {})
        model.pop("name", None)
        model.pop("revision", None)
    return _digest(data)


def driver_major(labels: Mapping[str, str]) -> str | None:
    """A node's NVIDIA driver major version from its GFD labels (:data:`DRIVER_MAJOR_LABELS`,
    the newer name first); None when neither is set (GFD not running, or not yet)."""
    for label in DRIVER_MAJOR_LABELS:
        value = labels.get(label)
        if value and value.strip():
            return value.strip()
    return None


def catalog_digest(entry: Mapping[str, Any]) -> str:
    """SHA-256 (first 16 hex) of one catalog class entry as plain data (its name, memory,
    usable bytes, products, MIG profile...). Only the entry of the class measured on enters a
    key: editing that class (another product list, a different usable figure) re-measures its
    workloads; adding an unrelated class does not."""
    return _digest(dict(entry))[:16]


def describe(spec: GPUWorkloadSpec) -> tuple[WorkloadKind, str, str]:
    """(workload kind, engine, model family) of a spec. The family is the HF ``model_type``
    (``model.architecture.modelType``), the diffusers pipeline class for a pipeline, else
    ``unknown`` (a spec giving only ``parameterCount``)."""
    if spec.model.architecture is not None:
        family = str(spec.model.architecture.model_type)
    elif spec.model.pipeline is not None:
        family = spec.model.pipeline.class_name
    else:
        family = "unknown"
    if spec.training is not None:
        return WorkloadKind.Training, "pytorch", family
    if spec.generation is not None:
        return WorkloadKind.Generation, "diffusers", family
    engine = str(spec.inference.engine) if spec.inference is not None else "unknown"
    return WorkloadKind.Inference, engine, family


def measurement_key(
    spec: GPUWorkloadSpec,
    *,
    gpu_class: str,
    probe_image: str,
    driver_major: str | None,
    catalog_digest: str,
) -> MeasurementKey:
    """The key fields of measuring ``spec`` on ``gpu_class`` (``.digest()`` is the key).

    ``probe_image`` is the effective image (``spec.measurement.image`` or the operator's
    default); ``driver_major`` the GFD driver major of the node (None: unknown);
    ``catalog_digest`` that of the class's catalog entry (:func:`catalog_digest`).
    """
    _, engine, _ = describe(spec)
    version = spec.inference.engine_version if spec.inference is not None else None
    return MeasurementKey(
        spec_digest=memory_spec_digest(spec),
        gpu_class=gpu_class,
        probe_image=probe_image,
        engine=engine,
        engine_version=version or "",
        driver_major=driver_major or "",
        catalog_digest=catalog_digest,
    )


def key_label(key: str) -> str:
    """The value of :data:`KEY_LABEL` for a key (its first :data:`KEY_LABEL_LENGTH` hex)."""
    return key[:KEY_LABEL_LENGTH]


def record_name(key: str, namespace: str | None = None) -> str:
    """The record's name for a key: ``gpum-`` + :func:`key_label` for scope Cluster, with
    ``-<namespace>`` for scope Namespace (the same key always names the same record, so two
    operators or a retried write create it once; a namespace's private record never takes the
    name of the cluster's)."""
    base = f"{RECORD_SHORT_NAME}-{key_label(key)}"
    return f"{base}-{namespace}" if namespace else base


def record_names(key: str, namespace: str) -> tuple[str, str]:
    """The two records a workload of ``namespace`` may reuse for ``key``, in the order they
    are tried: the cluster's, then the namespace's own."""
    return record_name(key), record_name(key, namespace)


# ----------------------------------------------------------------------------- the record


class RecordEstimate(_Status):
    """The estimate the measurement was taken against (the workload's status.estimate then)."""

    per_gpu: PerGpuBreakdown = Field(description="Estimated bytes on the most loaded GPU.")
    gpu_count: int = Field(1, description="GPUs one replica uses.")
    parameter_count: int | None = Field(None, description="Total parameters.")
    verdict: str = Field(description="Fits, NoSafeHeadroom or Incomplete.")
    calibration: CalibrationStatus | None = Field(
        None,
        description="The estimate's calibration (status.estimate.calibration): with mode Apply "
        "perGpu holds calibrated figures, and calibration learns from the analytic ones kept "
        "here (analyticTotalBytes, analyticRuntimeOverheadBytes).",
    )


class RecordResult(MeasurementStatus):
    """The measurement, with the fields of ``status.measurement``, and the workload that ran
    it."""

    source_namespace: str | None = Field(None, description="Namespace of the measured workload.")
    source_name: str | None = Field(None, description="Name of the measured workload.")


class GPUMeasurementSpec(_Status):
    """One finished GPU measurement, shared under its measurement key."""

    scope: RecordScope = Field(
        RecordScope.Namespace,
        description="Cluster: measured where no tenant could write (the operator's namespace, "
        "Synthetic mode, the operator's probe image), reusable by every namespace that shares; "
        "Namespace: reusable only by workloads of spec.namespace. Unset (records written before "
        "scopes): Namespace, of result.sourceNamespace.",
    )
    namespace: str | None = Field(
        None,
        max_length=63,
        description="Scope Namespace: the only namespace whose workloads may reuse the record.",
    )
    key: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="Measurement key: SHA-256 hex of keyFields."
    )
    key_fields: MeasurementKey = Field(description="What the key digests.")
    workload_kind: WorkloadKind = Field(description="Inference, Training or Generation.")
    engine: str = Field(description="Engine (keyFields.engine), for selection and display.")
    model_family: str = Field(
        description="HF model_type (model.architecture.modelType), or the pipeline class."
    )
    gpu_class: str = Field(description="Catalog class measured on (keyFields.gpuClass).")
    model_name: str | None = Field(None, description="spec.model.name, informational.")
    estimate: RecordEstimate | None = Field(
        None, description="The estimate the measurement was taken against."
    )
    result: RecordResult = Field(description="What the probe measured.")
    recorded_at: str = Field(description="When the record was written (RFC 3339).")
    expires_at: str = Field(
        description="After this (RFC 3339) the record is not reused and the operator deletes it."
    )


class GPUMeasurement(_Status):
    """A ``GPUMeasurement`` object as read back (metadata kept as plain data)."""

    api_version: str = Field(RECORD_API_VERSION, description="gpusizer.dev/v1alpha1.")
    kind: str = Field(RECORD_KIND, description="GPUMeasurement.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Object metadata.")
    spec: GPUMeasurementSpec = Field(description="The record.")

    @property
    def name(self) -> str:
        """metadata.name."""
        return str(self.metadata.get("name") or "")


def shareable(result: MeasurementStatus) -> bool:
    """Whether a finished measurement may be published for others to reuse.

    Shared: a GPU result (``device: cuda``) that completed, and a CUDA out-of-memory on the
    class (``outOfMemory``): both are facts about the key (this spec does not fit class X with
    this image and driver) that a second run would reproduce. Not shared: a crash, a timeout,
    an image pull failure, an eviction, a host OOM kill, an unsupported spec, a missing node
    and any CPU-only run: they say something about that run or that cluster, not about the
    memory of the key, and a second workload should try for itself.
    """
    if not result.completed_at:
        return False
    if result.out_of_memory:
        return True
    return result.device == "cuda" and result.reason is None


def _label_value(text: str) -> str:
    """``text`` as a valid label value (at most 63 characters of ``[A-Za-z0-9._-]``, starting
    and ending alphanumeric); other characters become ``_``."""
    value = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:63].strip("._-")
    return value if _LABEL_VALUE.match(value) else ""


def build_record(
    key: MeasurementKey,
    spec: GPUWorkloadSpec,
    *,
    result: MeasurementStatus,
    source_namespace: str,
    source_name: str,
    estimate: RecordEstimate | None,
    now: datetime.datetime,
    ttl_seconds: float,
    scope: RecordScope = RecordScope.Namespace,
) -> dict[str, Any]:
    """The ``GPUMeasurement`` object (plain data, ready to create) for a finished
    measurement of ``spec`` under ``key``; it expires ``ttl_seconds`` after ``now``. ``scope``
    Namespace (the default: trust is what must be shown) names and keeps it for
    ``source_namespace`` alone."""
    digest = key.digest()
    kind, engine, family = describe(spec)
    private = scope is RecordScope.Namespace
    record = GPUMeasurementSpec(
        scope=scope,
        namespace=source_namespace if private else None,
        key=digest,
        key_fields=key,
        workload_kind=kind,
        engine=engine,
        model_family=family,
        gpu_class=key.gpu_class,
        model_name=spec.model.name,
        estimate=estimate,
        result=RecordResult(
            **result.model_dump(exclude={"reused_from", "key_fields", "record_expires_at"}),
            source_namespace=source_namespace,
            source_name=source_name,
        ),
        recorded_at=rfc3339(now),
        expires_at=rfc3339(now + datetime.timedelta(seconds=ttl_seconds)),
    )
    labels = {
        KEY_LABEL: key_label(digest),
        LABEL_KIND: str(kind),
        LABEL_ENGINE: _label_value(engine),
        LABEL_FAMILY: _label_value(family),
        LABEL_GPU_CLASS: _label_value(key.gpu_class),
        SCOPE_LABEL: str(scope),
        SOURCE_NAMESPACE_LABEL: _label_value(source_namespace),
    }
    return {
        "apiVersion": RECORD_API_VERSION,
        "kind": RECORD_KIND,
        "metadata": {
            "name": record_name(digest, source_namespace if private else None),
            "labels": {k: v for k, v in labels.items() if v},
        },
        "spec": record.model_dump(by_alias=True, mode="json", exclude_none=True),
    }


def parse_record(obj: Any) -> GPUMeasurement | None:
    """A ``GPUMeasurement`` read from the API (plain data), or None when it is not one or its
    spec is unreadable (a hand-made object is ignored, never trusted)."""
    if not isinstance(obj, Mapping) or obj.get("kind", RECORD_KIND) != RECORD_KIND:
        return None
    try:
        return GPUMeasurement.model_validate(
            {
                "apiVersion": obj.get("apiVersion") or RECORD_API_VERSION,
                "kind": RECORD_KIND,
                "metadata": dict(obj.get("metadata") or {}),
                "spec": obj.get("spec"),
            }
        )
    except ValidationError:
        return None


def effective_expiry(record: GPUMeasurement, ttl_seconds: float) -> datetime.datetime | None:
    """When ``record`` stops being reusable: its ``expiresAt``, but never later than
    ``recordedAt`` plus ``ttl_seconds`` (``--measurement-record-ttl``): a record claiming to
    live until the year 9991 lives the TTL like any other. None when either time is unreadable
    (then it is expired)."""
    expires = parse_time(record.spec.expires_at)
    recorded = parse_time(record.spec.recorded_at)
    if expires is None or recorded is None:
        return None
    return min(expires, recorded + datetime.timedelta(seconds=ttl_seconds))


def is_fresh(
    record: GPUMeasurement, now: datetime.datetime, ttl_seconds: float | None = None
) -> bool:
    """Whether the record may still be reused at ``now``: before its :func:`effective_expiry`
    (``expiresAt`` alone without a TTL), recorded no later than :data:`CLOCK_SKEW_SECONDS` from
    now, and not being deleted."""
    if record.metadata.get("deletionTimestamp"):
        return False
    recorded = parse_time(record.spec.recorded_at)
    if recorded is None or (recorded - now).total_seconds() > CLOCK_SKEW_SECONDS:
        return False
    expires = (
        parse_time(record.spec.expires_at)
        if ttl_seconds is None
        else effective_expiry(record, ttl_seconds)
    )
    return expires is not None and now < expires


def reusable_by(record: GPUMeasurement, namespace: str) -> bool:
    """Whether a workload of ``namespace`` may reuse ``record`` (its scope, the module
    docstring): scope Cluster by any namespace that shares; scope Namespace by its own
    namespace only, named under that namespace (a record of the cluster's name is the
    cluster's, whatever namespace it claims)."""
    spec = record.spec
    if spec.scope is RecordScope.Cluster:
        return record.name == record_name(spec.key)
    own = spec.namespace or spec.result.source_namespace
    return own == namespace and record.name == record_name(spec.key, namespace)


def expired(
    records: Iterable[GPUMeasurement], now: datetime.datetime, ttl_seconds: float | None = None
) -> list[str]:
    """Names of the records past their :func:`effective_expiry` (or with an unreadable one) at
    ``now``."""
    out = []
    for record in records:
        expires = (
            parse_time(record.spec.expires_at)
            if ttl_seconds is None
            else effective_expiry(record, ttl_seconds)
        )
        if expires is None or now >= expires:
            out.append(record.name)
    return out
