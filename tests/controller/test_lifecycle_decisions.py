"""Decisions of the pure workload state machine (gpu_sizer.lifecycle) that the scenario tests in
test_reconcile.py do not reach: each test names the rule it holds to."""

from __future__ import annotations

from gpu_sizer.api import (
    Condition,
    ConditionStatus,
    MeasurementStatus,
    Phase,
    parse_spec,
    spec_hash,
)
from gpu_sizer.lifecycle import (
    DeleteJob,
    Emit,
    StartJob,
    current_conditions,
    measured_peak,
    settle_transitions,
    starts_measurement,
)
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind
from gpu_sizer.measurement.result import ProbeResult
from tests.controller.test_reconcile import (
    GIB,
    PRESENT,
    cond,
    gpu_result,
    observe,
    probe_result,
    raw,
    start,
)

#: An on-demand runtime: its measured peak does not grow with the GPU it runs on (a
#: pre-allocating engine lowers its fraction instead, tests/controller/test_reconcile_pools.py).
ON_DEMAND = {"engine": "transformers", "maxModelLen": 2048, "maxNumSeqs": 4}


def test_a_cpu_smoke_run_leaves_a_complete_estimate_ready_on_the_estimate() -> None:
    """No GPU on the node: the probe ran on the CPU, so nothing GPU-side was measured; a complete
    estimate stays Ready on the estimate, saying so, and no GPU figure is invented."""
    measuring = start(raw()).status
    estimate_rec = measuring.recommendation
    done = observe(raw(), measuring, probe_result("Succeeded", "cpu"))
    st = done.status
    assert st.phase is Phase.Ready
    measured, ready = cond(st, "Measured"), cond(st, "Ready")
    assert (measured.status, measured.reason) == ("True", "CpuSmokeRun")
    assert (ready.status, ready.reason) == ("True", "CpuSmokeRun")
    assert "no GPU figures" in ready.message and "rests on the estimate" in ready.message
    assert cond(st, "Stalled").status == "False" and cond(st, "Reconciling").status == "False"
    assert st.recommendation == estimate_rec
    assert st.recommendation is not None and st.recommendation.basis == "Estimate"
    m = st.measurement
    assert m is not None and m.device == "cpu" and measured_peak(m) is None


def test_a_peak_over_the_headroom_with_no_larger_allowed_class_is_rejected() -> None:
    """Fail safe: a measured peak that leaves less than minHeadroomFraction on the only allowed
    class rejects the workload and withdraws the recommendation, never keeps the estimate's."""
    doc = raw(inference=ON_DEMAND, placement={"gpuClasses": ["nvidia-l4"]})
    measuring = start(doc).status
    assert measuring.recommendation is not None  # the estimate fitted the L4
    st = observe(doc, measuring, gpu_result(22 * GIB)).status
    assert st.phase is Phase.Rejected and st.recommendation is None
    headroom = cond(st, "HeadroomSufficient")
    assert (headroom.status, headroom.reason) == ("False", "NoSafeHeadroom")
    assert "no larger allowed class" in headroom.message
    assert "measured peak 22.00 GiB per GPU on nvidia-l4" in headroom.message
    ready = cond(st, "Ready")
    assert (ready.status, ready.reason) == ("False", "NoSafeHeadroom")
    assert cond(st, "Stalled").status == "True"
    assert st.measurement is not None and st.measurement.peak_device_used_bytes == 22 * GIB


def test_cuda_oom_moves_to_the_next_class_even_when_the_cluster_has_no_node_of_it() -> None:
    """After a CUDA OOM the next larger allowed class is measured; with no node of any larger
    class present, the smallest larger one is still chosen (the status says no node was found)
    rather than a class the spec does not allow."""
    doc = raw(placement={"gpuClasses": ["nvidia-l4", "nvidia-a100-40gb"]})
    assert "nvidia-a100-40gb" not in PRESENT
    measuring = start(doc).status
    assert measuring.measurement is not None and measuring.measurement.gpu_class == "nvidia-l4"
    oom = Outcome(
        OutcomeKind.Succeeded,
        result=ProbeResult(
            status="OutOfMemory",
            mode="Synthetic",
            device="cuda",
            out_of_memory=True,
            oom_phase="load",
            oom_requested_bytes=2 * GIB,
        ),
    )
    nxt = observe(doc, measuring, oom)
    (job,) = [a for a in nxt.actions if isinstance(a, StartJob)]
    assert job.gpu_class.name == "nvidia-a100-40gb"
    assert DeleteJob(measuring.measurement.job_name or "") in nxt.actions
    m = nxt.status.measurement
    assert m is not None and m.gpu_class == "nvidia-a100-40gb" and m.job_name == job.name
    assert m.out_of_memory_classes == ["nvidia-l4"]
    measured = cond(nxt.status, "Measured")
    assert measured.reason == "OutOfMemory"
    assert "2.00 GiB allocation failed in phase load" in measured.message
    assert "no node of this class found in the cluster yet" in measured.message
    assert cond(nxt.status, "HeadroomSufficient").status == "False"
    assert nxt.status.phase is Phase.Measuring


def test_a_probe_that_reports_a_failure_keeps_the_estimate_and_says_what_the_probe_said() -> None:
    """A probe Timeout is the measurement's deadline; any other failed report is
    MeasurementFailed. Either way the workload is Failed with the estimate-based recommendation,
    and a Warning names the reason."""
    measuring = start(raw()).status
    for status, reason in (("Timeout", "DeadlineExceeded"), ("Failed", "MeasurementFailed")):
        done = observe(raw(), measuring, probe_result(status, "cuda", "model load hung"))
        st = done.status
        assert st.phase is Phase.Failed, status
        assert st.measurement is not None and st.measurement.reason == reason
        measured = cond(st, "Measured")
        assert (measured.status, measured.reason) == ("False", reason)
        assert measured.message == f"probe reported {status}: model load hung"
        assert cond(st, "Ready").status == "False" and cond(st, "Stalled").status == "True"
        assert st.recommendation == measuring.recommendation
        warnings = [a for a in done.actions if isinstance(a, Emit) and a.type_ == "Warning"]
        assert [w.reason for w in warnings] == [reason], status


