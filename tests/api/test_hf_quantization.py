"""config.json quantization_config -> spec.model.quantization, for every format sized, and what
the estimate makes of it (public figures where there are some)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.api.hf import UnsupportedConfig, model_from_hf_config
from gpu_sizer.api.hf_quantization import quantization_from_hf
from gpu_sizer.budget import estimate

CONFIGS = Path(__file__).parents[1] / "budget" / "configs"
GIB = 1 << 30


def config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return data


def weights_gib(model: dict[str, Any], tp: int = 1) -> float:
    spec = parse_spec(
        {"model": model, "inference": {"maxModelLen": 4096, "maxNumSeqs": 1,
                                       "tensorParallelSize": tp}}
    )  # fmt: skip
    per = estimate(spec).per_gpu
    return (per.weights_bytes + per.quantization_overhead_bytes) / GIB


def test_gpt_oss_mxfp4_keeps_its_not_converted_modules() -> None:
    model = model_from_hf_config(config("gpt-oss-20b"))
    assert model["quantization"] == {
        "method": "mxfp4",
        "modulesToNotConvert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head",
        ],
    }  # fmt: skip


@pytest.mark.parametrize(("name", "gib"), [("gpt-oss-20b", 12.8), ("gpt-oss-120b", 60.8)])
def test_gpt_oss_weights_match_the_published_checkpoint_sizes(name: str, gib: float) -> None:
    """gpt-oss model card (OpenAI, arXiv:2508.10925), Table 1: checkpoint sizes 12.8 GiB and
    60.8 GiB (MXFP4 experts at 4.25 bits, everything else bf16). vLLM's Triton MXFP4 backend
    (Hopper) pads the expert width 2880 to a multiple of 64, so it loads the same bytes."""
    assert round(weights_gib(model_from_hf_config(config(name))), 1) == gib


def test_deepseek_v3_block_fp8() -> None:
    model = model_from_hf_config(config("deepseek-v3"))
    assert model["quantization"] == {"method": "fp8", "weightBlockSize": [128, 128]}
    spec = parse_spec({"model": model, "inference": {"maxModelLen": 4096, "maxNumSeqs": 1}})
    per = estimate(spec).per_gpu
    # one fp32 scale per 128 x 128 block: 4 / 16384 bytes per fp8 weight
    assert 0 < per.quantization_overhead_bytes < per.weights_bytes * 4 / 16384 * 1.01


def test_fbgemm_fp8_is_per_channel_fp8_with_its_unconverted_modules() -> None:
    qc = {
        "quant_method": "fbgemm_fp8",
        "activation_scale_ub": 1200.0,
        "modules_to_not_convert": ["model.layers.0.mlp.down_proj", "lm_head"],
    }
    assert quantization_from_hf(qc) == {
        "method": "fp8",
        "perChannelScales": True,
        "modulesToNotConvert": ["model.layers.0.mlp.down_proj", "lm_head"],
    }


#: compressed-tensors configs as llm-compressor writes them for its presets (W4A16, FP8 dynamic,
#: W8A8 int8, NVFP4), with the keys that do not change stored bytes (observer...) included so
#: that the importer is seen to drop them.
def _ct(weights: dict[str, Any], fmt: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    base = {"observer": "minmax", "observer_kwargs": {}, "dynamic": False, "symmetric": True}
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "kv_cache_scheme": None,
        "global_compression_ratio": None,
        "ignore": ["lm_head"],
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {**base, **weights},
                "input_activations": inputs,
                "output_activations": None,
            }
        },
    }


W4A16 = _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
             "actorder": None}, "pack-quantized")  # fmt: skip
TOKEN = {"num_bits": 8, "strategy": "token", "dynamic": True}
FP8_DYNAMIC = _ct({"num_bits": 8, "type": "float", "strategy": "channel"}, "float-quantized",
                  {**TOKEN, "type": "float"})  # fmt: skip
W8A8_INT8 = _ct({"num_bits": 8, "type": "int", "strategy": "channel"}, "int-quantized",
                {**TOKEN, "type": "int"})  # fmt: skip
NVFP4 = _ct({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
            "nvfp4-pack-quantized",
            {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
             "dynamic": "local"})  # fmt: skip


@pytest.mark.parametrize(
    ("qc", "bits_per_weight"),
    [(W4A16, 4 + 16 / 128), (FP8_DYNAMIC, 8), (W8A8_INT8, 8), (NVFP4, 4 + 8 / 16)],
)
def test_compressed_tensors_presets(qc: dict[str, Any], bits_per_weight: float) -> None:
    """Llama-3-8B quantized with each preset: the decoder linears cost the format's bits per
    weight (scales included), lm_head (ignored) and the embedding stay bf16."""
    llama = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
             "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 8192,
             "torch_dtype": "bfloat16"}  # fmt: skip
    model = model_from_hf_config({**llama, "quantization_config": qc})
    q = model["quantization"]
    assert q["ignore"] == ["lm_head"] and "observer" not in json.dumps(q)
    linears = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    outer = 2 * 128256 * 4096 + 4096 + 32 * 2 * 4096
    expected = (linears * bits_per_weight / 8 + 2 * outer) / GIB
    assert weights_gib(model) == pytest.approx(expected, rel=0.001)


HQQ = {"quant_method": "hqq"}


def test_unknown_quantization_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedConfig, match=r"'hqq'.*compressed-tensors"):
        model_from_hf_config({**config("qwen3-8b"), "quantization_config": HQQ})
