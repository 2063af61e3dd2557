"""``spec.model.quantization``: how the checkpoint's weights are stored (GPTQ, AWQ, FP8, MXFP4,
compressed-tensors, bitsandbytes), with the rules each loader enforces on its options.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt, model_validator
from pydantic.alias_generators import to_snake

from gpu_sizer.api.spec.base import _Model, _Problems
from gpu_sizer.api.spec.bounds import LENGTHS, LIMITS
from gpu_sizer.api.spec.enums import (
    QUANTIZATION_BITS,
    CompressionFormat,
    QuantizationMethod,
    QuantizationStrategy,
    QuantizationType,
)

__all__ = ["CompressedTensorsArgs", "CompressedTensorsGroup", "ModuleNames", "Quantization"]


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
