"""Run one measurement and build the result: the probe's imperative shell.

:func:`measure` takes a validated spec and returns the :class:`ProbeResult` with the process exit
status; :func:`main_from_args` reads the spec, calls it, prints the result to stdout and writes
the compact form to the termination-message path. torch is imported only on the synthetic path,
so Command mode runs where only nvidia-ml-py is installed.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_sizer.api import (
    DTYPE_BYTES,
    GPUWorkloadSpec,
    InvalidWorkload,
    MeasurementMode,
    ParallelStrategy,
    Problem,
    parse_spec,
    spec_hash,
)
from gpu_sizer.api.times import now_rfc3339
from gpu_sizer.budget import estimate
from gpu_sizer.measurement.result import PhaseResult, ProbeResult, ResultStatus, compact_message
from gpu_sizer.probe.command_mode import TIMEOUT_EXIT_CODE
from gpu_sizer.probe.errors import TERMINATED, DeadlineExceeded, sigterm_sets_terminated
from gpu_sizer.probe.nvml import DEFAULT_HZ, NvmlSampler
from gpu_sizer.probe.support import synthetic_unsupported_reason

__all__ = [
    "DEFAULT_CPU_MAX_BYTES",
    "DEFAULT_TERMINATION_LOG",
    "Options",
    "deadline_seconds",
    "measure",
    "read_spec",
    "resident_bytes",
    "write_outputs",
]

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
#: CPU runs are for tiny models (CI, laptops): refuse specs whose resident bytes (inference: weights
#: and KV cache; training: weights, gradients and optimizer state) exceed this.
DEFAULT_CPU_MAX_BYTES = 2 << 30
_GIB = float(1 << 30)


@dataclass
class Options:
    """Probe settings from the command line."""

    termination_log: str = DEFAULT_TERMINATION_LOG
    deadline_seconds: float | None = None
    gpu_class: str | None = None
    sampler_hz: float = DEFAULT_HZ
    memory_limit_bytes: int | None = None
    cpu_max_bytes: int = DEFAULT_CPU_MAX_BYTES
    device: str = "auto"


def deadline_seconds(spec: GPUWorkloadSpec, given: float | None) -> float:
    """Seconds the workload may run: ``--deadline-seconds``, else the spec's ``timeoutSeconds``
    less a margin (10 %, at least 60 s when there is room) to write the result before the Job's
    ``activeDeadlineSeconds`` kills the pod."""
    if given is not None:
        return given
    timeout = spec.measurement.timeout_seconds
    return max(timeout * 0.9, timeout - 60.0)


def read_spec(source: str | None) -> GPUWorkloadSpec:
    """The spec from a file, ``-`` (stdin) or env ``GPU_SIZER_SPEC``: JSON (the GPUWorkload
    ``.spec`` as ``spec_to_wire`` writes it, what the Job passes) or YAML (a file such as the
    examples), either the ``.spec`` or a whole GPUWorkload object. JSON is tried first because
    PyYAML (YAML 1.1) reads some JSON numbers, such as ``1e-05``, as strings.

    :raises InvalidWorkload: missing, unreadable, not UTF-8, neither JSON nor YAML, or invalid
        (each problem names its field, ``spec.<path>``).
    """
    where = "GPU_SIZER_SPEC" if source is None else "stdin" if source == "-" else source
    raw: bytes
    if source is None:
        text = os.environ.get("GPU_SIZER_SPEC")
        if not text:
            raise _invalid("no spec: pass --spec FILE or set GPU_SIZER_SPEC")
        raw = os.fsencode(text)
    elif source == "-":
        raw = sys.stdin.buffer.read()
    else:
        try:
            with open(source, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise _invalid(f"cannot read spec file {source}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(
            f"{where} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "the spec is JSON or YAML"
        ) from None
    data = _load_document(text, where)
    if isinstance(data, dict) and "spec" in data and "model" not in data:
        data = data["spec"]
    return parse_spec(data)


def _load_document(text: str, where: str) -> Any:
    """``text`` as JSON, else as YAML; read through :mod:`gpu_sizer.jsonio` and
    :mod:`gpu_sizer.yamlio`, so that an integer longer than Python converts or nesting deeper
    than the decoder recurses is an invalid spec that says so, not a traceback."""
    from gpu_sizer.jsonio import JsonLimitError, loads
    from gpu_sizer.yamlio import YamlError, load

    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        json_error = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except JsonLimitError as exc:
        raise _invalid(f"{where}: {exc}") from None
    try:
        return load(text)
    except YamlError as exc:
        raise _invalid(
            f"{where} is neither JSON nor YAML (JSON: {json_error}; YAML: {exc})"
        ) from None


def _invalid(message: str) -> InvalidWorkload:
    return InvalidWorkload([Problem("spec", message)])


def measure(spec: GPUWorkloadSpec, options: Options) -> tuple[ProbeResult, int]:
    """Measure ``spec``; returns the result and the exit status for the process.

    Exit 0 whenever the probe produced a measurement outcome (Succeeded, OutOfMemory,
    Unsupported, Timeout) in Synthetic mode; Command mode propagates the command's status
    (124 at the deadline); 1 when the probe itself failed (the result says why).
    """
    started = now_rfc3339()
    deadline = time.monotonic() + deadline_seconds(spec, options.deadline_seconds)
    base: dict[str, Any] = {
        "gpu_class": options.gpu_class,
        "spec_hash": spec_hash(spec),
        "started_at": started,
    }
    command = spec.measurement.mode is MeasurementMode.Command
    with sigterm_sets_terminated():
        if TERMINATED.is_set():
            result = ProbeResult(
                status="Timeout",
                mode="Command" if command else "Synthetic",
                device="cpu",
                message="terminated by SIGTERM (Job deadline or pod deletion) before the "
                "workload started",
                **base,
            )
            code = TIMEOUT_EXIT_CODE if command else 0
        elif command:
            result, code = _measure_command(spec, options, deadline, base)
        else:
            result, code = _measure_synthetic(spec, options, deadline, base)
    result.completed_at = now_rfc3339()
    return result, code


def _measure_command(
    spec: GPUWorkloadSpec, options: Options, deadline: float, base: dict[str, Any]
) -> tuple[ProbeResult, int]:
    from gpu_sizer.probe.command_mode import run_command

    sampler = NvmlSampler(options.sampler_hz).start()
    try:
        outcome = run_command(list(spec.measurement.command), deadline=deadline, sampler=sampler)
    finally:
        sampler.stop()
    nvml = sampler.info()
    cuda = nvml.available
    children_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    status: ResultStatus
    message: str | None
    if outcome.error:
        status, message = "Failed", outcome.error
    elif outcome.timed_out:
        status = "Timeout"
        message = f"stopped at the deadline after {outcome.seconds} s (SIGTERM, then SIGKILL)"
    elif outcome.out_of_memory:
        status, message = "OutOfMemory", outcome.oom_line
    elif outcome.exit_code != 0:
        status, message = "Failed", f"command exited with status {outcome.exit_code}"
    else:
        status, message = "Succeeded", None
    notes = []
    if not cuda:
        notes.append("no GPU visible: peakRssBytes is the command's peak RSS, not a GPU figure")
    result = ProbeResult(
        status=status,
        mode="Command",
        device="cuda" if cuda else "cpu",
        gpu_count=len(nvml.devices),
        peak_device_used_bytes=sampler.peak_used(),
        peak_rss_bytes=None if cuda else children_rss,
        out_of_memory=outcome.out_of_memory,
        oom_phase="command" if outcome.out_of_memory else None,
        oom_requested_bytes=outcome.oom_requested_bytes,
        message=message,
        notes=notes,
        exit_code=outcome.exit_code,
        nvml=nvml,
        vllm=outcome.vllm.result(),
        phases=[
            PhaseResult(
                name="command",
                seconds=outcome.seconds,
                peak_device_used_bytes=sampler.peak_used(),
                peak_rss_bytes=None if cuda else children_rss,
            )
        ],
        **base,
    )
    return result, (1 if outcome.error else outcome.exit_code)


def _no_gpu_device() -> bool:
    """No NVIDIA device node is visible (``/dev/nvidiactl``, which the NVIDIA container runtime
    and the driver create wherever a GPU is usable): torch would find no CUDA device either."""
    return not os.path.exists("/dev/nvidiactl")


def _too_big_for_cpu(spec: GPUWorkloadSpec, options: Options) -> str | None:
    need, what = resident_bytes(spec)
    if need <= options.cpu_max_bytes:
        return None
    return (
        f"no GPU: the CPU fallback runs tiny models only; this workload needs about "
        f"{need / _GIB:.1f} GiB of {what} (limit --cpu-max-bytes "
        f"{options.cpu_max_bytes / _GIB:.1f} GiB); run it on a GPU node"
    )


def _measure_synthetic(
    spec: GPUWorkloadSpec, options: Options, deadline: float, base: dict[str, Any]
) -> tuple[ProbeResult, int]:
    if options.device == "cpu" or (options.device == "auto" and _no_gpu_device()):
        # Refused before importing torch (seconds on a loaded machine): the demo and a
        # workstation without a GPU ask this for every large example.
        early = synthetic_unsupported_reason(spec, cuda=False) or _too_big_for_cpu(spec, options)
        if early is not None:
            result = ProbeResult(
                status="Unsupported", mode="Synthetic", device="cpu", message=early, **base
            )
            return result, 0
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch

    from gpu_sizer.probe.memory import OutOfMemory, Recorder, as_out_of_memory

    base["torch_version"] = torch.__version__
    if options.device == "cuda" and not torch.cuda.is_available():
        built = torch.version.cuda or "no CUDA"
        probe_nvml = NvmlSampler(options.sampler_hz).start()
        probe_nvml.stop()
        return (
            ProbeResult(
                status="Failed",
                mode="Synthetic",
                device="cpu",
                message=f"--device cuda: torch {torch.__version__} (built with {built}) sees no "
                "CUDA device; check the GPU request and the NVIDIA container runtime",
                nvml=probe_nvml.info(),
                **base,
            ),
            1,
        )
    use_cuda = options.device == "cuda" or (options.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    kind = "cuda" if use_cuda else "cpu"
    gpu_count = torch.cuda.device_count() if use_cuda else 0

    def unsupported(reason: str, nvml: Any = None) -> tuple[ProbeResult, int]:
        return (
            ProbeResult(
                status="Unsupported",
                mode="Synthetic",
                device=kind,
                gpu_count=gpu_count,
                message=reason,
                nvml=nvml,
                **base,
            ),
            0,
        )

    reason = synthetic_unsupported_reason(spec, cuda=use_cuda)
    if reason is not None:
        return unsupported(reason)
    notes: list[str] = []
    if not use_cuda:
        too_big = _too_big_for_cpu(spec, options)
        if too_big is not None:
            return unsupported(too_big)
        notes.append("no GPU: peakRssBytes is this process's peak RSS on the CPU, not a GPU figure")

    if (
        spec.training is not None
        and spec.training.parallelism.strategy is not ParallelStrategy.none
    ):
        from gpu_sizer.probe.launch import measure_distributed

        world = spec.training.parallelism.gpus
        if use_cuda and gpu_count < world:
            return unsupported(
                f"the replica has {world} data-parallel ranks, one per GPU, but {gpu_count} "
                f"GPU(s) are visible; run on a node with {world} GPUs"
            )
        if not use_cuda:
            notes[-1] = (
                "no GPU: each rank ran on the CPU over gloo; peakCpuTensorBytes is a rank's peak "
                "of live CPU tensors (what the estimate's tensor components predict, without the "
                "runtime overhead), peakRssBytes its process's peak RSS; neither is a GPU figure"
            )
        result = measure_distributed(spec, kind, deadline, options.sampler_hz, base, notes)
        return result, 0

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        spec.model.dtype.value
    ]
    sampler = NvmlSampler(options.sampler_hz).start()
    recorder = Recorder(device, sampler, deadline)
    figures: Any = None
    status: ResultStatus = "Succeeded"
    oom: OutOfMemory | None = None
    message = None
    lift_cap = None
    # Imported before the memory cap is applied: importing loads torch.nn and friends, which
    # must not count against (or fail under) the workload's cap.
    from gpu_sizer.probe.inference import run_inference
    from gpu_sizer.probe.training import run_training

    if spec.generation is not None:
        from gpu_sizer.probe.generation import run_generation

    try:
        if options.memory_limit_bytes is not None:
            note, lift_cap = _apply_memory_limit(options.memory_limit_bytes, device, dtype)
            notes.append(note)
        if spec.generation is not None:
            figures = run_generation(spec, dtype, device, recorder)
        elif spec.inference is not None:
            start = engine_start(spec, options.gpu_class, device) if use_cuda else None
            figures = run_inference(spec, dtype, device, recorder, start)
        else:
            figures = run_training(spec, device, recorder)
        notes.extend(figures.notes)
    except OutOfMemory as exc:
        status, oom, message = "OutOfMemory", exc, exc.message
    except MemoryError as exc:  # Python's own allocation under the cap, outside a phase's body
        oom = as_out_of_memory(exc, recorder.current)
        assert oom is not None
        status, message = "OutOfMemory", oom.message
    except DeadlineExceeded as exc:
        status, message = "Timeout", str(exc)
    finally:
        if lift_cap is not None:
            lift_cap()  # writing the result needs memory too
        sampler.stop()
    peaks = recorder.peaks()
    result = ProbeResult(
        status=status,
        mode="Synthetic",
        device=kind,
        gpu_count=gpu_count,
        out_of_memory=oom is not None,
        oom_phase=oom.phase if oom else None,
        oom_requested_bytes=oom.requested if oom else None,
        message=message,
        notes=notes,
        nvml=sampler.info(),
        phases=recorder.phases,
        parameter_count=getattr(figures, "parameter_count", None),
        trainable_parameter_count=getattr(figures, "trainable_parameter_count", None),
        weights_bytes=getattr(figures, "weights_bytes", None),
        kv_cache_bytes=getattr(figures, "kv_cache_bytes", None),
        kv_cache_tokens=getattr(figures, "kv_cache_tokens", None),
        **peaks,
        **base,
    )
    return result, 0


def engine_start(spec: GPUWorkloadSpec, gpu_class: str | None, device: Any) -> Any:
    """How a pre-allocating engine starts on this GPU, as the estimate plans it for the class
    (``None`` for on-demand runtimes): the catalog class named by ``--gpu-class``, else one
    described by the device itself (``cudaMemGetInfo`` total as usable memory, the device's total
    as NVML's, its compute capability)."""
    import torch

    from gpu_sizer.budget.engines import models_pool
    from gpu_sizer.budget.estimate import engine_plans
    from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass
    from gpu_sizer.probe.inference import EngineStart

    inf = spec.inference
    if not models_pool(spec):
        return None
    assert inf is not None
    cls = next((c for c in DEFAULT_CATALOG if c.name == gpu_class), None)
    if cls is None:
        props = torch.cuda.get_device_properties(device)
        _, total = torch.cuda.mem_get_info(device)
        cls = GPUClass(
            name=gpu_class or "this-gpu",
            display_name=props.name,
            memory_bytes=int(props.total_memory),
            products=(props.name.replace(" ", "-"),),
            interconnect="unknown",
            usable_bytes=int(total),
            compute_capability=f"{props.major}.{props.minor}",
        )
    plan = engine_plans(spec, [cls], spec.placement.min_headroom_fraction)[0]
    return EngineStart(inf.engine, plan.fraction, plan.max_num_batched_tokens, plan.block_size)


def resident_bytes(spec: GPUWorkloadSpec) -> tuple[int, str]:
    """Bytes the synthetic run holds for its whole length, and what they are, in words.

    Taken from :func:`gpu_sizer.budget.estimate` (the most loaded GPU: rank 0's shard under
    tensor parallelism), so the figure the CPU fallback refuses with is the one ``status.estimate``
    shows. Inference: weights (with quantization metadata) and the KV cache. Training: weights,
    gradients, optimizer state and fp32 master weights, which follow the spec's method (LoRA: the
    frozen base plus the adapters and their gradients and state; a full fine-tune: every
    parameter's); training has no KV cache. Activations are left out: they come and go per step.
    """
    est = estimate(spec)
    per_gpu = est.per_gpu
    weights = per_gpu.weights_bytes + per_gpu.quantization_overhead_bytes
    if spec.generation is not None:
        # every component is built (on the CPU when offloaded), and a phase's activations (a
        # VAE decode, a denoiser step) can be larger than the weights: the larger of the two
        every = est.parameter_count * DTYPE_BYTES[spec.model.dtype]
        return max(every, est.per_gpu.total_bytes), "weights and the peak phase's activations"
    if spec.training is not None:
        state = per_gpu.gradient_bytes + per_gpu.optimizer_state_bytes + per_gpu.master_weight_bytes
        return weights + state, "weights, gradients and optimizer state"
    inf = spec.inference
    assert inf is not None
    # The CPU run holds maxNumSeqs x maxModelLen slots (16-token blocks), whatever the engine.
    slots = inf.max_num_seqs * -(-inf.max_model_len // 16) * 16
    # Say so: a pre-allocating engine's pool (status.estimate) is sized otherwise and is
    # usually far smaller than every sequence at full length.
    what = (
        f"weights and KV cache for maxNumSeqs x maxModelLen ({inf.max_num_seqs} x "
        f"{inf.max_model_len} tokens, all allocated by the CPU run)"
    )
    return weights + est.kv_cache_bytes_per_token * slots, what


def _apply_memory_limit(limit: int, device: Any, dtype: Any) -> tuple[str, Callable[[], None]]:
    """Cap what the workload may allocate beyond what the probe holds now (simulates a smaller
    device; the tests use it to drive the real out-of-memory path). Returns a note for the
    result and the function that lifts the cap again.

    CUDA: the caching allocator's per-process fraction (``set_per_process_memory_fraction``).
    CPU: the soft ``RLIMIT_AS`` (``setrlimit(2)``; the hard limit is kept, so the cap can be
    lifted to write the result). Before it is set, the runtime's thread pools are started with
    a small matmul and elementwise op in the workload's dtype: libgomp aborts the whole process
    (``Thread creation failed``) when it cannot map a thread's stack, whereas a tensor allocation
    over the cap fails with an exception that becomes an ``OutOfMemory`` result. oneDNN is
    switched off for the capped run (matmuls go to the BLAS path): its primitive creation
    crashes (SIGSEGV) or fails with a generic "could not create a primitive" when an mmap is
    refused. However small the cap, the outcome is a result.
    """
    import torch

    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = min(1.0, (torch.cuda.memory_reserved(device) + limit) / total)
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        return (
            f"memory limit: caching allocator capped at {fraction:.4f} of the device",
            lambda: torch.cuda.set_per_process_memory_fraction(1.0, device),
        )
    mkldnn = bool(torch.backends.mkldnn.enabled)
    torch.backends.mkldnn.set_flags(False)  # type: ignore[no-untyped-call]
    warm = torch.ones(256, 256, dtype=dtype)
    (warm @ warm).add_(1).sum()
    torch.ones(1 << 20).add_(1).sum()
    del warm
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    cap = vm + limit
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (min(cap, hard) if hard >= 0 else cap, hard))

    def lift() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        torch.backends.mkldnn.set_flags(mkldnn)  # type: ignore[no-untyped-call]

    return (
        f"memory limit: address space capped at {cap} bytes (RLIMIT_AS, {limit} beyond start; "
        "memory already mapped then counts as held); oneDNN off for the capped run",
        lift,
    )


def failed_result(message: str, base: dict[str, Any] | None = None) -> ProbeResult:
    """A ``Failed`` result for when the probe itself could not run."""
    return ProbeResult(
        status="Failed",
        mode="Synthetic",
        device="cpu",
        message=message[:2000],
        started_at=now_rfc3339(),
        completed_at=now_rfc3339(),
        **(base or {}),
    )


def write_outputs(result: ProbeResult, termination_log: str) -> None:
    """Write the compact result to ``termination_log`` (a note when it cannot), then the full
    document to stdout, one line."""
    message = compact_message(result)
    try:
        with open(termination_log, "w", encoding="utf-8") as f:
            f.write(message)
    except OSError as exc:
        result.notes.append(
            f"termination log {termination_log} not writable ({exc.strerror}); "
            "result on stdout only"
        )
    sys.stdout.write(
        json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True)) + "\n"
    )
    sys.stdout.flush()


