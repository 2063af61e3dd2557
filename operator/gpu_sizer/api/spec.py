"""The GPUWorkload spec (``gpusizer.dev/v1alpha1``): the single source of truth for the API.

Field names are fixed by the API contract in DESIGN.md. Python attributes are snake_case; the wire
names are camelCase (Kubernetes API conventions), except where they mirror a well-known engine
option (vLLM's ``maxModelLen``, ``maxNumSeqs``, ``kvCacheDtype``, ``tensorParallelSize``).

Sizes are integers in bytes, fractions are 0..1, durations are seconds, lengths are tokens.

Cross-field rules raise :class:`FieldError` naming the exact field, so that a validation error
always reads ``spec.inference.tensorParallelSize: ...`` rather than pointing at a parent object.
The CRD (``crds/``) is generated from these models by ``hack/gen-crd.py``; field descriptions
here become ``kubectl explain`` text.
"""

from __future__ import annotations

import difflib
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake

from gpu_sizer.api.family_keys import FAMILY_KEYS, family_key_problems

__all__ = [
    "DEEPSPEED_DEFAULTS",
    "DTYPE_BYTES",
    "KNOWN_MODEL_TYPES",
    "KNOWN_ROPE_TYPES",
    "LAYER_TYPES",
    "LENGTHS",
    "LIMITS",
    "LORA_TARGET_MODULES",
    "MAX_MIN_HEADROOM_FRACTION",
    "MOE_MODEL_TYPES",
    "QUANTIZATION_BITS",
    "VISION_LANGUAGE_MODEL_TYPES",
    "VISION_MODEL_TYPES",
    "Architecture",
    "CompressedTensorsArgs",
    "CompressedTensorsGroup",
    "CompressionFormat",
    "DdpOptions",
    "DeepSpeedOptions",
    "Dtype",
    "Engine",
    "FieldError",
    "Finetuning",
    "FinetuningMethod",
    "FsdpOptions",
    "GPUWorkloadSpec",
    "Inference",
    "Initialization",
    "KvCacheDtype",
    "Loss",
    "Measurement",
    "MeasurementMode",
    "Model",
    "Offload",
    "OffloadTarget",
    "Optimizer",
    "ParallelStrategy",
    "Parallelism",
    "Placement",
    "Precision",
    "PrecisionRecipe",
    "Quantization",
    "QuantizationMethod",
    "QuantizationStrategy",
    "QuantizationType",
    "RopeScaling",
    "Training",
    "TrainingDtype",
    "TrainingFramework",
    "VisionConfig",
    "spec_to_wire",
]


class FieldError(ValueError):
    """Cross-field rules failed; ``items`` holds (camelCase path relative to the model, message).

    :func:`gpu_sizer.api.errors.problems_from` appends each path to pydantic's location so that the
    reported path names the offending field, not the object that holds it, one line per problem.
    """

    def __init__(self, items: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {m}" for f, m in items))
        self.items = items


class _Problems:
    """Collects every cross-field problem of one model so that all are reported at once."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, field: str, message: str) -> None:
        self.items.append((field, message))

    def raise_if_any(self) -> None:
        if self.items:
            raise FieldError(self.items)


class _Model(BaseModel):
    """Base for spec objects: camelCase on the wire, unknown fields rejected (typos are errors)."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel),
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
    )


class Dtype(StrEnum):
    """Storage dtype of the weights (PyTorch names, as in a Hugging Face ``torch_dtype``)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e5m2 = "float8_e5m2"


DTYPE_BYTES: dict[Dtype, int] = {
    Dtype.float32: 4,
    Dtype.bfloat16: 2,
    Dtype.float16: 2,
    Dtype.float8_e4m3fn: 1,
    Dtype.float8_e5m2: 1,
}


class QuantizationMethod(StrEnum):
    """Weight quantization formats, as their loaders store them (see ``budget.quant_formats``).

    ``fp8`` covers every float8_e4m3 checkpoint whose config says ``quant_method`` ``fp8``
    (per-tensor, or block-wise with ``weightBlockSize``) or ``fbgemm_fp8`` (per output channel);
    ``mxfp4`` is OpenAI's gpt-oss format (MoE experts only); ``compressed-tensors`` is
    llm-compressor's format, whose schemes (W4A16, W8A8 int8/fp8, NVFP4, ...) its
    ``configGroups`` describe.
    """

    gptq = "gptq"
    awq = "awq"
    fp8 = "fp8"
    mxfp4 = "mxfp4"
    compressed_tensors = "compressed-tensors"
    bitsandbytes_nf4 = "bitsandbytes-nf4"
    bitsandbytes_int8 = "bitsandbytes-int8"


#: Bit widths each format really supports (AutoGPTQ/GPTQModel: 2, 3, 4, 8; AutoAWQ and vLLM's AWQ
#: kernels: 4; FP8: 8; MXFP4: 4; bitsandbytes NF4: 4; LLM.int8(): 8). compressed-tensors takes no
#: ``bits``: each config group gives its own ``numBits``.
QUANTIZATION_BITS: dict[QuantizationMethod, tuple[int, ...]] = {
    QuantizationMethod.gptq: (2, 3, 4, 8),
    QuantizationMethod.awq: (4,),
    QuantizationMethod.fp8: (8,),
    QuantizationMethod.mxfp4: (4,),
    QuantizationMethod.compressed_tensors: (),
    QuantizationMethod.bitsandbytes_nf4: (4,),
    QuantizationMethod.bitsandbytes_int8: (8,),
}


class CompressionFormat(StrEnum):
    """compressed-tensors ``format``: how a config group's weights are serialized
    (``compressed_tensors.CompressionFormat``)."""

    pack_quantized = "pack-quantized"
    int_quantized = "int-quantized"
    float_quantized = "float-quantized"
    naive_quantized = "naive-quantized"
    nvfp4_pack_quantized = "nvfp4-pack-quantized"
    mxfp4_pack_quantized = "mxfp4-pack-quantized"


class QuantizationType(StrEnum):
    """compressed-tensors ``QuantizationType``: integer or floating-point codes."""

    int_ = "int"
    float_ = "float"


class QuantizationStrategy(StrEnum):
    """compressed-tensors ``QuantizationStrategy``: what one scale covers."""

    tensor = "tensor"
    channel = "channel"
    group = "group"
    block = "block"
    token = "token"
    tensor_group = "tensor_group"


class Engine(StrEnum):
    """Inference engine; decides runtime overheads (CUDA graphs, workspaces)."""

    vllm = "vllm"
    transformers = "transformers"
    tgi = "tgi"
    sglang = "sglang"


class KvCacheDtype(StrEnum):
    """vLLM's ``--kv-cache-dtype``: ``auto`` stores the KV cache in the model dtype."""

    auto = "auto"
    fp8 = "fp8"
    fp8_e4m3 = "fp8_e4m3"
    fp8_e5m2 = "fp8_e5m2"


class Precision(StrEnum):
    """Training precision, in PyTorch Lightning's names."""

    fp32 = "fp32"
    bf16_mixed = "bf16-mixed"
    fp16_mixed = "fp16-mixed"
    bf16_true = "bf16-true"


class Optimizer(StrEnum):
    """Optimizer; decides optimizer-state bytes per trainable parameter."""

    adamw = "adamw"
    adamw_8bit = "adamw-8bit"
    sgd = "sgd"
    sgd_momentum = "sgd-momentum"
    adafactor = "adafactor"
    lion = "lion"


class FinetuningMethod(StrEnum):
    """``full`` trains every parameter; ``lora`` and ``qlora`` train adapters on a frozen base."""

    full = "full"
    lora = "lora"
    qlora = "qlora"


class ParallelStrategy(StrEnum):
    """Data-parallel sharding strategy (DeepSpeed ZeRO stages, PyTorch FSDP sharding strategies)."""

    none = "none"
    ddp = "ddp"
    fsdp_full_shard = "fsdp-full-shard"
    fsdp_shard_grad_op = "fsdp-shard-grad-op"
    fsdp_hybrid_shard = "fsdp-hybrid-shard"
    zero1 = "zero1"
    zero2 = "zero2"
    zero3 = "zero3"


class MeasurementMode(StrEnum):
    """``Synthetic`` runs a random-weight model of the same shape; ``Command`` wraps the workload's
    own command; ``Disabled`` never measures (the recommendation rests on the estimate)."""

    Synthetic = "Synthetic"
    Command = "Command"
    Disabled = "Disabled"


