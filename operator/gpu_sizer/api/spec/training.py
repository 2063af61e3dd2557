"""``spec.training``: one training step's recipe (fine-tuning method, precision, optimizer,
parallelism and offloading), named after the frameworks that run it (PEFT, PyTorch FSDP,
DeepSpeed ZeRO, Hugging Face Trainer).
"""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

from pydantic import Field, StrictBool, model_validator

from gpu_sizer.api.spec.base import _Model, _Problems
from gpu_sizer.api.spec.bounds import (
    LENGTHS,
    LIMITS,
    Elements,
    Fraction,
    Gpus,
    Identifier,
    Layers,
    Tokens,
)
from gpu_sizer.api.spec.enums import (
    FinetuningMethod,
    Initialization,
    Loss,
    OffloadTarget,
    Optimizer,
    ParallelStrategy,
    Precision,
    PrecisionRecipe,
    TrainingDtype,
    TrainingFramework,
)

__all__ = [
    "DEEPSPEED_DEFAULTS",
    "LORA_TARGET_MODULES",
    "DdpOptions",
    "DeepSpeedOptions",
    "Finetuning",
    "FsdpOptions",
    "Offload",
    "Parallelism",
    "Training",
]


#: LoRA target module names the sizing engine knows (PEFT ``target_modules``): the Llama names of
#: every projection role, the module names of the other families' fused or renamed projections
#: (as in ``budget/params.py``'s ``Linear.name``), and PEFT's ``all-linear``.
LORA_TARGET_MODULES: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "qkv_proj",
    "gate_up_proj",
    "query_key_value",
    "dense",
    "dense_h_to_4h",
    "dense_4h_to_h",
    "out_proj",
    "fc1",
    "fc2",
    "w1",
    "w2",
    "w3",
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_b_proj",
    "in_proj",
    "x_proj",
    "dt_proj",
    "all-linear",
)