def main_from_args(spec_source: str | None, options: Options) -> int:
    """Read the spec, measure, write the outputs; the process exit status.

    Every path past argument parsing writes one result document (stdout and the termination
    log): an unreadable or invalid spec is ``Failed`` with exit 2, the probe's own error
    (torch that cannot be imported, a bug) ``Failed`` with exit 1, SIGTERM at any point a
    ``Timeout``, Ctrl-C (SIGINT) ``Failed`` with exit 130.
    """
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s gpu-sizer probe: %(message)s"
    )
    base: dict[str, Any] = {"gpu_class": options.gpu_class}
    with sigterm_sets_terminated():
        try:
            return _read_and_measure(spec_source, options, base)
        except KeyboardInterrupt:
            write_outputs(
                failed_result("interrupted by SIGINT (Ctrl-C) before a result", base),
                options.termination_log,
            )
            return 130


def _read_and_measure(spec_source: str | None, options: Options, base: dict[str, Any]) -> int:
    try:
        spec = read_spec(spec_source)
    except InvalidWorkload as exc:
        write_outputs(failed_result(f"invalid spec: {exc}", base), options.termination_log)
        return 2
    except Exception as exc:  # stdin closed, a bug: still report it
        return _report_own_failure(exc, None, options, base)
    base["spec_hash"] = spec_hash(spec)
    try:
        result, code = measure(spec, options)
    except Exception as exc:  # the probe's own failure: still report it
        return _report_own_failure(exc, spec, options, base)
    write_outputs(result, options.termination_log)
    return code


def _report_own_failure(
    exc: Exception, spec: GPUWorkloadSpec | None, options: Options, base: dict[str, Any]
) -> int:
    traceback.print_exc(file=sys.stderr)
    result = failed_result(f"probe failed: {type(exc).__name__}: {exc}", base)
    if spec is not None and spec.measurement.mode is MeasurementMode.Command:
        result.mode = "Command"
    write_outputs(result, options.termination_log)
    return 1
