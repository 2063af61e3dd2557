"""Image and video generation in the GPUWorkload spec: ``spec.model.pipeline`` and
``spec.generation``.

A diffusion pipeline is described the way ``diffusers`` loads it: a pipeline class (the
``_class_name`` of ``model_index.json``) and its components, each with the name it has in
``model_index.json`` (``transformer``, ``vae``, ``text_encoder_2``...), its class and its
``config.json`` in camelCase (``gpu-sizer import-diffusers`` writes them). ``spec.generation``
is what one ``pipe(...)`` call asks for and how the pipeline is set up: resolution, frames,
batch, classifier-free guidance, offloading (``enable_model_cpu_offload``,
``enable_sequential_cpu_offload``, ``enable_group_offload``), VAE tiling and slicing, the
attention backend, and multi-GPU sequence and CFG parallelism.

The names follow ``diffusers`` where it has one (``maxSequenceLength``, ``numFrames``, the
attention backend names of ``set_attention_backend``); enum values are CamelCase otherwise.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, PrivateAttr, StrictBool, model_validator

from gpu_sizer.api.components import COMPONENT_CLASSES, checked_config, resolved_config
from gpu_sizer.api.spec.base import _Model, _Problems
from gpu_sizer.api.spec.bounds import LIMITS
from gpu_sizer.api.spec.enums import Dtype
from gpu_sizer.api.spec.quantization import Quantization

__all__ = [
    "PIPELINE_OPTIONS",
    "AttentionBackend",
    "ComponentDevice",
    "Generation",
    "GenerationEngine",
    "GenerationParallelism",
    "GenerationTask",
    "GroupOffload",
    "GroupOffloadType",
    "Pipeline",
    "PipelineComponent",
    "PipelineOffload",
]


class GenerationTask(StrEnum):
    """What the pipeline produces from what."""

    TextToImage = "TextToImage"
    ImageToImage = "ImageToImage"
    TextToVideo = "TextToVideo"
    ImageToVideo = "ImageToVideo"

    @property
    def video(self) -> bool:
        """Whether the output is a video (``numFrames`` frames)."""
        return self in (GenerationTask.TextToVideo, GenerationTask.ImageToVideo)


class GenerationEngine(StrEnum):
    """The library that runs the pipeline."""

    diffusers = "diffusers"


class PipelineOffload(StrEnum):
    """``diffusers`` offloading: ``Model`` is ``enable_model_cpu_offload`` (one whole model on the
    GPU at a time), ``Sequential`` is ``enable_sequential_cpu_offload`` (each module's weights
    streamed in while it runs), ``Group`` is ``enable_group_offload`` (groups of blocks)."""

    None_ = "None"
    Model = "Model"
    Sequential = "Sequential"
    Group = "Group"


class GroupOffloadType(StrEnum):
    """``enable_group_offload(offload_type=...)``: ``block_level`` or ``leaf_level``."""

    BlockLevel = "BlockLevel"
    LeafLevel = "LeafLevel"


class AttentionBackend(StrEnum):
    """``set_attention_backend`` names (``diffusers/models/attention_dispatch.py``):
    ``native`` is PyTorch SDPA (flash or memory-efficient kernels), ``flash``, ``sage`` and
    ``xformers`` the libraries of those names; ``math`` is ``_native_math``, the SDPA reference
    path that materialises the score matrix (as do the legacy ``AttnProcessor`` classes)."""

    native = "native"
    flash = "flash"
    sage = "sage"
    xformers = "xformers"
    math = "math"


class ComponentDevice(StrEnum):
    """Where a component runs: ``Gpu`` (following ``spec.generation.offload``), or ``Cpu``
    (never on the GPU, as Wan's ``--t5_cpu`` keeps the text encoder)."""

    Gpu = "Gpu"
    Cpu = "Cpu"


Dim = Annotated[int, Field(ge=8, le=16384, strict=True)]
Frames = Annotated[int, Field(ge=1, le=10_000, strict=True)]
Degree = Annotated[int, Field(ge=1, le=64, strict=True)]


class GroupOffload(_Model):
    """``enable_group_offload`` settings (``diffusers/hooks/group_offloading.py``)."""

    offload_type: GroupOffloadType = Field(
        GroupOffloadType.BlockLevel, description="BlockLevel | LeafLevel (offload_type)."
    )
    num_blocks_per_group: Annotated[int, Field(ge=1, le=1024, strict=True)] = Field(
        1, description="Blocks onloaded together at block level (num_blocks_per_group)."
    )
    use_stream: StrictBool = Field(
        False,
        description="Prefetch the next group on a CUDA stream (use_stream): one more group on "
        "the GPU; forces num_blocks_per_group 1.",
    )


class PipelineComponent(_Model):
    """One model of the pipeline, as ``model_index.json`` and its ``config.json`` give it."""

    name: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        description="The component's name in model_index.json (transformer, vae, text_encoder)."
    )
    class_name: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        alias="class",
        description="Its class (UNet2DConditionModel, WanTransformer3DModel, AutoencoderKLWan, "
        "T5EncoderModel...).",
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="The component's config.json, keys camelCased. Keys gpu-sizer does not read "
        "are kept and ignored, as diffusers' from_config does, unless one stands for a key it "
        "reads (snake_case, another letter case, a near miss, a transformers alias such as "
        "numHiddenLayers): that one is refused naming the key meant, which would otherwise "
        "take its class default.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    parameter_count: Annotated[int, Field(ge=1, le=LIMITS["parameters"], strict=True)] | None = (
        Field(
            None,
            description="Parameters, for a class gpu-sizer does not size (its activations are then "
            "not counted: the estimate is Incomplete).",
        )
    )
    dtype: Dtype | None = Field(
        None,
        description="Storage dtype (torch_dtype); default spec.model.dtype. float8 dtypes are "
        "diffusers' enable_layerwise_casting storage (compute in bfloat16).",
    )
    quantization: Quantization | None = Field(None, description="Weight quantization, if any.")
    offload: PipelineOffload | None = Field(
        None, description="This component's offloading; default spec.generation.offload."
    )
    group_offload: GroupOffload | None = Field(
        None,
        description="This component's enable_group_offload settings; default "
        "spec.generation.groupOffload.",
    )
    device: ComponentDevice = Field(
        ComponentDevice.Gpu, description="Gpu | Cpu (runs on the CPU, e.g. Wan's --t5_cpu)."
    )

    #: (the config object, its resolved_config), from validation; see :meth:`resolved_config`.
    _resolved: tuple[dict[str, Any], dict[str, Any]] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _check(self) -> PipelineComponent:
        found, resolved = checked_config(self.class_name, self.config)
        problems = _Problems()
        for key, message in found:
            problems.add(f"config.{key}", message)
        problems.raise_if_any()
        if resolved is not None:
            self._resolved = (self.config, resolved)
        return self

    def resolved_config(self) -> dict[str, Any]:
        """:func:`gpu_sizer.api.components.resolved_config` of this (known) class's config,
        computed once: validation resolves it while checking it, and the copies the estimate
        makes (``model_copy``, which keeps private attributes) share it while their config is
        the same object. Read it, never change it.

        The memo is read from ``__pydantic_private__`` directly: ``self._resolved`` goes through
        ``BaseModel.__getattr__``, and the admission checks call this a score of times per
        pipeline."""
        private = self.__pydantic_private__
        memo = private.get("_resolved") if private is not None else None
        if memo is None or memo[0] is not self.config:
            memo = self._resolved = (self.config, resolved_config(self.class_name, self.config))
        return memo[1]

    @property
    def known(self) -> bool:
        """Whether gpu-sizer sizes this class from its config."""
        return self.class_name in COMPONENT_CLASSES


