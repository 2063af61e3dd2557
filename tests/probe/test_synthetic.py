"""The synthetic inference and training paths end to end on tiny architectures (CPU)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.measurement.result import ProbeResult, parse_result
from gpu_sizer.probe.run import Options, measure

from .conftest import ROOT, TINY_LLAMA, inference_spec, training_spec

pytestmark = pytest.mark.probe

TINY_MIXTRAL = {**TINY_LLAMA, "modelType": "mixtral", "numLocalExperts": 4, "numExpertsPerTok": 2}
TINY_QWEN_MOE = {
    **TINY_LLAMA,
    "modelType": "qwen2_moe",
    "numLocalExperts": 4,
    "numExpertsPerTok": 2,
    "moeIntermediateSize": 32,
    "sharedExpertIntermediateSize": 64,
}
TINY_GEMMA2 = {**TINY_LLAMA, "modelType": "gemma2", "headDim": 32, "tieWordEmbeddings": True}
TINY_OPT = {**TINY_LLAMA, "modelType": "opt", "numKeyValueHeads": 4, "wordEmbedProjDim": 32}
TINY_NEOX = {**TINY_LLAMA, "modelType": "gpt_neox", "numKeyValueHeads": 4}
TINY_FALCON = {**TINY_LLAMA, "modelType": "falcon", "numKeyValueHeads": 1}
TINY_QWEN3_MOE = {
    **TINY_LLAMA,
    "modelType": "qwen3_moe",
    "headDim": 16,
    "numExperts": 4,
    "numExpertsPerTok": 2,
    "moeIntermediateSize": 32,
}
TINY_DEEPSEEK_V3 = {
    **TINY_LLAMA,
    "modelType": "deepseek_v3",
    "numKeyValueHeads": 4,
    "qLoraRank": 24,
    "kvLoraRank": 16,
    "qkRopeHeadDim": 8,
    "qkNopeHeadDim": 16,
    "vHeadDim": 16,
    "nRoutedExperts": 4,
    "numExpertsPerTok": 2,
    "nSharedExperts": 1,
    "moeIntermediateSize": 32,
    "firstKDenseReplace": 1,
}
TINY_GPT_OSS = {
    **TINY_LLAMA,
    "modelType": "gpt_oss",
    "numLocalExperts": 4,
    "numExpertsPerTok": 2,
    "slidingWindow": 16,
    "attentionBias": True,
}
TINY_NEMOTRON_H = {
    **TINY_LLAMA,
    "modelType": "nemotron_h",
    "numHiddenLayers": 4,
    "hybridOverridePattern": "M-*-",
    "mambaNumHeads": 8,
    "mambaHeadDim": 16,
    "ssmStateSize": 16,
    "nGroups": 2,
}
TINY_JAMBA = {
    **TINY_LLAMA,
    "modelType": "jamba",
    "numHiddenLayers": 4,
    "numExperts": 4,
    "numExpertsPerTok": 2,
    "attnLayerPeriod": 4,
    "attnLayerOffset": 2,
}
TINY_GEMMA3 = {
    **TINY_LLAMA,
    "modelType": "gemma3",
    "headDim": 16,
    "slidingWindow": 16,
    "visionConfig": {
        "modelType": "siglip_vision_model",
        "hiddenSize": 32,
        "intermediateSize": 64,
        "numHiddenLayers": 2,
        "numAttentionHeads": 2,
        "imageSize": 56,
        "patchSize": 14,
    },
}
NEW_FAMILIES = [
    TINY_QWEN3_MOE,
    TINY_DEEPSEEK_V3,
    TINY_GPT_OSS,
    TINY_NEMOTRON_H,
    TINY_JAMBA,
    TINY_GEMMA3,
]


def _measure(spec: dict[str, Any], **options: Any) -> tuple[ProbeResult, int]:
    return measure(parse_spec(spec), Options(device="cpu", **options))


@pytest.mark.parametrize(
    "arch",
    [
        TINY_LLAMA,
        TINY_MIXTRAL,
        TINY_QWEN_MOE,
        TINY_GEMMA2,
        TINY_OPT,
        TINY_NEOX,
        TINY_FALCON,
        *NEW_FAMILIES,
    ],
    ids=lambda a: a["modelType"],
)
def test_inference_runs_every_family(arch: dict[str, Any]) -> None:
    result, code = _measure(inference_spec(arch))
    assert code == 0 and result.status == "Succeeded", result.message
    assert result.device == "cpu" and result.mode == "Synthetic"
    names = [p.name for p in result.phases]
    encode = ["encode"] if "visionConfig" in arch else []
    assert names == ["load", "kv-cache", *encode, "prefill@1", "decode@1", "prefill@4", "decode@4"]
    assert result.peak_rss_bytes and result.peak_rss_bytes > 0
    # No GPU figure is ever invented on the CPU.
    assert result.peak_allocated_bytes is None and result.peak_reserved_bytes is None
    assert result.peak_device_used_bytes is None
    assert result.nvml is not None and not result.nvml.available and result.nvml.reason


def test_kv_cache_is_sized_for_max_num_seqs_times_max_model_len() -> None:
    # PagedAttention (Kwon et al. 2023, section 3): 2 (K and V) x layers x kv heads x head size
    # x bytes per element per token; 16-token blocks.
    result, _ = _measure(inference_spec(maxModelLen=100, maxNumSeqs=3))
    slots = 3 * math.ceil(100 / 16) * 16
    per_token = 2 * 2 * 2 * 16 * 2  # layers 2, kv heads 2, head size 64/4 = 16, bf16
    assert result.kv_cache_tokens == slots
    assert result.kv_cache_bytes == per_token * slots


def test_fp8_kv_cache_halves_the_cache() -> None:
    auto, _ = _measure(inference_spec())
    fp8, _ = _measure(inference_spec(kvCacheDtype="fp8"))
    assert fp8.status == "Succeeded", fp8.message
    assert auto.kv_cache_bytes == 2 * (fp8.kv_cache_bytes or 0)
    assert any("fp8 KV cache" in n and "vLLM's fp8" in n for n in fp8.notes)
    # The notes speak of the engine the spec names, not vLLM.
    sglang, _ = _measure(inference_spec(kvCacheDtype="fp8", engine="sglang"))
    assert sglang.status == "Succeeded", sglang.message
    assert any("fp8 KV cache" in n and "SGLang" in n for n in sglang.notes)
    assert not any("vLLM" in n for n in sglang.notes), sglang.notes


def test_chunked_prefill_handles_prompts_longer_than_the_chunk() -> None:
    result, _ = _measure(inference_spec(maxModelLen=200, maxNumSeqs=2, maxNumBatchedTokens=64))
    assert result.status == "Succeeded", result.message


def test_concurrency_above_max_num_seqs_is_capped_with_a_note() -> None:
    # The API now refuses levels above maxNumSeqs; an object stored before that rule can still
    # reach the probe, so the spec is built past validation as such an object would be.
    parsed = parse_spec(inference_spec())
    stale = parsed.model_copy(
        update={
            "measurement": parsed.measurement.model_copy(update={"concurrency_levels": [2, 99]})
        }
    )
    result, _ = measure(stale, Options(device="cpu"))
    assert [p.name for p in result.phases if p.name.startswith("decode")] == [
        "decode@2",
        "decode@4",
    ]
    assert any("exceed maxNumSeqs" in n for n in result.notes)


def test_weights_bytes_are_parameters_times_dtype_width() -> None:
    spec = inference_spec()
    spec["model"]["dtype"] = "float32"
    result, _ = _measure(spec)
    assert result.parameter_count is not None
    assert result.weights_bytes == 4 * result.parameter_count


@pytest.mark.parametrize(
    ("precision", "optimizer"),
    [
        ("bf16-mixed", "adamw"),
        ("fp16-mixed", "sgd-momentum"),
        ("fp32", "adafactor"),
        ("bf16-true", "lion"),
        ("bf16-mixed", "sgd"),
    ],
)
def test_training_step_runs(precision: str, optimizer: str) -> None:
    result, code = _measure(training_spec(precision=precision, optimizer=optimizer))
    assert code == 0 and result.status == "Succeeded", result.message
    names = [p.name for p in result.phases]
    assert names[0] == "load"
    # Two optimizer steps over two accumulation micro-batches each.
    assert names.count("step2.optimizer") == 1
    assert {"step1.forward1", "step1.backward2", "step2.forward2"} <= set(names)
    assert result.trainable_parameter_count == result.parameter_count


def test_training_weights_follow_precision() -> None:
    mixed, _ = _measure(training_spec(precision="bf16-mixed"))
    true, _ = _measure(training_spec(precision="bf16-true"))
    assert mixed.parameter_count == true.parameter_count
    # bf16-mixed keeps float32 parameters (master weights); bf16-true keeps bfloat16.
    assert mixed.weights_bytes == 4 * (mixed.parameter_count or 0)
    assert true.weights_bytes == 2 * (true.parameter_count or 0)


def test_lora_trains_only_adapters() -> None:
    spec = training_spec(
        activationCheckpointing=True,
        finetuning={"method": "lora", "loraRank": 4, "loraTargetModules": ["q_proj", "v_proj"]},
    )
    result, _ = _measure(spec)
    assert result.status == "Succeeded", result.message
    # Adapters A [r, in] and B [out, r] on q (64 -> 64) and v (64 -> 32) in 2 layers.
    assert result.trainable_parameter_count == 2 * (4 * 64 + 64 * 4 + 4 * 64 + 32 * 4)
    assert any("LoRA" in n for n in result.notes)


def test_moe_training_with_checkpointing() -> None:
    result, _ = _measure(training_spec(TINY_MIXTRAL, activationCheckpointing=True))
    assert result.status == "Succeeded", result.message


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"model": {"quantization": {"method": "awq"}}}, "awq 4-bit"),
        ({"model": {"dtype": "float8_e4m3fn"}}, "float8_e4m3fn"),
        ({"model": {"quantization": {"method": "gptq", "bits": 8}}}, "gptq 8-bit"),
        (
            {"model": {"architecture": None, "parameterCount": 1000}},
            "needs spec.model.architecture",
        ),
    ],
)
def test_unfaithful_specs_are_unsupported_not_measured(change: dict[str, Any], reason: str) -> None:
    spec = inference_spec()
    for key, values in change.items():
        spec[key] = {k: v for k, v in {**spec[key], **values}.items() if v is not None}
    result, code = _measure(spec)
    assert code == 0
    assert result.status == "Unsupported"
    assert reason in (result.message or "")
    assert result.peak_rss_bytes is None and not result.phases


def test_sharded_training_is_unsupported() -> None:
    spec = training_spec(parallelism={"strategy": "zero3", "dataParallelSize": 4})
    result, _ = _measure(spec)
    assert result.status == "Unsupported" and "zero3" in (result.message or "")


def test_adamw_8bit_without_bitsandbytes_is_unsupported() -> None:
    pytest.importorskip("torch")
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes installed here")
    result, _ = _measure(training_spec(optimizer="adamw-8bit"))
    assert result.status == "Unsupported" and "bitsandbytes" in (result.message or "")


def test_large_model_on_cpu_is_refused_not_attempted() -> None:
    big = {
        **TINY_LLAMA,
        "hiddenSize": 4096,
        "intermediateSize": 14336,
        "numHiddenLayers": 32,
        "numAttentionHeads": 32,
        "numKeyValueHeads": 8,
        "vocabSize": 128256,
    }
    spec = inference_spec(big)
    result, _ = _measure(spec)
    assert result.status == "Unsupported"
    per_gpu = estimate(parse_spec(spec)).per_gpu
    need = (per_gpu.weights_bytes + per_gpu.kv_cache_bytes) / 2**30
    assert result.message == (
        f"no GPU: the CPU fallback runs tiny models only; this workload needs about {need:.1f} "
        "GiB of weights and KV cache for maxNumSeqs x maxModelLen ("
        f"{spec['inference']['maxNumSeqs']} x {spec['inference']['maxModelLen']} tokens, all "
        "allocated by the CPU run) (limit --cpu-max-bytes 2.0 GiB); run it on a GPU node"
    )


def test_large_training_on_cpu_is_refused_with_the_estimates_figure() -> None:
    # A 13B LoRA holds the frozen bf16 base plus small adapters and their state (no KV cache):
    # about 25 GiB, not the ~194 GiB of a full fine-tune's fp32 weights, gradients and AdamW.
    doc = yaml.safe_load((ROOT / "examples" / "llama-2-13b-lora.yaml").read_text())
    spec = parse_spec(doc["spec"])
    assert spec.training is not None and spec.training.finetuning is not None
    result, _ = measure(spec, Options(device="cpu"))
    assert result.status == "Unsupported"
    per_gpu = estimate(spec).per_gpu
    need = (
        per_gpu.weights_bytes
        + per_gpu.gradient_bytes
        + per_gpu.optimizer_state_bytes
        + per_gpu.master_weight_bytes
    )
    assert 24 * 2**30 < need < per_gpu.total_bytes  # base weights dominate; activations excluded
    assert result.message == (
        f"no GPU: the CPU fallback runs tiny models only; this workload needs about "
        f"{need / 2**30:.1f} GiB of weights, gradients and optimizer state (limit "
        "--cpu-max-bytes 2.0 GiB); run it on a GPU node"
    )


def test_deadline_stops_between_steps() -> None:
    result, code = _measure(inference_spec(), deadline_seconds=0.0)
    assert code == 0
    assert result.status == "Timeout" and "deadline" in (result.message or "")


def test_result_round_trips_through_the_termination_message() -> None:
    from gpu_sizer.measurement.result import compact_message

    result, _ = _measure(inference_spec())
    assert parse_result(compact_message(result)) == result


def test_sigterm_during_a_run_still_writes_a_timeout_result(tmp_path: Any) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys

    from .conftest import ROOT

    # Long enough on two shared cores to be running when the signal arrives.
    arch = {**TINY_LLAMA, "maxPositionEmbeddings": 2048}
    spec = inference_spec(arch, maxModelLen=2048, maxNumSeqs=64, maxNumBatchedTokens=2048)
    spec["measurement"]["concurrencyLevels"] = [1, 2, 4, 8, 16, 32, 64]
    log = tmp_path / "log"
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-m", "gpu_sizer.probe", "--termination-log", str(log)],
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT / "operator"),
            "GPU_SIZER_SPEC": json.dumps(spec),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # the probe logs each phase as it starts
        if "phase prefill@1 started" in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["status"] == "Timeout" and "SIGTERM" in result["message"], result
    # What was measured before the signal is kept (an interrupted phase with its peaks so far).
    names = [p["name"] for p in result["phases"]]
    assert names[:2] == ["load", "kv-cache"]
    assert names[2] in ("prefill@1", "prefill@1 (interrupted)")
    assert not any(n.startswith("decode@64") for n in names)
    assert json.loads(log.read_text())["status"] == "Timeout"


def test_tensor_parallel_measures_one_rank() -> None:
    whole, _ = _measure(inference_spec())
    rank, _ = _measure(inference_spec(tensorParallelSize=2))
    assert rank.status == "Succeeded", rank.message
    # KV heads (2) split over 2 ranks: half the cache per GPU.
    assert rank.kv_cache_bytes == (whole.kv_cache_bytes or 0) // 2
    assert (rank.parameter_count or 0) < (whole.parameter_count or 0)
    assert any("rank 0's shard" in n for n in rank.notes)


@pytest.mark.parametrize("arch", [TINY_LLAMA, TINY_GEMMA2, TINY_OPT], ids=lambda a: a["modelType"])
def test_pipeline_parallel_measures_the_heaviest_stage(arch: dict[str, Any]) -> None:
    whole, _ = _measure(inference_spec(arch))
    stage, _ = _measure(inference_spec(arch, pipelineParallelSize=2, tensorParallelSize=2))
    assert stage.status == "Succeeded", stage.message
    # One of 2 layers per stage, KV heads split over 2 ranks: a quarter of the cache.
    assert stage.kv_cache_bytes == (whole.kv_cache_bytes or 0) // 4
    assert any("most loaded stage" in n for n in stage.notes)


def test_tensor_parallel_training_trains_one_rank() -> None:
    from gpu_sizer.api import Architecture
    from gpu_sizer.budget.params import layout

    spec = training_spec(parallelism={"tensorParallelSize": 2})
    result, _ = _measure(spec)
    assert result.status == "Succeeded", result.message
    assert (
        result.trainable_parameter_count == layout(Architecture.model_validate(TINY_LLAMA), 2).total
    )
    assert any("rank 0's shard" in n for n in result.notes)


def test_pipeline_parallel_training_is_unsupported() -> None:
    result, _ = _measure(training_spec(parallelism={"pipelineParallelSize": 2}))
    assert result.status == "Unsupported" and "1F1B" in (result.message or "")


@pytest.mark.parametrize(
    ("engine", "words", "passes_at_4"),
    [
        # maxModelLen 128, 4 decode steps: prompts of 124 tokens. The engines' 8192-token chunk
        # is capped at the 4 x 128 = 512 tokens that can be resident (budget.prefill_tokens).
        ("vllm", ["vLLM", "chunked prefill of 512 tokens"], [(4, 124)]),
        ("sglang", ["SGLang", "chunked prefill of 512 tokens"], [(4, 124)]),
        # TGI's prefill budget is maxModelLen + 50 = 178 tokens: one prompt per forward pass.
        ("tgi", ["TGI", "178 tokens"], [(1, 124)] * 4),
        # transformers' generate prefills the whole batch at once, unchunked.
        ("transformers", ["transformers", "no chunked prefill", "512 tokens"], [(4, 124)]),
    ],
)
def test_prefill_follows_the_engine(
    monkeypatch: pytest.MonkeyPatch, engine: str, words: list[str], passes_at_4: list[Any]
) -> None:
    from gpu_sizer.budget.activations import prefill_tokens
    from gpu_sizer.probe import inference

    calls: list[tuple[int, int]] = []
    real = inference._forward

    def spy(model: Any, batch: int, t: int, views: Any, start: int) -> None:
        calls.append((batch, t))
        real(model, batch, t, views, start)

    monkeypatch.setattr(inference, "_forward", spy)
    spec = inference_spec(engine=engine, maxNumBatchedTokens=None)
    del spec["inference"]["maxNumBatchedTokens"]
    spec["measurement"]["concurrencyLevels"] = [4]
    parsed = parse_spec(spec)
    assert parsed.inference is not None
    result, code = measure(parsed, Options(device="cpu"))
    assert code == 0 and result.status == "Succeeded", result.message
    prefill = [c for c in calls if c[1] > 1]
    assert prefill == passes_at_4
    note = next(n for n in result.notes if n.startswith("maxNumBatchedTokens unset"))
    for word in words:
        assert word in note, note
    assert str(prefill_tokens(parsed.inference)) in note
    if engine != "vllm":
        assert not any("vLLM V1" in n for n in result.notes), result.notes
    assert any("DynamicCache" in n for n in result.notes) is (engine == "transformers")


def test_a_full_size_pipeline_on_the_cpu_is_refused_not_attempted() -> None:
    # SD 1.5's weights alone are under the CPU limit; with its peak phase (the VAE decode of
    # four 512x512 images) it is not, and the probe must not start building it
    doc = yaml.safe_load((ROOT / "examples" / "sd15-txt2img-l4.yaml").read_text())
    result, code = _measure(doc["spec"])
    assert code == 0
    assert result.status == "Unsupported"
    assert "the peak phase's activations" in (result.message or "")
    assert not result.phases
