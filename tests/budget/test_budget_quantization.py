"""Quantization formats as stored: block-wise and per-channel FP8, MXFP4, compressed-tensors,
and the modules each checkpoint leaves unquantized."""

from __future__ import annotations

from typing import Any

import pytest
from tests.architectures import LLAMA_3_1_405B, LLAMA_3_8B, arch

from gpu_sizer.api import Model, Quantization, parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.budget.params import Linear, layout
from gpu_sizer.budget.quant_formats import Storage, linear_bytes
from gpu_sizer.budget.quant_targets import split_by_storage, storage_for
from gpu_sizer.budget.weights import weight_bytes

GIB = 1 << 30
SQUARE = Linear("o", "o_proj", 4096, 4096, 1, False, True, "self_attn.o_proj")


def quant(method: str, **kw: Any) -> Quantization:
    return Quantization.model_validate({"method": method, **kw})


def ct(weights: dict[str, Any], **kw: Any) -> Quantization:
    """A compressed-tensors config with one group targeting every Linear."""
    groups = {"group_0": {"targets": ["Linear"], "weights": weights}}
    return quant("compressed-tensors", configGroups=groups, **kw)


# --- storage per linear -------------------------------------------------------------------------


def test_fp8_block_scales_one_fp32_per_128_x_128_block() -> None:
    """vLLM Fp8LinearMethod: weight_scale_inv [ceil(N/128), ceil(K/128)] fp32. DeepSeek-V3's
    shared-expert-sized projection 7168 -> 18432: 144 x 56 blocks."""
    lin = Linear("up", "up_proj", 7168, 18432, 1, False, True, "mlp.up_proj")
    q = quant("fp8", weightBlockSize=[128, 128])
    payload, meta = weight_bytes_of(lin, q)
    assert payload == 7168 * 18432
    assert meta == 144 * 56 * 4
    # an edge block that is not full still has its scale
    odd = lin._replace(in_features=7168 + 1)
    assert weight_bytes_of(odd, q)[1] == 144 * 57 * 4


def weight_bytes_of(lin: Linear, q: Quantization) -> tuple[int, int]:
    st = storage_for(q, f"model.layers.3.{lin.path}", lin)
    assert st is not None
    return linear_bytes(lin.in_features, lin.out_features, lin.copies, st, 2, lin.role)


def test_fp8_scales_per_tensor_and_per_channel() -> None:
    assert weight_bytes_of(SQUARE, quant("fp8")) == (4096 * 4096, 4)
    per_channel = quant("fp8", perChannelScales=True)
    assert weight_bytes_of(SQUARE, per_channel) == (4096 * 4096, 4 * 4096)


def test_mxfp4_is_4_25_bits_per_weight_and_only_for_experts() -> None:
    """OCP MX: e2m1 codes two per byte plus one e8m0 scale per 32 elements = 4.25 bits. vLLM
    Mxfp4MoEMethod quantizes FusedMoE only; attention, routers and shared layers stay bf16."""
    experts = Linear("down", "down_proj", 2880, 2880, 32, True, True, "mlp.experts.down_proj")
    payload, meta = weight_bytes_of(experts, quant("mxfp4"))
    assert (payload + meta) * 8 / (2880 * 2880 * 32) == 4.25
    q_proj = Linear("q", "q_proj", 2880, 4096, 1, True, True, "self_attn.q_proj")
    assert storage_for(quant("mxfp4"), "model.layers.0.self_attn.q_proj", q_proj) is None