#: Pipeline options (``model_index.json`` entries that are ``__init__`` arguments but not
#: components, registered with ``register_to_config``) that change what a call runs, with their
#: JSON kinds. ``boundaryRatio``: Wan 2.2's switch from ``transformer`` (high-noise expert) to
#: ``transformer_2`` (``null``: only ``transformer`` runs); ``expandTimesteps``: Wan 2.2 TI2V's
#: per-token timesteps; ``forceZerosForEmptyPrompt``: SDXL/Mochi use zeros instead of encoding
#: an empty negative prompt; ``requiresSafetyChecker``, ``addWatermarker``,
#: ``requiresAestheticsScore``: informational here.
PIPELINE_OPTIONS: dict[str, tuple[str, ...]] = {
    "boundaryRatio": ("ratio", "null"),
    "expandTimesteps": ("bool",),
    "forceZerosForEmptyPrompt": ("bool",),
    "requiresSafetyChecker": ("bool", "null"),
    "addWatermarker": ("bool", "null"),
    "requiresAestheticsScore": ("bool",),
}


def _option_problem(kinds: tuple[str, ...], value: Any) -> str | None:
    if value is None:
        return None if "null" in kinds else "must not be null"
    if "bool" in kinds:
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number between 0 and 1" + (" or null" if "null" in kinds else "")
    return None if 0 <= value <= 1 else "must be between 0 and 1"


