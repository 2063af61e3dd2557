"""The GPUWorkload status: what the operator writes and GitOps pipelines read.

Every field here is declared in the generated CRD, because a real API server silently prunes
status fields its schema does not declare. Sizes are bytes, fractions 0..1, times RFC 3339.

A few read-only fields exist only for ``kubectl get``'s printer columns, which can show a raw
JSONPath value but cannot divide: ``estimate.perGpu.totalGiB``, ``measurement.peakGiB`` and
``recommendation.headroomPercent``. They are pydantic computed fields, derived from the byte and
fraction fields whenever a status is serialized, and ignored when a status is parsed.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Annotated

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, computed_field
from pydantic.alias_generators import to_camel

#: One value of ``recommendation.engineArgs``, keyed by the flag's own name.
EngineArgValue = Annotated[
    str, Field(description="The flag's value as the engine's command line takes it (e.g. 0.9).")
]

__all__ = [
    "Basis",
    "CalibrationFactor",
    "CalibrationMode",
    "CalibrationStatus",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "EstimateStatus",
    "GPUWorkloadStatus",
    "LaunchStatus",
    "MeasurementKey",
    "MeasurementStatus",
    "MeasurementUsage",
    "MissingComponent",
    "NodeAffinitySnippet",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PeakPhase",
    "PerGpuBreakdown",
    "Phase",
    "PhaseEstimate",
    "RecommendationStatus",
    "ResourcesSnippet",
]

GIB = 1 << 30


class _Status(BaseModel):
    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel),
        populate_by_name=True,
        extra="ignore",
    )


class Phase(StrEnum):
    """Lifecycle summary; conditions carry the detail."""

    Pending = "Pending"
    Estimated = "Estimated"
    Measuring = "Measuring"
    Ready = "Ready"
    Rejected = "Rejected"
    Failed = "Failed"


class PeakPhase(StrEnum):
    """The phase of a workload whose memory is the peak (``status.estimate.peakPhase``).

    Training: ``Load`` (initialisation and checkpoint load, before sharding completes) or
    ``Step`` (forward, backward and the optimizer update). Generation: ``TextEncode``,
    ``Denoise`` or ``VaeDecode``.
    """

    Load = "Load"
    Step = "Step"
    TextEncode = "TextEncode"
    Denoise = "Denoise"
    VaeDecode = "VaeDecode"


class Basis(StrEnum):
    """What a recommendation rests on."""

    Estimate = "Estimate"
    Measurement = "Measurement"


class ConditionType(StrEnum):
    """kstatus conditions (Ready, Reconciling, Stalled) plus the domain ones."""

    Ready = "Ready"
    Reconciling = "Reconciling"
    Stalled = "Stalled"
    Estimated = "Estimated"
    Measured = "Measured"
    HeadroomSufficient = "HeadroomSufficient"


class ConditionStatus(StrEnum):
    """metav1.ConditionStatus."""

    true = "True"
    false = "False"
    unknown = "Unknown"


class Condition(_Status):
    """metav1.Condition."""

    type: str = Field(description="Condition type (Ready, Reconciling, Stalled, Estimated, ...).")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase machine-readable reason.")
    message: str = Field("", description="Human-readable detail, with figures and units.")
    observed_generation: int | None = Field(
        None, description="metadata.generation this condition was computed from."
    )
    last_transition_time: str | None = Field(
        None, description="When status last changed (RFC 3339)."
    )


class PerGpuBreakdown(_Status):
    """Bytes on the most loaded GPU, by category."""

    weights_bytes: int = Field(0, description="Model weights (quantized payload if quantized).")
    quantization_overhead_bytes: int = Field(
        0, description="Quantization metadata: scales, zero points, act-order indices, absmax."
    )
    kv_cache_bytes: int = Field(0, description="Inference KV cache.")
    activation_bytes: int = Field(0, description="Activations and temporary workspaces.")
    gradient_bytes: int = Field(0, description="Gradients of trainable parameters.")
    optimizer_state_bytes: int = Field(0, description="Optimizer state.")
    master_weight_bytes: int = Field(0, description="fp32 master weights (mixed precision).")
    communication_buffer_bytes: int = Field(
        0,
        description="Gradient and parameter communication buffers: DDP gradient buckets, "
        "DeepSpeed reduce buckets, FSDP all-gather and reduce-scatter buffers; not inside "
        "gradientBytes.",
    )
    runtime_overhead_bytes: int = Field(
        0, description="CUDA context, library workspaces, CUDA graphs, NCCL, allocator cache."
    )
    total_bytes: int = Field(0, description="Sum of the above: the per-GPU requirement.")

    @computed_field(  # type: ignore[prop-decorator]
        alias="totalGiB",
        description="totalBytes in GiB (2^30 bytes), one decimal; for display only.",
    )
    @property
    def total_gib(self) -> float:
        """``total_bytes`` in GiB, rounded to 0.1, for the printer column."""
        return round(self.total_bytes / GIB, 1)


class MissingComponent(_Status):
    """A component the workload needs that the estimate could not count (it is 0 in ``perGpu``).

    An estimate with any missing component is ``Incomplete``: it is a lower bound and never says
    that the workload fits. Consumers decide from this list, not from ``notes``.
    """

    component: str = Field(
        description="The perGpu field left uncounted: kvCacheBytes, activationBytes, ..."
    )
    fields: list[str] = Field(
        default_factory=list,
        description="Spec field paths that would let the estimate count it.",
    )
    message: str = Field("", description="What is not counted and the fields it needs.")
    fix: str = Field("", description="How to supply the missing fields.")


class PhaseEstimate(_Status):
    """The per-GPU total of one phase of the workload (bytes); generation phases also say
    what is resident and running."""

    name: PeakPhase = Field(description="Phase (Load, Step, TextEncode, Denoise, VaeDecode).")
    total_bytes: int = Field(description="Bytes on the most loaded GPU during the phase.")
    weights_bytes: int = Field(0, description="Generation: weights resident (offload applied).")
    activation_bytes: int = Field(
        0, description="Generation: activations and buffers of the running model."
    )
    running: str = Field("", description="Generation: the components running at the peak.")
    resident: str = Field(
        "",
        description="Generation: every component with weights on the GPU at the peak (the "
        "running one and those its offload mode leaves there), comma-separated.",
    )


class CalibrationMode(StrEnum):
    """``--calibration``: Off (no factors), Report (factors shown, numbers analytic), Apply
    (the named components scaled; the verdict and recommendation follow)."""

    Off = "Off"
    Report = "Report"
    Apply = "Apply"


class CalibrationFactor(_Status):
    """One correction factor learned from measurement records (see
    gpu_sizer.records.calibration)."""

    engine: str = Field(
        description="Engine of the records: vllm, ..., pytorch (training), diffusers."
    )
    gpu_class: str = Field(description="GPU class the records were measured on.")
    component: str = Field(
        description="Tensors (PyTorch allocator peak vs the tensor components), RuntimeOverhead "
        "(device-used minus allocated peak vs runtimeOverheadBytes) or Total."
    )
    records: int = Field(description="Records the factor was learned from.")
    observed_ratio: float = Field(
        description="Median of measured / estimated bytes over the records (each namespace's "
        "median first; outlying namespaces trimmed), before the bounds."
    )
    factor: float = Field(description="The factor: observedRatio bounded to 1.0..1.5.")
    usable: bool = Field(
        description="Enough evidence for the factor to be applied: at least 5 records, and "
        "cluster-wide from at least 3 namespaces."
    )
    namespaces: int | None = Field(
        None, description="Namespaces the records came from (after trimming outliers)."
    )
    scope: str | None = Field(
        None,
        description="Cluster (records no tenant could have written) or Namespace (this "
        "namespace's own records: they only ever raise its own estimates).",
    )
    sources: list[Annotated[str, Field(max_length=317)]] = Field(
        default_factory=list,
        max_length=10,
        description="namespace/name of the measured workloads whose records moved the factor "
        "(at most 10).",
    )
    before_bytes: int = Field(description="This estimate's analytic bytes of the component.")
    after_bytes: int = Field(description="The bytes with the factor (equal to before when not).")
    applied: bool = Field(description="Whether the estimate's figures include the factor.")


class CalibrationStatus(_Status):
    """Correction factors for this workload's engine and GPU class, learned from the fleet's
    measurements; with mode Apply, the figures of perGpu include the applied ones."""

    mode: CalibrationMode = Field(description="Report or Apply (--calibration).")
    gpu_class: str = Field(description="The GPU class whose factors these are.")
    adjusted: bool = Field(description="Whether any figure of this estimate was scaled.")
    analytic_total_bytes: int = Field(description="perGpu.totalBytes before calibration.")
    analytic_runtime_overhead_bytes: int = Field(
        0, description="perGpu.runtimeOverheadBytes before calibration."
    )
    factors: list[CalibrationFactor] = Field(
        default_factory=list, description="The factors of this engine and GPU class."
    )
    ruled_out: list[CalibrationFactor] = Field(
        default_factory=list,
        description="Mode Apply: the factors of cheaper classes the analytic estimate fits and "
        "the calibrated one does not (afterBytes: the need there).",
    )
    message: str = Field("", description="What was adjusted and by how much (GiB).")


class EstimateStatus(_Status):
    """The memory model's planning figure."""

    parameter_count: int = Field(description="Total parameters.")
    gpu_count: int = Field(description="GPUs one replica uses (declared parallelism only).")
    kv_cache_bytes_per_token: int = Field(
        0, description="KV cache bytes per token on one GPU (0 for training)."
    )
    per_gpu: PerGpuBreakdown = Field(description="Bytes on the most loaded GPU.")
    trainable_parameter_count: int | None = Field(
        None, description="Parameters that receive gradients (training only)."
    )
    kv_cache_tokens: int | None = Field(
        None, description="Tokens the KV cache is sized for (inference only)."
    )
    kv_cache_capacity_tokens: int | None = Field(
        None,
        description="Pre-allocating engines: the KV cache pool in tokens on gpuClass, as vLLM "
        "logs 'GPU KV cache size: N tokens'.",
    )
    max_concurrency: float | None = Field(
        None,
        description="Pre-allocating engines: kvCacheCapacityTokens / maxModelLen, as vLLM logs "
        "'Maximum concurrency for N tokens per request'.",
    )
    gpu_class: str | None = Field(
        None,
        description="Pre-allocating engines: the GPU class these figures are for (the pool "
        "depends on the GPU): the recommended class, else the largest allowed class.",
    )
    engine_version: str | None = Field(
        None, description="Engine release whose allocation rules the estimate follows."
    )
    peak_phase: PeakPhase | None = Field(
        None,
        description="Phase whose per-GPU total is the peak and is shown in perGpu (training: "
        "Load or Step; generation: TextEncode, Denoise or VaeDecode).",
    )
    phases: list[PhaseEstimate] = Field(
        default_factory=list,
        description="Per-GPU total of every phase estimated; perGpu shows the largest.",
    )
    host_bytes_per_node: int | None = Field(
        None,
        description="Host memory (RAM) the workload's processes on one node hold for model "
        "data: offloaded optimizer state and parameters, checkpoint staging at load, a "
        "pipeline's offloaded or CPU-placed components (bytes).",
    )
    notes: list[str] = Field(
        default_factory=list,
        description="Caveats of this estimate (approximations; missing components are "
        "listed in missingComponents).",
    )
    missing_components: list[MissingComponent] = Field(
        default_factory=list,
        description="Components the workload needs that could not be counted; non-empty means "
        "the estimate is a lower bound (verdict Incomplete), never a fit.",
    )

    calibration: CalibrationStatus | None = Field(
        None,
        description="Correction factors learned from measurement records (--calibration "
        "report or apply), and what they changed.",
    )

    @property
    def complete(self) -> bool:
        """Whether every component the workload needs is counted."""
        return not self.missing_components


