"""The per-GPU budget of one diffusion pipeline call, phase by phase. Pure.

A ``diffusers`` pipeline call runs three phases, each with its own resident set:

- ``TextEncode``: every text encoder in turn (and, for image-to-video and image-to-image, the
  image encoder and a VAE encode of the conditioning input);
- ``Denoise``: the denoiser once or twice per step (twice when classifier-free guidance runs
  sequentially); Wan 2.2's two experts take turns;
- ``VaeDecode``: the VAE decoder on the final latents, then the output's post-processing.

What is resident in a phase depends on the offload mode of each component (``diffusers``
0.42.1, ``pipelines/pipeline_utils.py``): ``None`` keeps every component on the GPU for the
whole call (``pipe.to("cuda")``); ``Model`` (``enable_model_cpu_offload``) keeps only the model
that runs (the chain of ``model_cpu_offload_seq`` offloads the previous model when the next one's
``forward`` starts); ``Sequential`` (``enable_sequential_cpu_offload``) and ``Group``
(``enable_group_offload``) stream the running model's weights in (``parts.sequential_resident``
and ``parts.group_resident``); a component on the CPU (``device: Cpu``) holds nothing on the GPU.
The phase's activations are the running model's (``denoise``, ``decode``,
``text_encoders.encoder_forward_bytes``). The peak phase is the one whose total is largest; its
figures are ``status.estimate.perGpu`` and its name ``status.estimate.peakPhase``.

Multi-GPU (``spec.generation.parallelism``): sequence parallelism divides the denoiser's tokens,
CFG parallelism gives each GPU one branch of a batched guidance pass, ``denoiserFsdp`` shards the
denoiser's weights over every GPU (plus the current and the prefetched block unsharded); the
text encoders and the VAE run whole on every GPU. Each parallel dimension adds an NCCL
communicator to the runtime overhead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_sizer.api import (
    DTYPE_BYTES,
    AttentionBackend,
    ComponentDevice,
    Dtype,
    EstimateStatus,
    GPUWorkloadSpec,
    GroupOffloadType,
    Model,
    PeakPhase,
    PerGpuBreakdown,
    PhaseEstimate,
    PipelineComponent,
    PipelineOffload,
)
from gpu_sizer.api.components import COMPONENT_CLASSES, Role, resolved_config
from gpu_sizer.budget.diffusion.decode import (
    DecodeShape,
    latent_geometry,
    vae_decode_bytes,
    vae_encode_bytes,
)
from gpu_sizer.budget.diffusion.denoise import DenoiseShape, denoiser_forward_bytes
from gpu_sizer.budget.diffusion.denoisers import UnsupportedConfig
from gpu_sizer.budget.diffusion.parts import (
    Part,
    expanded,
    group_resident,
    layerwise_cast_elements,
    parameter_count,
    sequential_resident,
    tensor_bytes,
)
from gpu_sizer.budget.diffusion.pipelines import PIPELINES, Encodes, Guidance
from gpu_sizer.budget.diffusion.registry import KINDS
from gpu_sizer.budget.diffusion.text_encoders import encoder_forward_bytes
from gpu_sizer.budget.runtime import allocator_reserve_bytes, base_overhead_bytes
from gpu_sizer.budget.weights import flat_weight_bytes

__all__ = ["Missing", "generation_estimate", "pipeline_parameter_count"]

TEXT_ENCODE, DENOISE, VAE_DECODE = "TextEncode", "Denoise", "VaeDecode"
_FLOAT8 = (Dtype.float8_e4m3fn, Dtype.float8_e5m2)


@dataclass(frozen=True)
class Missing:
    """A part of the workload the estimate cannot count, with the fields that would let it."""

    component: str
    fields: list[str]
    message: str
    fix: str


@dataclass
class _Component:
    """One pipeline component, resolved: its tree when gpu-sizer knows the class."""

    index: int
    spec: PipelineComponent
    role: Role | None
    config: dict[str, Any] | None
    part: Part | None
    params: int | None
    weights: int
    quant: int
    storage_bytes: int
    act_bytes: int
    offload: PipelineOffload
    problem: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def on_gpu(self) -> bool:
        return self.spec.device is ComponentDevice.Gpu


@dataclass
class _Phase:
    name: str
    weights: int = 0
    quant: int = 0
    activations: int = 0
    running: list[str] = field(default_factory=list)


def _role(c: PipelineComponent) -> Role | None:
    known = COMPONENT_CLASSES.get(c.class_name)
    if known is not None:
        return known.role
    if c.name in ("unet", "transformer", "transformer_2", "prior"):
        return Role.Denoiser
    if c.name.startswith("vae"):
        return Role.Vae
    if c.name.startswith("text_encoder"):
        return Role.TextEncoder
    if c.name.startswith("image_encoder"):
        return Role.ImageEncoder
    return None


def _resolve(spec: GPUWorkloadSpec, index: int, c: PipelineComponent) -> _Component:
    gen = spec.generation
    assert gen is not None
    dtype = c.dtype or spec.model.dtype
    storage = DTYPE_BYTES[dtype]
    act = max(2, storage) if dtype in _FLOAT8 else storage
    offload = c.offload or gen.offload
    role = _role(c)
    base = _Component(index, c, role, None, None, c.parameter_count, 0, 0, storage, act, offload)
    kind = KINDS.get(c.class_name)
    if kind is not None:
        config = resolved_config(c.class_name, c.config)
        try:
            part = kind.build(config)
        except (UnsupportedConfig, KeyError, ValueError, TypeError, ZeroDivisionError) as exc:
            base.problem = f"config not sized: {exc}"
            part = None
        if part is not None:
            base.config, base.part = config, part
            base.params = parameter_count(part)
    if base.params is not None:
        if c.quantization is not None:
            model = Model(parameter_count=base.params, dtype=dtype, quantization=c.quantization)
            base.weights, base.quant = flat_weight_bytes(base.params, model)
        elif base.part is not None and dtype in _FLOAT8:
            # enable_layerwise_casting: the castable layers in float8, the rest in bfloat16
            assert kind is not None
            cast = layerwise_cast_elements(base.part, kind.casting_skips)
            compute = tensor_bytes(base.part, DTYPE_BYTES[Dtype.bfloat16], kind.keep_fp32)
            base.weights = compute - cast * (DTYPE_BYTES[Dtype.bfloat16] - storage)
        elif base.part is not None:
            fp32 = kind.keep_fp32 if kind is not None else ()
            base.weights = tensor_bytes(base.part, storage, fp32)
        else:
            base.weights = base.params * storage
    return base


def pipeline_parameter_count(spec: GPUWorkloadSpec) -> int:
    """Parameters of every component gpu-sizer can count (0 for the others)."""
    assert spec.model.pipeline is not None and spec.generation is not None
    return sum(
        _resolve(spec, i, c).params or 0 for i, c in enumerate(spec.model.pipeline.components)
    )


def _resident(c: _Component, running: bool, spec: GPUWorkloadSpec, fsdp: int) -> tuple[int, int]:
    """(weight, quantization-metadata) bytes of ``c`` on the GPU while it runs (``running``)
    or while another model runs."""
    if not c.on_gpu:
        return 0, 0
    if fsdp > 1 and c.role is Role.Denoiser and c.part is not None:
        blocks = max(
            (parameter_count(b) for s in c.part.children if s.sequence for b in expanded(s)),
            default=0,
        )
        held = 2 * blocks * c.storage_bytes if running else 0
        return -(-c.weights // fsdp) + held, -(-c.quant // fsdp)
    mode = c.offload
    if mode is PipelineOffload.None_ or (
        running and (mode is PipelineOffload.Model or c.part is None)
    ):
        return c.weights, c.quant
    if not running:
        return 0, 0
    assert c.part is not None
    if mode is PipelineOffload.Sequential:
        return sequential_resident(c.part) * c.storage_bytes, 0
    assert spec.generation is not None
    g = c.spec.group_offload or spec.generation.group_offload
    held = group_resident(
        c.part,
        leaf_level=g.offload_type is GroupOffloadType.LeafLevel,
        blocks_per_group=g.num_blocks_per_group,
        use_stream=g.use_stream,
        block_modules=KINDS[c.spec.class_name].block_modules,
    )
    return held * c.storage_bytes, 0


def generation_estimate(spec: GPUWorkloadSpec) -> tuple[EstimateStatus, list[Missing]]:
    """Per-GPU budget of ``spec`` (``spec.generation`` with ``spec.model.pipeline``), and the
    parts it could not count. Bytes; never raises for a spec that passed validation."""
    gen, pipeline = spec.generation, spec.model.pipeline
    assert gen is not None and pipeline is not None
    comps = [_resolve(spec, i, c) for i, c in enumerate(pipeline.components)]
    missing: list[Missing] = []
    notes: list[str] = []
    kind = PIPELINES.get(pipeline.class_name)
    where = "spec.model.pipeline"
    if kind is None:
        missing.append(
            Missing(
                "activationBytes",
                [f"{where}.class"],
                f"pipeline class {pipeline.class_name} is not one gpu-sizer models (how it batches "
                "guidance, its text lengths, what it encodes)",
                "supported pipeline classes: " + ", ".join(sorted(PIPELINES)),
            )
        )
    elif gen.task not in kind.tasks:
        notes.append(
            f"{pipeline.class_name} runs {', '.join(t.value for t in kind.tasks)}, not "
            f"{gen.task.value}: sized as the pipeline runs"
        )
    for c in comps:
        path = f"{where}.components[{c.index}]"
        if c.part is None:
            what = "weights and activations" if c.params is None else "activations"
            reason = c.problem or f"class {c.spec.class_name} is not one gpu-sizer sizes"
            missing.append(
                Missing(
                    "weightsBytes" if c.params is None else "activationBytes",
                    [f"{path}.class", f"{path}.config"]
                    + ([] if c.params else [f"{path}.parameterCount"]),
                    f"component {c.name}: {what} not counted ({reason})",
                    "use a supported class and its config.json (gpu-sizer import-diffusers): "
                    + ", ".join(sorted(COMPONENT_CLASSES)),
                )
            )
    denoisers = [c for c in comps if c.role is Role.Denoiser]
    vaes = [c for c in comps if c.role is Role.Vae]
    encoders = [c for c in comps if c.role is Role.TextEncoder]
    images = [c for c in comps if c.role is Role.ImageEncoder]
    if not denoisers:
        missing.append(
            Missing(
                "activationBytes",
                [f"{where}.components"],
                "no denoiser component",
                "add the pipeline's unet or transformer",
            )
        )
    vae = next((c for c in vaes if c.part is not None), None)
    if vae is None:
        missing.append(
            Missing(
                "activationBytes",
                [f"{where}.components"],
                "no sized VAE: the latent grid and the decode are unknown",
                "add the pipeline's vae with its config.json",
            )
        )
    par = gen.parallelism
    world = par.gpu_count
    fsdp = world if par.denoiser_fsdp else 1
    cfg = gen.classifier_free_guidance
    guidance = kind.guidance if kind is not None else Guidance.Batched
    phases: list[_Phase] = []

    def weights_now(running: set[str]) -> tuple[int, int]:
        total = quant = 0
        for c in comps:
            w, q = _resident(c, c.name in running, spec, fsdp)
            total, quant = total + w, quant + q
        return total, quant

    geometry = (
        latent_geometry(vae.spec.class_name, vae.config) if vae is not None and vae.config else None
    )

    # --- TextEncode -------------------------------------------------------------------------
    te = _Phase(TEXT_ENCODE)
    steps: list[tuple[str, int]] = []
    for c in encoders:
        if not c.on_gpu or c.part is None or c.config is None:
            continue
        tokens = 77
        if kind is not None:
            tokens = kind.text_tokens.get(c.name, 77)
            if (
                gen.max_sequence_length is not None
                and kind.sequence_length == tokens
                and tokens != 77
            ):
                tokens = gen.max_sequence_length
            tokens += kind.template_tokens.get(c.name, 0)
        steps.append(
            (
                c.name,
                encoder_forward_bytes(
                    c.spec.class_name, c.config, gen.batch_size, tokens, c.act_bytes
                ),
            )
        )
    for c in images:
        if c.on_gpu and c.config is not None and c.spec.class_name == "CLIPVisionModel":
            tokens = (c.config["image_size"] // c.config["patch_size"]) ** 2 + 1
            steps.append(
                (
                    c.name,
                    encoder_forward_bytes(
                        "CLIPVisionModel", c.config, gen.batch_size, tokens, c.act_bytes
                    ),
                )
            )
    if (
        kind is not None
        and kind.encodes is not Encodes.Nothing
        and vae is not None
        and geometry
        and vae.config
    ):
        s, t, _ = geometry
        frames = 1 if kind.encodes is Encodes.Image else (gen.num_frames - 1) // t + 1
        shape = DecodeShape(
            gen.batch_size,
            frames,
            gen.height // s,
            gen.width // s,
            vae.act_bytes,
            gen.vae_tiling,
            gen.vae_slicing,
        )
        steps.append((vae.name, vae_encode_bytes(vae.spec.class_name, vae.config, shape)))
    for name, act in steps:
        w, q = weights_now({name})
        if w + act > te.weights + te.activations:
            te.weights, te.quant, te.activations, te.running = w, q, act, [name]
    if not steps:
        te.weights, _ = weights_now(set())
    phases.append(te)

    # --- Denoise ----------------------------------------------------------------------------
    dn = _Phase(DENOISE)
    if geometry is not None:
        s, t, latent_channels = geometry
        frames = (gen.num_frames - 1) // t + 1 if gen.task.video else 1
        lh, lw = gen.height // s, gen.width // s
        text = kind.denoiser_tokens if kind is not None else 77
        if (
            gen.max_sequence_length is not None
            and kind is not None
            and kind.sequence_length is not None
        ):
            text = text - kind.sequence_length + gen.max_sequence_length
        batch = gen.batch_size
        if cfg and guidance is Guidance.Batched and not par.cfg_parallel:
            batch *= 2
        for c in denoisers:
            if c.part is None or c.config is None:
                continue
            dshape = DenoiseShape(
                batch,
                frames,
                lh,
                lw,
                text,
                c.act_bytes,
                materialised=gen.attention_backend is AttentionBackend.math,
                sequence_split=par.ulysses_degree * par.ring_degree,
                ulysses=par.ulysses_degree,
            )
            try:
                act = denoiser_forward_bytes(c.spec.class_name, c.config, dshape)
            except (KeyError, ValueError, ZeroDivisionError) as exc:
                missing.append(
                    Missing(
                        "activationBytes",
                        [f"{where}.components[{c.index}].config"],
                        f"denoiser {c.name}: {exc}",
                        "check its config",
                    )
                )
                continue
            latents = 6 * batch * latent_channels * frames * lh * lw * 4
            w, q = weights_now({c.name})
            if w + act + latents > dn.weights + dn.activations:
                dn.weights, dn.quant, dn.activations, dn.running = w, q, act + latents, [c.name]
    if not dn.running:
        dn.weights, _ = weights_now({c.name for c in denoisers})
    phases.append(dn)

    # --- VaeDecode --------------------------------------------------------------------------
    vd = _Phase(VAE_DECODE)
    if vae is not None and geometry is not None and vae.config is not None:
        s, t, _ = geometry
        frames = (gen.num_frames - 1) // t + 1 if gen.task.video else 1
        act_bytes = vae.act_bytes
        upcast = (
            kind is not None
            and kind.upcast_vae
            and (vae.spec.dtype or spec.model.dtype) is Dtype.float16
            and bool(vae.spec.config.get("forceUpcast", True))
        )
        if upcast:
            act_bytes = 4
        shape = DecodeShape(
            gen.batch_size,
            frames,
            gen.height // s,
            gen.width // s,
            act_bytes,
            gen.vae_tiling,
            gen.vae_slicing,
        )
        act = vae_decode_bytes(vae.spec.class_name, vae.config, shape)
        out_frames = gen.num_frames if gen.task.video else 1
        act += 2 * gen.batch_size * 3 * out_frames * gen.height * gen.width * act_bytes
        w, q = weights_now({vae.name})
        if upcast and vae.on_gpu and vae.offload in (PipelineOffload.None_, PipelineOffload.Model):
            w += vae.weights
            notes.append(
                f"{pipeline.class_name} decodes in float32: the float16 VAE has forceUpcast, so "
                "diffusers upcasts it for the decode"
            )
        vd.weights, vd.quant, vd.activations, vd.running = w, q, act, [vae.name]
    else:
        vd.weights, _ = weights_now(set())
    phases.append(vd)

    groups = sum(1 for d in (par.ulysses_degree, par.ring_degree) if d > 1) + (
        1 if par.cfg_parallel else 0
    )
    groups += 1 if par.denoiser_fsdp and world > 1 else 0

    def total(p: _Phase) -> int:
        return (
            p.weights
            + p.quant
            + p.activations
            + base_overhead_bytes(groups)
            + allocator_reserve_bytes(p.activations)
        )

    peak = max(phases, key=total)
    runtime = base_overhead_bytes(groups) + allocator_reserve_bytes(peak.activations)
    breakdown = PerGpuBreakdown(
        weights_bytes=peak.weights,
        quantization_overhead_bytes=peak.quant,
        activation_bytes=peak.activations,
        runtime_overhead_bytes=runtime,
        total_bytes=peak.weights + peak.quant + peak.activations + runtime,
    )
    notes += _offload_notes(comps)
    params = sum(c.params or 0 for c in comps)
    status = EstimateStatus(
        parameter_count=params,
        gpu_count=world,
        kv_cache_bytes_per_token=0,
        per_gpu=breakdown,
        peak_phase=PeakPhase(peak.name),
        phases=[
            PhaseEstimate(
                name=PeakPhase(p.name),
                total_bytes=total(p),
                weights_bytes=p.weights + p.quant,
                activation_bytes=p.activations,
                running=", ".join(p.running),
            )
            for p in phases
        ],
        notes=list(dict.fromkeys(notes)),
    )
    return status, missing


def _offload_notes(comps: list[_Component]) -> list[str]:
    """One line per offload mode in use, naming its components."""
    out: list[str] = []
    cpu = [c.name for c in comps if not c.on_gpu]
    if cpu:
        out.append(f"on the CPU, never on the GPU: {', '.join(cpu)}")
    for mode in (PipelineOffload.Model, PipelineOffload.Sequential, PipelineOffload.Group):
        names = [c.name for c in comps if c.on_gpu and c.offload is mode]
        if names:
            out.append(
                f"offload {mode.value}: {', '.join(names)} on the GPU only while running; "
                "host memory holds their weights"
            )
    return out