def test_a_reused_measurement_names_the_record_it_rests_on() -> None:
    """A measurement taken over from a shared GPUMeasurement is re-derived like one's own, and the
    Measured condition says which record it came from."""
    done = observe(raw(), start(raw()).status, gpu_result(10 * GIB)).status
    assert done.measurement is not None
    reused = done.model_copy(
        update={"measurement": done.measurement.model_copy(update={"reused_from": "rec-1"})}
    )
    plan = start(raw(), prev=reused, now="T5")
    assert not any(isinstance(a, StartJob) for a in plan.actions)
    measured = cond(plan.status, "Measured")
    assert measured.status == "True"
    assert measured.message.startswith("reused GPUMeasurement rec-1: measured peak 10.00 GiB")
    assert plan.status.phase is Phase.Ready


def test_leaving_the_kueue_queue_says_measuring_and_records_the_node() -> None:
    measuring = start(raw()).status
    queued = observe(raw(), measuring, Outcome(OutcomeKind.Pending, "in Kueue", queued=True))
    running = observe(
        raw(), queued.status, Outcome(OutcomeKind.Running, "", node_name="gpu-7"), now="T3"
    )
    assert running.actions == () and running.status.phase is Phase.Measuring
    measured = cond(running.status, "Measured")
    assert (measured.status, measured.reason) == ("Unknown", "Measuring")
    assert running.status.measurement is not None
    assert running.status.measurement.node_name == "gpu-7"


def test_a_placement_change_that_nothing_fits_stops_the_running_job() -> None:
    """Placement is outside the spec hash: the measurement of the hash is running, but no allowed
    class fits any more, so its Job is deleted and the workload is Rejected with a Warning."""
    measuring = start(raw()).status
    assert measuring.measurement is not None and measuring.measurement.job_name
    tiny = raw(
        placement={"gpuClasses": ["nvidia-a100-40gb-mig-1g.5gb"], "minHeadroomFraction": 0.5}
    )
    plan = start(tiny, prev=measuring, gen=2, now="T3")
    assert plan.status.phase is Phase.Rejected and plan.status.measurement is None
    assert DeleteJob(measuring.measurement.job_name) in plan.actions
    assert not any(isinstance(a, StartJob) for a in plan.actions)
    assert [a.type_ for a in plan.actions if isinstance(a, Emit)] == ["Warning"]
    assert not starts_measurement(plan, measuring, spec_hash(parse_spec(tiny)))


def test_the_peak_a_recommendation_rests_on_prefers_nvml_then_reserved_then_allocated() -> None:
    def m(**peaks: int) -> MeasurementStatus:
        return MeasurementStatus(spec_hash="h", **peaks)

    both = m(peak_device_used_bytes=9, peak_reserved_bytes=8, peak_allocated_bytes=7)
    assert measured_peak(both) == 9
    assert measured_peak(m(peak_reserved_bytes=8, peak_allocated_bytes=7)) == 8
    assert measured_peak(m(peak_allocated_bytes=7)) == 7
    assert measured_peak(m()) is None


def test_a_stored_condition_without_a_transition_time_is_not_given_a_new_one() -> None:
    """Kubernetes API conventions: the time moves only when the status changes. A stored
    condition that lacks a time keeps the decision's own time when its status is unchanged; a
    changed status takes ``now``."""
    stored = [Condition(type="Ready", status=ConditionStatus.false, reason="a", message="")]
    same = Condition(
        type="Ready",
        status=ConditionStatus.false,
        reason="b",
        message="",
        last_transition_time="T1",
    )
    (kept,) = settle_transitions([same], stored, "T9")
    assert kept.last_transition_time == "T1"
    moved = same.model_copy(update={"status": ConditionStatus.true})
    (changed,) = settle_transitions([moved], stored, "T9")
    assert changed.last_transition_time == "T9"


def test_without_a_generation_no_condition_is_restated_as_not_evaluated() -> None:
    old = Condition(
        type="HeadroomSufficient",
        status=ConditionStatus.true,
        reason="EstimateFits",
        message="",
        observed_generation=1,
        last_transition_time="T1",
    )
    assert current_conditions([old], None, "T5") == [old]
    (restated,) = current_conditions([old], 2, "T5")
    assert (restated.status, restated.reason) == (ConditionStatus.unknown, "NotEvaluated")


def test_a_workload_ready_on_the_estimate_announces_it_once_not_on_every_new_figure() -> None:
    """Measurement disabled: the EstimateOnly Event marks entering Ready. A placement change
    (outside the spec hash) that moves the estimate's figures rewrites the Ready message but
    posts no second Event."""
    first = start(raw(measurement={"mode": "Disabled"}))
    assert first.status.phase is Phase.Ready
    assert [a.reason for a in first.actions if isinstance(a, Emit)] == ["EstimateOnly"]
    moved = raw(measurement={"mode": "Disabled"}, placement={"minHeadroomFraction": 0.3})
    again = start(moved, prev=first.status, gen=2, now="T4")
    assert again.status.phase is Phase.Ready and again.actions == ()
    assert cond(again.status, "Ready").message != cond(first.status, "Ready").message