class MeasurementKey(_Status):
    """The fields a measurement key digests. Two workloads with equal fields measure the same
    memory; any change in one of them is a different measurement."""

    spec_digest: str = Field(
        description="SHA-256 of the spec fields that change memory (see memory_spec_digest)."
    )
    gpu_class: str = Field(description="Catalog class measured on.")
    probe_image: str = Field(description="Probe image that ran the measurement.")
    engine: str = Field(
        description="Inference engine (vllm, transformers, tgi, sglang), pytorch for training, "
        "diffusers for generation."
    )
    engine_version: str = Field(
        "", description="spec.inference.engineVersion; empty when the spec leaves it to the image."
    )
    driver_major: str = Field(
        "",
        description="NVIDIA driver major version of the node (GFD nvidia.com/cuda.driver-version"
        ".major, else nvidia.com/cuda.driver.major); empty when unknown.",
    )
    catalog_digest: str = Field(description="Digest of the catalog entry of gpuClass.")

    def digest(self) -> str:
        """The measurement key: SHA-256 (64 hex) of these fields (sorted-key compact JSON)."""
        data = self.model_dump(mode="json", by_alias=True)
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


class MeasurementStatus(_Status):
    """What the probe measured on a real device."""

    spec_hash: str = Field(description="specHash of the spec that was measured.")
    job_name: str | None = Field(None, description="Measurement Job name.")
    node_name: str | None = Field(None, description="Node the Job ran on.")
    gpu_product: str | None = Field(None, description="NVML device name / GFD product label.")
    gpu_class: str | None = Field(None, description="Catalog class measured on.")
    gpu_memory_bytes: int | None = Field(None, description="Device memory as NVML reports it.")
    device: str | None = Field(None, description="cuda or cpu (cpu figures are not GPU figures).")
    peak_allocated_bytes: int | None = Field(None, description="torch.cuda.max_memory_allocated.")
    peak_reserved_bytes: int | None = Field(None, description="torch.cuda.max_memory_reserved.")
    peak_device_used_bytes: int | None = Field(None, description="NVML peak used on the device.")
    measured_ranks: int | None = Field(
        None, description="Ranks the Job ran (one node's) when the job spans several nodes."
    )
    job_ranks: int | None = Field(
        None, description="Ranks of the whole job (spec) when only one node's were run."
    )
    derived_peak_bytes: int | None = Field(
        None,
        description="The job's per-GPU peak derived from the one-node measurement (bytes); the "
        "peak fields above are what the node measured.",
    )
    scope: str | None = Field(
        None, description="What was measured and what was derived, with figures."
    )
    out_of_memory: bool = Field(False, description="The probe hit CUDA out-of-memory.")
    model_revision: str | None = Field(None, description="spec.model.revision when measured.")
    reason: str | None = Field(None, description="How the measurement ended, when not success.")
    message: str | None = Field(None, description="Detail, with figures and units.")
    started_at: str | None = Field(None, description="RFC 3339.")
    completed_at: str | None = Field(None, description="RFC 3339.")
    memory_request_bytes: int | None = Field(
        None, description="Host memory (RAM) request and limit of the probe container."
    )
    retry: int | None = Field(
        None,
        description="How many Jobs replaced a failed or unschedulable one for this spec and "
        "class (part of the Job name).",
    )
    retried: bool | None = Field(
        None, description="Already retried once after an eviction or a host OOM kill."
    )
    recreated: bool | None = Field(
        None, description="The Job was deleted by someone and recreated once."
    )
    out_of_memory_classes: list[str] | None = Field(
        None, description="Classes on which the probe hit CUDA out-of-memory for this spec."
    )
    reused_from: str | None = Field(
        None,
        description="Name of the GPUMeasurement (cluster-scoped) whose result this is, when "
        "the measurement was reused instead of run (same measurement key).",
    )
    measurement_key: str | None = Field(
        None, description="Measurement key (SHA-256 hex of keyFields) of this measurement."
    )
    record_expires_at: str | None = Field(
        None,
        description="When the GPUMeasurement this measurement produced or reused expires (RFC "
        "3339); deleted before then, the workload is measured again.",
    )
    key_fields: MeasurementKey | None = Field(
        None,
        description="What the key digests, as measured: when one of them no longer holds (probe "
        "image, engine version, node driver major, catalog entry), the workload is measured "
        "again.",
    )

    @computed_field(  # type: ignore[prop-decorator]
        alias="peakGiB",
        description="Largest measured peak (device used, reserved or allocated) in GiB (2^30 "
        "bytes), one decimal; for display only.",
    )
    @property
    def peak_gib(self) -> float | None:
        """The most conservative measured peak in GiB, or ``None`` before any figure exists."""
        peaks = [
            p
            for p in (
                self.peak_device_used_bytes,
                self.peak_reserved_bytes,
                self.peak_allocated_bytes,
            )
            if p is not None
        ]
        return round(max(peaks) / GIB, 1) if peaks else None


