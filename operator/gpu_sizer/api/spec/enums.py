"""The enumerations of the language-model spec: dtypes, quantization formats, engines and the
training recipe's choices (the diffusion pipeline's live with it, in :mod:`.generation`).

Values are the names the field already uses (PyTorch dtypes, vLLM's ``--kv-cache-dtype``,
PyTorch Lightning's precisions, DeepSpeed/FSDP strategies), so that a user copies them from the
engine's own configuration.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "DTYPE_BYTES",
    "QUANTIZATION_BITS",
    "CompressionFormat",
    "Dtype",
    "Engine",
    "FinetuningMethod",
    "Initialization",
    "KvCacheDtype",
    "Loss",
    "MeasurementMode",
    "OffloadTarget",
    "Optimizer",
    "ParallelStrategy",
    "Precision",
    "PrecisionRecipe",
    "QuantizationMethod",
    "QuantizationStrategy",
    "QuantizationType",
    "TrainingDtype",
    "TrainingFramework",
]


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
