"""A ``modelType`` without a parameter layout (issue 10, item 5: any model ``transformers`` can
build is accepted): weights from ``parameterCount``, the KV cache and activations from the
architecture's attention geometry, exactly as for a known family with the same geometry."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from tests.architectures import LLAMA_3_8B, MISTRAL_7B

from gpu_sizer.api import InvalidWorkload, parse_spec
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.budget import estimate
from gpu_sizer.budget.params import layout
from gpu_sizer.probe.support import synthetic_unsupported_reason
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

CONFIGS = Path(__file__).parent / "configs"
INFERENCE = {"maxModelLen": 8192, "maxNumSeqs": 16}
TRAINING = {"microBatchSize": 2, "sequenceLength": 4096, "activationCheckpointing": True}


def renamed(arch: dict[str, Any], model_type: str = "my_llama") -> dict[str, Any]:
    return {**copy.deepcopy(arch), "modelType": model_type}


def spec(arch: dict[str, Any], params: int | None = None, **workload: Any) -> Any:
    model: dict[str, Any] = {"architecture": arch}
    if params is not None:
        model["parameterCount"] = params
    return parse_spec({"model": model, **(workload or {"inference": INFERENCE})})


def llama_params() -> int:
    return layout(spec(LLAMA_3_8B).model.architecture).total


@pytest.mark.parametrize(
    "workload",
    [
        {"inference": INFERENCE},
        {"inference": {**INFERENCE, "tensorParallelSize": 2, "kvCacheDtype": "fp8"}},
        {"training": TRAINING},
        {"training": {**TRAINING, "activationCheckpointing": False}},
    ],
    ids=["inference", "inference-tp2-fp8", "training-checkpointed", "training"],
)
def test_same_geometry_same_kv_cache_and_activations(workload: dict[str, Any]) -> None:
    """Llama-3-8B under another name, with its exact parameter count: nothing is missing, and
    the KV cache and activations equal the known family's; so do the weights without a split."""
    known = estimate(spec(LLAMA_3_8B, **workload))
    generic = estimate(spec(renamed(LLAMA_3_8B), llama_params(), **workload))
    assert generic.missing_components == []
    assert generic.kv_cache_bytes_per_token == known.kv_cache_bytes_per_token
    assert generic.per_gpu.kv_cache_bytes == known.per_gpu.kv_cache_bytes
    assert generic.per_gpu.activation_bytes == known.per_gpu.activation_bytes
    if "tensorParallelSize" not in workload.get("inference", {}):
        assert generic.per_gpu == known.per_gpu
    assert any("no parameter layout" in n for n in generic.notes)


def test_a_fit_is_a_fit() -> None:
    assert assess(spec(renamed(LLAMA_3_8B), llama_params())).verdict is Verdict.Fits


def test_mla_geometry_is_the_latent_as_vllm_stores_it() -> None:
    """vLLM issue 15871 (vllm-project/vllm#15871): DeepSeek-V2-Lite caches kv_lora_rank +
    qk_rope_head_dim = 576 elements per token and layer, 31,104 bytes per token in bf16; an
    unknown family with the same MLA keys is sized the same way."""
    doc = json.loads((CONFIGS / "deepseek-v2-lite.json").read_text())
    known = model_from_hf_config(doc)["architecture"]
    e = estimate(spec(renamed(known, "my_mla"), layout(spec(known).model.architecture).total))
    assert e.kv_cache_bytes_per_token == 576 * 2 * 27 == 31_104
    assert e.missing_components == []


def test_a_window_slides_only_the_layers_layer_types_name() -> None:
    """Which layers slide is family code (Mistral: all; Gemma 2: even ones): a generic family
    applies slidingWindow only where layerTypes says sliding_attention."""
    params = layout(spec(MISTRAL_7B).model.architecture).total
    long = {"maxModelLen": 32768, "maxNumSeqs": 1}
    full = estimate(spec(renamed(MISTRAL_7B), params, inference=long)).per_gpu.kv_cache_bytes
    per_token_layer = 2 * 8 * 128 * 2
    assert full == 32 * 32768 * per_token_layer  # the window is not applied
    types = ["sliding_attention", "full_attention"] * 16
    mixed = {**renamed(MISTRAL_7B), "layerTypes": types}
    assert (
        estimate(spec(mixed, params, inference=long)).per_gpu.kv_cache_bytes
        == (16 * 4096 + 16 * 32768) * per_token_layer
    )


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidWorkload) as caught:
        parse_spec(doc)
    return [str(p) for p in caught.value.problems]


def test_an_unknown_family_needs_its_parameter_count() -> None:
    [line] = problems({"model": {"architecture": renamed(LLAMA_3_8B)}, "inference": INFERENCE})
    assert line.startswith(
        "spec.model.architecture.modelType: model type 'my_llama' has no exact parameter layout"
    )
    assert "give spec.model.parameterCount" in line
    assert "gpu-sizer import-hf-config counts it with transformers" in line


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"hybridOverridePattern": "M*" * 16}, "hybridOverridePattern"),
        ({"layerTypes": ["linear_attention", "full_attention"] * 16}, "layerTypes"),
    ],
)
def test_state_space_layers_of_an_unknown_family_are_refused(
    keys: dict[str, Any], field: str
) -> None:
    doc = {"architecture": {**renamed(LLAMA_3_8B), **keys}, "parameterCount": 8_000_000_000}
    [line] = problems({"model": doc, "inference": INFERENCE})
    assert line.startswith(f"spec.model.architecture.{field}: ")
    assert "keep spec.model.parameterCount" in line


def test_the_probe_does_not_build_an_unknown_family() -> None:
    reason = synthetic_unsupported_reason(spec(renamed(LLAMA_3_8B), llama_params()), cuda=True)
    assert reason is not None and "'my_llama'" in reason and "measurement.mode: Command" in reason


@pytest.mark.parametrize("quantization", [None, {"method": "fp8"}, {"method": "gptq"}])
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (1, 2), (2, 4)])
@pytest.mark.parametrize("engine", ["vllm", "transformers"])
def test_served_weights_of_an_unknown_family_are_not_below_the_layouts(
    quantization: dict[str, str] | None, tp: int, pp: int, engine: str
) -> None:
    """Llama-3-8B under another name, its exact parameter count, against its own layout (the
    oracle): quantized, its 16-bit embedding and lm_head (2 x 128,256 x 4,096) are counted as
    such, and the most loaded pipeline stage holds an embedding table beside its layers. The
    estimate never falls below the layout's and stays within one table of it (an even split
    that quantized every parameter was 0.98 GiB under at FP8 on one GPU, and 0.49 GiB under on
    the last of 4 pipeline stages in bf16)."""
    workload = {"inference": {**INFERENCE, "engine": engine, "tensorParallelSize": tp,
                              "pipelineParallelSize": pp}}  # fmt: skip

    def served(arch: dict[str, Any], params: int | None) -> Any:
        model: dict[str, Any] = {"architecture": arch}
        if params is not None:
            model["parameterCount"] = params
        if quantization is not None:
            model["quantization"] = quantization
        return estimate(parse_spec({"model": model, **workload}))

    known = served(LLAMA_3_8B, None)
    generic = served(renamed(LLAMA_3_8B), llama_params())
    table = 128_256 * 4096 * 2 // tp
    mine = generic.per_gpu.weights_bytes + generic.per_gpu.quantization_overhead_bytes
    theirs = known.per_gpu.weights_bytes + known.per_gpu.quantization_overhead_bytes
    assert theirs <= mine <= theirs + table
    if pp > 1:
        assert any("most loaded of" in n and "upper bound" in n for n in generic.notes)