class NodeSelectorRequirement(_Status):
    """Kubernetes ``NodeSelectorRequirement`` (core/v1): one label test."""

    key: str = Field(description="Node label key, e.g. nvidia.com/gpu.product.")
    operator: str = Field(description="In, NotIn, Exists, DoesNotExist, Gt or Lt.")
    values: list[str] = Field(default_factory=list, description="Label values.")


class NodeSelectorTerm(_Status):
    """Kubernetes ``NodeSelectorTerm``: every requirement must hold."""

    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, description="Label requirements, ANDed."
    )


class NodeSelector(_Status):
    """Kubernetes ``NodeSelector``: any term may hold."""

    node_selector_terms: list[NodeSelectorTerm] = Field(
        default_factory=list, description="Terms, ORed."
    )


class NodeAffinitySnippet(_Status):
    """A ready-to-paste ``spec.affinity.nodeAffinity`` for a pod template."""

    required_during_scheduling_ignored_during_execution: NodeSelector = Field(
        description="Nodes of the recommended class (GPU Feature Discovery product labels)."
    )


class ResourcesSnippet(_Status):
    """A ready-to-paste container ``resources`` (GPU extended resource only)."""

    limits: dict[str, Annotated[str, Field(description="Quantity, e.g. '1'.")]] = Field(
        default_factory=dict,
        description="Extended resource -> quantity, e.g. nvidia.com/gpu: '1' (GPUs are requested "
        "by limits; Kubernetes copies them to requests).",
    )


