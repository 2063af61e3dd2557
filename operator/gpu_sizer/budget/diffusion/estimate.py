"""The per-GPU budget of one diffusion pipeline call, phase by phase. Pure.

A ``diffusers`` pipeline call runs three phases, each with its own resident set:

- ``TextEncode``: every text encoder in turn, for the prompt and the negative prompt (and, for
  image-to-video and image-to-image, the image encoder and a VAE encode of the conditioning
  input);
- ``Denoise``: the denoiser once or twice per step (twice when classifier-free guidance runs
  sequentially); Wan 2.2's two experts take turns, each a ``Denoise`` entry of its own;
- ``VaeDecode``: the VAE decoder on the final latents, the output's post-processing, and SD's
  safety checker on the decoded images.

The forwards of a call and their order come from :mod:`~gpu_sizer.budget.diffusion.calls`;
which weights are on the GPU during each, under each component's offload mode, from
:mod:`~gpu_sizer.budget.diffusion.residency` (accelerate's hook chain for ``Model``: a model
stays until the next model of ``model_cpu_offload_seq`` runs). A step's activations are the
running model's (``denoise``, ``decode``, ``text_encoders.encoder_forward_bytes``). Each phase
reports its largest step; the peak phase is the one whose total is largest, its figures
``status.estimate.perGpu`` and its name ``status.estimate.peakPhase``. Components are built
once per config (:mod:`~gpu_sizer.budget.diffusion.resolved`).

Multi-GPU (``spec.generation.parallelism``): sequence parallelism divides the denoiser's tokens,
CFG parallelism gives each GPU one branch of a batched guidance pass, ``denoiserFsdp`` shards the
denoiser's weights over every GPU (plus the current and the prefetched block unsharded); the
text encoders and the VAE run whole on every GPU. Each parallel dimension adds an NCCL
communicator to the runtime overhead.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from gpu_sizer.api import (
    DTYPE_BYTES,
    AttentionBackend,
    ComponentDevice,
    Dtype,
    EstimateStatus,
    Generation,
    GPUWorkloadSpec,
    GroupOffloadType,
    Model,
    PeakPhase,
    PerGpuBreakdown,
    PhaseEstimate,
    PipelineComponent,
    PipelineOffload,
)
from gpu_sizer.api.components import COMPONENT_CLASSES, Role
from gpu_sizer.api.spec.output_size import output_size
from gpu_sizer.budget.diffusion.bounds import wan_reference_margin_bytes
from gpu_sizer.budget.diffusion.calls import DENOISE, TEXT_ENCODE, VAE_DECODE, Step, call_steps
from gpu_sizer.budget.diffusion.decode import (
    DecodeShape,
    latent_geometry,
    vae_decode_bytes,
    vae_encode_bytes,
)
from gpu_sizer.budget.diffusion.denoise import (
    DenoiseShape,
    denoiser_forward_bytes,
    denoiser_tokens,
)
from gpu_sizer.budget.diffusion.pipelines import PIPELINES, Guidance, PipelineKind
from gpu_sizer.budget.diffusion.residency import resident_sets
from gpu_sizer.budget.diffusion.resolved import ComponentModel, component_model, config_key
from gpu_sizer.budget.diffusion.text_encoders import IMAGE_ENCODERS, encoder_forward_bytes
from gpu_sizer.budget.runtime import allocator_reserve_bytes, base_overhead_bytes
from gpu_sizer.budget.weights import flat_weight_bytes

__all__ = [
    "ESTIMATES_SIZE",
    "Missing",
    "estimates_clear",
    "generation_estimate",
    "pipeline_parameter_count",
]

_FLOAT8 = (Dtype.float8_e4m3fn, Dtype.float8_e5m2)
_STREAMED = (PipelineOffload.Sequential, PipelineOffload.Group)
_OFFLOADED = (PipelineOffload.Model, PipelineOffload.Sequential, PipelineOffload.Group)
_GIB: Final = 1 << 30


@dataclass(frozen=True)
class Missing:
    """A part of the workload the estimate cannot count, with the fields that would let it."""

    component: str
    fields: list[str]
    message: str
    fix: str


@dataclass
class _Component:
    """One pipeline component, resolved: its built model when gpu-sizer knows the class."""

    index: int
    spec: PipelineComponent
    role: Role | None
    model: ComponentModel | None
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

    @property
    def config(self) -> dict[str, Any] | None:
        return self.model.config if self.model is not None else None


@dataclass
class _Phase:
    name: str
    weights: int = 0
    quant: int = 0
    activations: int = 0
    running: list[str] = field(default_factory=list)
    resident: list[str] = field(default_factory=list)
    #: the peak step's resident set (``resident`` in component order is derived from it)
    holding: frozenset[str] = frozenset()
    #: model-offloaded components left on the GPU by the hook chain while another runs
    kept: list[str] = field(default_factory=list)


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
    if c.name == "safety_checker":
        return Role.SafetyChecker
    return None


def _resolve(spec: GPUWorkloadSpec, index: int, c: PipelineComponent) -> _Component:
    gen = spec.generation
    assert gen is not None
    dtype = c.dtype or spec.model.dtype
    storage = DTYPE_BYTES[dtype]
    act = max(2, storage) if dtype in _FLOAT8 else storage
    offload = c.offload or gen.offload
    base = _Component(index, c, _role(c), None, c.parameter_count, 0, 0, storage, act, offload)
    if c.class_name in COMPONENT_CLASSES:
        built = component_model(c.class_name, c.resolved_config())
        if isinstance(built, str):
            base.problem = built
        else:
            base.model, base.params = built, built.params
    if base.params is None:
        return base
    if c.quantization is not None:
        model = Model(parameter_count=base.params, dtype=dtype, quantization=c.quantization)
        base.weights, base.quant = flat_weight_bytes(base.params, model)
    elif base.model is not None and dtype in _FLOAT8:
        # enable_layerwise_casting: the castable layers in float8, the rest in bfloat16
        base.weights = base.model.layerwise_cast_bytes(storage)
    elif base.model is not None:
        base.weights = base.model.weight_bytes(storage, dtype is Dtype.float16)
    else:
        base.weights = base.params * storage
    return base


def pipeline_parameter_count(spec: GPUWorkloadSpec) -> int:
    """Parameters of every component gpu-sizer can count (0 for the others)."""
    assert spec.model.pipeline is not None and spec.generation is not None
    return sum(
        _resolve(spec, i, c).params or 0 for i, c in enumerate(spec.model.pipeline.components)
    )


def _held(c: _Component, running: bool, spec: GPUWorkloadSpec, fsdp: int) -> tuple[int, int]:
    """(weight, quantization-metadata) bytes of resident component ``c``: whole, or under
    ``Sequential``/``Group`` offload only the modules or groups its hooks hold while it runs;
    a denoiser sharded by FSDP holds its shard plus the current and the prefetched block."""
    if fsdp > 1 and c.role is Role.Denoiser and c.model is not None:
        held = 2 * c.model.largest_block() * c.storage_bytes if running else 0
        return -(-c.weights // fsdp) + held, -(-c.quant // fsdp)
    if c.offload not in _STREAMED or c.model is None or not running:
        return c.weights, c.quant
    if c.offload is PipelineOffload.Sequential:
        return c.model.sequential_elements() * c.storage_bytes, 0
    assert spec.generation is not None
    g = c.spec.group_offload or spec.generation.group_offload
    held = c.model.group_elements(
        g.offload_type is GroupOffloadType.LeafLevel, g.num_blocks_per_group, g.use_stream
    )
    return held * c.storage_bytes, 0


def _text_tokens(kind: PipelineKind | None, name: str, override: int | None) -> int:
    if kind is None:
        return 77
    tokens = kind.text_tokens.get(name, 77)
    if override is not None and kind.sequence_length == tokens and tokens != 77:
        tokens = override
    return tokens + kind.template_tokens.get(name, 0)


def _steps_and_residents(
    pipeline_class: str,
    present: tuple[tuple[str, str], ...],
    modes: tuple[tuple[str, PipelineOffload], ...],
    names: tuple[str, ...],
    guidance: bool,
    image_conditioned: bool,
    options: Mapping[str, Any],
) -> tuple[list[Step], list[frozenset[str]]]:
    kind = PIPELINES.get(pipeline_class)
    steps = call_steps(
        pipeline_class,
        kind,
        dict(present),
        guidance=guidance,
        image_conditioned=image_conditioned,
        options=options,
    )
    sequence = kind.offload_sequence if kind is not None else names
    excluded = kind.exclude_from_offload if kind is not None else ()
    return steps, resident_sets(steps, dict(modes), sequence, excluded)


_PLANS: Final[dict[tuple[Any, ...], tuple[list[Step], list[frozenset[str]]]]] = {}
#: Distinct (pipeline, components, offload modes, options) plans kept.
_PLANS_SIZE: Final = 512


def _plan(
    pipeline_class: str,
    present: tuple[tuple[str, str], ...],
    modes: tuple[tuple[str, PipelineOffload], ...],
    names: tuple[str, ...],
    guidance: bool,
    image_conditioned: bool,
    options: Mapping[str, Any],
) -> tuple[list[Step], list[frozenset[str]]]:
    """The call's steps and what is resident during each, memoised: they depend on the
    pipeline's structure (class, components, offload modes, options), not on sizes. The
    callers only read the lists."""
    args = (pipeline_class, present, modes, names, guidance, image_conditioned)
    key = (*args, tuple(options.items()))
    try:
        hit = _PLANS.get(key)
    except TypeError:  # an unhashable option value: not memoised
        return _steps_and_residents(*args, options)
    if hit is None:
        if len(_PLANS) >= _PLANS_SIZE:
            _PLANS.clear()
        hit = _PLANS[key] = _steps_and_residents(*args, options)
    return hit


def _fingerprint(value: Any) -> Any:
    """A hashable image of ``value`` (a model of the spec, its fields, its lists and maps): two
    values with the same fingerprint are equal for the estimate. A component's config is
    replaced by its resolved config (what the estimate reads), so two spellings of the same
    config share one figure. Exact-type tests first: this runs on every estimate."""
    t = type(value)
    if t in _PLAIN or isinstance(value, Enum):
        return value
    if t is list or t is tuple:
        return tuple(v if type(v) in _PLAIN else _fingerprint(v) for v in value)
    if t is PipelineComponent:
        fields = tuple(
            v if type(v) in _PLAIN else _fingerprint(v)
            for k, v in value.__dict__.items()
            if k != "config"
        )
        if value.class_name in COMPONENT_CLASSES:
            return (fields, config_key(value.class_name, value.resolved_config()))
        return (fields, _fingerprint(value.config))
    if isinstance(value, BaseModel):
        return (
            t,
            tuple(v if type(v) in _PLAIN else _fingerprint(v) for v in value.__dict__.values()),
        )
    if isinstance(value, Mapping):
        return (
            tuple(value),
            tuple(v if type(v) in _PLAIN else _fingerprint(v) for v in value.values()),
        )
    return value


_PLAIN: Final = frozenset({int, float, str, bool, type(None)})
_ESTIMATES: Final[dict[Any, tuple[EstimateStatus, tuple[Missing, ...]]]] = {}
#: Distinct estimates kept (a webhook sees the same few workloads again and again).
ESTIMATES_SIZE: Final = 1024


def estimates_clear() -> None:
    """Forget the memoised estimates and call plans (the component models stay: see
    :func:`gpu_sizer.budget.diffusion.resolved.cache_clear`)."""
    _ESTIMATES.clear()
    _PLANS.clear()


def generation_estimate(spec: GPUWorkloadSpec) -> tuple[EstimateStatus, list[Missing]]:
    """Per-GPU budget of ``spec`` (``spec.generation`` with ``spec.model.pipeline``), and the
    parts it could not count. Bytes; never raises for a spec that passed validation.

    Memoised by the fingerprint of what it reads (``spec.model.dtype``, the pipeline with each
    component's resolved config, ``spec.generation``); each call gets its own copy of the
    status (its lists are shared: read them, never change them)."""
    assert spec.generation is not None and spec.model.pipeline is not None
    try:
        key = _fingerprint((spec.model.dtype, spec.model.pipeline, spec.generation))
        hit = _ESTIMATES.get(key)
    except TypeError:  # an unhashable value somewhere (a config value of an odd type)
        key = hit = None
    if hit is None:
        status, missing = _generation_estimate(spec)
        if key is not None:
            if len(_ESTIMATES) >= ESTIMATES_SIZE:
                _ESTIMATES.clear()
            _ESTIMATES[key] = (status, tuple(missing))
        return status.model_copy(), missing
    return hit[0].model_copy(), list(hit[1])


#: Component names that carry weights in the modelled pipelines' ``__init__`` (the rest are
#: tokenizers, schedulers and processors).
_WEIGHTED_NAMES: Final = frozenset(
    {
        "unet",
        "transformer",
        "transformer_2",
        "vae",
        "text_encoder",
        "text_encoder_2",
        "text_encoder_3",
        "image_encoder",
        "safety_checker",
    }
)


def _unsized_fix(c: PipelineComponent) -> str:
    """What to change for a component gpu-sizer cannot size: for a known class, values it
    sizes (the class is right); otherwise the closest supported class name, then the list."""
    if c.known:
        return (
            f"{c.class_name} is sized, but not with the value named: use the checkpoint's "
            "own config.json (gpu-sizer import-diffusers writes it)"
        )
    close = difflib.get_close_matches(c.class_name, COMPONENT_CLASSES, n=1, cutoff=0.8)
    hint = f"did you mean {close[0]}? " if close else ""
    return (
        f"{hint}use a supported class and its config.json (gpu-sizer import-diffusers): "
        + ", ".join(sorted(COMPONENT_CLASSES))
    )


#: Denoisers whose ``_cp_plan`` splits ``encoder_hidden_states`` too (diffusers 0.42.1), and
#: whether the pipeline pads the text to a fixed length (Flux and LTX-Video pad to
#: ``max_sequence_length``; Qwen-Image's text is as long as the longest prompt).
_TEXT_SPLIT: Final = {
    "FluxTransformer2DModel": True,
    "LTXVideoTransformer3DModel": True,
    "QwenImageTransformer2DModel": False,
}


def _unsplittable(
    denoisers: list[_Component],
    kind: PipelineKind | None,
    gen: Generation,
    frames: int,
    lh: int,
    lw: int,
    split: int,
    notes: list[str],
) -> list[Missing]:
    """The sequences a ``split``-way Ulysses x ring degree cannot shard: ``EquipartitionSharder
    .shard`` (diffusers 0.42.1 ``hooks/context_parallel.py``) asserts that each tensor the
    ``_cp_plan`` splits is divisible by the mesh size, which the spec's ``ulysses_anything`` /
    ``ring_anything`` would lift but does not set. Image tokens at this size, and the padded text
    where the plan splits it; a prompt-long text (Qwen-Image) cannot be known here."""
    out: list[Missing] = []
    text = kind.denoiser_tokens if kind is not None else 0
    if gen.max_sequence_length is not None and kind is not None and kind.sequence_length:
        text = text - kind.sequence_length + gen.max_sequence_length
    for c in denoisers:
        if c.config is None:
            continue
        cls = c.spec.class_name
        shape = DenoiseShape(1, frames, lh, lw, text, c.act_bytes)
        try:
            tokens = denoiser_tokens(cls, c.config, shape)
        except (KeyError, ValueError):
            continue
        counts = [(f"{tokens} image tokens", tokens)]
        padded = _TEXT_SPLIT.get(cls)
        if padded:
            counts.append((f"{text} text tokens", text))
        bad = [what for what, n in counts if n % split]
        if bad:
            out.append(
                Missing(
                    "activationBytes",
                    [
                        "spec.generation.parallelism.ulyssesDegree",
                        "spec.generation.parallelism.ringDegree",
                    ],
                    f"component {c.name}: {' and '.join(bad)} are not divisible by the {split} "
                    "GPUs of the sequence split (EquipartitionSharder.shard asserts it); the "
                    "split run is not sized",
                    "use a ulyssesDegree x ringDegree that divides the tokens (a power of 2 at "
                    "sides that are multiples of 64)",
                )
            )
        elif padded is False:
            notes.append(
                f"{c.name}: its text is as long as the longest prompt, and the {split}-way "
                "sequence split must divide it too (EquipartitionSharder.shard asserts it): pad "
                f"prompts to a multiple of {split} tokens"
            )
    return out


def _setting_notes(spec: GPUWorkloadSpec) -> list[str]:
    """Notes for settings that are valid but rarely what the user meant: ``spec.generation``
    settings the call never reads (``maxSequenceLength`` for a pipeline whose encoders take a
    fixed length: the Stable Diffusion 1.x/XL ``__call__`` has no ``max_sequence_length``
    argument, CLIP always encodes 77 tokens; ``groupOffload`` when no component is
    group-offloaded)."""
    gen, pipeline = spec.generation, spec.model.pipeline
    assert gen is not None and pipeline is not None
    kind = PIPELINES.get(pipeline.class_name)
    out: list[str] = []
    if gen.max_sequence_length is not None and kind is not None and not kind.sequence_length:
        out.append(
            f"spec.generation.maxSequenceLength {gen.max_sequence_length} is not an argument of "
            f"{pipeline.class_name}.__call__ in diffusers 0.42.1 (its CLIP encoders take 77 "
            "tokens): ignored"
        )
    grouped = gen.offload is PipelineOffload.Group or any(
        c.offload is PipelineOffload.Group for c in pipeline.components
    )
    if "group_offload" in gen.model_fields_set and not grouped:
        out.append(
            "spec.generation.groupOffload applies only with offload Group (here "
            f"{gen.offload.value}, and no component sets offload Group): ignored"
        )
    present = {c.name for c in pipeline.components}
    absent = [n for n in (kind.encode_order if kind is not None else ()) if n not in present]
    if absent:
        out.append(
            f"no {', '.join(absent)}: {pipeline.class_name} then encodes no prompt, and its call "
            "needs the embeddings given (prompt_embeds), made elsewhere; their encoder is not "
            "counted"
        )
    par = gen.parallelism
    if par.denoiser_fsdp and par.gpu_count == 1:
        out.append(
            "spec.generation.parallelism.denoiserFsdp shards over the parallel GPUs, and there "
            "is one (ulyssesDegree x ringDegree, x2 with cfgParallel): ignored"
        )
    elif par.denoiser_fsdp:
        offloaded = sorted(
            {
                mode.value
                for c in pipeline.components
                if _role(c) is Role.Denoiser and (mode := c.offload or gen.offload) in _STREAMED
            }
        )
        if offloaded:
            out.append(
                f"denoiserFsdp with the denoiser's offload {', '.join(offloaded)}: its shard is "
                "sized whole on every GPU while it runs, not streamed (offload hooks over an "
                "FSDP-sharded module are not modelled), an upper bound"
            )
    return out


def _generation_estimate(spec: GPUWorkloadSpec) -> tuple[EstimateStatus, list[Missing]]:
    gen, pipeline = spec.generation, spec.model.pipeline
    assert gen is not None and pipeline is not None
    comps = [_resolve(spec, i, c) for i, c in enumerate(pipeline.components)]
    by_name = {c.name: c for c in comps}
    missing: list[Missing] = []
    notes: list[str] = []
    kind = PIPELINES.get(pipeline.class_name)
    if kind is not None and gen.task not in kind.tasks:
        # the class's __call__ does what it does whatever the task says: an image pipeline
        # makes images (numFrames is no argument of it), an image-to-image one encodes its input
        runs = kind.tasks[0]
        several = gen.task.video and not runs.video and gen.num_frames > 1
        one = f", one frame, not {gen.num_frames}" if several else ""
        notes.append(
            f"{pipeline.class_name} runs {', '.join(t.value for t in kind.tasks)}, not "
            f"{gen.task.value}: sized as the pipeline runs ({runs.value}{one})"
        )
        gen = gen.model_copy(update={"task": runs})
    # the size the pipeline really runs at (validation refused the sizes it cannot run)
    size = output_size(pipeline, gen.task.video, gen.height, gen.width, gen.num_frames)
    if (size.height, size.width, size.num_frames) != (gen.height, gen.width, gen.num_frames):
        gen = gen.model_copy(
            update={"height": size.height, "width": size.width, "num_frames": size.num_frames}
        )
    notes += size.notes
    where = "spec.model.pipeline"
    if kind is None:
        missing.append(
            Missing(
                "activationBytes",
                [f"{where}.class"],
                f"pipeline class {pipeline.class_name} is not one gpu-sizer models (how it batches "
                "guidance, its text lengths, what it encodes, which models it keeps resident)",
                "supported pipeline classes: " + ", ".join(sorted(PIPELINES)),
            )
        )
    for c in comps:
        path = f"{where}.components[{c.index}]"
        if kind is not None and c.name not in kind.components:
            # from_pretrained loads only the __init__'s components: a renamed transformer
            # leaves the pipeline without one
            missing.append(
                Missing(
                    "activationBytes",
                    [f"{path}.name"],
                    f"component {c.name}: {pipeline.class_name}.__init__ takes no {c.name} "
                    "(diffusers 0.42.1), so the pipeline never loads or runs it",
                    "name each component as the pipeline's __init__ does: "
                    + ", ".join(n for n in kind.components if n in _WEIGHTED_NAMES),
                )
            )
        if c.spec.known and c.spec.parameter_count is not None and c.params is not None:
            notes.append(
                f"{path}.parameterCount {c.spec.parameter_count:,} ignored: {c.spec.class_name} "
                f"is counted from its config ({c.params:,} parameters)"
            )
        if c.model is None:
            what = "weights and activations" if c.params is None else "activations"
            reason = c.problem or f"class {c.spec.class_name} is not one gpu-sizer sizes"
            missing.append(
                Missing(
                    "weightsBytes" if c.params is None else "activationBytes",
                    [f"{path}.class", f"{path}.config"]
                    + ([] if c.params else [f"{path}.parameterCount"]),
                    f"component {c.name}: {what} not counted ({reason})",
                    _unsized_fix(c.spec),
                )
            )
    denoisers = [c for c in comps if c.role is Role.Denoiser]
    vae = next((c for c in comps if c.role is Role.Vae and c.model is not None), None)
    if not denoisers:
        missing.append(
            Missing(
                "activationBytes",
                [f"{where}.components"],
                "no denoiser component",
                "add the pipeline's unet or transformer",
            )
        )
    if vae is None:
        missing.append(
            Missing(
                "activationBytes",
                [f"{where}.components"],
                "no sized VAE: the latent grid and the decode are unknown",
                "add the pipeline's vae with its config.json",
            )
        )
    options = pipeline.config
    if kind is not None:
        taken = {to_camel(k) for k in kind.options}
        # expandTimesteps outside Wan is refused below (the denoiser would size it per token)
        ignored = sorted(k for k in options if k not in taken and k != "expandTimesteps")
        if ignored:
            notes.append(
                f"{where}.config: {', '.join(ignored)} not an option of {pipeline.class_name} in "
                "diffusers 0.42.1 (its __init__ takes "
                + (", ".join(sorted(taken)) or "none")
                + "); from_pretrained ignores such entries, and so does the estimate"
            )
    notes += _setting_notes(spec)
    if options.get("expandTimesteps") and pipeline.class_name not in (
        "WanPipeline",
        "WanImageToVideoPipeline",
    ):
        missing.append(
            Missing(
                "activationBytes",
                [f"{where}.config.expandTimesteps"],
                f"expandTimesteps on {pipeline.class_name}: per-token timesteps are sized for the "
                "Wan pipelines only",
                "remove expandTimesteps, or use a Wan pipeline",
            )
        )
    par = gen.parallelism
    world = par.gpu_count
    fsdp = world if par.denoiser_fsdp else 1
    cfg = gen.classifier_free_guidance
    guidance = kind.guidance if kind is not None else Guidance.Batched
    geometry = None
    if vae is not None and vae.model is not None:
        vae_class, vae_config = vae.spec.class_name, vae.model.config
        geometry = vae.model.memo(("geometry",), lambda: latent_geometry(vae_class, vae_config))
    # a component that cannot be placed by role runs nowhere in the call, but is still resident
    present = {c.name: c.role.value for c in comps if c.role is not None and c.on_gpu}
    image_conditioned = any(
        c.config is not None and c.config.get("image_dim") is not None for c in denoisers
    )
    modes = {c.name: c.offload for c in comps if c.on_gpu}
    steps, residents = _plan(
        pipeline.class_name,
        tuple(present.items()),
        tuple(modes.items()),
        tuple(c.name for c in comps),
        cfg,
        image_conditioned,
        options,
    )
    frames = (gen.num_frames - 1) // geometry[1] + 1 if geometry and gen.task.video else 1
    experts = {s.component for s in steps if s.phase == DENOISE}
    lh, lw = (gen.height // geometry[0], gen.width // geometry[0]) if geometry else (0, 0)
    split = par.ulysses_degree * par.ring_degree
    if split > 1 and geometry is not None:
        missing += _unsplittable(denoisers, kind, gen, frames, lh, lw, split, notes)

    def activations(step: Step) -> int | None:
        """Bytes the running model's forward adds, ``None`` when it cannot be sized."""
        c = by_name[step.component]
        if c.model is None or c.config is None:
            return 0 if c.params is not None else None
        model, cls, config = c.model, c.spec.class_name, c.config
        batch, act_bytes = gen.batch_size, c.act_bytes
        if step.what in ("prompt", "negative prompt"):
            tokens = _text_tokens(kind, c.name, gen.max_sequence_length)
            return model.memo(
                ("encoder", batch, tokens, act_bytes),
                lambda: encoder_forward_bytes(cls, config, batch, tokens, act_bytes),
            )
        if step.what == "image":
            if cls not in IMAGE_ENCODERS:
                return 0
            tokens = (config["image_size"] // config["patch_size"]) ** 2 + 1
            return model.memo(
                ("encoder", batch, tokens, act_bytes),
                lambda: encoder_forward_bytes(cls, config, batch, tokens, act_bytes),
            )
        if step.what == "safety check":
            vision = config["vision_config"]
            tokens = (vision["image_size"] // vision["patch_size"]) ** 2 + 1
            images = batch * 3 * gen.height * gen.width * (vae.act_bytes if vae else 2)
            return images + model.memo(
                ("encoder", batch, tokens, act_bytes),
                lambda: encoder_forward_bytes(cls, config, batch, tokens, act_bytes),
            )
        if geometry is None:
            return None
        latent_channels = geometry[2]
        if step.what == "encode":
            assert kind is not None
            enc_frames = 1 if kind.encodes.value == "Image" else frames
            shape = DecodeShape(
                batch, enc_frames, lh, lw, act_bytes, gen.vae_tiling, gen.vae_slicing
            )
            return model.memo(("encode", shape), lambda: vae_encode_bytes(cls, config, shape))
        if step.what == "decode":
            return decode_bytes(c)
        return denoise_bytes(c, latent_channels)

    def denoise_bytes(c: _Component, latent_channels: int) -> int | None:
        assert c.config is not None
        text = kind.denoiser_tokens if kind is not None else 77
        if gen.max_sequence_length is not None and kind is not None and kind.sequence_length:
            text = text - kind.sequence_length + gen.max_sequence_length
        batch = gen.batch_size
        if cfg and guidance is Guidance.Batched and not par.cfg_parallel:
            batch *= 2
        shape = DenoiseShape(
            batch,
            frames,
            lh,
            lw,
            text,
            c.act_bytes,
            materialised=gen.attention_backend is AttentionBackend.math,
            sequence_split=par.ulysses_degree * par.ring_degree,
            ulysses=par.ulysses_degree,
            per_token_timesteps=bool(options.get("expandTimesteps")),
        )
        cls, config = c.spec.class_name, c.config
        try:
            assert c.model is not None
            act = c.model.memo(
                ("denoise", shape), lambda: denoiser_forward_bytes(cls, config, shape)
            )
        except (KeyError, ValueError, ZeroDivisionError) as exc:
            missing.append(
                Missing(
                    "activationBytes",
                    [f"{where}.components[{c.index}].config"],
                    f"denoiser {c.name}: {exc}",
                    "check its config",
                )
            )
            return None
        if c.offload is PipelineOffload.Model:
            margin = wan_reference_margin_bytes(
                pipeline.class_name, options, experts, config, shape
            )
            if margin:
                act += margin
                notes.append(
                    "upper bound: each Wan 2.2 expert under offload Model counts what the "
                    "reference code's per-token float32 modulation holds (its README measures "
                    "the two experts with --offload_model at 59.8 GB for 720P, 41.3 GB for 480P; "
                    "no diffusers measurement of this setting is published)"
                )
        return act + 6 * batch * latent_channels * frames * lh * lw * 4

    upcast = (
        vae is not None
        and kind is not None
        and kind.upcast_vae
        and (vae.spec.dtype or spec.model.dtype) is Dtype.float16
        and bool(vae.model is not None and vae.model.config.get("force_upcast", True))
    )

    def decode_bytes(c: _Component) -> int:
        assert c.config is not None
        act_bytes = 4 if upcast else c.act_bytes
        shape = DecodeShape(
            gen.batch_size, frames, lh, lw, act_bytes, gen.vae_tiling, gen.vae_slicing
        )
        cls, config = c.spec.class_name, c.config
        assert c.model is not None
        decoded = c.model.memo(("decode", shape), lambda: vae_decode_bytes(cls, config, shape))
        out_frames = gen.num_frames if gen.task.video else 1
        output = gen.batch_size * 3 * out_frames * gen.height * gen.width * act_bytes
        # postprocess (VaeImageProcessor.denormalize: (x / 2 + 0.5).clamp) holds the output and
        # two temporaries after the decoder's own tensors are freed; .cpu() then moves it off
        return max(decoded, 3 * output)

    phases: dict[str, _Phase] = {}
    order: list[str] = []
    for step, resident in zip(steps, residents, strict=True):
        act = activations(step)
        if act is None:
            continue
        weights = quant = 0
        for name in resident:
            held = by_name[name]
            if fsdp == 1 and held.offload not in _STREAMED:
                w, q = held.weights, held.quant  # whole: _held's common case
            else:
                w, q = _held(held, name == step.component, spec, fsdp)
            weights, quant = weights + w, quant + q
        if (
            step.what == "decode"
            and upcast
            and by_name[step.component].offload
            in (
                PipelineOffload.None_,
                PipelineOffload.Model,
            )
        ):
            weights += by_name[step.component].weights
            notes.append(
                f"{pipeline.class_name} decodes in float32: the float16 VAE has forceUpcast, so "
                "diffusers upcasts it for the decode"
            )
        key = f"{step.phase}:{step.component}" if step.phase == DENOISE else step.phase
        if key not in phases:
            phases[key] = _Phase(step.phase)
            order.append(key)
        p = phases[key]
        if not p.running or weights + quant + act > p.weights + p.quant + p.activations:
            p.weights, p.quant, p.activations = weights, quant, act
            p.running = [step.component]
            p.holding = resident
    for p in phases.values():  # the peak step's residents, in component order
        p.resident = [c.name for c in comps if c.name in p.holding]
        p.kept = [
            n
            for n in p.resident
            if n != p.running[0] and by_name[n].offload is PipelineOffload.Model
        ]
    for name in (TEXT_ENCODE, DENOISE, VAE_DECODE):
        if not any(phases[k].name == name for k in order):
            empty = _Phase(name)  # nothing runs: what pipe.to() left on the GPU
            empty.weights = sum(
                _held(c, False, spec, fsdp)[0]
                for c in comps
                if c.on_gpu and c.offload is PipelineOffload.None_
            )
            phases[name] = empty
            order.append(name)
    listed = sorted(order, key=lambda k: (TEXT_ENCODE, DENOISE, VAE_DECODE).index(phases[k].name))
    for key in listed:
        p = phases[key]
        if p.kept:
            notes.append(
                f"offload Model keeps {', '.join(p.kept)} on the GPU while {p.running[0]} runs: "
                "enable_model_cpu_offload offloads a model only when the next model of "
                "model_cpu_offload_seq runs"
            )

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

    peak = max((phases[k] for k in listed), key=total)
    runtime = base_overhead_bytes(groups) + allocator_reserve_bytes(peak.activations)
    breakdown = PerGpuBreakdown(
        weights_bytes=peak.weights,
        quantization_overhead_bytes=peak.quant,
        activation_bytes=peak.activations,
        runtime_overhead_bytes=runtime,
        total_bytes=peak.weights + peak.quant + peak.activations + runtime,
    )
    notes += _offload_notes(comps, world)
    params = sum(c.params or 0 for c in comps)
    host = _host_bytes(comps)
    status = EstimateStatus(
        parameter_count=params,
        gpu_count=world,
        # Every rank's process loads the pipeline and offloads its own copy (xDiT and
        # diffusers' offload hooks are per process); a sharded denoiser counted whole per rank
        # is the upper bound.
        host_bytes_per_node=world * host if host else None,
        kv_cache_bytes_per_token=0,
        per_gpu=breakdown,
        peak_phase=PeakPhase(peak.name),
        phases=[
            PhaseEstimate(
                name=PeakPhase(phases[k].name),
                total_bytes=total(phases[k]),
                weights_bytes=phases[k].weights + phases[k].quant,
                activation_bytes=phases[k].activations,
                running=", ".join(phases[k].running),
                resident=", ".join(phases[k].resident),
            )
            for k in listed
        ],
        notes=list(dict.fromkeys(notes)),
    )
    return status, missing


def _on_host(c: _Component) -> int:
    """Bytes of ``c``'s weights (and quantization metadata) host memory holds in one process:
    all of them when it runs on the CPU or is offloaded, else none. Offloaded weights live on the
    host whole between forwards, once per process, in diffusers 0.42.1:

    - ``Model`` (``DiffusionPipeline.enable_model_cpu_offload``, ``pipelines/pipeline_utils.py``):
      accelerate's ``cpu_offload_with_hook`` moves each model to the CPU after it ran;
    - ``Sequential`` (``enable_sequential_cpu_offload``): accelerate's ``cpu_offload`` saves the
      state dict to the CPU and copies each submodule in for its forward;
    - ``Group`` (``enable_group_offload``, ``hooks/group_offloading.py``): each ``ModuleGroup``
      moves its parameters to the offload device and onloads them per group; with ``use_stream``
      ``ModuleGroup._init_cpu_param_dict`` keeps a pinned copy of every parameter instead
      (``_to_cpu``: ``pin_memory()``), which replaces the pageable one when
      ``GroupOffloadingHook.initialize_hook`` offloads the group: the same bytes, page-locked
      (not told apart here).

    :func:`_host_bytes` (``status.estimate.hostBytesPerNode``) and :func:`_offload_notes` both
    sum this, so the figure a note states is the one the status and the fixes carry."""
    return c.weights + c.quant if not c.on_gpu or c.offload in _OFFLOADED else 0


def _gib(n: int) -> str:
    return f"{n / _GIB:.1f} GiB"


def _host_bytes(comps: list[_Component]) -> int:
    """Host memory (bytes) the pipeline's weights take in one process: every component that
    runs on the CPU or is offloaded lives there whole between its forwards (:func:`_on_host`)."""
    return sum(_on_host(c) for c in comps)


def _offload_notes(comps: list[_Component], world: int) -> list[str]:
    """One line per offload mode in use (and one for the components on the CPU), naming its
    components and the host memory their weights take: the node must have that much RAM for
    the pod, which no GPU figure shows. ``world`` processes each hold their own copy (every
    rank loads and offloads the pipeline itself: diffusers' hooks are per process)."""

    def held(names: list[str]) -> str:
        one = sum(_on_host(c) for c in comps if c.name in names)
        if world == 1:
            return f"host memory holds their weights ({_gib(one)})"
        return (
            f"host memory holds their weights ({_gib(one)} in each of the {world} processes, "
            f"{_gib(world * one)} per node)"
        )

    cpu: list[str] = []
    by_mode: dict[PipelineOffload, list[str]] = {}
    for c in comps:
        if not c.on_gpu:
            cpu.append(c.name)
        elif c.offload in _OFFLOADED:
            by_mode.setdefault(c.offload, []).append(c.name)
    out = [f"on the CPU, never on the GPU: {', '.join(cpu)}; {held(cpu)}"] if cpu else []
    for mode in _OFFLOADED:
        names = by_mode.get(mode)
        if names:
            out.append(
                f"offload {mode.value}: {', '.join(names)} on the GPU only while running; "
                + held(names)
            )
    return out