#: Model families whose parameter layout the sizing engine knows exactly (Hugging Face
#: ``model_type`` values).
KNOWN_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "gemma",
    "gemma2",
    "phi3",
    "gpt_neox",
    "falcon",
    "opt",
    "qwen3",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "gemma3",
    "gemma3_text",
    "llama4",
    "mistral3",
    "qwen2_5_vl",
    "granite",
    "olmo2",
    "glm4_moe",
    "nemotron_h",
    "jamba",
)

#: Model families that are mixture-of-experts: their architecture must say how many experts.
MOE_MODEL_TYPES: tuple[str, ...] = (
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "llama4",
    "glm4_moe",
    "jamba",
)

#: Per-layer kinds of ``layerTypes`` (``transformers``' ``layer_types`` values; Nemotron-H's
#: ``layers_block_type`` and Jamba's ``layers_block_type`` use the same words).
LAYER_TYPES: tuple[str, ...] = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "attention",
    "linear_attention",
    "mamba",
    "mlp",
    "moe",
)

#: RoPE scaling types of ``transformers``' ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils.py``),
#: plus ``su`` (Phi-3's early name for longrope) and ``default`` (no scaling).
KNOWN_ROPE_TYPES: tuple[str, ...] = (
    "default",
    "linear",
    "dynamic",
    "yarn",
    "longrope",
    "su",
    "llama3",
    "mrope",
)

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

#: Upper bounds of the size fields. They are generous (several times the largest published
#: models: Llama-3.1-405B has 126 layers, hidden 16384, vocab 128256; DeepSeek-V3 256 experts;
#: Gemini-class contexts of 10M tokens) and exist so that a typo cannot produce a 40-digit table or
#: a status integer beyond int64 (what the API server stores): with every field at its maximum the
#: per-GPU byte counts stay far below 2**63.
LIMITS: dict[str, int] = {
    "layers": 1024,
    "width": 262_144,
    "intermediate": 1_048_576,
    "heads": 16_384,
    "vocab": 4_194_304,
    "experts": 1024,
    "state": 65_536,
    "tokens": 16_777_216,
    "batchedTokens": 134_217_728,
    "seqs": 65_536,
    "parameters": 10**14,
    "microBatch": 65_536,
    "gpus": 65_536,
    "steps": 1_048_576,
    "rank": 65_536,
}

#: Upper bounds of list lengths (CRD ``maxItems``) and string lengths (``maxLength``) in the spec.
#: They bound the work and the answer of one admission review (a 100,000-entry
#: ``loraTargetModules`` took 13 s to validate and produced a 27 MB denial) and let the API
#: server's CEL cost estimator bound the validation rules. Each is far above real use: the
#: catalog has 15 classes, PEFT targets name at most the 7 projection roles of a block, a
#: Hugging Face repository id is at most 96 + 1 + 96 characters, an image reference at most a
#: 255-character name plus tag or digest.
LENGTHS: dict[str, int] = {
    "identifier": 64,  # model types, rope types, LoRA module names
    "name": 256,  # model names (Hub ids), revisions
    "image": 1024,
    "gpuClass": 63,  # a DNS label, like the class names of the catalog
    "gpuClasses": 64,
    "loraTargetModules": 64,
    "concurrencyLevels": 16,
    "commandArgs": 256,
    "commandArg": 16_384,
    # quantization: Llama-3.1-405B-FP8 lists 511 modules by full name; config groups are few
    "moduleName": 256,
    "moduleNames": 2048,
    "configGroups": 16,
}

