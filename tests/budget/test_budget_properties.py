"""Properties of the memory model over generated valid specs (hypothesis).

- estimate() never raises for a spec that validates, and its total is the sum of its components;
- more tokens (maxNumSeqs, maxModelLen, microBatchSize, sequenceLength) never need less memory;
- more sharding (tensor parallelism, a higher ZeRO stage, more data-parallel ranks under
  ZeRO/FSDP) never needs more memory per GPU. Two physical exceptions are excluded by the
  generated cases and stated here: going from 1 to 2 ranks of a group adds that group's NCCL
  communicator buffers, and ZeRO-3's gathered working set can outweigh what sharding saves: on
  a model of very few layers or a huge vocabulary (its largest module), and on any model smaller
  than ``stage3_max_live_parameters`` (DeepSpeed keeps up to 1e9 gathered elements resident, so
  a small model stays gathered on top of its partition), which the ZeRO-stage comparison rules
  out by setting that limit and the prefetch bucket to 0.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpu_sizer.api import (
    KNOWN_MODEL_TYPES,
    QUANTIZATION_BITS,
    EstimateStatus,
    InvalidWorkload,
    QuantizationMethod,
    parse_spec,
)
from gpu_sizer.budget import estimate
from gpu_sizer.budget.engines.common import COMM_GROUP_BYTES
from gpu_sizer.budget.params import layout
from gpu_sizer.budget.runtime import NCCL_COMMUNICATOR_BYTES

MOE_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe")
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much]
)


@st.composite
def architectures(draw: st.DrawFn, min_layers: int = 1) -> dict[str, Any]:
    family = draw(st.sampled_from(KNOWN_MODEL_TYPES))
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([8, 16, 64, 128]))
    a: dict[str, Any] = {
        "modelType": family,
        "numHiddenLayers": draw(st.integers(min_layers, 48)),
        "hiddenSize": heads * head_dim,
        "intermediateSize": draw(st.integers(1, 4096)),
        "numAttentionHeads": heads,
        "numKeyValueHeads": kv,
        "vocabSize": draw(st.integers(1, 160_000)),
        "maxPositionEmbeddings": 1 << 17,
    }
    if draw(st.booleans()):
        a["tieWordEmbeddings"] = draw(st.booleans())
    if draw(st.booleans()):
        a["attentionBias"] = draw(st.booleans())
    if family in ("falcon",):
        a["newDecoderArchitecture"] = draw(st.booleans())
        a["parallelAttn"] = draw(st.booleans())
    if family == "opt":
        a["wordEmbedProjDim"] = (
            draw(st.sampled_from([None, 64, a["hiddenSize"]])) or a["hiddenSize"]
        )
        a["doLayerNormBefore"] = draw(st.booleans())
    if family in MOE_FAMILIES and draw(st.booleans()):
        experts = draw(st.integers(1, 16))
        a["numLocalExperts"] = experts
        a["numExpertsPerTok"] = draw(st.integers(1, experts))
        if family == "qwen2_moe":
            a["moeIntermediateSize"] = draw(st.integers(1, 2048))
            a["sharedExpertIntermediateSize"] = draw(st.integers(1, 4096))
    if draw(st.booleans()):
        a["slidingWindow"] = draw(st.integers(1, 1 << 16))
    _new_family_keys(draw, family, a)
    return a


#: The config.json key each MoE family names its expert count with.
_EXPERT_KEYS = {
    "qwen3_moe": "numExperts",
    "jamba": "numExperts",
    "deepseek_v2": "nRoutedExperts",
    "deepseek_v3": "nRoutedExperts",
    "glm4_moe": "nRoutedExperts",
    "gpt_oss": "numLocalExperts",
    "llama4": "numLocalExperts",
}
_VISION = {
    "gemma3": "siglip_vision_model",
    "mistral3": "pixtral",
    "qwen2_5_vl": "qwen2_5_vl",
    "llama4": "llama4_vision_model",
}


def _new_family_keys(draw: st.DrawFn, family: str, a: dict[str, Any]) -> None:
    """The keys the newer families need, drawn small (MLA, experts, patterns, Mamba, vision)."""
    layers = a["numHiddenLayers"]
    if family in _EXPERT_KEYS:
        experts = draw(st.integers(1, 16))
        a[_EXPERT_KEYS[family]] = experts
        a["numExpertsPerTok"] = draw(st.integers(1, experts))
        a["moeIntermediateSize"] = draw(st.integers(1, 512))
        if family in ("deepseek_v2", "deepseek_v3", "glm4_moe"):
            a["nSharedExperts"] = draw(st.integers(0, 2))
            a["firstKDenseReplace"] = draw(st.integers(0, layers))
    if family in ("deepseek_v2", "deepseek_v3"):
        a["kvLoraRank"] = draw(st.sampled_from([16, 64, 512]))
        a["qkRopeHeadDim"] = draw(st.sampled_from([8, 64]))
        a["qkNopeHeadDim"] = draw(st.sampled_from([16, 128]))
        a["vHeadDim"] = draw(st.sampled_from([16, 128]))
        if draw(st.booleans()):
            a["qLoraRank"] = draw(st.sampled_from([32, 1536]))
    if family in ("gpt_oss", "gemma3", "gemma3_text") and draw(st.booleans()):
        a["layerTypes"] = draw(
            st.lists(
                st.sampled_from(["sliding_attention", "full_attention"]),
                min_size=layers,
                max_size=layers,
            )
        )
    if family == "llama4" and draw(st.booleans()):
        a["interleaveMoeLayerStep"] = draw(st.integers(1, 4))
        a["attentionChunkSize"] = draw(st.integers(1, 1 << 14))
    if family == "nemotron_h":
        a["hybridOverridePattern"] = "".join(
            draw(st.lists(st.sampled_from("M*-"), min_size=layers, max_size=layers))
        )
        a["mambaNumHeads"] = draw(st.sampled_from([8, 16, 128]))
        a["mambaHeadDim"] = draw(st.sampled_from([16, 64]))
        a["ssmStateSize"] = draw(st.sampled_from([16, 128]))
        a["nGroups"] = draw(st.sampled_from([1, 2, 8]))
    if family == "jamba":
        a["attnLayerPeriod"] = draw(st.integers(1, 8))
        a["attnLayerOffset"] = draw(st.integers(0, a["attnLayerPeriod"] - 1))
        a["mambaDState"] = draw(st.sampled_from([8, 16]))
    if family in _VISION:
        a["visionConfig"] = {
            "modelType": _VISION[family],
            "hiddenSize": 64,
            "intermediateSize": draw(st.integers(1, 256)),
            "numHiddenLayers": draw(st.integers(1, 4)),
            "numAttentionHeads": 4,
            "imageSize": 112,
        }


@st.composite
def quantizations(draw: st.DrawFn) -> dict[str, Any] | None:
    if draw(st.booleans()):
        return None
    method = draw(st.sampled_from(list(QuantizationMethod)))
    q: dict[str, Any] = {"method": method.value}
    if QUANTIZATION_BITS[method]:
        q["bits"] = draw(st.sampled_from(QUANTIZATION_BITS[method]))
    if method in (QuantizationMethod.gptq, QuantizationMethod.awq):
        q["groupSize"] = draw(st.sampled_from([-1, 32, 64, 128]))
        q["descAct"] = draw(st.booleans())
    if method is QuantizationMethod.fp8:
        scales = draw(st.sampled_from(["tensor", "channel", "block"]))
        if scales == "channel":
            q["perChannelScales"] = True
        elif scales == "block":
            q["weightBlockSize"] = [128, 128]
    if method is QuantizationMethod.compressed_tensors:
        q["configGroups"] = {"group_0": {"targets": ["Linear"], "weights": draw(ct_weights())}}
        q["ignore"] = draw(
            st.lists(st.sampled_from(["lm_head", "re:.*mlp.gate$", "re:.*self_attn.*"]))
        )
    elif method is not QuantizationMethod.bitsandbytes_int8 and draw(st.booleans()):
        q["modulesToNotConvert"] = draw(
            st.lists(st.sampled_from(["lm_head", "self_attn", "model.layers.0", "*.mlp"]))
        )
    return q


@st.composite
def ct_weights(draw: st.DrawFn) -> dict[str, Any]:
    """compressed-tensors weight schemes vLLM serves: W4A16/W8A16, W8A8 int8/fp8, NVFP4."""
    kind = draw(st.sampled_from(["w4a16", "w8a8-int8", "fp8-channel", "fp8-block", "nvfp4"]))
    if kind == "w4a16":
        return {"numBits": draw(st.sampled_from([4, 8])), "type": "int", "strategy": "group",
                "groupSize": draw(st.sampled_from([32, 64, 128])),
                "symmetric": draw(st.booleans())}  # fmt: skip
    if kind == "w8a8-int8":
        return {"numBits": 8, "type": "int", "strategy": "channel"}
    if kind == "fp8-channel":
        return {"numBits": 8, "type": "float", "strategy": "channel"}
    if kind == "fp8-block":
        return {"numBits": 8, "type": "float", "strategy": "block", "blockStructure": [128, 128]}
    return {"numBits": 4, "type": "float", "strategy": "tensor_group", "groupSize": 16}


def _parallel_sizes(draw: st.DrawFn, a: dict[str, Any]) -> int:
    return draw(st.sampled_from([t for t in (1, 2, 4, 8) if a["numAttentionHeads"] % t == 0]))


@st.composite
def inference_specs(draw: st.DrawFn) -> dict[str, Any]:
    a = draw(architectures())
    model: dict[str, Any] = {
        "architecture": a,
        "dtype": draw(st.sampled_from(["bfloat16", "float16", "float32", "float8_e4m3fn"])),
    }
    q = draw(quantizations())
    if q is not None:
        model["quantization"] = q
    seqs = draw(st.integers(1, 512))
    inf: dict[str, Any] = {
        "engine": draw(st.sampled_from(["vllm", "transformers", "tgi", "sglang"])),
        "maxModelLen": draw(st.integers(1, 32768)),
        "maxNumSeqs": seqs,
        "kvCacheDtype": draw(st.sampled_from(["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])),
        "tensorParallelSize": _parallel_sizes(draw, a),
        "pipelineParallelSize": draw(st.integers(1, min(4, a["numHiddenLayers"]))),
        "enforceEager": draw(st.booleans()),
    }
    if draw(st.booleans()):
        inf["maxNumBatchedTokens"] = draw(st.integers(seqs, 65536))
    return {"model": model, "inference": inf}


@st.composite
def training_specs(draw: st.DrawFn, min_layers: int = 1) -> dict[str, Any]:
    a = draw(architectures(min_layers=min_layers))
    method = draw(st.sampled_from(["full", "lora", "qlora"]))
    model: dict[str, Any] = {"architecture": a}
    if method == "qlora":
        model["quantization"] = {"method": "bitsandbytes-nf4"}
    elif method == "lora" and draw(st.booleans()):
        q = draw(quantizations())
        if q is not None:
            model["quantization"] = q
    strategy = draw(
        st.sampled_from(
            ["none", "ddp", "fsdp-full-shard", "fsdp-shard-grad-op", "zero1", "zero2", "zero3"]
        )
    )
    targets = draw(
        st.sampled_from(
            [["q_proj", "v_proj"], ["all-linear"], ["query_key_value", "dense"], ["fc1", "w1"]]
        )
    )
    tr: dict[str, Any] = {
        "microBatchSize": draw(st.integers(1, 16)),
        "sequenceLength": draw(st.integers(1, 16384)),
        "gradientAccumulationSteps": draw(st.integers(1, 16)),
        "precision": draw(st.sampled_from(["fp32", "bf16-mixed", "fp16-mixed", "bf16-true"])),
        "optimizer": draw(
            st.sampled_from(["adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion"])
        ),
        "activationCheckpointing": draw(st.booleans()),
        "flashAttention": draw(st.booleans()),
        "finetuning": {
            "method": method,
            "loraRank": draw(st.integers(1, 256)),
            "loraTargetModules": targets,
        },
        "parallelism": {
            "strategy": strategy,
            "dataParallelSize": 1 if strategy == "none" else draw(st.sampled_from([1, 2, 8, 64])),
            "tensorParallelSize": _parallel_sizes(draw, a),
            "pipelineParallelSize": draw(st.integers(1, min(4, a["numHiddenLayers"]))),
        },
    }
    return {"model": model, "training": tr}


@st.composite
def specs_without_architecture(draw: st.DrawFn) -> dict[str, Any]:
    doc = draw(st.one_of(inference_specs(), training_specs()))
    doc["model"].pop("architecture")
    doc["model"]["parameterCount"] = draw(st.integers(1, 10**12))
    if "training" in doc:
        doc["training"]["finetuning"]["method"] = "full"
        doc["model"].pop("quantization", None)
    return doc


def _estimate(doc: dict[str, Any]) -> EstimateStatus:
    try:
        spec = parse_spec(doc)
    except InvalidWorkload:
        assume(False)
        raise
    return estimate(spec)


def _phase(est: EstimateStatus, name: str) -> int:
    return next(p.total_bytes for p in est.phases if p.name == name)


def _components(est: EstimateStatus) -> int:
    g = est.per_gpu
    return (
        g.weights_bytes
        + g.quantization_overhead_bytes
        + g.kv_cache_bytes
        + g.activation_bytes
        + g.gradient_bytes
        + g.optimizer_state_bytes
        + g.master_weight_bytes
        + g.communication_buffer_bytes
        + g.runtime_overhead_bytes
    )


@SETTINGS
@given(st.one_of(inference_specs(), training_specs(), specs_without_architecture()))
def test_no_valid_spec_crashes_and_totals_add_up(doc: dict[str, Any]) -> None:
    est = _estimate(doc)
    assert est.per_gpu.total_bytes == _components(est)
    assert min(est.per_gpu.model_dump().values()) >= 0
    assert est.gpu_count >= 1


@SETTINGS
@given(inference_specs(), st.integers(1, 64), st.sampled_from(["maxNumSeqs", "maxModelLen"]))
def test_more_inference_tokens_never_need_less(doc: dict[str, Any], more: int, key: str) -> None:
    base = _estimate(doc)
    doc["inference"][key] += more
    bigger = _estimate(doc)
    assert bigger.per_gpu.total_bytes >= base.per_gpu.total_bytes
    assert bigger.per_gpu.kv_cache_bytes >= base.per_gpu.kv_cache_bytes


@SETTINGS
@given(training_specs(), st.integers(1, 64), st.sampled_from(["microBatchSize", "sequenceLength"]))
def test_more_training_tokens_never_need_less(doc: dict[str, Any], more: int, key: str) -> None:
    base = _estimate(doc)
    doc["training"][key] += more
    bigger = _estimate(doc)
    assert bigger.per_gpu.total_bytes >= base.per_gpu.total_bytes
    # perGpu shows the peak instant (backward, or the optimizer step with its workspace in
    # activationBytes), so compare the Step phase as a whole.
    assert _phase(bigger, "Step") >= _phase(base, "Step")


@SETTINGS
@given(st.one_of(inference_specs(), training_specs()))
def test_more_tensor_parallel_ranks_never_need_more_per_gpu(doc: dict[str, Any]) -> None:
    section = doc["inference"] if "inference" in doc else doc["training"]["parallelism"]
    base = _estimate(doc)
    tp = section["tensorParallelSize"]
    section["tensorParallelSize"] = 2 * tp
    doubled = _estimate(doc)
    group = COMM_GROUP_BYTES if "inference" in doc else NCCL_COMMUNICATOR_BYTES
    allowance = group if tp == 1 else 0
    assert doubled.per_gpu.total_bytes <= base.per_gpu.total_bytes + allowance


def _no_huge_module(doc: dict[str, Any]) -> None:
    """Keep to models whose gathered ZeRO-3 working set is at most a quarter of the model."""
    lay = layout(parse_spec(doc).model.architecture)  # type: ignore[arg-type]
    unit = max(lay.largest_layer, lay.embedding + lay.head) + lay.largest_layer
    assume(4 * unit <= lay.total)


@SETTINGS
@given(training_specs(min_layers=8), st.sampled_from([2, 8, 64]))
def test_higher_zero_stage_never_needs_more_per_gpu(doc: dict[str, Any], dp: int) -> None:
    par = doc["training"]["parallelism"]
    par.update(dataParallelSize=dp, tensorParallelSize=1, pipelineParallelSize=1)
    totals = []
    for stage in ("zero1", "zero2", "zero3"):
        par["strategy"] = stage
        if stage == "zero3":
            par["deepspeed"] = {"stage3MaxLiveParameters": 0, "stage3PrefetchBucketSize": 0}
        totals.append(_estimate(doc).per_gpu.total_bytes)
    par.pop("deepspeed")
    _no_huge_module(doc)
    assert totals[0] >= totals[1] >= totals[2]
    par["strategy"] = "fsdp-shard-grad-op"
    sgo = _estimate(doc).per_gpu.total_bytes
    par["strategy"] = "fsdp-full-shard"
    assert _estimate(doc).per_gpu.total_bytes <= sgo


@SETTINGS
@given(
    training_specs(),
    st.sampled_from(["zero1", "zero2", "zero3", "fsdp-full-shard", "fsdp-shard-grad-op"]),
    st.sampled_from([2, 4, 16]),
)
def test_more_data_parallel_ranks_never_need_more_under_sharding(
    doc: dict[str, Any], strategy: str, dp: int
) -> None:
    par = doc["training"]["parallelism"]
    par.update(strategy=strategy, dataParallelSize=dp)
    base = _estimate(doc)
    par["dataParallelSize"] = 2 * dp
    assert _estimate(doc).per_gpu.total_bytes <= base.per_gpu.total_bytes