class Pipeline(_Model):
    """A diffusers pipeline: its class, its model components (tokenizers and schedulers,
    which hold no weights, are left out) and its options (``model_index.json``'s other
    entries)."""

    class_name: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        alias="class",
        description="Pipeline class (model_index.json _class_name), e.g. WanPipeline.",
    )
    components: Annotated[list[PipelineComponent], Field(min_length=1, max_length=16)] = Field(
        description="The pipeline's models."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="The pipeline's options from model_index.json (its entries that are not "
        "components), keys camelCased: boundaryRatio (Wan 2.2's switch to transformer_2; null "
        "runs transformer only), expandTimesteps, forceZerosForEmptyPrompt, "
        "requiresSafetyChecker... Other keys are kept and ignored.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    @model_validator(mode="after")
    def _check(self) -> Pipeline:
        problems = _Problems()
        for key, value in self.config.items():
            kinds = PIPELINE_OPTIONS.get(key)
            bad = None if kinds is None else _option_problem(kinds, value)
            if bad is not None:
                problems.add(f"config.{key}", bad)
        seen: set[str] = set()
        for i, component in enumerate(self.components):
            if component.name in seen:
                problems.add(
                    f"components[{i}].name", f"duplicate component name {component.name!r}"
                )
            seen.add(component.name)
        problems.raise_if_any()
        return self

    def component(self, name: str) -> PipelineComponent | None:
        """The component named ``name``, or ``None``."""
        return next((c for c in self.components if c.name == name), None)


class GenerationParallelism(_Model):
    """Multi-GPU generation: GPUs are added only by what is declared here.

    Sequence parallelism splits the denoiser's tokens over ``ulyssesDegree x ringDegree`` GPUs
    (diffusers ``ContextParallelConfig(ulysses_degree, ring_degree)``; xDiT and the Wan and
    HunyuanVideo repositories' ``--ulysses-degree``/``--ring-degree``); CFG parallelism runs the
    conditional and unconditional passes on two GPUs (xDiT ``--use_cfg_parallel``);
    ``denoiserFsdp`` shards the denoiser's weights over all of them (Wan's ``--dit_fsdp``).
    """

    ulysses_degree: Degree = Field(1, description="Ulysses (all-to-all) sequence-parallel degree.")
    ring_degree: Degree = Field(1, description="Ring-attention sequence-parallel degree.")
    cfg_parallel: StrictBool = Field(
        False, description="Conditional and unconditional passes on two GPUs."
    )
    denoiser_fsdp: StrictBool = Field(
        False, description="Shard the denoiser's weights over the GPUs (FSDP full shard)."
    )

    @property
    def gpu_count(self) -> int:
        """GPUs one replica uses."""
        return self.ulysses_degree * self.ring_degree * (2 if self.cfg_parallel else 1)


class Generation(_Model):
    """One image or video generation call and the pipeline's memory settings."""

    engine: GenerationEngine = Field(GenerationEngine.diffusers, description="diffusers.")
    task: GenerationTask = Field(
        description="TextToImage | ImageToImage | TextToVideo | ImageToVideo."
    )
    height: Dim = Field(description="Output height in pixels.")
    width: Dim = Field(description="Output width in pixels.")
    num_frames: Frames = Field(1, description="Output frames (1 for images).")
    batch_size: Annotated[int, Field(ge=1, le=1024, strict=True)] = Field(
        1, description="Images or videos per call (prompts x num_images_per_prompt)."
    )
    classifier_free_guidance: StrictBool = Field(
        True,
        description="Run the unconditional pass too (guidance_scale > 1, or true_cfg_scale > 1 "
        "for guidance-distilled models such as Flux.1 dev and HunyuanVideo).",
    )
    max_sequence_length: Annotated[int, Field(ge=1, le=8192, strict=True)] | None = Field(
        None, description="Text tokens (max_sequence_length); default the pipeline's."
    )
    offload: PipelineOffload = Field(
        PipelineOffload.None_, description="None | Model | Sequential | Group."
    )
    group_offload: GroupOffload = Field(
        default_factory=lambda: GroupOffload(), description="Settings for offload Group."
    )
    vae_tiling: StrictBool = Field(False, description="vae.enable_tiling().")
    vae_slicing: StrictBool = Field(False, description="vae.enable_slicing().")
    attention_backend: AttentionBackend = Field(
        AttentionBackend.native, description="native | flash | sage | xformers | math."
    )
    parallelism: GenerationParallelism = Field(
        default_factory=lambda: GenerationParallelism(), description="Multi-GPU generation."
    )

    @model_validator(mode="after")
    def _check(self) -> Generation:
        problems = _Problems()
        if not self.task.video and self.num_frames != 1:
            problems.add(
                "numFrames",
                f"task {self.task.value} produces images: numFrames must be 1, not "
                f"{self.num_frames} (use TextToVideo or ImageToVideo)",
            )
        if self.parallelism.cfg_parallel and not self.classifier_free_guidance:
            problems.add(
                "parallelism.cfgParallel",
                "cfgParallel runs the unconditional pass on a second GPU; it needs "
                "classifierFreeGuidance true",
            )
        problems.raise_if_any()
        return self
