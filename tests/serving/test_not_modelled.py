"""What serving sizing does not model yet is Incomplete with its reason, never a guess that admits.

- Hybrid linear attention (Qwen3-Next's Gated DeltaNet, Kimi-Linear's KDA) holds a recurrent
  state per sequence, not a KV cache per token; vLLM sizes it as a ``MambaSpec`` page beside the
  attention layers' (``v1/kv_cache_interface.py``). gpu-sizer sizes such state only for
  Nemotron-H and Jamba: these families import without an architecture, and the estimate is
  Incomplete on every engine.
- Multi-token-prediction (MTP) layers (DeepSeek-V3's ``num_nextn_predict_layers``, Qwen3-Next's
  ``mtp_num_hidden_layers``) are skipped by vLLM's target model and loaded only by a speculative
  drafter, which the spec cannot ask for: they are not counted, and the import says so.

The configs are ``transformers``' own config classes (the oracle: ``Qwen3NextConfig``,
``KimiLinearConfig``, ``DeepseekV3Config``), whose defaults are the published models' shapes.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.api import Engine, GPUWorkloadSpec, parse_spec
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.budget.engines import (
    NEWER_RELEASE_MARGIN_BYTES,
    is_unread_release,
    modeled_releases,
    resolve_release,
)
from gpu_sizer.budget.estimate import engine_plans
from gpu_sizer.budget.params import layout
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess
from tests.architectures import LLAMA_3_8B


def _config(model_type: str, **overrides: Any) -> dict[str, Any]:
    from transformers import CONFIG_MAPPING

    config: dict[str, Any] = CONFIG_MAPPING[model_type]().to_dict()
    return {**config, "model_type": model_type, **overrides}


@pytest.mark.parametrize("model_type", ["qwen3_next", "kimi_linear"])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi"])
def test_hybrid_linear_attention_is_incomplete_with_its_reason(
    model_type: str, engine: str
) -> None:
    warnings: list[str] = []
    model = model_from_hf_config(_config(model_type), warnings, serving=True)
    assert "architecture" not in model
    (why,) = [w for w in warnings if "recurrent state per sequence" in w]
    assert "MambaSpec" in why
    spec = parse_spec(
        {
            "model": {**model, "parameterCount": 80_000_000_000},
            "inference": {"engine": engine, "maxModelLen": 32768, "maxNumSeqs": 16},
        }
    )
    a = assess(spec)
    assert a.verdict in (Verdict.Incomplete, Verdict.NoSafeHeadroom)
    assert a.verdict is not Verdict.Fits and a.recommendation is None
    assert "KV cache" in a.message


def test_a_hand_written_linear_attention_architecture_is_refused() -> None:
    arch = {
        "modelType": "qwen3_next", "numHiddenLayers": 4, "hiddenSize": 2048,
        "intermediateSize": 5120, "numAttentionHeads": 16, "numKeyValueHeads": 2,
        "headDim": 256, "vocabSize": 151936, "maxPositionEmbeddings": 262144,
        "layerTypes": ["linear_attention"] * 3 + ["full_attention"],
    }  # fmt: skip
    with pytest.raises(ValueError, match="linear_attention"):
        parse_spec(
            {
                "model": {"architecture": arch, "parameterCount": 10**9},
                "inference": {"maxModelLen": 4096, "maxNumSeqs": 1},
            }
        )


def test_mtp_layers_are_left_out_and_the_import_says_why() -> None:
    """DeepSeek-V3: 61 decoder layers plus one MTP layer in the checkpoint; vLLM's
    ``DeepseekV2ForCausalLM.load_weights`` skips the MTP weights unless speculative decoding
    loads them as a drafter."""
    warnings: list[str] = []
    config = _config("deepseek_v3", num_nextn_predict_layers=1)
    model = model_from_hf_config(config, warnings, serving=True)
    (why,) = [w for w in warnings if "multi-token-prediction" in w]
    assert "--speculative-config" in why
    arch = parse_spec(
        {"model": model, "inference": {"maxModelLen": 4096, "maxNumSeqs": 1}}
    ).model.architecture
    assert arch is not None and arch.num_hidden_layers == config["num_hidden_layers"]
    assert layout(arch).layers == config["num_hidden_layers"]


# --- releases whose rules were not read: the nearest rules plus a stated margin ---------------

_H100 = {c.name: c for c in DEFAULT_CATALOG}["nvidia-h100-80gb"]


def _served(engine: str, version: str | None) -> GPUWorkloadSpec:
    inference: dict[str, Any] = {
        "engine": engine, "maxModelLen": 8192, "maxNumSeqs": 64, "gpuMemoryUtilization": 0.85,
    }  # fmt: skip
    if version is not None:
        inference["engineVersion"] = version
    return parse_spec({"model": {"architecture": LLAMA_3_8B}, "inference": inference})


def _pool(spec: GPUWorkloadSpec) -> tuple[int, tuple[str, ...]]:
    p = engine_plans(spec, [_H100], 0.10)[0]
    return p.kv_pool, p.notes


@pytest.mark.parametrize(
    ("engine", "unread", "nearest"),
    [
        ("vllm", "0.5.4", "0.6.3.post1"),
        ("vllm", "0.40.0", modeled_releases(Engine.vllm)[0]),
        ("sglang", "0.3.6", "0.4.10"),
        ("sglang", "0.9.0", modeled_releases(Engine.sglang)[0]),
        ("tgi", "0.9.3", "1.4.0"),
        ("tgi", "4.0.0", modeled_releases(Engine.tgi)[0]),
    ],
)
def test_a_release_outside_the_modeled_rules_is_an_upper_bound_with_its_margin(
    engine: str, unread: str, nearest: str
) -> None:
    """A version older than the first release the oldest modeled rules hold from (TGI 0.9.3
    still took ``--max-batch-total-tokens`` as given; TGI#653's 0.9.4-era image first sized the
    blocks from free memory), or newer than every modeled one, is sized with the nearest rules
    plus ``NEWER_RELEASE_MARGIN_BYTES`` out of the pool, and the note says it is an upper bound."""
    spec = _served(engine, unread)
    inf = spec.inference
    assert inf is not None and is_unread_release(inf)
    assert resolve_release(inf)[0].version == nearest
    pool, notes = _pool(spec)
    read, _ = _pool(_served(engine, nearest))
    assert read - pool >= NEWER_RELEASE_MARGIN_BYTES * 0.9  # TGI keeps a share of it free
    (note,) = [n for n in notes if unread in n]
    assert "upper bound" in note and "1 GiB" in note and nearest in note


@pytest.mark.parametrize(
    ("engine", "version"),
    [("vllm", "0.6.0"), ("vllm", "0.7.2"), ("sglang", "0.4.0"), ("tgi", "0.9.4"), ("tgi", "1.0.3")],
)
def test_a_release_the_oldest_rules_cover_takes_them_without_a_margin(
    engine: str, version: str
) -> None:
    spec = _served(engine, version)
    assert spec.inference is not None and not is_unread_release(spec.inference)
    rel, note = resolve_release(spec.inference)
    assert note is not None and "upper bound" not in note
    assert _pool(spec)[0] == _pool(_served(engine, rel.version))[0]


# --- releases that do not load the family at all --------------------------------------------


@pytest.mark.parametrize(
    ("engine", "version", "config", "refused"),
    [
        ("vllm", "0.9.2", "gpt-oss-20b", True),  # GptOssForCausalLM arrived in 0.10.1
        ("vllm", "0.10.1", "gpt-oss-20b", False),
        ("vllm", None, "gpt-oss-20b", False),
        ("tgi", None, "gpt-oss-20b", True),  # huggingface/text-generation-inference#3309
        ("vllm", "0.8.2", "llama-4-scout-17b-16e-instruct", True),  # Llama 4 from 0.8.3
        ("vllm", "0.8.5", "llama-4-scout-17b-16e-instruct", False),
    ],
)
def test_a_release_that_does_not_load_the_family_is_never_admitted(
    engine: str, version: str | None, config: str, refused: bool
) -> None:
    """The engine stops at model loading ("Model architectures [...] are not supported"): no
    memory rule applies, and no class or fix makes it start."""
    from tests.serving.figures import _hf

    inference: dict[str, Any] = {"engine": engine, "maxModelLen": 8192, "maxNumSeqs": 16}
    if version is not None:
        inference["engineVersion"] = version
    spec = parse_spec({"model": _hf(config), "inference": inference})
    a = assess(spec)
    plan = engine_plans(spec, [_H100], 0.10)[0]
    if refused:
        assert a.verdict is not Verdict.Fits and a.recommendation is None
        assert plan.start_error is not None and "model type" in plan.start_error
        assert plan.start_error in a.message
        assert ("engineVersion" if engine == "vllm" else "use vllm or sglang") in plan.start_error
    else:  # Llama 4 Scout does not fit one H100 in bf16: the memory rules decide there
        assert "model type" not in (plan.start_error or "")


@pytest.mark.parametrize("parallel", [{"dataParallelSize": 2}, {"enableExpertParallel": True}])
def test_data_or_expert_parallelism_under_v0_rules_is_refused_with_the_fix(
    parallel: dict[str, Any],
) -> None:
    """vLLM before 0.8 is sized with V0's rules, which gpu-sizer has read without data or
    expert parallelism: such a spec is never admitted, and the reason names the release to pin."""
    from tests.serving.figures import _hf

    inference = {"maxModelLen": 8192, "maxNumSeqs": 16, "engineVersion": "0.7.2", **parallel}
    spec = parse_spec({"model": _hf("qwen3-30b-a3b"), "inference": inference})
    plan = engine_plans(spec, [_H100], 0.10)[0]
    assert plan.start_error is not None and "not modeled" in plan.start_error
    assert "0.8.5 or later" in plan.start_error
    assert assess(spec).verdict is not Verdict.Fits
    later = {**inference, "engineVersion": "0.8.5"}
    v1 = parse_spec({"model": _hf("qwen3-30b-a3b"), "inference": later})
    assert engine_plans(v1, [_H100], 0.10)[0].start_error is None