def test_mxfp4_pads_the_expert_intermediate_size_to_64() -> None:
    """vLLM Mxfp4MoEMethod.create_weights (Triton backend): intermediate rounded up to 64."""
    st = Storage("mxfp4", 4, 32)
    down = linear_bytes(2000, 2880, 1, st, 2, "down")
    assert down == (2880 * 2048 // 2, 2880 * 2048 // 32)
    gate_up = linear_bytes(2880, 2 * 2000, 1, st, 2, "gate_up")
    assert gate_up == (2 * 2048 * 2880 // 2, 2 * 2048 * 2880 // 32)


def test_compressed_tensors_w4a16_group_128() -> None:
    """CompressedTensorsWNA16: weight_packed int32 [N, K/8], weight_scale bf16 [N, K/128];
    asymmetric adds weight_zero_point int32 [N/8, K/128]; actorder adds g_idx int32 [K]."""
    w = {"numBits": 4, "type": "int", "strategy": "group", "groupSize": 128}
    payload, meta = weight_bytes_of(SQUARE, ct(w))
    assert payload == 4096 * 4096 // 2
    assert meta == 4096 * 32 * 2
    _, asym = weight_bytes_of(SQUARE, ct({**w, "symmetric": False}))
    assert asym - meta == 4096 // 8 * 4 * 32
    _, ordered = weight_bytes_of(SQUARE, ct({**w, "actorder": "group"}))
    assert ordered - meta == 4 * 4096


def test_compressed_tensors_w8a8_int8_and_fp8() -> None:
    """CompressedTensorsW8A8Int8 / W8A8Fp8: 8-bit weight [N, K] and fp32 scales per channel
    (or per tensor, or per block); a static input scale adds one fp32."""
    int8 = ct({"numBits": 8, "type": "int", "strategy": "channel"})
    assert weight_bytes_of(SQUARE, int8) == (4096 * 4096, 4 * 4096)
    fp8 = ct({"numBits": 8, "type": "float", "strategy": "tensor"})
    assert weight_bytes_of(SQUARE, fp8) == (4096 * 4096, 4)
    block = ct({"numBits": 8, "type": "float", "strategy": "block", "blockStructure": [128, 128]})
    assert weight_bytes_of(SQUARE, block) == (4096 * 4096, 32 * 32 * 4)
    tensor = {"numBits": 8, "type": "float", "strategy": "tensor"}
    group = {"targets": ["Linear"], "weights": tensor, "inputActivations": tensor}
    static = quant("compressed-tensors", configGroups={"group_0": group})
    assert weight_bytes_of(SQUARE, static) == (4096 * 4096, 8)


def test_compressed_tensors_nvfp4() -> None:
    """CompressedTensorsW4A4Fp4: weight_packed uint8 [N, K/2], weight_scale fp8 [N, K/16],
    weight_global_scale and input_global_scale fp32: 4.5 bits per weight plus 8 bytes."""
    q = ct({"numBits": 4, "type": "float", "strategy": "tensor_group", "groupSize": 16})
    payload, meta = weight_bytes_of(SQUARE, q)
    assert payload == 4096 * 4096 // 2
    assert meta == 4096 * 4096 // 16 + 8


# --- which modules stay unquantized -------------------------------------------------------------


def test_modules_to_not_convert_matches_name_parts_not_substrings() -> None:
    q = quant("fp8", modulesToNotConvert=["self_attn", "model.layers.1.mlp", "*.mlp.down_proj"])
    gate = Linear("gate", "gate_proj", 8, 8, 1, False, True, "mlp.gate_proj")
    down = gate._replace(role="down", name="down_proj", path="mlp.down_proj")
    assert storage_for(q, "model.layers.0.self_attn.q_proj", SQUARE) is None
    assert storage_for(q, "model.layers.1.mlp.gate_proj", gate) is None
    assert storage_for(q, "model.layers.0.mlp.gate_proj", gate) is not None
    assert storage_for(q, "model.layers.7.mlp.down_proj", down) is None
    # "gate" (a router's name) never covers "gate_proj"
    router_named = quant("fp8", modulesToNotConvert=["gate"])
    assert storage_for(router_named, "model.layers.0.mlp.gate_proj", gate) is not None


def test_compressed_tensors_ignore_is_exact_or_re_match() -> None:
    """vLLM should_ignore_layer: equal names, or 're:' patterns with re.match."""
    w = {"numBits": 8, "type": "float", "strategy": "channel"}
    q = ct(w, ignore=["lm_head", "re:.*self_attn.*", "model.layers.2.mlp.down_proj"])
    down = Linear("down", "down_proj", 8, 8, 1, False, True, "mlp.down_proj")
    assert storage_for(q, "model.layers.0.self_attn.o_proj", SQUARE) is None
    assert storage_for(q, "model.layers.2.mlp.down_proj", down) is None
    assert storage_for(q, "model.layers.3.mlp.down_proj", down) is not None
    # re.match anchors at the start: "mlp" alone matches nothing
    assert storage_for(ct(w, ignore=["re:mlp"]), "model.layers.3.mlp.down_proj", down) is not None


def test_compressed_tensors_name_targets_win_over_linear() -> None:
    """find_matched_target: a name or regex target matches before the Linear class target."""
    groups = {
        "attn": {
            "targets": ["re:.*self_attn.*"],
            "weights": {"numBits": 8, "type": "float", "strategy": "channel"},
        },
        "rest": {
            "targets": ["Linear"],
            "weights": {"numBits": 4, "type": "int", "strategy": "group", "groupSize": 128},
        },
    }
    q = quant("compressed-tensors", configGroups=groups)
    down = Linear("down", "down_proj", 8, 8, 1, False, True, "mlp.down_proj")
    attn = storage_for(q, "model.layers.0.self_attn.o_proj", SQUARE)
    mlp = storage_for(q, "model.layers.0.mlp.down_proj", down)
    assert attn is not None and attn.kind == "fp8"
    assert mlp is not None and mlp.kind == "wna16"


def test_split_counts_layers_per_storage() -> None:
    lin = Linear("down", "down_proj", 8, 8, 1, False, True, "mlp.down_proj")
    q = quant("fp8", modulesToNotConvert=["model.layers.0.mlp.down_proj", "layers.3"])
    split = dict(split_by_storage(q, "model.layers", lin, tuple(range(5))))
    assert split[None] == 2 and sum(split.values()) == 5


# --- public figures -----------------------------------------------------------------------------


def llama_405b_fp8_modules_to_not_convert() -> list[str]:
    """quantization_config.modules_to_not_convert of meta-llama/Llama-3.1-405B-Instruct-FP8
    (huggingface.co/meta-llama/Llama-3.1-405B-Instruct-FP8/blob/main/config.json,
    quant_method fbgemm_fp8): every attention projection of the 126 layers, the MLP of the first
    and the last layer, and lm_head, as full module names. Built here from that rule rather than
    copied."""
    names = [
        f"model.layers.{i}.self_attn.{m}"
        for i in range(126)
        for m in ("k_proj", "o_proj", "q_proj", "v_proj")
    ]
    mlp = ("down_proj", "gate_proj", "up_proj")
    names += [f"model.layers.{i}.mlp.{m}" for i in (0, 125) for m in mlp]
    return [*names, "lm_head"]


def test_llama_3_1_405b_fp8_at_tp8_loads_57_75_gib_per_gpu() -> None:
    """vLLM issue 6746 (vLLM 0.5.3, 8 x H100): "Loading model weights took 57.7520 GB" (vLLM's
    GB are GiB: model_memory_usage / 2**30) for meta-llama/Meta-Llama-3.1-405B-Instruct-FP8 at
    tensor parallelism 8, where counting every linear as FP8 gives 47.77 GiB.

    FBGEMM FP8 stores fp8 weights with one fp32 scale per output channel
    (FBGEMMFp8LinearMethod), and vLLM loads the modules_to_not_convert in bf16
    (UnquantizedLinearMethod). Counted module by module that is 56.73 GiB per GPU. Tolerance
    2 %: vLLM's figure is the CUDA memory allocated while loading (CudaMemoryProfiler around
    load_model), which holds more than the checkpoint's tensors (the 32 MiB rotary cos/sin
    cache is one); the remaining 1.0 GiB (1.8 %) we could not attribute to a tensor. The
    all-FP8 reading is 17 % short.
    """
    figure = 57.7520 * GIB
    base = {"architecture": LLAMA_3_1_405B, "dtype": "bfloat16"}
    inference = {"maxModelLen": 8192, "maxNumSeqs": 1, "tensorParallelSize": 8}
    fbgemm = {"method": "fp8", "perChannelScales": True}
    as_stored = {**fbgemm, "modulesToNotConvert": llama_405b_fp8_modules_to_not_convert()}

    def weights(q: dict[str, Any]) -> int:
        spec = parse_spec({"model": {**base, "quantization": q}, "inference": inference})
        per = estimate(spec).per_gpu
        return per.weights_bytes + per.quantization_overhead_bytes

    stored = weights(as_stored)
    assert stored == pytest.approx(figure, rel=0.02)
    assert round(stored / GIB, 2) == 56.73
    all_fp8 = weights(fbgemm)
    assert all_fp8 / figure < 0.85  # what the estimate said before: it "fit" where vLLM failed


def test_unquantized_modules_are_bf16_module_by_module() -> None:
    """Llama-3-8B with attention excluded: MLPs FP8, attention bf16, outer bf16."""
    a = arch(LLAMA_3_8B)
    lay = layout(a)
    q = quant("fp8", modulesToNotConvert=["self_attn"])
    weights, meta = weight_bytes(
        lay, Model(architecture=a, quantization=q), lay.embedding + lay.head
    )
    attn = 4096 * 4096 * 2 + 4096 * 1024 * 2
    mlp = 3 * 4096 * 14336
    outer = 2 * 128256 * 4096 + 4096
    assert weights == 32 * (2 * attn + mlp + 2 * 2 * 4096) + 2 * outer
    assert meta == 32 * 3 * 4  # one per-tensor scale per quantized MLP projection