class Finetuning(_Model):
    """Which parameters train."""

    method: FinetuningMethod = Field(FinetuningMethod.full, description="full | lora | qlora.")
    lora_rank: Annotated[int, Field(ge=1, le=LIMITS["rank"], strict=True)] = Field(
        16, description="LoRA rank r."
    )
    lora_dropout: Fraction = Field(
        0.0,
        description="PEFT LoraConfig.lora_dropout (default 0.0). Above 0 every adapted linear "
        "keeps its own dropout mask and dropped input for backward.",
    )
    prepare_model_for_kbit_training: StrictBool | None = Field(
        None,
        description="A quantized base went through PEFT prepare_model_for_kbit_training, which "
        "casts the unquantized parameters (embeddings, lm_head, norms) to float32, so the "
        "residual stream runs in float32. Unset: the framework's default (transformers: true, "
        "as TRL's SFTTrainer calls it for a 4/8-bit model with a peft_config).",
    )
    lora_target_modules: Annotated[
        list[Identifier], Field(max_length=LENGTHS["loraTargetModules"])
    ] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Projections that get adapters (q_proj, k_proj, v_proj, o_proj, gate_proj, "
        "up_proj, down_proj, or all-linear; also the family names qkv_proj, gate_up_proj, "
        "query_key_value, dense, dense_h_to_4h, dense_4h_to_h, out_proj, fc1, fc2, w1, w2, w3).",
    )

    @model_validator(mode="after")
    def _check(self) -> Finetuning:
        problems = _Problems()
        for i, name in enumerate(self.lora_target_modules):
            if name not in LORA_TARGET_MODULES:
                close = difflib.get_close_matches(name, LORA_TARGET_MODULES, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                problems.add(
                    f"loraTargetModules[{i}]",
                    f"unknown module {name!r}; {hint}known: " + ", ".join(LORA_TARGET_MODULES),
                )
        if self.method is not FinetuningMethod.full and not self.lora_target_modules:
            problems.add(
                "loraTargetModules",
                f"{self.method.value} needs at least one target module (e.g. [q_proj, v_proj] or "
                "[all-linear]); with none, nothing trains",
            )
        problems.raise_if_any()
        return self


#: DeepSpeed ``zero_optimization`` defaults (``deepspeed/runtime/zero/config.py``,
#: ``DeepSpeedZeroConfig``, DeepSpeed 0.19.5), in elements.
DEEPSPEED_DEFAULTS: dict[str, int] = {
    "reduceBucketSize": 500_000_000,
    "allgatherBucketSize": 500_000_000,
    "stage3PrefetchBucketSize": 50_000_000,
    "stage3MaxLiveParameters": 1_000_000_000,
    "stage3MaxReuseDistance": 1_000_000_000,
    "stage3ParamPersistenceThreshold": 100_000,
    "subGroupSize": 1_000_000_000,
}


class Offload(_Model):
    """Optimizer state and parameters kept off the GPU (DeepSpeed ZeRO-Offload/-Infinity,
    FSDP ``CPUOffload``/``CPUOffloadPolicy``)."""

    optimizer: OffloadTarget = Field(
        OffloadTarget.None_,
        description="None | Cpu | Nvme: fp32 master weights, optimizer state and the optimizer "
        "step (DeepSpeed offload_optimizer; Nvme needs zero3).",
    )
    parameters: OffloadTarget = Field(
        OffloadTarget.None_,
        description="None | Cpu | Nvme: sharded 16-bit parameters (DeepSpeed offload_param, "
        "zero3 only; FSDP CPUOffload moves parameters, gradients and the optimizer together).",
    )


class DdpOptions(_Model):
    """PyTorch ``DistributedDataParallel`` options that change memory."""

    gradient_as_bucket_view: StrictBool = Field(
        False,
        description="Gradients are views into the reducer's buckets (DDP gradient_as_bucket_view); "
        "false keeps a bucket copy of every gradient.",
    )


class FsdpOptions(_Model):
    """PyTorch FSDP options that change memory."""

    version: Literal[1, 2] = Field(
        1,
        description="1: FullyShardedDataParallel (FlatParameter units; Hugging Face accelerate and "
        "Lightning default); 2: fully_shard (per-parameter DTensor sharding).",
    )
    shard_group_size: Annotated[int, Field(ge=1, le=LIMITS["gpus"], strict=True)] | None = Field(
        None,
        description="fsdp-hybrid-shard: ranks one copy is sharded over; default gpusPerNode.",
    )


class DeepSpeedOptions(_Model):
    """DeepSpeed ``zero_optimization`` settings that change memory, in elements; defaults are
    DeepSpeed's own (``DeepSpeedZeroConfig``)."""

    reduce_bucket_size: Elements = Field(
        DEEPSPEED_DEFAULTS["reduceBucketSize"],
        description="Gradient elements reduced at a time (one buffer; two with overlapComm).",
    )
    allgather_bucket_size: Elements = Field(
        DEEPSPEED_DEFAULTS["allgatherBucketSize"],
        description="Parameter elements all-gathered at a time after the step (ZeRO-1/2).",
    )
    overlap_comm: StrictBool | None = Field(
        None,
        description="Overlap gradient reduction with backward (double reduce buffer in ZeRO-1/2); "
        "default true for zero3, false otherwise.",
    )
    stage3_prefetch_bucket_size: Elements = Field(
        DEEPSPEED_DEFAULTS["stage3PrefetchBucketSize"],
        description="ZeRO-3: parameter elements prefetched ahead of use.",
    )
    stage3_max_live_parameters: Elements = Field(
        DEEPSPEED_DEFAULTS["stage3MaxLiveParameters"],
        description="ZeRO-3: gathered parameter elements kept resident before releasing.",
    )
    stage3_max_reuse_distance: Elements = Field(
        DEEPSPEED_DEFAULTS["stage3MaxReuseDistance"],
        description="ZeRO-3: a parameter reused within this many elements is not released.",
    )
    stage3_param_persistence_threshold: Elements = Field(
        DEEPSPEED_DEFAULTS["stage3ParamPersistenceThreshold"],
        description="ZeRO-3: parameters of at most this many elements stay unpartitioned.",
    )
    sub_group_size: Elements = Field(
        DEEPSPEED_DEFAULTS["subGroupSize"],
        description="ZeRO-3: elements of one optimizer sub-group (its fp32 gradient copy at the "
        "step).",
    )


class Parallelism(_Model):
    """How training is spread over GPUs; GPUs are only ever added by what is declared here."""

    strategy: ParallelStrategy = Field(
        ParallelStrategy.none,
        description="none | ddp | fsdp-full-shard | fsdp-shard-grad-op | fsdp-hybrid-shard | "
        "zero1 | zero2 | zero3.",
    )
    data_parallel_size: Gpus = Field(1, description="Data-parallel replicas (ranks).")
    tensor_parallel_size: Gpus = Field(1, description="Tensor-parallel degree.")
    pipeline_parallel_size: Layers = Field(1, description="Pipeline-parallel stages.")
    context_parallel_size: Gpus = Field(
        1,
        description="Ranks one sequence is split across (context parallelism: ring attention, "
        "DeepSpeed Ulysses); ZeRO/FSDP shard over dataParallelSize x contextParallelSize.",
    )
    sequence_parallel: StrictBool = Field(
        False,
        description="Megatron sequence parallelism: layer norms and dropout split over the "
        "tensor-parallel ranks (needs tensorParallelSize > 1).",
    )
    gpus_per_node: Annotated[int, Field(ge=1, le=64, strict=True)] | None = Field(
        None,
        description="GPUs (ranks) per node; default the replica's GPUs up to 8. Sizes host "
        "memory per node, the measurement Job and fsdp-hybrid-shard's shard group.",
    )
    ddp: DdpOptions | None = Field(None, description="DDP options (strategy ddp).")
    fsdp: FsdpOptions | None = Field(None, description="FSDP options (strategy fsdp-*).")
    deepspeed: DeepSpeedOptions | None = Field(
        None, description="DeepSpeed ZeRO options (strategy zero1/2/3)."
    )

    @model_validator(mode="after")
    def _check(self) -> Parallelism:
        problems = _Problems()
        s = self.strategy
        fsdp = s.value.startswith("fsdp")
        zero = s in (ParallelStrategy.zero1, ParallelStrategy.zero2, ParallelStrategy.zero3)
        for name, options, applies, which in (
            ("ddp", self.ddp, s is ParallelStrategy.ddp, "ddp"),
            ("fsdp", self.fsdp, fsdp, "fsdp-*"),
            ("deepspeed", self.deepspeed, zero, "zero1/2/3"),
        ):
            if options is not None and not applies:
                problems.add(
                    name, f"{name} options apply to strategy {which}, not {s.value}; remove them"
                )
        if self.sequence_parallel and self.tensor_parallel_size == 1:
            problems.add(
                "sequenceParallel",
                "sequence parallelism splits activations over tensor-parallel ranks: it needs "
                "tensorParallelSize > 1",
            )
        if (
            self.fsdp is not None
            and self.fsdp.shard_group_size is not None
            and s is not ParallelStrategy.fsdp_hybrid_shard
        ):
            problems.add("fsdp.shardGroupSize", "shardGroupSize applies to fsdp-hybrid-shard only")
        problems.raise_if_any()
        return self

    @property
    def data_shards(self) -> int:
        """Ranks that ZeRO/FSDP shard model states over (data x context parallel)."""
        return self.data_parallel_size * self.context_parallel_size

    @property
    def gpus(self) -> int:
        """GPUs of one replica: data x tensor x pipeline x context parallel."""
        return (
            self.data_parallel_size
            * self.tensor_parallel_size
            * self.pipeline_parallel_size
            * self.context_parallel_size
        )

    @property
    def ranks_per_node(self) -> int:
        """Ranks on one node: ``gpusPerNode``, else the replica's GPUs up to 8."""
        return min(self.gpus, self.gpus_per_node or 8)


class Training(_Model):
    """One training or fine-tuning configuration."""

    micro_batch_size: Annotated[int, Field(ge=1, le=LIMITS["microBatch"], strict=True)] = Field(
        description="Sequences per micro-batch per GPU."
    )
    sequence_length: Tokens = Field(description="Tokens per training sequence.")
    gradient_accumulation_steps: Annotated[int, Field(ge=1, le=LIMITS["steps"], strict=True)] = (
        Field(1, description="Micro-batches accumulated per optimizer step.")
    )
    precision: Precision = Field(
        Precision.bf16_mixed, description="fp32 | bf16-mixed | fp16-mixed | bf16-true."
    )
    optimizer: Optimizer = Field(
        Optimizer.adamw,
        description="adamw | adamw-8bit | sgd | sgd-momentum | adafactor | lion.",
    )
    activation_checkpointing: StrictBool = Field(
        False, description="Recompute activations in backward (keeps only layer inputs)."
    )
    flash_attention: StrictBool = Field(
        True, description="Fused attention (no seq x seq score matrix kept for backward)."
    )
    finetuning: Finetuning = Field(
        default_factory=lambda: Finetuning(), description="Which parameters train."
    )
    parallelism: Parallelism = Field(
        default_factory=lambda: Parallelism(), description="Sharding over GPUs."
    )
    precision_recipe: PrecisionRecipe = Field(
        PrecisionRecipe.Auto,
        description="Which tensors hold which dtype: Auto | Float32 | Autocast (fp32 parameters, "
        "16-bit compute) | MasterWeights (16-bit parameters and gradients, fp32 master copy) | "
        "LowPrecision (16-bit parameters and gradients, no fp32 copy).",
    )
    gradient_dtype: TrainingDtype | None = Field(
        None,
        description="Gradients' dtype when it differs from the recipe's (e.g. float32 for "
        "Megatron's main_grad or DeepSpeed data_types.grad_accum_dtype).",
    )
    optimizer_state_dtype: TrainingDtype | None = Field(
        None,
        description="Optimizer state dtype when it differs from the recipe's (float32, or "
        "bfloat16 states; 8-bit optimizers set their own).",
    )
    offload: Offload | None = Field(
        None, description="Optimizer state and parameters offloaded to CPU or NVMe."
    )
    loss: Loss = Field(Loss.standard, description="standard | fused | chunked.")
    framework: TrainingFramework = Field(
        TrainingFramework.transformers,
        description="transformers | accelerate | torchtune | deepspeed | custom: the loop whose "
        "loading path (initialization Auto) and loss code are modelled.",
    )
    framework_version: str | None = Field(
        None,
        min_length=1,
        max_length=32,
        pattern=r"^v?[0-9]+(\.[0-9]+){0,3}([.+-]?[A-Za-z][A-Za-z0-9]*)?$",
        description="Release of the framework, e.g. '4.47.1' for transformers (before 4.49 the "
        "causal-LM loss copies the shifted float32 logits). Unset: the newest modelled.",
    )
    initialization: Initialization = Field(
        Initialization.Auto,
        description="How ranks get the model before sharding: Auto | GpuPerRank | CpuPerRank | "
        "RankZeroCpu | MetaDevice.",
    )

    @model_validator(mode="after")
    def _check(self) -> Training:
        problems = _Problems()
        recipe, precision = self.precision_recipe, self.precision
        if recipe is PrecisionRecipe.Float32 and precision is not Precision.fp32:
            problems.add(
                "precisionRecipe",
                f"Float32 trains in fp32; precision is {precision.value}: set precision fp32 or "
                "choose Autocast, MasterWeights or LowPrecision",
            )
        if precision is Precision.fp32 and recipe not in (
            PrecisionRecipe.Auto,
            PrecisionRecipe.Float32,
        ):
            problems.add(
                "precisionRecipe",
                f"{recipe.value} needs 16-bit compute; precision fp32 goes with Float32 (or Auto)",
            )
        if recipe is PrecisionRecipe.Autocast and precision is Precision.bf16_true:
            problems.add(
                "precisionRecipe",
                "Autocast keeps fp32 parameters; bf16-true keeps bfloat16 ones: use "
                "bf16-mixed with Autocast, or LowPrecision/MasterWeights with bf16-true",
            )
        sixteen = "float16" if precision is Precision.fp16_mixed else "bfloat16"
        for name, dtype in (
            ("gradientDtype", self.gradient_dtype),
            ("optimizerStateDtype", self.optimizer_state_dtype),
        ):
            if dtype is None or dtype is TrainingDtype.float32:
                continue
            if precision is Precision.fp32 or dtype.value != sixteen:
                problems.add(
                    name,
                    f"{dtype.value} does not go with precision {precision.value}: use float32 "
                    f"or {sixteen if precision is not Precision.fp32 else 'a 16-bit precision'}",
                )
        if self.optimizer_state_dtype is not None and self.optimizer is Optimizer.adamw_8bit:
            problems.add(
                "optimizerStateDtype",
                "adamw-8bit keeps its states in 8 bits (bitsandbytes); remove optimizerStateDtype",
            )
        strategy = self.parallelism.strategy
        off = self.offload
        if off is not None:
            zero = strategy in (
                ParallelStrategy.zero1,
                ParallelStrategy.zero2,
                ParallelStrategy.zero3,
            )
            fsdp = strategy.value.startswith("fsdp")
            if off.parameters is not OffloadTarget.None_ and strategy not in (
                ParallelStrategy.zero3,
                ParallelStrategy.fsdp_full_shard,
                ParallelStrategy.fsdp_hybrid_shard,
                ParallelStrategy.fsdp_shard_grad_op,
            ):
                problems.add(
                    "offload.parameters",
                    f"parameter offload needs sharded parameters (zero3 or fsdp-*), not "
                    f"strategy {strategy.value}",
                )
            if off.optimizer is not OffloadTarget.None_ and not (zero or fsdp):
                problems.add(
                    "offload.optimizer",
                    f"optimizer offload needs DeepSpeed ZeRO (zero1/2/3; with one GPU, zero2 "
                    f"with dataParallelSize 1) or FSDP, not strategy {strategy.value}",
                )
            nvme = OffloadTarget.Nvme in (off.optimizer, off.parameters)
            if nvme and strategy is not ParallelStrategy.zero3:
                problems.add(
                    "offload",
                    "NVMe offload is DeepSpeed ZeRO-Infinity: it needs strategy zero3",
                )
            if fsdp and off.optimizer is not off.parameters:
                problems.add(
                    "offload",
                    "FSDP offloads parameters, gradients and the optimizer step together "
                    "(CPUOffload(offload_params=True)): set both optimizer and parameters to Cpu",
                )
        cp = self.parallelism.context_parallel_size
        if self.sequence_length % cp:
            problems.add(
                "parallelism.contextParallelSize",
                f"contextParallelSize {cp} must divide sequenceLength ({self.sequence_length}): "
                "each rank holds an equal chunk of the sequence",
            )
        problems.raise_if_any()
        return self
