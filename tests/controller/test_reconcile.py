"""The pure reconcile core: (spec, observed state) -> status and actions."""

from __future__ import annotations

import datetime
from typing import Any

from gpu_sizer.api import GPUWorkloadStatus, Phase, parse_spec, spec_hash
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.lifecycle import (
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
    decide,
    invalid_plan,
    plan_outcome,
    plan_spec,
)
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind, classify
from gpu_sizer.measurement.result import NvmlInfo, ProbeResult
from gpu_sizer.sizing.verdict import assess
from tests.architectures import LLAMA_3_2_1B

GIB = 1 << 30
CONFIG = Config(catalog=DEFAULT_CATALOG, unschedulable_timeout_seconds=600)
PRESENT = frozenset({"nvidia-l4", "nvidia-a100-80gb"})


def raw(**extra: Any) -> dict[str, Any]:
    """A small complete inference spec (Llama-3.2-1B) that fits the smallest class."""
    doc: dict[str, Any] = {
        "model": {"name": "m", "architecture": LLAMA_3_2_1B, "dtype": "bfloat16"},
        "inference": {"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 4},
    }
    doc.update(extra)
    return doc


def bare(**extra: Any) -> dict[str, Any]:
    """The same with only parameterCount: the estimate misses the KV cache (Incomplete)."""
    return raw(model={"name": "m", "parameterCount": 1_235_814_400, "dtype": "bfloat16"}, **extra)


def namer(cls: str, mem: int, retry: int) -> str:
    return f"job-{cls}-{mem // GIB}-{retry}"


def start(
    spec_doc: dict[str, Any], prev: GPUWorkloadStatus | None = None, gen: int = 1, now: str = "T1"
) -> Plan:
    spec = parse_spec(spec_doc)
    wl = Workload("w", "ns", gen, spec, spec_hash(spec), prev)
    return plan_spec(
        wl,
        assess(spec, DEFAULT_CATALOG, present=PRESENT),
        CONFIG,
        present=PRESENT,
        now=now,
        job_name=namer,
        memory_bytes=4 * GIB,
    )


def observe(
    spec_doc: dict[str, Any], prev: GPUWorkloadStatus, outcome: Outcome, now: str = "T2"
) -> Plan:
    spec = parse_spec(spec_doc)
    wl = Workload("w", "ns", 1, spec, spec_hash(spec), prev)
    return plan_outcome(wl, outcome, CONFIG, present=PRESENT, now=now, job_name=namer)


def cond(status: GPUWorkloadStatus, type_: str) -> Any:
    return next(c for c in status.conditions if c.type == type_)


def gpu_result(peak: int, total: int = 23034 << 20) -> Outcome:
    r = ProbeResult(
        status="Succeeded",
        mode="Synthetic",
        device="cuda",
        peak_device_used_bytes=peak,
        nvml=NvmlInfo(available=True, device_name="NVIDIA L4", total_bytes=total),
    )
    return Outcome(OutcomeKind.Succeeded, result=r, node_name="n1")


def test_create_starts_one_job_on_the_smallest_present_class() -> None:
    plan = start(raw())
    assert plan.status.phase is Phase.Measuring
    (job,) = [a for a in plan.actions if isinstance(a, StartJob)]
    assert job.gpu_class.name == "nvidia-l4" and job.gpus == 1 and job.memory_bytes == 4 * GIB
    assert plan.status.measurement is not None and plan.status.measurement.job_name == job.name
    assert cond(plan.status, "Reconciling").status == "True"


def test_resume_while_measuring_does_nothing() -> None:
    first = start(raw()).status
    again = start(raw(), prev=first, now="T9")
    assert again.actions == () and again.status.phase is Phase.Measuring
    assert cond(again.status, "Ready").last_transition_time == "T1"


def test_spec_change_deletes_the_old_job_and_says_spec_changed() -> None:
    first = start(raw()).status
    plan = start(
        raw(inference={"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 8}),
        prev=first,
        gen=2,
        now="T3",
    )
    kinds = [type(a) for a in plan.actions]
    assert kinds[0] is DeleteJob and StartJob in kinds
    assert cond(plan.status, "Measured").reason == "SpecChanged"
    assert plan.status.observed_generation == 2


def test_success_is_ready_on_the_measurement_and_never_remeasured() -> None:
    measuring = start(raw()).status
    done = observe(raw(), measuring, gpu_result(10 * GIB))
    assert done.status.phase is Phase.Ready
    rec = done.status.recommendation
    assert rec is not None and rec.basis == "Measurement" and rec.required_bytes_per_gpu == 10 * GIB
    assert any(isinstance(a, Emit) and a.reason == "Measured" for a in done.actions)
    again = start(raw(), prev=done.status, now="T5")
    assert not any(isinstance(a, StartJob) for a in again.actions)
    assert again.status.phase is Phase.Ready


def test_measured_peak_without_headroom_moves_to_a_larger_class() -> None:
    # An on-demand runtime: its peak does not grow with the GPU. (Pre-allocating engines lower
    # their memory fraction instead: tests/controller/test_reconcile_pools.py.)
    doc = raw(inference={"engine": "transformers", "maxModelLen": 2048, "maxNumSeqs": 4})
    measuring = start(doc).status
    done = observe(doc, measuring, gpu_result(22 * GIB))
    assert done.status.phase is Phase.Ready
    assert cond(done.status, "HeadroomSufficient").status == "False"
    assert done.status.recommendation is not None
    assert done.status.recommendation.gpu_memory_bytes > 23034 << 20


def test_cuda_oom_measures_again_on_a_larger_class_then_rejects() -> None:
    only_l4 = raw(placement={"gpuClasses": ["nvidia-l4", "nvidia-a100-80gb"]})
    measuring = start(only_l4).status
    oom = Outcome(
        OutcomeKind.Succeeded,
        result=ProbeResult(
            status="OutOfMemory",
            mode="Synthetic",
            device="cuda",
            out_of_memory=True,
            oom_phase="load",
        ),
    )
    nxt = observe(only_l4, measuring, oom)
    (job,) = [a for a in nxt.actions if isinstance(a, StartJob)]
    assert job.gpu_class.name == "nvidia-a100-80gb"
    last = observe(only_l4, nxt.status, oom, now="T3")
    assert last.status.phase is Phase.Rejected
    assert last.status.measurement is not None
    assert last.status.measurement.out_of_memory_classes == ["nvidia-l4", "nvidia-a100-80gb"]


def test_unschedulable_waits_then_keeps_the_estimate() -> None:
    measuring = start(raw()).status
    early = observe(
        raw(), measuring, Outcome(OutcomeKind.Unschedulable, "0/3 nodes", seconds_unschedulable=10)
    )
    assert early.status == measuring and early.actions == ()
    late = observe(
        raw(), measuring, Outcome(OutcomeKind.Unschedulable, "0/3 nodes", seconds_unschedulable=601)
    )
    assert late.status.phase is Phase.Estimated
    assert cond(late.status, "Measured").reason == "Unschedulable"  # l4 nodes exist: capacity
    assert late.status.recommendation is not None and late.status.recommendation.basis == "Estimate"


def test_a_job_that_never_gets_a_pod_ends_on_the_unschedulable_timeout() -> None:
    """Pods refused by a ResourceQuota (no pod, no scheduler condition): the same timeout ends
    the wait, the Job is deleted and the message says why, instead of the Job's deadline."""
    measuring = start(raw()).status
    doc = {
        "metadata": {"name": "j", "creationTimestamp": "2026-01-01T11:00:00Z"},
        "spec": {"activeDeadlineSeconds": 930},
        "status": {"startTime": "2026-01-01T11:00:00Z"},
    }
    now = datetime.datetime(2026, 1, 1, 11, 10, 1, tzinfo=datetime.UTC)
    late = observe(raw(), measuring, classify(doc, [], now))
    assert late.status.phase is Phase.Estimated
    measured = cond(late.status, "Measured")
    assert measured.reason == "Unschedulable" and "no pod for 601 s" in measured.message
    assert any(isinstance(a, DeleteJob) for a in late.actions)


def test_host_oom_retries_once_with_twice_the_memory() -> None:
    measuring = start(raw()).status
    retry = observe(raw(), measuring, Outcome(OutcomeKind.HostOOMKilled, "OOMKilled"))
    (job,) = [a for a in retry.actions if isinstance(a, StartJob)]
    assert job.memory_bytes == 8 * GIB
    failed = observe(raw(), retry.status, Outcome(OutcomeKind.HostOOMKilled, "OOMKilled"))
    assert failed.status.phase is Phase.Failed and cond(failed.status, "Stalled").status == "True"


def test_job_deleted_is_recreated_once_under_the_same_name() -> None:
    measuring = start(raw()).status
    again = observe(raw(), measuring, Outcome(OutcomeKind.Missing))
    (job,) = [a for a in again.actions if isinstance(a, StartJob)]
    assert measuring.measurement is not None and job.name == measuring.measurement.job_name
    gone = observe(raw(), again.status, Outcome(OutcomeKind.Missing))
    assert (
        gone.status.phase is Phase.Failed and cond(gone.status, "Measured").reason == "JobDeleted"
    )


def test_disabled_measurement_is_ready_on_the_estimate() -> None:
    plan = start(raw(measurement={"mode": "Disabled"}))
    assert plan.status.phase is Phase.Ready and not any(
        isinstance(a, StartJob) for a in plan.actions
    )
    assert cond(plan.status, "Ready").reason == "EstimateOnly"
    # The Event says why it is Ready (the Ready condition's message), not the last condition's
    # (Stalled, empty when nothing is stalled).
    (event,) = [a for a in plan.actions if isinstance(a, Emit)]
    assert (event.type_, event.reason) == ("Normal", "EstimateOnly")
    assert event.message == cond(plan.status, "Ready").message
    assert event.message.startswith("ready on the estimate alone (measurement disabled): ")


def test_invalid_spec_stalls_with_field_paths() -> None:
    plan = invalid_plan(
        ["spec.inference.maxNumSeqs: must be >= 1"], generation=3, now="T", previous=None
    )
    assert plan.status.phase is Phase.Failed
    assert "spec.inference.maxNumSeqs" in cond(plan.status, "Stalled").message
    assert any(isinstance(a, Emit) and a.reason == "InvalidSpec" for a in plan.actions)


def test_invalid_spec_leaves_no_condition_of_the_old_spec_standing() -> None:
    """A Ready spec made invalid: HeadroomSufficient=True of generation 1 must not stay beside
    the invalid generation 2 (it reads as this spec's verdict). Every condition is this
    generation's: HeadroomSufficient Unknown (InvalidSpec), none left at generation 1."""
    ready = start(raw(measurement={"mode": "Disabled"}), gen=1).status
    assert cond(ready, "HeadroomSufficient").status == "True"
    plan = invalid_plan(["spec.model.dtype: bad"], generation=2, now="T2", previous=ready)
    headroom = cond(plan.status, "HeadroomSufficient")
    assert (headroom.status, headroom.reason) == ("Unknown", "InvalidSpec")
    assert {c.observed_generation for c in plan.status.conditions} == {2}
    assert plan.status.recommendation is None and plan.status.estimate is None


def test_a_condition_no_decision_restated_is_unknown_for_the_new_generation() -> None:
    from gpu_sizer.api import Condition
    from gpu_sizer.lifecycle import current_conditions

    old = Condition(
        type="HeadroomSufficient",
        status="True",
        reason="MeasuredFits",
        message="x",
        observed_generation=1,
        last_transition_time="T0",
    )
    same = old.model_copy(update={"type": "Measured", "observed_generation": 2})
    out = {c.type: c for c in current_conditions([old, same], 2, "T5")}
    assert out["HeadroomSufficient"].status == "Unknown"
    assert out["HeadroomSufficient"].reason == "NotEvaluated"
    assert out["HeadroomSufficient"].observed_generation == 2
    assert out["HeadroomSufficient"].last_transition_time == "T5"
    assert out["Measured"] == same


def test_unchanged_verdict_on_resume_posts_no_event_again() -> None:
    problems = ["spec.inference.maxNumSeqs: must be >= 1"]
    first = invalid_plan(problems, generation=3, now="T", previous=None)
    again = invalid_plan(problems, generation=3, now="T2", previous=first.status)
    assert not any(isinstance(a, Emit) for a in again.actions)
    changed = invalid_plan(["spec.model.dtype: bad"], generation=4, now="T3", previous=again.status)
    assert any(isinstance(a, Emit) and a.reason == "InvalidSpec" for a in changed.actions)


def test_absent_class_waits_for_a_node_and_measures_again_when_one_joins() -> None:
    h100 = raw(placement={"gpuClasses": ["nvidia-h100-80gb"]})
    measuring = start(h100).status
    late = observe(
        h100, measuring, Outcome(OutcomeKind.Unschedulable, "0/3", seconds_unschedulable=601)
    )
    assert cond(late.status, "Measured").reason == "NoNodeOfClass"
    assert "when a node of the class joins" in cond(late.status, "Measured").message
    still = start(h100, prev=late.status, now="T4")  # no H100 yet: nothing to do
    assert not any(isinstance(a, StartJob) for a in still.actions)
    spec = parse_spec(h100)
    wl = Workload("w", "ns", 1, spec, spec_hash(spec), late.status)
    now_present = PRESENT | {"nvidia-h100-80gb"}
    joined = plan_spec(
        wl,
        assess(spec, DEFAULT_CATALOG, present=now_present),
        CONFIG,
        present=now_present,
        now="T5",
        job_name=namer,
        memory_bytes=4 * GIB,
    )
    (job,) = [a for a in joined.actions if isinstance(a, StartJob)]
    assert measuring.measurement is not None and job.name != measuring.measurement.job_name
    assert joined.status.phase is Phase.Measuring


# --- Incomplete estimates: never Ready on the estimate alone -----------------------------------


def probe_result(status: str, device: str, message: str = "") -> Outcome:
    r = ProbeResult(status=status, mode="Synthetic", device=device, message=message or None)
    return Outcome(OutcomeKind.Succeeded, result=r, node_name="n1")


def test_incomplete_with_measurement_disabled_is_stalled_naming_the_missing_fields() -> None:
    plan = start(bare(measurement={"mode": "Disabled"}))
    st = plan.status
    assert st.phase is Phase.Estimated and st.recommendation is None
    assert not any(isinstance(a, StartJob) for a in plan.actions)
    assert st.estimate is not None and not st.estimate.complete
    assert cond(st, "Estimated").status == "True" and cond(st, "Estimated").reason == "Incomplete"
    ready = cond(st, "Ready")
    assert ready.status == "False" and ready.reason == "Incomplete"
    assert "numHiddenLayers" in ready.message and "import-hf-config" in ready.message
    assert "spec.measurement.mode is Disabled" in ready.message
    assert cond(st, "Stalled").status == "True" and cond(st, "Reconciling").status == "False"
    assert cond(st, "HeadroomSufficient").status == "Unknown"
    assert [a.reason for a in plan.actions if isinstance(a, Emit)] == ["Incomplete"]


def test_incomplete_is_measured_on_the_lower_bound_class_without_a_recommendation() -> None:
    plan = start(bare())
    (job,) = [a for a in plan.actions if isinstance(a, StartJob)]
    assert job.gpu_class.name == "nvidia-l4"  # what the counted components fit
    st = plan.status
    assert st.phase is Phase.Measuring and st.recommendation is None
    assert cond(st, "Ready").status == "False"
    assert cond(st, "Estimated").reason == "Incomplete"


def test_a_gpu_measurement_makes_an_incomplete_estimate_ready() -> None:
    measuring = start(bare()).status
    done = observe(bare(), measuring, gpu_result(12 * GIB)).status
    assert done.phase is Phase.Ready and cond(done, "Ready").status == "True"
    assert done.recommendation is not None and done.recommendation.basis == "Measurement"


def test_no_gpu_figure_leaves_an_incomplete_estimate_not_ready() -> None:
    """The probe cannot build a synthetic model without the architecture (Unsupported), or ran
    on a CPU: nothing measured the missing KV cache, so the workload does not become Ready."""
    measuring = start(bare()).status
    for outcome in (
        probe_result("Unsupported", "cuda", "synthetic mode needs spec.model.architecture"),
        probe_result("Succeeded", "cpu"),
    ):
        st = observe(bare(), measuring, outcome).status
        ready = cond(st, "Ready")
        assert st.phase is Phase.Estimated, outcome
        assert ready.status == "False" and ready.reason == "Incomplete", outcome
        assert "spec.model.architecture.numKeyValueHeads" in ready.message
        assert cond(st, "Stalled").status == "True"
    # the same outcomes leave a complete estimate Ready on the estimate, as before
    complete = start(raw()).status
    st = observe(raw(), complete, probe_result("Unsupported", "cuda", "too big for CPU")).status
    assert st.phase is Phase.Ready and cond(st, "Ready").reason == "EstimateOnly"


# --- Settled statuses: deciding again over an unchanged world changes nothing (issue 13, item 5)


def decide_again(spec_doc: dict[str, Any], prev: GPUWorkloadStatus, outcome: Outcome) -> Plan:
    spec = parse_spec(spec_doc)
    wl = Workload("w", "ns", 1, spec, spec_hash(spec), prev)
    return decide(
        wl,
        assess(spec, DEFAULT_CATALOG, present=PRESENT),
        CONFIG,
        present=PRESENT,
        now="T-later",
        job_name=namer,
        memory_bytes=4 * GIB,
        observe=lambda m: outcome,
    )


def test_a_measured_status_is_reproduced_exactly_on_resume() -> None:
    """Re-deriving a measured status goes through the estimate (Measured Unknown, Ready False)
    on the way; no transition time may move for that."""
    done = observe(raw(), start(raw()).status, gpu_result(10 * GIB)).status
    again = start(raw(), prev=done, now="T-restart")
    assert again.status == done and again.actions == ()
    assert decide_again(raw(), done, Outcome(OutcomeKind.Missing)).status == done


def test_a_workload_waiting_for_a_node_of_its_class_is_not_rewritten() -> None:
    h100 = raw(placement={"gpuClasses": ["nvidia-h100-80gb"]})
    late = observe(
        h100,
        start(h100).status,
        Outcome(OutcomeKind.Unschedulable, "0/3", seconds_unschedulable=601),
    ).status
    for now in ("T6", "T7"):
        assert start(h100, prev=late, now=now).status == late


def test_rejected_failed_and_running_statuses_are_reproduced() -> None:
    measuring = start(raw()).status
    running = Outcome(OutcomeKind.Running, "running on n1", node_name="n1")
    on_node = decide_again(raw(), measuring, running).status
    assert decide_again(raw(), on_node, running).status == on_node
    failed = observe(raw(), measuring, Outcome(OutcomeKind.ImagePullFailed, "ErrImagePull")).status
    assert failed.phase is Phase.Failed
    assert start(raw(), prev=failed, now="T8").status == failed
    too_big = raw(model={"name": "m", "parameterCount": 2_000_000_000_000, "dtype": "bfloat16"})
    rejected = start(too_big)
    assert rejected.status.phase is Phase.Rejected
    assert start(too_big, prev=rejected.status, now="T9").status == rejected.status


def test_a_real_change_moves_only_the_conditions_that_changed() -> None:
    measuring = start(raw(), now="T1").status
    done = observe(raw(), measuring, gpu_result(10 * GIB), now="T2").status
    assert cond(done, "Estimated").last_transition_time == "T1"  # True before and after
    assert cond(done, "Ready").last_transition_time == "T2"  # False -> True
    assert cond(done, "Stalled").last_transition_time == "T1"  # False throughout


def test_decide_follows_the_running_job_of_the_current_spec() -> None:
    measuring = start(raw()).status
    done = decide_again(raw(), measuring, gpu_result(10 * GIB))
    assert done.status.phase is Phase.Ready
    assert [a.reason for a in done.actions if isinstance(a, Emit)] == ["Measured"]
    # A spec change while measuring starts the new spec's Job and never reads the old one's.
    changed = raw(inference={"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 8})

    def never(m: Any) -> Outcome:
        raise AssertionError(f"observed {m.job_name} of the previous spec")

    spec = parse_spec(changed)
    plan = decide(
        Workload("w", "ns", 2, spec, spec_hash(spec), measuring),
        assess(spec, DEFAULT_CATALOG, present=PRESENT),
        CONFIG,
        present=PRESENT,
        now="T3",
        job_name=namer,
        memory_bytes=4 * GIB,
        observe=never,
    )
    assert [type(a) for a in plan.actions][:1] == [DeleteJob]
    assert any(isinstance(a, StartJob) for a in plan.actions)


def test_deciding_again_while_measuring_keeps_an_incomplete_estimate_incomplete() -> None:
    measuring = start(bare()).status
    running = Outcome(OutcomeKind.Running, "running on n1", node_name="n1")
    again = decide_again(bare(), measuring, running).status
    assert cond(again, "Estimated").reason == "Incomplete"
    assert (
        cond(again, "Estimated").last_transition_time
        == cond(measuring, "Estimated").last_transition_time
    )


def test_a_queued_measurement_admitted_without_a_pod_yet_says_measuring() -> None:
    """Kueue resumed the Job, whose pod is not there yet (unschedulable for 0 s): no longer
    Queued, and not ended either."""
    measuring = start(raw()).status
    queued = observe(raw(), measuring, Outcome(OutcomeKind.Pending, "in Kueue", queued=True))
    assert cond(queued.status, "Measured").reason == "Queued"
    admitted = observe(
        raw(), queued.status, Outcome(OutcomeKind.Unschedulable, "no pod yet"), now="T3"
    )
    assert cond(admitted.status, "Measured").reason == "Measuring"
    assert admitted.status.phase is Phase.Measuring and admitted.actions == ()