class LaunchStatus(_Status):
    """How the launchers users run express a job of ``workerCount`` x ``gpusPerWorker`` GPUs."""

    torchrun_args: list[str] = Field(
        default_factory=list,
        description="torchrun flags of every worker, e.g. [--nnodes=2, --nproc-per-node=8].",
    )
    pytorch_job_replicas: dict[
        str, Annotated[int, Field(description="Pods of this replica type.")]
    ] = Field(
        default_factory=dict,
        description="Kubeflow PyTorchJob pytorchReplicaSpecs replicas (Master 1, Worker the "
        "rest), each a pod of gpusPerWorker GPUs, nprocPerNode gpusPerWorker.",
    )
    job_set_parallelism: int = Field(
        description="JobSet: one replicatedJob of replicas 1 whose Indexed Job has parallelism "
        "and completions of this many pods."
    )
    leader_worker_set_size: int = Field(
        description="LeaderWorkerSet leaderWorkerTemplate.size (the leader and its workers)."
    )
    interconnect: str = Field(
        description="The interconnect the figures assume: within a node and between nodes."
    )


class RecommendationStatus(_Status):
    """The GPU class to run on."""

    gpu_class: str = Field(description="Catalog class name.")
    gpu_count: int = Field(description="GPUs of that class per replica.")
    gpu_memory_bytes: int = Field(description="Usable memory of one GPU of the class.")
    required_bytes_per_gpu: int = Field(description="Estimated or measured peak per GPU.")
    headroom_fraction: float = Field(description="(capacity - required) / capacity.")
    basis: Basis = Field(description="Estimate or Measurement.")
    present_in_cluster: bool | None = Field(
        None, description="Whether nodes of this class were found in the cluster."
    )
    cheapest_fitting_class: str | None = Field(
        None, description="Cheapest catalog class that fits, present in the cluster or not."
    )
    node_affinity: NodeAffinitySnippet | None = Field(
        None, description="Ready-to-paste spec.affinity.nodeAffinity for the pod template."
    )
    resources: ResourcesSnippet | None = Field(
        None, description="Ready-to-paste container resources (the GPU limit) per replica."
    )
    worker_count: int | None = Field(
        None, description="Pods (nodes) the job spans; 1 for one pod. gpuCount is the total."
    )
    gpus_per_worker: int | None = Field(
        None, description="GPUs of one worker pod (its nvidia.com/gpu limit in resources)."
    )
    host_memory_bytes_per_worker: int | None = Field(
        None,
        description="Host memory one worker pod needs for offload and the load phase (bytes).",
    )
    launch: LaunchStatus | None = Field(
        None, description="The same split as launchers express it (torchrun, PyTorchJob, ...)."
    )
    engine_args: dict[str, EngineArgValue] | None = Field(
        None,
        description="Inference: the engine's own flags (e.g. --gpu-memory-utilization, "
        "--max-model-len) to start it with on gpuClass so that it behaves as estimated.",
    )
    engine_command_args: list[str] | None = Field(
        None,
        description="engineArgs ready to paste into a container's args, one element each "
        '(["--gpu-memory-utilization=0.86", "--max-model-len=8192", "--enforce-eager"]: a '
        "boolean flag alone).",
    )

    @computed_field(  # type: ignore[prop-decorator]
        alias="headroomPercent",
        description="headroomFraction as a percentage, one decimal; for display only.",
    )
    @property
    def headroom_percent(self) -> float:
        """``headroom_fraction`` x 100, rounded to 0.1, for the printer column."""
        return round(self.headroom_fraction * 100, 1)