PositiveInt = Annotated[int, Field(ge=1, strict=True)]
Layers = Annotated[int, Field(ge=1, le=LIMITS["layers"], strict=True)]
Width = Annotated[int, Field(ge=1, le=LIMITS["width"], strict=True)]
Inner = Annotated[int, Field(ge=1, le=LIMITS["intermediate"], strict=True)]
Heads = Annotated[int, Field(ge=1, le=LIMITS["heads"], strict=True)]
Experts = Annotated[int, Field(ge=1, le=LIMITS["experts"], strict=True)]
Tokens = Annotated[int, Field(ge=1, le=LIMITS["tokens"], strict=True)]
Seqs = Annotated[int, Field(ge=1, le=LIMITS["seqs"], strict=True)]
Gpus = Annotated[int, Field(ge=1, le=LIMITS["gpus"], strict=True)]
Vocab = Annotated[int, Field(ge=1, le=LIMITS["vocab"], strict=True)]
Rank = Annotated[int, Field(ge=1, le=LIMITS["rank"], strict=True)]
MicroBatch = Annotated[int, Field(ge=1, le=LIMITS["microBatch"], strict=True)]
Identifier = Annotated[str, Field(max_length=LENGTHS["identifier"])]
Name = Annotated[str, Field(max_length=LENGTHS["name"])]
Fraction = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A finite float on the wire; strict mode still accepts an integer (JSON has one number type) but
not a string or a boolean. NaN and Infinity (which Python's and Go's JSON readers can produce
from ``NaN`` literals or overflowing ones such as ``1e400``) are refused: every comparison with
NaN is false, so a NaN bound would silently pass or fail range checks."""


class RopeScaling(_Model):
    """RoPE scaling from config.json's ``rope_scaling``: extends the usable context."""

    rope_type: Identifier | None = Field(
        None,
        description="Scaling type from config.json: " + ", ".join(KNOWN_ROPE_TYPES) + " "
        "(unset: linear). No default is stored, so that an object written with the legacy "
        "`type` key keeps its value.",
    )
    legacy_type: Identifier | None = Field(
        None,
        alias="type",
        exclude=True,
        description="Older config.json files name ropeType `type`; accepted as ropeType.",
    )
    factor: Fraction = Field(1.0, ge=1.0, le=1024.0, description="Context extension factor.")
    original_max_position_embeddings: Tokens | None = Field(
        None, description="Context length the model was pre-trained with, in tokens."
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_key(cls, data: Any) -> Any:
        """config.json has used both ``type`` and ``rope_type``: take ``type`` as ropeType."""
        if isinstance(data, dict) and data.get("type") is not None:
            data = dict(data)
            legacy = data.pop("type")
            if data.get("ropeType", legacy) != legacy:
                raise FieldError(
                    [("type", f"type {legacy!r} disagrees with ropeType {data['ropeType']!r}")]
                )
            data["ropeType"] = legacy
        return data

    @model_validator(mode="after")
    def _check(self) -> RopeScaling:
        if self.rope_type is not None and self.rope_type not in KNOWN_ROPE_TYPES:
            raise FieldError(
                [
                    (
                        "ropeType",
                        f"unknown rope type {self.rope_type!r}; known: "
                        + ", ".join(KNOWN_ROPE_TYPES),
                    )
                ]
            )
        return self


Count = Annotated[int, Field(ge=0, le=LIMITS["layers"], strict=True)]
State = Annotated[int, Field(ge=1, le=LIMITS["state"], strict=True)]


class VisionConfig(_Model):
    """A vision-language model's image encoder: config.json's ``vision_config``, camelCased.

    The keys are those of the vision config class of each supported family, spelled as that
    class spells them (Qwen2.5-VL says ``depth``/``numHeads`` where SigLIP, Pixtral and Llama 4
    say ``numHiddenLayers``/``numAttentionHeads``); either spelling is accepted.
    """

    model_type: Identifier = Field(
        description="Vision config model_type: siglip_vision_model (Gemma 3), pixtral "
        "(Mistral 3), qwen2_5_vl (Qwen2.5-VL), llama4_vision_model (Llama 4)."
    )
    hidden_size: Width = Field(description="Encoder width.")
    intermediate_size: Inner = Field(description="Encoder MLP inner width.")
    num_hidden_layers: Layers | None = Field(None, description="Encoder blocks (SigLIP, Pixtral).")
    depth: Layers | None = Field(None, description="Encoder blocks (Qwen2.5-VL's name).")
    num_attention_heads: Heads | None = Field(None, description="Encoder heads.")
    num_heads: Heads | None = Field(None, description="Encoder heads (Qwen2.5-VL's name).")
    head_dim: Width | None = Field(None, description="Per-head width (Pixtral).")
    patch_size: Width = Field(14, description="Patch side in pixels.")
    image_size: Annotated[int, Field(ge=1, le=LIMITS["width"], strict=True)] | None = Field(
        None, description="Image side in pixels the encoder was trained at (learned positions)."
    )
    num_channels: Width | None = Field(None, description="Image channels (default 3).")
    in_chans: Width | None = Field(None, description="Image channels (Qwen2.5-VL's name).")
    temporal_patch_size: Width | None = Field(
        None, description="Qwen2.5-VL: frames per 3-D patch (default 2)."
    )
    spatial_merge_size: Width | None = Field(
        None, description="Qwen2.5-VL: patches merged per side by the merger (default 2)."
    )
    out_hidden_size: Width | None = Field(
        None, description="Qwen2.5-VL: merger output width (the language model's hiddenSize)."
    )
    vision_use_head: StrictBool | None = Field(
        None, description="SigLIP: attention-pooling head (false in Gemma 3)."
    )
    vision_output_dim: Width | None = Field(None, description="Llama 4: adapter output width.")
    projector_input_dim: Width | None = Field(None, description="Llama 4: projector input.")
    projector_output_dim: Width | None = Field(None, description="Llama 4: projector output.")
    pixel_shuffle_ratio: Fraction | None = Field(
        None, gt=0.0, le=1.0, description="Llama 4: pixel-shuffle ratio (0.5 merges 2 x 2)."
    )

    @property
    def layers(self) -> int:
        """Encoder blocks, whichever key the config uses."""
        return self.num_hidden_layers or self.depth or 1

    @property
    def heads(self) -> int:
        """Encoder attention heads, whichever key the config uses."""
        return self.num_attention_heads or self.num_heads or 1

    @property
    def channels(self) -> int:
        """Image channels, whichever key the config uses."""
        return self.num_channels or self.in_chans or 3

    @model_validator(mode="after")
    def _check(self) -> VisionConfig:
        problems = _Problems()
        if self.model_type not in VISION_MODEL_TYPES:
            problems.add(
                "modelType",
                f"unknown vision model type {self.model_type!r}; supported: "
                + ", ".join(VISION_MODEL_TYPES),
            )
        if self.num_hidden_layers is None and self.depth is None:
            problems.add("numHiddenLayers", "give numHiddenLayers (or depth)")
        if self.num_attention_heads is None and self.num_heads is None:
            problems.add("numAttentionHeads", "give numAttentionHeads (or numHeads)")
        problems.raise_if_any()
        return self


#: Vision encoders the sizing engine knows (``vision_config.model_type``), by the family that
#: uses them.
VISION_MODEL_TYPES: tuple[str, ...] = (
    "siglip_vision_model",
    "pixtral",
    "qwen2_5_vl",
    "llama4_vision_model",
)

#: Families whose config.json nests a ``vision_config`` (vision-language models).
VISION_LANGUAGE_MODEL_TYPES: tuple[str, ...] = ("gemma3", "mistral3", "qwen2_5_vl", "llama4")


class Architecture(_Model):
    """The model's shape: Hugging Face config.json keys, camelCased.

    Only the keys that change memory are kept. Defaults follow ``transformers``' config classes.
    """

    model_type: Identifier = Field(
        description="Hugging Face model_type. Exact parameter layouts: "
        + ", ".join(KNOWN_MODEL_TYPES)
        + ". Any other model_type needs spec.model.parameterCount; its attention geometry "
        "(layers, KV heads, head size, layerTypes, slidingWindow, kvLoraRank) sizes the KV "
        "cache and activations."
    )
    num_hidden_layers: Layers = Field(description="Transformer blocks (num_hidden_layers).")
    hidden_size: Width = Field(description="Model width d_model (hidden_size).")
    intermediate_size: Inner = Field(
        description="MLP inner width (intermediate_size; ffn_dim for OPT); per expert for MoE."
    )
    num_attention_heads: Heads = Field(description="Query heads per layer.")
    num_key_value_heads: Heads | None = Field(
        None,
        description="KV heads per layer (GQA/MQA); default num_attention_heads (multi-head).",
    )
    head_dim: Width | None = Field(
        None, description="Per-head width; default hiddenSize / numAttentionHeads."
    )
    vocab_size: Annotated[int, Field(ge=1, le=LIMITS["vocab"], strict=True)] = Field(
        description="Vocabulary size (rows of the embedding)."
    )
    tie_word_embeddings: StrictBool | None = Field(
        None,
        description="lm_head shares the input embedding's weights; unset takes the family's "
        "config-class default (tied for gemma, gemma2, falcon, opt).",
    )
    max_position_embeddings: Tokens = Field(
        description="Longest context the model supports without rope scaling, in tokens."
    )
    attention_bias: StrictBool | None = Field(
        None,
        description="q/k/v/o projections carry biases (Llama's attention_bias); unset takes the "
        "family default (biased for gpt_neox and opt; Qwen2's qkv biases are always counted).",
    )
    mlp_bias: StrictBool = Field(
        False, description="MLP projections carry biases (Llama's mlp_bias)."
    )
    num_local_experts: Experts | None = Field(
        None, description="MoE: experts per layer (Mixtral's num_local_experts)."
    )
    num_experts_per_tok: Experts | None = Field(
        None, description="MoE: experts routed per token (top-k)."
    )
    moe_intermediate_size: Inner | None = Field(
        None, description="MoE: per-expert MLP width when it differs from intermediateSize."
    )
    shared_expert_intermediate_size: Inner | None = Field(
        None, description="MoE: width of the always-on shared expert (Qwen2-MoE)."
    )
    sliding_window: Tokens | None = Field(
        None, description="Sliding-window attention span in tokens; caps the KV cache per sequence."
    )
    rope_scaling: RopeScaling | None = Field(
        None, description="RoPE scaling; allows maxModelLen beyond maxPositionEmbeddings."
    )
    word_embed_proj_dim: Width | None = Field(
        None, description="OPT: embedding width when it differs from hiddenSize (OPT-350m)."
    )
    new_decoder_architecture: StrictBool = Field(
        False, description="Falcon: the 40B/180B layout with grouped KV heads and two layer norms."
    )
    parallel_attn: StrictBool = Field(
        True,
        description="Falcon: attention and MLP read one shared layer norm (parallel_attn); false "
        "adds a post-attention layer norm.",
    )
    do_layer_norm_before: StrictBool = Field(
        True,
        description="OPT: pre-layer-norm blocks with a final layer norm (false for OPT-350m).",
    )
    num_experts: Experts | None = Field(
        None, description="MoE: experts per layer, as Qwen-MoE and Jamba name it (num_experts)."
    )
    n_routed_experts: Experts | None = Field(
        None, description="MoE: routed experts per layer, as DeepSeek and GLM name it."
    )
    n_shared_experts: Count | None = Field(
        None, description="MoE: always-on shared experts of moeIntermediateSize (DeepSeek, GLM)."
    )
    first_k_dense_replace: Count | None = Field(
        None, description="MoE: the first k layers have a dense MLP (DeepSeek, GLM)."
    )
    moe_layer_freq: Layers | None = Field(
        None, description="DeepSeek: every n-th layer after the first k is MoE (default 1)."
    )
    decoder_sparse_step: Layers | None = Field(
        None, description="Qwen-MoE: every n-th layer is MoE (default 1)."
    )
    mlp_only_layers: (
        Annotated[
            tuple[Annotated[int, Field(ge=0, lt=LIMITS["layers"], strict=True)], ...],
            Field(max_length=LIMITS["layers"]),
        ]
        | None
    ) = Field(None, description="Qwen-MoE: layer indices with a dense MLP.")
    interleave_moe_layer_step: Layers | None = Field(
        None, description="Llama 4: every n-th layer is MoE (1: all; 2: Maverick)."
    )
    intermediate_size_mlp: Inner | None = Field(
        None, description="Llama 4: MLP width of the dense (non-MoE) layers."
    )
    q_lora_rank: Width | None = Field(
        None, description="MLA: query compression rank (unset: a full q_proj, DeepSeek-V2-Lite)."
    )
    kv_lora_rank: Width | None = Field(
        None,
        description="MLA (multi-head latent attention): the compressed KV width cached per "
        "token and layer, with qkRopeHeadDim (DeepSeek-V2/V3).",
    )
    qk_rope_head_dim: Width | None = Field(None, description="MLA: rotary part of a q/k head.")
    qk_nope_head_dim: Width | None = Field(None, description="MLA: non-rotary part of a q/k head.")
    v_head_dim: Width | None = Field(None, description="MLA: value head width.")
    layer_types: Annotated[tuple[Identifier, ...], Field(max_length=LIMITS["layers"])] | None = (
        Field(
            None,
            description="Per-layer kind, as transformers reads it: " + ", ".join(LAYER_TYPES) + ".",
        )
    )
    sliding_window_pattern: Layers | None = Field(
        None,
        description="Gemma 3: every n-th layer is global, the others slide (default 6); used when "
        "layerTypes is unset.",
    )
    attention_chunk_size: Tokens | None = Field(
        None, description="Llama 4: chunked local attention span in tokens (default 8192)."
    )
    no_rope_layers: (
        Annotated[
            tuple[Annotated[int, Field(ge=0, le=1, strict=True)], ...],
            Field(max_length=LIMITS["layers"]),
        ]
        | None
    ) = Field(
        None,
        description="Llama 4: 1 per RoPE (chunked) layer, 0 per NoPE (global) layer; default "
        "every fourth layer global.",
    )
    use_qk_norm: StrictBool | None = Field(
        None, description="q/k RMSNorm per head (GLM-4.5: weights; Llama 4: weightless L2 norm)."
    )
    hybrid_override_pattern: str | None = Field(
        None,
        description="Nemotron-H: one character per layer: M Mamba-2, * attention, - MLP.",
        max_length=LIMITS["layers"],
    )
    mamba_num_heads: Heads | None = Field(None, description="Nemotron-H: Mamba-2 heads.")
    mamba_head_dim: Width | None = Field(None, description="Nemotron-H: Mamba-2 head width.")
    ssm_state_size: State | None = Field(None, description="Nemotron-H: SSM state per head.")
    n_groups: Heads | None = Field(None, description="Nemotron-H: Mamba-2 B/C groups.")
    conv_kernel: State | None = Field(None, description="Nemotron-H: causal conv width.")
    expand: Width | None = Field(None, description="Nemotron-H: Mamba inner width / hidden.")
    use_conv_bias: StrictBool | None = Field(None, description="Nemotron-H: conv1d bias.")
    use_bias: StrictBool | None = Field(
        None, description="Nemotron-H: Mamba-2 in_proj/out_proj biases."
    )
    attn_layer_period: Layers | None = Field(None, description="Jamba: attention layer period.")
    attn_layer_offset: Count | None = Field(None, description="Jamba: attention layer offset.")
    expert_layer_period: Layers | None = Field(None, description="Jamba: MoE layer period.")
    expert_layer_offset: Count | None = Field(None, description="Jamba: MoE layer offset.")
    mamba_d_state: State | None = Field(None, description="Jamba: SSM state per channel.")
    mamba_d_conv: State | None = Field(None, description="Jamba: causal conv width.")
    mamba_expand: Width | None = Field(None, description="Jamba: Mamba inner width / hidden.")
    mamba_dt_rank: Width | None = Field(None, description="Jamba: time-step projection rank.")
    mamba_conv_bias: StrictBool | None = Field(None, description="Jamba: conv1d bias.")
    mamba_proj_bias: StrictBool | None = Field(
        None, description="Jamba: Mamba in_proj/out_proj biases."
    )
    vision_config: VisionConfig | None = Field(
        None,
        description="Vision-language models (" + ", ".join(VISION_LANGUAGE_MODEL_TYPES) + "): "
        "config.json's vision_config; the language model's keys (text_config) sit at this level.",
    )
    multimodal_projector_bias: StrictBool | None = Field(
        None, description="Mistral 3: biases on the multimodal projector (default false)."
    )
    spatial_merge_size: Width | None = Field(
        None, description="Mistral 3: image patches merged per side (default 2)."
    )

    @property
    def experts(self) -> int | None:
        """Routed experts per MoE layer, whichever config key names them."""
        return self.num_local_experts or self.num_experts or self.n_routed_experts

    @property
    def kv_heads(self) -> int:
        """KV heads per layer (multi-head attention when unset)."""
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """Per-head width in elements."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def max_context(self) -> int:
        """Longest usable context in tokens, rope scaling included."""
        if self.rope_scaling is None or self.rope_scaling.factor <= 1.0:
            return self.max_position_embeddings
        base = self.rope_scaling.original_max_position_embeddings or self.max_position_embeddings
        return max(self.max_position_embeddings, int(base * self.rope_scaling.factor))

    @model_validator(mode="after")
    def _check(self) -> Architecture:
        problems = _Problems()
        if self.model_type not in KNOWN_MODEL_TYPES:
            self._check_generic(problems)
        else:
            keys = {
                to_camel(name): getattr(self, name)
                for name in type(self).model_fields
                if to_camel(name) in FAMILY_KEYS
            }
            for wire, message in family_key_problems(self.model_type, keys):
                problems.add(wire, message)
        if self.num_attention_heads % self.kv_heads != 0:
            problems.add(
                "numKeyValueHeads",
                f"numAttentionHeads ({self.num_attention_heads}) must be divisible by "
                f"numKeyValueHeads ({self.kv_heads})",
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads != 0:
            problems.add(
                "headDim",
                f"hiddenSize ({self.hidden_size}) is not divisible by numAttentionHeads "
                f"({self.num_attention_heads}); set headDim explicitly",
            )
        named = [
            wire
            for wire, value in (
                ("numLocalExperts", self.num_local_experts),
                ("numExperts", self.num_experts),
                ("nRoutedExperts", self.n_routed_experts),
            )
            if value is not None
        ]
        experts = self.experts
        if len(named) > 1:
            problems.add(named[1], f"give one of {' and '.join(named)}: they name the same count")
        if self.model_type in MOE_MODEL_TYPES and experts is None:
            problems.add(
                "numLocalExperts",
                f"{self.model_type} is a mixture-of-experts family: set the expert count as "
                "config.json names it (numLocalExperts, numExperts or nRoutedExperts) and "
                "numExpertsPerTok (num_experts_per_tok); without them it would be sized as a "
                "dense model",
            )
        elif (experts is None) != (self.num_experts_per_tok is None):
            problems.add(
                "numExpertsPerTok",
                "MoE needs both an expert count and numExpertsPerTok, or neither",
            )
        if (
            experts is not None
            and self.num_experts_per_tok is not None
            and self.num_experts_per_tok > experts
        ):
            problems.add(
                "numExpertsPerTok",
                f"numExpertsPerTok ({self.num_experts_per_tok}) cannot exceed the expert count "
                f"({experts})",
            )
        self._check_layers(problems)
        problems.raise_if_any()
        return self

    def _check_generic(self, problems: _Problems) -> None:
        """A family without a parameter layout is sized from its attention geometry only: its
        layers must all be attention layers (state-space and linear-attention layers hold state
        whose size only a known family's keys give)."""
        hybrid = [
            wire
            for wire, value in (
                ("hybridOverridePattern", self.hybrid_override_pattern),
                ("mambaNumHeads", self.mamba_num_heads),
                ("ssmStateSize", self.ssm_state_size),
                ("attnLayerPeriod", self.attn_layer_period),
                ("mambaDState", self.mamba_d_state),
            )
            if value is not None
        ]
        if hybrid:
            problems.add(
                hybrid[0],
                f"model type {self.model_type!r} has state-space layers, which are sized only "
                "for nemotron_h and jamba: drop spec.model.architecture and keep "
                "spec.model.parameterCount (the estimate is then Incomplete: KV cache and "
                "activations not counted)",
            )

    def _check_layers(self, problems: _Problems) -> None:
        """Per-layer patterns, MLA and the families that need a nested vision config."""
        layers = self.num_hidden_layers
        if self.layer_types is not None:
            unknown = sorted({t for t in self.layer_types if t not in LAYER_TYPES})
            if unknown:
                problems.add(
                    "layerTypes",
                    f"unknown layer types {unknown}; known: " + ", ".join(LAYER_TYPES),
                )
            hybrid = self.model_type in ("nemotron_h", "jamba")
            kinds = set(self.layer_types)
            if not hybrid and kinds - {"full_attention", "sliding_attention", "chunked_attention"}:
                fix = (
                    ""
                    if self.model_type in KNOWN_MODEL_TYPES
                    else " (a model with other layers: drop spec.model.architecture and keep "
                    "spec.model.parameterCount; the estimate is then Incomplete)"
                )
                problems.add(
                    "layerTypes",
                    f"{self.model_type} layers are full_attention, sliding_attention or "
                    f"chunked_attention, not {sorted(kinds - set(LAYER_TYPES[:3]))}{fix}",
                )
            if "moe" in kinds and self.model_type == "nemotron_h":
                problems.add("layerTypes", "Nemotron-H MoE layers are not sized yet")
            if len(self.layer_types) != layers:
                problems.add(
                    "layerTypes",
                    f"{len(self.layer_types)} entries for numHiddenLayers {layers}: give one "
                    "per layer",
                )
        for name, wire in (("no_rope_layers", "noRopeLayers"),):
            values = getattr(self, name)
            if values is not None and len(values) not in (0, layers):
                problems.add(wire, f"{len(values)} entries for numHiddenLayers {layers}")
        pattern = self.hybrid_override_pattern
        if pattern is not None:
            bad = sorted(set(pattern) - set("M*-"))
            if bad:
                problems.add(
                    "hybridOverridePattern",
                    f"layer codes {bad} are not supported: M (Mamba-2), * (attention) and - (MLP) "
                    "are; E (the MoE layers of Nemotron 3 Nano and later) is not sized yet",
                )
            if len(pattern) != layers:
                problems.add(
                    "hybridOverridePattern",
                    f"{len(pattern)} characters for numHiddenLayers {layers}: give one per layer",
                )
        if self.model_type == "nemotron_h" and pattern is None and self.layer_types is None:
            problems.add(
                "hybridOverridePattern",
                "nemotron_h needs its layer pattern: hybridOverridePattern (or layerTypes) "
                "from config.json",
            )
        if self.mlp_only_layers is not None and any(i >= layers for i in self.mlp_only_layers):
            problems.add("mlpOnlyLayers", f"layer indices must be below numHiddenLayers {layers}")
        mla = (self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim)
        if any(v is not None for v in mla) and any(v is None for v in mla):
            problems.add(
                "kvLoraRank",
                "multi-head latent attention needs kvLoraRank, qkRopeHeadDim, qkNopeHeadDim and "
                "vHeadDim together",
            )
        if self.model_type in ("deepseek_v2", "deepseek_v3") and self.kv_lora_rank is None:
            problems.add(
                "kvLoraRank",
                f"{self.model_type} uses multi-head latent attention: set kvLoraRank, "
                "qkRopeHeadDim, qkNopeHeadDim and vHeadDim from config.json",
            )
        if self.model_type in VISION_LANGUAGE_MODEL_TYPES and self.vision_config is None:
            problems.add(
                "visionConfig",
                f"{self.model_type} is a vision-language model: give config.json's "
                "vision_config as visionConfig (and its text_config keys at this level)",
            )
        if self.vision_config is not None and self.model_type not in VISION_LANGUAGE_MODEL_TYPES:
            problems.add(
                "visionConfig",
                f"{self.model_type} has no vision encoder; visionConfig applies to "
                + ", ".join(VISION_LANGUAGE_MODEL_TYPES),
            )


ModuleNames = Annotated[
    tuple[Annotated[str, Field(min_length=1, max_length=LENGTHS["moduleName"])], ...],
    Field(max_length=LENGTHS["moduleNames"]),
]
"""Module names or patterns of a checkpoint (``model.layers.0.self_attn.q_proj``)."""


class CompressedTensorsArgs(_Model):
    """compressed-tensors ``QuantizationArgs`` of one tensor kind (config.json keys, camelCased).

    Only the keys that change stored bytes are kept; ``observer`` and the like are dropped by
    ``gpu-sizer import-hf-config``.
    """

    num_bits: Annotated[int, Field(ge=2, le=8, strict=True)] = Field(
        8, description="Bits per element: 4 (W4A16, NVFP4, MXFP4) or 8 (W8A8, FP8)."
    )
    type: QuantizationType = Field(QuantizationType.int_, description="int | float.")
    strategy: QuantizationStrategy | None = Field(
        None,
        description="tensor | channel | group | block | token | tensor_group (NVFP4: one fp8 "
        "scale per 16 elements plus one global scale).",
    )
    group_size: Annotated[int, Field(ge=1, le=LIMITS["intermediate"], strict=True)] | None = Field(
        None, description="Elements per scale along the input features (group strategy)."
    )
    block_structure: (
        tuple[
            Annotated[int, Field(ge=1, le=LIMITS["width"], strict=True)],
            Annotated[int, Field(ge=1, le=LIMITS["width"], strict=True)],
        ]
        | None
    ) = Field(None, description="Block strategy: [output, input] elements per scale.")
    symmetric: StrictBool = Field(True, description="False stores zero points too.")
    dynamic: StrictBool = Field(
        False,
        description="Scales computed at run time (activations; compressed-tensors' 'local', "
        "per group at run time under a static global scale, is true here).",
    )
    actorder: Literal["group", "weight", "static"] | None = Field(
        None, description="Activation reordering; group/weight store a g_idx per input feature."
    )


class CompressedTensorsGroup(_Model):
    """compressed-tensors ``QuantizationScheme``: which modules it targets and how."""

    targets: ModuleNames = Field(
        description="Module class names (Linear), exact module names or 're:' regular expressions."
    )
    weights: CompressedTensorsArgs | None = Field(None, description="How weights are stored.")
    input_activations: CompressedTensorsArgs | None = Field(
        None, description="How activations are quantized (static input scales are counted)."
    )


class Quantization(_Model):
    """Weight quantization as stored in the checkpoint (config.json ``quantization_config``).

    Besides the method, the modules a checkpoint leaves unquantized change memory a lot
    (Llama-3.1-405B-FP8 keeps attention and two MLPs in bf16): ``modulesToNotConvert``
    (transformers and vLLM's name for fp8, fbgemm_fp8, mxfp4, GPTQ/AWQ and bitsandbytes) or
    compressed-tensors' ``ignore``. Embeddings and lm_head stay 16-bit in every format.
    """

    method: QuantizationMethod = Field(
        description="gptq | awq | fp8 | mxfp4 | compressed-tensors | bitsandbytes-nf4 | "
        "bitsandbytes-int8."
    )
    bits: StrictInt | None = Field(
        None, ge=2, le=8, description="Bits per weight; default the method's only/usual width."
    )
    group_size: StrictInt | None = Field(
        None,
        ge=-1,
        le=LIMITS["intermediate"],
        description="GPTQ/AWQ group size (weights sharing one scale); -1 is per-channel. "
        "Default 128.",
    )
    desc_act: StrictBool = Field(
        False, description="GPTQ act-order: stores a g_idx permutation index per input row."
    )
    double_quant: StrictBool = Field(
        True, description="bitsandbytes NF4: quantize the absmax constants too (QLoRA paper)."
    )
    per_channel_scales: StrictBool = Field(
        False,
        description="FP8: one weight scale per output channel (FBGEMM FP8, quant_method "
        "fbgemm_fp8) instead of one per tensor.",
    )
    weight_block_size: (
        tuple[
            Annotated[int, Field(ge=1, le=LIMITS["width"], strict=True)],
            Annotated[int, Field(ge=1, le=LIMITS["width"], strict=True)],
        ]
        | None
    ) = Field(
        None,
        description="FP8: [output, input] elements per weight scale (block-wise FP8; "
        "DeepSeek-V3 and Qwen3 FP8 releases use [128, 128]).",
    )
    modules_to_not_convert: ModuleNames | None = Field(
        None,
        description="Modules left unquantized (transformers' and vLLM's modules_to_not_convert "
        "or ignored_layers): full names, parent modules or '*' for one name part.",
    )
    format: CompressionFormat | None = Field(
        None, description="compressed-tensors: how weights are serialized."
    )
    config_groups: (
        Annotated[
            dict[
                Annotated[str, Field(min_length=1, max_length=LENGTHS["identifier"])],
                CompressedTensorsGroup,
            ],
            Field(max_length=LENGTHS["configGroups"]),
        ]
        | None
    ) = Field(None, description="compressed-tensors: the quantization schemes and their targets.")
    ignore: ModuleNames = Field(
        (),
        description="compressed-tensors: modules left unquantized (exact names or 're:' "
        "regular expressions).",
    )

    def __hash__(self) -> int:
        """Hash of every field, ``configGroups`` as its (name, group) pairs: the object is frozen,
        but pydantic's generated hash would hash the dict and fail ("unhashable type: 'dict'"),
        and the memory model keys its caches on the model (``budget.estimate``)."""
        return hash(
            tuple(
                tuple(sorted(value.items())) if isinstance(value, dict) else value
                for value in vars(self).values()
            )
        )

    @property
    def effective_bits(self) -> int:
        """Bits per weight, defaulting to the method's usual width (compressed-tensors: the
        first config group's weight bits)."""
        if self.bits is not None:
            return self.bits
        if self.method is QuantizationMethod.compressed_tensors:
            for group in (self.config_groups or {}).values():
                if group.weights is not None:
                    return group.weights.num_bits
            return 8
        return 4 if self.method is QuantizationMethod.gptq else QUANTIZATION_BITS[self.method][0]

    @model_validator(mode="after")
    def _check(self) -> Quantization:
        problems = _Problems()
        allowed = QUANTIZATION_BITS[self.method]
        if self.bits is not None and self.bits not in allowed:
            problems.add(
                "bits",
                f"{self.method.value} supports bits "
                + " or ".join(str(b) for b in allowed)
                + f", not {self.bits}",
            )
        if self.group_size is not None and self.group_size == 0:
            problems.add("groupSize", "groupSize must be -1 (per-channel) or positive")
        ct = self.method is QuantizationMethod.compressed_tensors
        if ct:
            for name in ("groupSize", "weightBlockSize", "modulesToNotConvert"):
                if getattr(self, to_snake(name)) is not None:
                    problems.add(
                        name,
                        f"compressed-tensors gives {name} per config group"
                        + (" (use ignore for unquantized modules)" if name[0] == "m" else ""),
                    )
            groups = self.config_groups or {}
            if not any(g.weights is not None for g in groups.values()):
                problems.add(
                    "configGroups",
                    "compressed-tensors needs configGroups with weights (config.json "
                    "quantization_config.config_groups; gpu-sizer import-hf-config copies them)",
                )
            for name, group in groups.items():
                _check_ct_weights(problems, f"configGroups.{name}.weights", group.weights)
        else:
            for name in ("format", "configGroups"):
                if getattr(self, to_snake(name)) is not None:
                    problems.add(name, f"{name} applies only to method compressed-tensors")
            if self.ignore:
                problems.add(
                    "ignore",
                    "ignore is compressed-tensors' list; other methods name unquantized "
                    "modules in modulesToNotConvert",
                )
        if self.weight_block_size is not None:
            if self.method is not QuantizationMethod.fp8:
                problems.add("weightBlockSize", "weightBlockSize applies only to method fp8")
            elif self.per_channel_scales:
                problems.add(
                    "weightBlockSize",
                    "block-wise and per-channel scales exclude each other; give one",
                )
        problems.raise_if_any()
        return self


def _check_ct_weights(problems: _Problems, path: str, args: CompressedTensorsArgs | None) -> None:
    """The weight schemes vLLM's compressed-tensors loader serves (``CompressedTensorsConfig.
    _get_scheme_from_parts``): int 4/8 (W4A16, W8A16, W8A8), float 8 (FP8), float 4 (NVFP4 with
    16-element groups, MXFP4 with 32)."""
    if args is None:
        return
    bits, kind = args.num_bits, args.type
    if bits not in (4, 8):
        problems.add(f"{path}.numBits", f"numBits {bits} is not served; use 4 or 8")
    strategy = args.strategy
    if strategy is QuantizationStrategy.group and args.group_size is None:
        problems.add(f"{path}.groupSize", "the group strategy needs groupSize")
    if strategy is QuantizationStrategy.block and args.block_structure is None:
        problems.add(f"{path}.blockStructure", "the block strategy needs blockStructure")
    if kind is QuantizationType.float_ and bits == 4 and args.group_size not in (None, 16, 32):
        problems.add(
            f"{path}.groupSize",
            "float 4-bit weights are NVFP4 (groupSize 16) or MXFP4 (groupSize 32)",
        )


class Model(_Model):
    """What is loaded: an architecture (preferred) or a bare parameter count."""

    name: Name | None = Field(None, description="Model name, informational (e.g. a Hub id).")
    revision: Name | None = Field(
        None, description="Model revision (commit), informational; recorded with measurements."
    )
    architecture: Architecture | None = Field(
        None, description="Shape from config.json; gives exact parameter and KV cache figures."
    )
    parameter_count: Annotated[int, Field(ge=1, le=LIMITS["parameters"], strict=True)] | None = (
        Field(None, description="Total parameters; required when architecture is absent.")
    )
    dtype: Dtype = Field(Dtype.bfloat16, description="Storage dtype of unquantized weights.")
    quantization: Quantization | None = Field(None, description="Weight quantization, if any.")
    pipeline: Pipeline | None = Field(
        None,
        description="A diffusion pipeline (image or video generation): its class and components "
        "from model_index.json and each config.json (gpu-sizer import-diffusers).",
    )

    @property
    def quantization_method(self) -> QuantizationMethod | None:
        """The quantization method, or ``None`` for unquantized weights."""
        return self.quantization.method if self.quantization else None

    @model_validator(mode="after")
    def _check(self) -> Model:
        problems = _Problems()
        if self.pipeline is not None:
            if self.architecture is not None:
                problems.add(
                    "pipeline",
                    "give spec.model.pipeline (a diffusion pipeline) or spec.model.architecture "
                    "(a language model), not both",
                )
        elif self.architecture is None and self.parameter_count is None:
            problems.add(
                "parameterCount",
                "give spec.model.architecture (config.json keys), spec.model.parameterCount, or "
                "spec.model.pipeline (a diffusion pipeline)",
            )
        arch = self.architecture
        if (
            arch is not None
            and arch.model_type not in KNOWN_MODEL_TYPES
            and self.parameter_count is None
        ):
            problems.add(
                "architecture.modelType",
                f"model type {arch.model_type!r} has no exact parameter layout in gpu-sizer "
                "(those with one: " + ", ".join(KNOWN_MODEL_TYPES) + "): give "
                "spec.model.parameterCount with it (gpu-sizer import-hf-config counts it with "
                "transformers on the meta device when the hf extra is installed); the "
                "architecture then sizes the KV cache and activations",
            )
        problems.raise_if_any()
        return self


class Inference(_Model):
    """Serving settings, named after vLLM's engine arguments."""

    engine: Engine = Field(Engine.vllm, description="vllm | transformers | tgi | sglang.")
    max_model_len: Tokens = Field(
        description="Longest sequence (prompt plus output) in tokens (vLLM --max-model-len)."
    )
    max_num_seqs: Seqs = Field(
        description="Sequences resident at once, each up to maxModelLen (vLLM --max-num-seqs)."
    )
    max_num_batched_tokens: (
        Annotated[int, Field(ge=1, le=LIMITS["batchedTokens"], strict=True)] | None
    ) = Field(
        None,
        description="Tokens per forward pass (prefill chunk); default the engine's "
        "(vLLM and SGLang 8192, TGI maxModelLen + 50; transformers prefills every sequence "
        "at once).",
    )
    kv_cache_dtype: KvCacheDtype = Field(
        KvCacheDtype.auto, description="auto (model dtype) | fp8 | fp8_e4m3 | fp8_e5m2."
    )
    tensor_parallel_size: Gpus = Field(
        1, description="GPUs the model is split across by tensor parallelism."
    )
    pipeline_parallel_size: Layers = Field(
        1, description="Pipeline stages (layers split across GPUs)."
    )
    data_parallel_size: Gpus = Field(
        1,
        description="Engine data parallelism (vLLM --data-parallel-size, SGLang --dp): replicas "
        "of the attention layers, each with its own KV cache and batch, tensor x pipeline GPUs "
        "each; a mixture-of-experts model's experts span all data x tensor parallel GPUs "
        "(vLLM). GPUs: tensor x pipeline x data.",
    )
    enable_expert_parallel: StrictBool = Field(
        False,
        description="Mixture-of-experts: split the experts by count across the expert group "
        "(vLLM --enable-expert-parallel over data x tensor parallel GPUs, SGLang --ep-size equal "
        "to --tp) instead of splitting each expert's width.",
    )
    enforce_eager: StrictBool = Field(
        False, description="Disable CUDA graphs (vLLM --enforce-eager); saves their memory pool."
    )
    gpu_memory_utilization: Fraction | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="Pre-allocating engines: the fraction of each GPU the engine takes at start "
        "and carves its KV cache pool from (vLLM --gpu-memory-utilization; SGLang "
        "--mem-fraction-static, the share for weights and KV pool; TGI --cuda-memory-fraction). "
        "Unset: gpu-sizer picks, per GPU class, the largest value up to the engine's default that "
        "leaves spec.placement.minHeadroomFraction free, and reports it in "
        "status.recommendation.engineArgs. Not used by transformers (it allocates on demand).",
    )
    engine_version: str | None = Field(
        None,
        min_length=1,
        max_length=32,
        pattern=r"^v?[0-9]+(\.[0-9]+){0,3}([.+-]?[A-Za-z][A-Za-z0-9]*)?$",
        description="Engine release (e.g. 0.11.0): defaults such as maxNumBatchedTokens, CUDA "
        "graph sizes and what counts inside gpuMemoryUtilization change between versions. "
        "Unset: the newest release gpu-sizer models for the engine (named in "
        "status.estimate.engineVersion).",
    )
    target_concurrency: Fraction | None = Field(
        None,
        gt=0.0,
        le=float(LIMITS["seqs"]),
        description="Pre-allocating engines: how many concurrent requests of maxModelLen tokens "
        "the KV cache pool must hold without preemption; the verdict fails when the pool holds "
        "fewer. Unset: the engine's own start-up condition (vLLM and TGI: one maxModelLen "
        "request; SGLang: a pool of at least one token, shorter pools refuse longer prompts).",
    )

    @property
    def required_concurrency(self) -> float:
        """``targetConcurrency``, or what the engine itself requires to start when unset."""
        if self.target_concurrency is not None:
            return self.target_concurrency
        return 0.0 if self.engine is Engine.sglang else 1.0


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


class PrecisionRecipe(StrEnum):
    """Which tensors hold which dtype in training (see docs/memory-model.md, "Precision recipes").

    ``Auto`` picks the framework's default for ``precision``: ``fp32`` -> ``Float32``;
    ``bf16-true`` -> ``LowPrecision``; ``bf16-mixed``/``fp16-mixed`` -> ``Autocast`` with
    PyTorch-native training (``none``, ``ddp``, ``fsdp-*``: ``torch.autocast``, Lightning's
    ``*-mixed``, Hugging Face Trainer ``--bf16``) and ``MasterWeights`` with DeepSpeed ZeRO
    (``zero1/2/3``: the model in 16 bits, fp32 master partition in the ZeRO optimizer).
    """

    Auto = "Auto"
    Float32 = "Float32"
    Autocast = "Autocast"
    MasterWeights = "MasterWeights"
    LowPrecision = "LowPrecision"


class TrainingDtype(StrEnum):
    """A dtype the training recipe may hold gradients or optimizer state in."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class OffloadTarget(StrEnum):
    """Where offloaded training state lives: the GPU (``None``), host RAM or NVMe."""

    None_ = "None"
    Cpu = "Cpu"
    Nvme = "Nvme"


class Loss(StrEnum):
    """How the language-model loss is computed; decides the logits' bytes.

    ``standard``: full logits in the compute dtype, upcast to float32 and log-softmax saved
    (Hugging Face ``ForCausalLMLoss``). ``chunked``: torchtune's ``CEWithChunkedOutputLoss``
    (the 16-bit logits, one fp32 chunk of 8 at a time, compiled as torchtune recommends).
    ``fused``: a fused linear cross-entropy (Liger ``LigerFusedLinearCrossEntropyLoss``,
    unsloth, Apple's Cut Cross-Entropy) that never materialises the full logits.
    """

    standard = "standard"
    fused = "fused"
    chunked = "chunked"


class TrainingFramework(StrEnum):
    """The training loop that runs the step; decides the loading path and the loss code.

    ``transformers``: Hugging Face ``Trainer`` and the trainers built on it (TRL ``SFTTrainer``,
    axolotl, LlamaFactory), with accelerate and PEFT. ``accelerate``: a custom loop under
    ``accelerate``. ``torchtune``: torchtune's recipes. ``deepspeed``: ``deepspeed.initialize``
    in a custom loop. ``custom``: anything else; its loading path is taken at its worst (every
    rank materialises the model on its GPU), stated as an upper bound.
    """

    transformers = "transformers"
    accelerate = "accelerate"
    torchtune = "torchtune"
    deepspeed = "deepspeed"
    custom = "custom"


class Initialization(StrEnum):
    """How each rank gets the model before sharding: decides the ``Load`` phase's peak.

    ``GpuPerRank``: every rank materialises the full model on its GPU, then shards (loaded with
    a ``device_map``, or moved with ``.to("cuda")`` before wrapping). ``CpuPerRank``: every rank
    loads the full model into host RAM and the wrapper moves it to the GPU (FSDP ``device_id``:
    unit by unit).
    ``RankZeroCpu``: rank 0 loads it into host RAM, the others build it on the meta device and
    receive it by broadcast (FSDP ``sync_module_states``, accelerate
    ``cpu_ram_efficient_loading``). ``MetaDevice``: no rank materialises the full model (meta
    device then sharded load, DeepSpeed ``zero.Init``). ``Auto``: the framework's default
    (``budget.training_load.initialization``): ``MetaDevice`` under ``zero3`` (Hugging Face
    ``from_pretrained`` runs inside ``deepspeed.zero.Init``), ``GpuPerRank`` for a
    bitsandbytes base or a ``custom`` loop, ``CpuPerRank`` otherwise; ``transformers`` + FSDP
    also counts TRL's ``device_map="auto"`` load on the GPUs.
    """

    Auto = "Auto"
    GpuPerRank = "GpuPerRank"
    CpuPerRank = "CpuPerRank"
    RankZeroCpu = "RankZeroCpu"
    MetaDevice = "MetaDevice"


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

Elements = Annotated[int, Field(ge=0, le=LIMITS["parameters"], strict=True)]


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


class Measurement(_Model):
    """How the measurement Job runs."""

    mode: MeasurementMode = Field(
        MeasurementMode.Synthetic, description="Synthetic | Command | Disabled."
    )
    image: Annotated[str, Field(max_length=LENGTHS["image"])] | None = Field(
        None, description="Probe image; default from the operator."
    )
    command: Annotated[
        list[Annotated[str, Field(max_length=LENGTHS["commandArg"])]],
        Field(max_length=LENGTHS["commandArgs"]),
    ] = Field(
        default_factory=list,
        description="Command mode: the workload's own command, run under the probe's sampler.",
    )
    timeout_seconds: StrictInt = Field(
        900, ge=30, le=86400, description="Deadline for the measurement Job, in seconds."
    )
    concurrency_levels: Annotated[list[Seqs], Field(max_length=LENGTHS["concurrencyLevels"])] = (
        Field(
            default_factory=list,
            description="Inference: concurrent sequences to measure at; default [1, maxNumSeqs].",
        )
    )

    @model_validator(mode="after")
    def _check(self) -> Measurement:
        problems = _Problems()
        if self.mode is MeasurementMode.Command and not self.command:
            problems.add("command", "mode Command needs a non-empty command")
        for i, arg in enumerate(self.command):
            if not arg:
                problems.add(f"command[{i}]", "must not be an empty string")
        problems.raise_if_any()
        return self


#: Largest ``spec.placement.minHeadroomFraction`` the API accepts. A margin of more than half a
#: GPU would leave most of it idle, and is usually a mix-up with a utilization (vLLM's
#: ``--gpu-memory-utilization 0.9`` is 10 % headroom, not 90 %). The one source of this bound:
#: the CRD, ``gpu-sizer estimate`` and the webhook refuse larger values with the same field error,
#: and a namespace policy (``maxMinHeadroomFraction``) can only lower it.
MAX_MIN_HEADROOM_FRACTION: float = 0.5


class Placement(_Model):
    """Where the workload may run, and the safety margin it needs."""

    gpu_classes: Annotated[
        list[Annotated[str, Field(max_length=LENGTHS["gpuClass"])]],
        Field(max_length=LENGTHS["gpuClasses"]),
    ] = Field(
        default_factory=list,
        description="Allowed GPU classes (see `gpu-sizer catalog`); empty allows every class.",
    )
    min_headroom_fraction: Fraction = Field(
        0.10,
        ge=0.0,
        le=MAX_MIN_HEADROOM_FRACTION,
        description="Fraction of the GPU's memory that must stay free at the peak.",
    )


class GPUWorkloadSpec(_Model):
    """A model and how it runs: exactly one of ``inference`` or ``training``."""

    model: Model = Field(description="The model that is loaded.")
    inference: Inference | None = Field(None, description="Serving configuration.")
    training: Training | None = Field(None, description="Training configuration.")
    generation: Generation | None = Field(
        None, description="Image or video generation with a diffusion pipeline."
    )
    measurement: Measurement = Field(
        default_factory=lambda: Measurement(), description="Measurement Job settings."
    )
    placement: Placement = Field(
        default_factory=lambda: Placement(), description="Allowed GPUs and headroom."
    )

    @model_validator(mode="after")
    def _check(self) -> GPUWorkloadSpec:
        problems = _Problems()
        set_ = [k for k in ("inference", "training", "generation") if getattr(self, k) is not None]
        if len(set_) > 1:
            both = "both " if len(set_) == 2 else "all "
            problems.add(
                set_[-1],
                " and ".join(f"spec.{k}" for k in set_) + f" are {both}set; set exactly one "
                "(one GPUWorkload sizes one workload)",
            )
        elif not set_:
            problems.add(
                "inference",
                "set exactly one of spec.inference (serving a language model), spec.training "
                "(training or fine-tuning) or spec.generation (image or video generation)",
            )
        _check_pipeline(problems, self)
        arch = self.model.architecture
        if self.inference is not None:
            inf = self.inference
            if arch is not None:
                _check_tensor_parallel(
                    problems, arch, inf.tensor_parallel_size, "inference.tensorParallelSize"
                )
                if inf.max_model_len > arch.max_context:
                    problems.add(
                        "inference.maxModelLen",
                        f"maxModelLen {inf.max_model_len} exceeds the model's context of "
                        f"{arch.max_context} tokens (maxPositionEmbeddings, rope scaling "
                        "included); lower it or set model.architecture.ropeScaling",
                    )
                if inf.pipeline_parallel_size > arch.num_hidden_layers:
                    problems.add(
                        "inference.pipelineParallelSize",
                        f"pipelineParallelSize {inf.pipeline_parallel_size} exceeds the "
                        f"{arch.num_hidden_layers} layers",
                    )
                if inf.enable_expert_parallel and arch.experts is None:
                    problems.add(
                        "inference.enableExpertParallel",
                        f"model type {arch.model_type!r} as given has no experts: expert "
                        "parallelism applies to mixture-of-experts models (set the expert count "
                        "and numExpertsPerTok, or drop enableExpertParallel)",
                    )
            if inf.engine is Engine.tgi and (
                inf.data_parallel_size > 1 or inf.enable_expert_parallel
            ):
                problems.add(
                    "inference.dataParallelSize"
                    if inf.data_parallel_size > 1
                    else "inference.enableExpertParallel",
                    "TGI has no data or expert parallelism (its shards are tensor-parallel "
                    "only): run replicas as separate deployments, or use vllm or sglang",
                )
            if inf.engine is Engine.transformers and inf.data_parallel_size > 1:
                problems.add(
                    "inference.dataParallelSize",
                    "transformers serves one model copy per process: run replicas as separate "
                    "deployments (dataParallelSize applies to vllm and sglang)",
                )
            for i, level in enumerate(self.measurement.concurrency_levels):
                if level > inf.max_num_seqs:
                    problems.add(
                        f"measurement.concurrencyLevels[{i}]",
                        f"concurrency level {level} exceeds inference.maxNumSeqs "
                        f"({inf.max_num_seqs}): the engine never runs more sequences at once",
                    )
            if inf.target_concurrency is not None and inf.target_concurrency > inf.max_num_seqs:
                problems.add(
                    "inference.targetConcurrency",
                    f"targetConcurrency ({inf.target_concurrency:g}) exceeds maxNumSeqs "
                    f"({inf.max_num_seqs}): the engine never runs more sequences at once; raise "
                    "maxNumSeqs or lower targetConcurrency",
                )
            if inf.gpu_memory_utilization is not None and inf.engine is Engine.transformers:
                problems.add(
                    "inference.gpuMemoryUtilization",
                    "transformers allocates on demand and takes no fixed fraction of the GPU; "
                    "gpuMemoryUtilization applies to vllm, sglang and tgi (remove it)",
                )
            if (
                inf.max_num_batched_tokens is not None
                and inf.max_num_batched_tokens < inf.max_num_seqs
            ):
                problems.add(
                    "inference.maxNumBatchedTokens",
                    f"maxNumBatchedTokens ({inf.max_num_batched_tokens}) must be at least "
                    f"maxNumSeqs ({inf.max_num_seqs}): each decode step batches one token per "
                    "sequence",
                )
        if self.training is not None:
            tr = self.training
            par = tr.parallelism
            if arch is not None:
                _check_tensor_parallel(
                    problems,
                    arch,
                    par.tensor_parallel_size,
                    "training.parallelism.tensorParallelSize",
                )
                if tr.sequence_length > arch.max_context:
                    problems.add(
                        "training.sequenceLength",
                        f"sequenceLength {tr.sequence_length} exceeds the model's context of "
                        f"{arch.max_context} tokens",
                    )
                if par.pipeline_parallel_size > arch.num_hidden_layers:
                    problems.add(
                        "training.parallelism.pipelineParallelSize",
                        f"pipelineParallelSize {par.pipeline_parallel_size} exceeds the "
                        f"{arch.num_hidden_layers} layers",
                    )
            sharded = par.strategy not in (ParallelStrategy.none,)
            if par.data_parallel_size > 1 and not sharded:
                problems.add(
                    "training.parallelism.strategy",
                    f"dataParallelSize {par.data_parallel_size} needs a strategy "
                    "(ddp, fsdp-*, zero1/2/3); 'none' runs one replica",
                )
            if tr.finetuning.method is FinetuningMethod.qlora:
                q = self.model.quantization
                if q is None:
                    problems.add(
                        "model.quantization",
                        "qlora trains adapters on a 4-bit NF4 base: set model.quantization to "
                        "{method: bitsandbytes-nf4, bits: 4}, or use finetuning method lora for "
                        "a bf16/fp16 base",
                    )
                elif q.method is not QuantizationMethod.bitsandbytes_nf4:
                    problems.add(
                        "training.finetuning.method",
                        "qlora trains adapters on a bitsandbytes-nf4 base; set "
                        "model.quantization.method to bitsandbytes-nf4 or use lora",
                    )
            if tr.finetuning.method is not FinetuningMethod.full and arch is None:
                problems.add(
                    "training.finetuning.method",
                    f"{tr.finetuning.method.value} needs model.architecture to size the adapters",
                )
        q = self.model.quantization
        if (
            arch is not None
            and q is not None
            and q.method in (QuantizationMethod.gptq, QuantizationMethod.awq)
            and q.group_size is not None
            and q.group_size > 0
        ):
            widths = {"hiddenSize": arch.hidden_size, "intermediateSize": arch.intermediate_size}
            if arch.moe_intermediate_size is not None:
                widths["moeIntermediateSize"] = arch.moe_intermediate_size
            bad = [f"{k} ({v})" for k, v in widths.items() if v % q.group_size]
            if bad:
                problems.add(
                    "model.quantization.groupSize",
                    f"groupSize {q.group_size} must divide the input features of every "
                    f"quantized projection; it does not divide {' and '.join(bad)}",
                )
        problems.raise_if_any()
        return self

    @property
    def gpu_count(self) -> int:
        """GPUs one replica uses: only the parallelism the spec declares."""
        if self.generation is not None:
            return self.generation.parallelism.gpu_count
        if self.inference is not None:
            inf = self.inference
            return inf.tensor_parallel_size * inf.pipeline_parallel_size * inf.data_parallel_size
        assert self.training is not None
        return self.training.parallelism.gpus


def _check_tensor_parallel(problems: _Problems, arch: Architecture, tp: int, field: str) -> None:
    """vLLM's rule: heads split evenly; KV heads split evenly or are replicated evenly; Mamba-2
    heads split evenly and B/C groups split evenly or are a single replicated group."""
    if arch.num_attention_heads % tp != 0:
        problems.add(
            field,
            f"tensorParallelSize {tp} must divide numAttentionHeads ({arch.num_attention_heads})",
        )
    kv = arch.kv_heads
    if kv % tp != 0 and tp % kv != 0:
        problems.add(
            field,
            f"tensorParallelSize {tp} must divide numKeyValueHeads ({kv}) or be a multiple of it",
        )
    if arch.model_type == "nemotron_h":
        # vLLM mamba_mixer2.py MambaMixer2.__init__ asserts both; the defaults are
        # NemotronHConfig's (128 heads, 8 groups).
        heads = arch.mamba_num_heads or 128
        groups = arch.n_groups or 8
        if heads % tp != 0:
            problems.add(field, f"tensorParallelSize {tp} must divide mambaNumHeads ({heads})")
        if groups % tp != 0 and groups != 1:
            problems.add(
                field,
                f"tensorParallelSize {tp} must divide nGroups ({groups}), or nGroups must be 1",
            )


def _check_pipeline(problems: _Problems, spec: GPUWorkloadSpec) -> None:
    """A pipeline is generated with (spec.generation); spec.generation needs one."""
    pipeline = spec.model.pipeline
    if spec.generation is not None and pipeline is None:
        problems.add(
            "model.pipeline",
            "spec.generation runs a diffusion pipeline: give spec.model.pipeline (its class and "
            "components; gpu-sizer import-diffusers writes it)",
        )
    if pipeline is not None and spec.generation is None:
        where = "inference" if spec.inference is not None else "training"
        if spec.inference is not None or spec.training is not None:
            problems.add(
                where,
                f"spec.model.pipeline is a diffusion pipeline: spec.{where} sizes language "
                "models; use spec.generation (fine-tuning a pipeline's denoiser is not sized "
                "yet)",
            )


def spec_to_wire(spec: GPUWorkloadSpec) -> dict[str, Any]:
    """The spec as camelCase JSON-compatible data, defaults filled, ``None`` fields dropped."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


# Generation models import the base classes above; they are bound here, after them, so that the
# forward references in Model and GPUWorkloadSpec resolve.
from gpu_sizer.api.generation import Generation, Pipeline  # noqa: E402

Model.model_rebuild()
GPUWorkloadSpec.model_rebuild()
