"""Every family against ``transformers`` as the oracle, from the models' published config.json.

The fixtures in ``tests/budget/configs/`` are the models' config.json files as published (each
names its source in ``_source``; weights are never downloaded). For each one:

- ``gpu-sizer import-hf-config``'s reading of it (``model_from_hf_config``) gives an architecture
  whose exact parameter count (:func:`gpu_sizer.budget.params.layout`) equals the parameter count
  of the ``transformers`` model built from the same config on PyTorch's meta device;
- for each tensor-parallel degree the heads allow, one rank's layout equals the share of every
  ``transformers`` parameter that rank holds under vLLM's sharding (column-parallel outputs,
  row-parallel inputs, replicated norms, routers and row-parallel biases, MLA's replicated
  down-projections, experts split along their width);
- the model card's published total, where one is given, matches to the precision it is given in.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from gpu_sizer.api import Architecture
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.budget.params import layer_plan, layout

CONFIGS = Path(__file__).parent / "configs"
NAMES = sorted(p.stem for p in CONFIGS.glob("*.json"))

#: Totals as the model cards publish them, in billions, with the digits they give.
PUBLISHED_BILLIONS: dict[str, str] = {
    # huggingface.co/Qwen/Qwen3-8B: "Number of Parameters: 8.2B"
    "qwen3-8b": "8.2",
    # huggingface.co/Qwen/Qwen3-30B-A3B: "Number of Parameters: 30.5B in total"
    "qwen3-30b-a3b": "30.5",
    # huggingface.co/deepseek-ai/DeepSeek-V2-Lite: "15.7B total parameters"
    "deepseek-v2-lite": "15.7",
    # DeepSeek-V3 technical report: "671B total parameters" (the 14B MTP module excluded)
    "deepseek-v3": "671",
    # huggingface.co/openai/gpt-oss-20b model card: 21B parameters (20.9B in the gpt-oss card)
    "gpt-oss-20b": "20.9",
    # gpt-oss model card (OpenAI, 2025), Table 1: 116.83B total for gpt-oss-120b
    "gpt-oss-120b": "116.8",
    # huggingface.co/google/gemma-3-1b-it safetensors: 999,885,952 ("1B")
    "gemma-3-1b-it": "0.999885952",
    # huggingface.co/google/gemma-3-27b-it safetensors: "27.4B"
    "gemma-3-27b-it": "27.4",
    # huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct: "109B total parameters"
    "llama-4-scout-17b-16e-instruct": "109",
    # huggingface.co/mistralai/Mistral-Small-3.1-24B-Instruct-2503: "24B"
    "mistral-small-3.1-24b-instruct-2503": "24",
    # huggingface.co/Qwen/Qwen2.5-VL-72B-Instruct safetensors: "73.4B"
    "qwen2.5-vl-72b-instruct": "73.4",
    # huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct safetensors: "8.29B"
    "qwen2.5-vl-7b-instruct": "8.29",
    # huggingface.co/allenai/OLMo-2-1124-7B safetensors: "7.3B"
    "olmo-2-1124-7b": "7.3",
    # huggingface.co/zai-org/GLM-4.5-Air: "106 billion total parameters"
    "glm-4.5-air": "106",
    # huggingface.co/microsoft/phi-4: "14B parameters" (safetensors 14.7B)
    "phi-4": "14.7",
    # huggingface.co/ai21labs/Jamba-v0.1: "52B total available parameters"
    "jamba-v0.1": "52",
    # huggingface.co/nvidia/NVIDIA-Nemotron-Nano-9B-v2 safetensors: "8.89B"
    "nvidia-nemotron-nano-9b-v2": "8.89",
    # huggingface.co/ibm-granite/granite-3.3-8b-instruct safetensors: "8.17B"
    "granite-3.3-8b-instruct": "8.17",
}


def _config(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    assert doc.pop("_source").startswith("https://huggingface.co/")
    return doc


def _arch(name: str) -> Architecture:
    doc = _config(name)
    doc.pop("quantization_config", None)  # read by the quantization tests
    return Architecture.model_validate(model_from_hf_config(doc)["architecture"])


def _meta_model(name: str) -> torch.nn.Module:
    doc = _config(name)
    doc.pop("quantization_config", None)  # quantized formats are counted elsewhere
    if doc["model_type"] == "mistral3":
        # transformers 5.24's Mistral3Config ties lm_head by default; the published checkpoint
        # (and vLLM, which reads text_config.tie_word_embeddings) keeps a separate lm_head.
        doc["tie_word_embeddings"] = False
    config = transformers.AutoConfig.for_model(**doc)
    with torch.device("meta"):
        model: torch.nn.Module = getattr(transformers, config.architectures[0])._from_config(config)
    return model


_MODELS: dict[str, torch.nn.Module] = {}


def _model(name: str) -> torch.nn.Module:
    if name not in _MODELS:
        _MODELS[name] = _meta_model(name)
    return _MODELS[name]


def test_every_supported_family_has_a_published_config() -> None:
    """Each known ``modelType`` is checked against a published config.json: the fixtures here,
    or the older families' figures in tests/architectures.py (test_budget_params.py)."""
    from tests import architectures

    from gpu_sizer.api import KNOWN_MODEL_TYPES

    covered = {_config(name)["model_type"] for name in NAMES}
    covered |= {
        v["modelType"]
        for v in vars(architectures).values()
        if isinstance(v, dict) and "modelType" in v
    }
    assert covered == set(KNOWN_MODEL_TYPES)


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count_equals_transformers(name: str) -> None:
    expected = sum(p.numel() for p in _model(name).parameters())
    assert layout(_arch(name)).total == expected