class MeasurementUsage(_Status):
    """GPU-seconds this workload's measurement Jobs used on one UTC day, charged to its
    namespace's ``measurementGpuSecondsPerDay`` budget (the namespace policy's daily cap on
    measurement GPU time). Kept in the status so that the charge survives an operator restart
    and a re-measurement."""

    day: str = Field(description="The UTC day charged, YYYY-MM-DD.")
    gpu_seconds: int = Field(
        ge=0,
        description="GPUs of one replica x seconds from each Job's start to its result, rounded "
        "up to whole seconds (at least 1 per Job), summed over the Jobs that ended that day.",
    )
    last_job_name: str | None = Field(
        None, description="The last Job charged (each Job is charged once)."
    )


class GPUWorkloadStatus(_Status):
    """``.status`` of a GPUWorkload."""

    observed_generation: int | None = Field(None, description="Generation last processed.")
    phase: Phase = Field(Phase.Pending, description="Lifecycle summary.")
    spec_hash: str | None = Field(None, description="Hash of the normalized spec.")
    estimate: EstimateStatus | None = Field(None, description="Memory model estimate.")
    measurement: MeasurementStatus | None = Field(None, description="Last measurement.")
    recommendation: RecommendationStatus | None = Field(None, description="GPU class to use.")
    conditions: list[Condition] = Field(default_factory=list, description="kstatus conditions.")
    measurement_usage: MeasurementUsage | None = Field(
        None, description="GPU-seconds charged to the namespace's daily measurement budget."
    )