@pytest.mark.parametrize("name", sorted(PUBLISHED_BILLIONS))
def test_parameter_count_matches_the_model_card(name: str) -> None:
    """Within the last digit the card gives (cards round or truncate: GLM-4.5-Air's 106.85B is
    "106 billion")."""
    published = PUBLISHED_BILLIONS[name]
    digits = len(published.split(".")[1]) if "." in published else 0
    assert abs(layout(_arch(name)).total / 1e9 - float(published)) < 10.0**-digits


def _split(n: int, tp: int) -> int:
    return -(-n // tp)


def _rank_numel(name: str, shape: tuple[int, ...], arch: Architecture, tp: int) -> int:
    """What one of ``tp`` vLLM ranks holds of the transformers parameter ``name``."""
    leaf = name.rsplit(".", 2)
    module, kind = (leaf[-2], leaf[-1]) if len(leaf) > 1 else ("", leaf[-1])
    numel = 1
    for d in shape:
        numel *= d
    hd = arch.head_size
    if "embed" in name or name.endswith("lm_head.weight"):
        return _split(arch.vocab_size, tp) * shape[-1]
    if "norm" in module or "layernorm" in module or kind in ("A_log", "D", "dt_bias"):
        if "mixer.norm" in name or kind in ("A_log", "D", "dt_bias") or "mamba" in name:
            if "layernorm" in module:  # Jamba's dt/B/C norms: replicated
                return numel
            return numel // tp
        return numel
    if kind == "sinks":
        return numel // tp
    if module in ("router", "gate", "shared_expert_gate"):
        return numel
    if module in ("q_a_proj", "kv_a_proj_with_mqa"):
        return numel
    if module in ("qkv_proj", "query_key_value"):
        q = arch.num_attention_heads // tp * hd
        rows = q + 2 * max(1, arch.kv_heads // tp) * hd
        return rows * (shape[1] if kind == "weight" else 1)
    if module in ("k_proj", "v_proj"):
        rows = max(1, arch.kv_heads // tp) * hd
        return rows * (shape[1] if kind == "weight" else 1)
    if module in ("q_proj", "q_b_proj", "kv_b_proj", "in_proj", "conv1d", "dt_proj"):
        return numel // tp
    if module in ("o_proj", "out_proj", "x_proj", "down_proj"):
        return numel // tp if kind == "weight" else numel
    if module == "experts":
        experts = shape[0]
        width = shape[1] if shape[1] != arch.hidden_size else shape[-1]  # [E, I, H] or [E, H, I]
        if kind == "gate_up_proj_bias":
            return experts * 2 * _split(shape[1] // 2, tp)
        if kind == "down_proj_bias":
            return numel
        if kind == "gate_up_proj":
            return experts * arch.hidden_size * 2 * _split(width // 2, tp)
        if kind == "down_proj":
            return experts * arch.hidden_size * _split(width, tp)
    if module in ("gate_proj", "up_proj", "gate_up_proj"):
        fused = 2 if module == "gate_up_proj" else 1
        return fused * _split(shape[0] // fused, tp) * (shape[1] if kind == "weight" else 1)
    raise AssertionError(f"no sharding rule for {name} {shape}")


def _tp_cases() -> list[Any]:
    cases = []
    for name in NAMES:
        arch = _arch(name)
        if arch.vision_config is not None:
            continue  # encoders: a planning split (gpu_sizer.budget.vision)
        for tp in (2, 4, 8):
            kv = arch.kv_heads
            heads_ok = arch.num_attention_heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)
            mamba_ok = all(
                (getattr(arch, key) or 8) % tp == 0 for key in ("mamba_num_heads", "n_groups")
            )
            if heads_ok and mamba_ok:
                cases.append(pytest.param(name, tp, id=f"{name}-tp{tp}"))
    return cases


@pytest.mark.parametrize(("name", "tp"), _tp_cases())
def test_tensor_parallel_rank_equals_its_share_of_every_parameter(name: str, tp: int) -> None:
    arch = _arch(name)
    model = _model(name)
    share = 0
    for pname, p in model.named_parameters():
        share += _rank_numel(pname, tuple(p.shape), arch, tp)
    assert layout(arch, tp).total == share


def test_layer_patterns_come_from_the_config() -> None:
    """Per-layer kinds as transformers reads them, per family."""
    gemma = layer_plan(_arch("gemma-3-27b-it"))
    assert [k.window for k in gemma[:6]] == ["sliding"] * 5 + ["full"]
    assert sum(k.window == "full" for k in gemma) == 62 // 6
    oss = layer_plan(_arch("gpt-oss-20b"))
    assert [k.window for k in oss[:2]] == ["sliding", "full"]
    scout = layer_plan(_arch("llama-4-scout-17b-16e-instruct"))
    assert [k.window for k in scout[:4]] == ["chunked"] * 3 + ["full"]
    assert all(k.ffn == "moe" for k in scout)
    v3 = layer_plan(_arch("deepseek-v3"))
    assert [k.ffn for k in v3[:4]] == ["dense"] * 3 + ["moe"]
    assert all(k.mixer == "mla" for k in v3)
    nemotron = layer_plan(_arch("nvidia-nemotron-nano-9b-v2"))
    assert sum(k.mixer == "attention" for k in nemotron) == 4
    assert sum(k.mixer == "mamba" for k in nemotron) == 27
    jamba = layer_plan(_arch("jamba-v0.1"))
    assert [i for i, k in enumerate(jamba) if k.mixer == "attention"] == [4, 12, 20, 28]
    assert [k.ffn for k in jamba[:4]] == ["dense", "moe", "dense", "moe"]


def test_module_paths_name_checkpoint_modules() -> None:
    """Linear paths are the checkpoint's module names, so ignore lists can match them."""
    v3 = layout(_arch("deepseek-v3"))
    paths = {lin.path for lin in v3.linears}
    assert {"self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa", "mlp.experts.down_proj"} <= paths
    assert v3.prefix == "model.layers"
    names = {re.sub(r"\.\d+\.", ".N.", n) for n, _ in _model("qwen3-8b").named_parameters()}
    for lin in layout(_arch("qwen3-8b")).linears:
        assert f"model.layers.N.{lin.path}.weight" in names
