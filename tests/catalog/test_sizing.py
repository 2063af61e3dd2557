"""assess(): the one verdict path, its computed fixes, warnings and the cluster inventory.

Fix tests check the fixes against the memory model itself (a fix's value fits, one step further
does not), so they hold for any monotonic budget, not for one set of numbers.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_sizer.api import GPUWorkloadSpec, parse_spec
from gpu_sizer.api.spec import MAX_MIN_HEADROOM_FRACTION
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG, fits
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import MIN_FIX_MAX_MODEL_LEN, assess

GIB = 1 << 30
BY_NAME = {c.name: c for c in DEFAULT_CATALOG}

#: meta-llama/Meta-Llama-3-8B config.json (Hugging Face Hub).
LLAMA_3_8B = {
    "modelType": "llama", "numHiddenLayers": 32, "hiddenSize": 4096, "intermediateSize": 14336,
    "numAttentionHeads": 32, "numKeyValueHeads": 8, "vocabSize": 128256,
    "maxPositionEmbeddings": 8192,
}  # fmt: skip


def spec(**parts: Any) -> GPUWorkloadSpec:
    """A spec served by an on-demand runtime (transformers) unless ``inference`` names an engine:
    these tests check the class-independent verdict path; the pre-allocating engines' per-class
    path is tested in tests/catalog/test_pool_verdict.py."""
    data: dict[str, Any] = {
        "model": {"architecture": copy.deepcopy(LLAMA_3_8B), "revision": "abc123"},
        "inference": {"maxModelLen": 8192, "maxNumSeqs": 4},
    }
    for key, value in parts.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    if data.get("inference") is not None:
        data["inference"] = {"engine": "transformers", **data["inference"]}
    return parse_spec(data)


def too_big() -> GPUWorkloadSpec:
    """64 sequences of 8k tokens on an L4: the KV cache alone is 64 GiB."""
    return spec(
        inference={"maxModelLen": 8192, "maxNumSeqs": 64},
        placement={"gpuClasses": ["nvidia-l4"]},
    )


def vllm_too_big() -> GPUWorkloadSpec:
    """vLLM on an L4 asked to hold 16 concurrent 8k-token requests: its pool holds about 3.6."""
    return spec(
        inference={"engine": "vllm", "maxModelLen": 8192, "maxNumSeqs": 64,
                   "targetConcurrency": 16},
        placement={"gpuClasses": ["nvidia-l4"]},
    )  # fmt: skip


def test_fits_gives_a_consistent_recommendation() -> None:
    s = spec()
    a = assess(s)
    assert a.verdict is Verdict.Fits and a.recommendation is not None
    rec = a.recommendation
    assert rec.gpu_count == a.estimate.gpu_count == s.gpu_count == 1
    assert rec.required_bytes_per_gpu == a.estimate.per_gpu.total_bytes
    assert rec.headroom_fraction == pytest.approx(
        (rec.gpu_memory_bytes - rec.required_bytes_per_gpu) / rec.gpu_memory_bytes, abs=1e-4
    )
    assert rec.headroom_fraction >= s.placement.min_headroom_fraction
    assert rec.basis == "Estimate" and rec.cheapest_fitting_class == rec.gpu_class
    # the first class in rank order that fits: every cheaper class does not
    cls = BY_NAME[rec.gpu_class]
    for cheaper in (c for c in DEFAULT_CATALOG if c.rank < cls.rank):
        assert not fits(cheaper, rec.required_bytes_per_gpu, 0.10)
    assert "GiB" in a.message and rec.gpu_class in a.message and not a.fixes


def test_gpu_count_comes_only_from_declared_parallelism() -> None:
    a = assess(spec(inference={"maxModelLen": 8192, "maxNumSeqs": 4, "tensorParallelSize": 2,
                               "pipelineParallelSize": 2}))  # fmt: skip
    assert a.recommendation is not None and a.recommendation.gpu_count == 4


def test_unknown_gpu_class_names_it_and_lists_the_known_ones() -> None:
    a = assess(spec(placement={"gpuClasses": ["nvidia-h100", "nvidia-l4"]}))
    assert a.verdict is Verdict.UnknownGpuClass and a.recommendation is None
    assert a.message.startswith("spec.placement.gpuClasses: unknown GPU class 'nvidia-h100'")
    assert "nvidia-h100-80gb" in a.message and "'nvidia-l4'" not in a.message


def test_no_safe_headroom_message() -> None:
    s = too_big()
    a = assess(s)
    assert a.verdict is Verdict.NoSafeHeadroom and a.recommendation is None
    lines = a.message.splitlines()
    assert 1 <= len(lines) <= 2
    total = a.estimate.per_gpu.total_bytes / GIB
    assert f"needs {total:.1f} GiB per GPU" in lines[0]
    assert f"KV cache {a.estimate.per_gpu.kv_cache_bytes / GIB:.1f} GiB" in lines[0]
    assert "nvidia-l4 (22.0 GiB usable)" in lines[0]
    assert "10% headroom required" in lines[0]
    assert lines[1].startswith("Fits with any of: ")
    for fix in a.fixes:
        if fix.fits:
            assert str(fix) in lines[1]


def _largest_fits(s: GPUWorkloadSpec) -> bool:
    return fits(BY_NAME["nvidia-l4"], estimate(s).per_gpu.total_bytes, 0.10)


def _inference(s: GPUWorkloadSpec, **changes: Any) -> GPUWorkloadSpec:
    assert s.inference is not None
    return s.model_copy(update={"inference": s.inference.model_copy(update=changes)})


def test_max_num_seqs_fix_is_the_largest_that_fits() -> None:
    s = too_big()
    fix = next(f for f in assess(s).fixes if f.field == "spec.inference.maxNumSeqs")
    assert fix.fits and fix.gpu_class == "nvidia-l4" and 1 <= fix.value < 64
    assert _largest_fits(_inference(s, max_num_seqs=fix.value))
    assert not _largest_fits(_inference(s, max_num_seqs=fix.value + 1))
    refit = assess(_inference(s, max_num_seqs=fix.value))
    assert refit.verdict is Verdict.Fits
    assert refit.estimate.per_gpu.total_bytes == fix.required_bytes_per_gpu


def test_max_model_len_fix_is_the_largest_that_fits_to_256_tokens() -> None:
    s = spec(
        inference={"maxModelLen": 8192, "maxNumSeqs": 16},
        placement={"gpuClasses": ["nvidia-l4"]},
    )
    fix = next(f for f in assess(s).fixes if f.field == "spec.inference.maxModelLen")
    assert _largest_fits(_inference(s, max_model_len=fix.value))
    step = 256 if fix.value >= 1024 else 1
    assert not _largest_fits(_inference(s, max_model_len=fix.value + step))


def test_fixes_are_usable_or_said_not_enough() -> None:
    """100,000 sequences cannot fit by shortening them to 1 token: no fix below the floors."""
    s = spec(
        inference={"maxModelLen": 8192, "maxNumSeqs": 65_536},
        placement={"gpuClasses": ["nvidia-l4"]},
    )
    a = assess(s)
    by_field = {f.field: f for f in a.fixes}
    length = by_field["spec.inference.maxModelLen"]
    assert length.value == MIN_FIX_MAX_MODEL_LEN and not length.fits
    seqs = by_field["spec.inference.maxNumSeqs"]
    assert seqs.value >= 1
    assert "maxModelLen 1 " not in a.message
    not_enough = a.message.split("Not enough alone: ")[1]
    assert f"maxModelLen {MIN_FIX_MAX_MODEL_LEN} (" in not_enough


def test_tensor_parallel_fix_is_the_smallest_valid_size_that_fits() -> None:
    s = vllm_too_big()
    fix = next(f for f in assess(s).fixes if f.field == "spec.inference.tensorParallelSize")
    assert fix.gpu_count == fix.value and 32 % fix.value == 0
    for smaller in range(2, fix.value):
        if 32 % smaller == 0 and (8 % smaller == 0 or smaller % 8 == 0):
            assert assess(_inference(s, tensor_parallel_size=smaller)).verdict is not Verdict.Fits
    assert assess(_inference(s, tensor_parallel_size=fix.value)).verdict is Verdict.Fits


def test_no_tensor_parallel_fix_for_transformers() -> None:
    s = spec(inference={"engine": "transformers", "maxModelLen": 8192, "maxNumSeqs": 64},
             placement={"gpuClasses": ["nvidia-l4"]})  # fmt: skip
    fields = {f.field for f in assess(s).fixes}
    assert "spec.inference.tensorParallelSize" not in fields
    assert "spec.inference.maxNumSeqs" in fields


def test_fp8_kv_cache_fix_is_offered_and_recomputed() -> None:
    s = too_big()
    fix = next(f for f in assess(s).fixes if f.field == "spec.inference.kvCacheDtype")
    changed = _inference(s, kv_cache_dtype="fp8")
    assert fix.value == "fp8"
    assert fix.required_bytes_per_gpu == estimate(changed).per_gpu.total_bytes
    s8 = spec(inference={"maxModelLen": 8192, "maxNumSeqs": 64, "kvCacheDtype": "fp8"},
              placement={"gpuClasses": ["nvidia-l4"]})  # fmt: skip
    assert "spec.inference.kvCacheDtype" not in {f.field for f in assess(s8).fixes}


#: meta-llama/Llama-2-70b-hf config.json (Hugging Face Hub).
LLAMA_2_70B = {
    "modelType": "llama", "numHiddenLayers": 80, "hiddenSize": 8192, "intermediateSize": 28672,
    "numAttentionHeads": 64, "numKeyValueHeads": 8, "vocabSize": 32000,
    "maxPositionEmbeddings": 4096,
}  # fmt: skip


def _training(**training: Any) -> GPUWorkloadSpec:
    """Full fine-tune of a 70B model on L4s: more than 24 GB per GPU under any sharding of 4."""
    base: dict[str, Any] = {"microBatchSize": 8, "sequenceLength": 4096}
    base.update(training)
    return spec(
        model={"architecture": LLAMA_2_70B, "revision": "abc"},
        inference=None,
        training=base,
        placement={"gpuClasses": ["nvidia-l4"]},
    )


def test_training_fixes() -> None:
    a = assess(_training(parallelism={"strategy": "ddp", "dataParallelSize": 4}))
    assert a.verdict is Verdict.NoSafeHeadroom
    by_field = {f.field: f for f in a.fixes}
    ckpt = by_field["spec.training.activationCheckpointing"]
    assert ckpt.value is True
    zero3 = by_field["spec.training.parallelism.strategy"]
    assert zero3.value == "zero3" and zero3.gpu_count == 4
    assert "spec.inference.maxNumSeqs" not in by_field


def test_zero3_data_parallel_fix_doubles_until_it_fits() -> None:
    def on_h100(dp: int) -> GPUWorkloadSpec:
        base = _training(
            microBatchSize=1,
            sequenceLength=1024,
            activationCheckpointing=True,
            parallelism={"strategy": "zero3", "dataParallelSize": dp},
        )
        return base.model_copy(
            update={
                "placement": base.placement.model_copy(update={"gpu_classes": ["nvidia-h100-80gb"]})
            }
        )

    # 70B full fine-tune with AdamW: ~1.1 TB of model state; one 80 GB GPU cannot hold it.
    a = assess(on_h100(1))
    assert a.verdict is Verdict.NoSafeHeadroom
    fix = next(f for f in a.fixes if f.field == "spec.training.parallelism.dataParallelSize")
    assert fix.fits and fix.value in (2, 4, 8, 16, 32, 64) and fix.gpu_count == fix.value
    assert assess(on_h100(fix.value)).verdict is Verdict.Fits
    assert fix.value == 2 or assess(on_h100(fix.value // 2)).verdict is Verdict.NoSafeHeadroom


def test_no_checkpointing_fix_when_already_on() -> None:
    a = assess(_training(activationCheckpointing=True))
    assert "spec.training.activationCheckpointing" not in {f.field for f in a.fixes}


def test_warnings() -> None:
    no_revision = spec(model={"architecture": copy.deepcopy(LLAMA_3_8B)})
    assert any("spec.model.revision" in w for w in assess(no_revision).warnings)
    disabled = spec(measurement={"mode": "Disabled"})
    assert any("Disabled" in w for w in assess(disabled).warnings)
    assert not [w for w in assess(spec()).warnings if "revision" in w or "Disabled" in w]


def test_headroom_under_twice_the_minimum_warns() -> None:
    s = spec()
    required = estimate(s).per_gpu.total_bytes
    cls = min((c for c in DEFAULT_CATALOG if fits(c, required, 0.0)), key=lambda c: c.usable)
    room = (cls.usable - required) / cls.usable
    tight = spec(placement={"gpuClasses": [cls.name], "minHeadroomFraction": room * 0.75})
    a = assess(tight)
    assert a.verdict is Verdict.Fits
    assert any("under twice" in w for w in a.warnings)


def test_present_inventory() -> None:
    a = assess(spec(), present={"nvidia-h200"})
    assert a.recommendation is not None
    assert a.recommendation.gpu_class == "nvidia-h200"
    assert a.recommendation.present_in_cluster is True
    assert a.recommendation.cheapest_fitting_class != "nvidia-h200"
    assert "no nodes in the cluster" in a.message
    absent = assess(spec(), present=set())
    assert absent.recommendation is not None and absent.recommendation.present_in_cluster is False
    assert any("add" in w and "nodes" in w for w in absent.warnings)


def test_assess_is_deterministic() -> None:
    assert assess(too_big()) == assess(too_big())


# --- no valid spec crashes the assessment -------------------------------------------------------

_ENGINES = ["vllm", "transformers", "tgi", "sglang"]
_QUANT = [
    None,
    {"method": "awq", "bits": 4},
    {"method": "gptq", "bits": 3, "groupSize": -1},
    {"method": "fp8"},
    {"method": "bitsandbytes-nf4"},
    {"method": "bitsandbytes-int8"},
]


@settings(max_examples=150, deadline=None)
@given(
    seqs=st.integers(1, 65_536),
    length=st.integers(1, 8192),
    tp=st.sampled_from([1, 2, 4, 8]),
    engine=st.sampled_from(_ENGINES),
    kv=st.sampled_from(["auto", "fp8", "fp8_e5m2"]),
    quant=st.sampled_from(_QUANT),
    headroom=st.floats(0.0, MAX_MIN_HEADROOM_FRACTION),
    classes=st.lists(st.sampled_from([c.name for c in DEFAULT_CATALOG]), max_size=3),
)
def test_any_valid_inference_spec_gets_a_verdict(
    seqs: int, length: int, tp: int, engine: str, kv: str, quant: Any, headroom: float,
    classes: list[str],
) -> None:  # fmt: skip
    model: dict[str, Any] = {"architecture": copy.deepcopy(LLAMA_3_8B)}
    if quant:
        model["quantization"] = quant
    s = spec(
        model=model,
        inference={"engine": engine, "maxModelLen": length, "maxNumSeqs": seqs,
                   "tensorParallelSize": tp, "kvCacheDtype": kv},
        placement={"gpuClasses": classes, "minHeadroomFraction": headroom},
    )  # fmt: skip
    a = assess(s)
    assert a.verdict in (Verdict.Fits, Verdict.NoSafeHeadroom)
    assert (a.recommendation is not None) == (a.verdict is Verdict.Fits)
    if a.verdict is Verdict.NoSafeHeadroom:
        assert a.message.count("\n") <= 1
        for fix in a.fixes:
            assert fix.required_bytes_per_gpu > 0 and fix.field.startswith("spec.")


@settings(max_examples=100, deadline=None)
@given(
    micro=st.integers(1, 64),
    seq=st.integers(1, 4096),
    strategy=st.sampled_from(["ddp", "fsdp-full-shard", "fsdp-shard-grad-op", "zero1", "zero2",
                              "zero3"]),
    dp=st.integers(1, 16),
    method=st.sampled_from(["full", "lora", "qlora"]),
    optimizer=st.sampled_from(["adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion"]),
    ckpt=st.booleans(),
)  # fmt: skip
def test_any_valid_training_spec_gets_a_verdict(
    micro: int, seq: int, strategy: str, dp: int, method: str, optimizer: str, ckpt: bool
) -> None:
    model: dict[str, Any] = {"architecture": LLAMA_2_70B}
    if method == "qlora":
        model["quantization"] = {"method": "bitsandbytes-nf4"}
    s = spec(
        model=model,
        inference=None,
        training={"microBatchSize": micro, "sequenceLength": seq, "optimizer": optimizer,
                  "activationCheckpointing": ckpt, "finetuning": {"method": method},
                  "parallelism": {"strategy": strategy, "dataParallelSize": dp}},
    )  # fmt: skip
    a = assess(s)
    assert a.verdict in (Verdict.Fits, Verdict.NoSafeHeadroom)
    assert a.estimate.gpu_count == dp


#: deepseek-ai/DeepSeek-V2-Lite, 15.7B parameters (model card). Issue 10: given as a bare
#: parameterCount at 16 x 32k tokens, it "fitted" an RTX A6000 at 30 GiB while its MLA KV cache
#: alone is 31,104 B/token (vLLM issue 15871) x 16 x 32,768 tokens = 15.2 GiB more.
DEEPSEEK_V2_LITE_BARE: dict[str, Any] = {
    "model": {"name": "deepseek-ai/DeepSeek-V2-Lite", "revision": "x",
              "parameterCount": 15_700_000_000},
    "inference": {"maxModelLen": 32768, "maxNumSeqs": 16},
}  # fmt: skip


def test_deepseek_v2_lite_with_only_a_parameter_count_is_incomplete_not_a_fit() -> None:
    a = assess(parse_spec(copy.deepcopy(DEEPSEEK_V2_LITE_BARE)))
    assert a.verdict is Verdict.Incomplete
    assert a.recommendation is None  # a lower bound is never published as a recommendation
    # what is counted is the old, silent "fit": about 30 GiB, first fitting an RTX A6000
    assert a.lower_bound is not None and a.lower_bound.gpu_class == "nvidia-rtx-a6000"
    assert 29 * GIB < a.estimate.per_gpu.total_bytes < 31 * GIB
    kv = 31_104 * 16 * 32_768
    assert a.estimate.per_gpu.total_bytes + kv > BY_NAME["nvidia-rtx-a6000"].memory_bytes * 0.9
    assert {m.component for m in a.estimate.missing_components} == {
        "kvCacheBytes", "activationBytes"
    }  # fmt: skip
    assert a.message.startswith("incomplete estimate: KV cache not counted: ")
    for name in ("numHiddenLayers", "numKeyValueHeads", "headDim", "import-hf-config"):
        assert name in a.message
    assert "a lower bound: at least nvidia-rtx-a6000" in a.message


def test_incomplete_training_estimate_misses_activations() -> None:
    s = parse_spec(
        {"model": {"parameterCount": 1_000_000_000, "revision": "x"},
         "training": {"microBatchSize": 1, "sequenceLength": 2048}}
    )  # fmt: skip
    a = assess(s)
    assert a.verdict is Verdict.Incomplete and "activations and logits not counted" in a.message


def test_a_lower_bound_that_fits_nothing_is_a_definite_rejection() -> None:
    """Missing components only add memory: if what is counted already fits no allowed class,
    the verdict is NoSafeHeadroom, and the message says the real need is higher still."""
    s = parse_spec(
        {"model": {"parameterCount": 70_000_000_000, "revision": "x"},
         "inference": {"maxModelLen": 8192, "maxNumSeqs": 4},
         "placement": {"gpuClasses": ["nvidia-l4"]}}
    )  # fmt: skip
    a = assess(s)
    assert a.verdict is Verdict.NoSafeHeadroom
    assert "The real need is higher: incomplete estimate: KV cache not counted" in a.message


def test_incomplete_is_no_warning_but_the_verdict() -> None:
    a = assess(parse_spec(copy.deepcopy(DEEPSEEK_V2_LITE_BARE)))
    assert not [w for w in a.warnings if "architecture" in w]
    assert assess(spec()).verdict is Verdict.Fits


def test_every_reported_integer_fits_int64_even_at_the_field_maxima() -> None:
    """Each field at its API maximum multiplies out to ~10**25 bytes; the status must fit int64."""
    from gpu_sizer.api import LIMITS

    arch = {
        "modelType": "mixtral", "numHiddenLayers": LIMITS["layers"],
        "hiddenSize": LIMITS["width"], "intermediateSize": LIMITS["intermediate"],
        "numAttentionHeads": LIMITS["heads"], "vocabSize": LIMITS["vocab"],
        "maxPositionEmbeddings": LIMITS["tokens"], "numLocalExperts": LIMITS["experts"],
        "numExpertsPerTok": LIMITS["experts"],
    }  # fmt: skip
    for part in (
        {"inference": {"engine": "transformers", "maxModelLen": LIMITS["tokens"],
                       "maxNumSeqs": LIMITS["seqs"]}},
        {"training": {"microBatchSize": LIMITS["microBatch"], "sequenceLength": LIMITS["tokens"],
                      "precision": "fp32"}},
    ):  # fmt: skip
        a = assess(parse_spec({"model": {"architecture": arch, "dtype": "float32"}, **part}))
        assert a.verdict is Verdict.NoSafeHeadroom and a.fixes == []
        figures = json.dumps(a.estimate.model_dump(mode="json"))
        assert all(int(n) < 2**63 for n in re.findall(r"\d{10,}", figures))
        assert any("1 EiB" in n for n in a.estimate.notes)


def test_an_estimate_within_the_cap_is_kept_as_it_is() -> None:
    """The cap check reads the figures without dumping the estimate (admission throughput);
    an estimate with nothing to cap is passed on unchanged, the same object."""
    from gpu_sizer.sizing.assessment import cap_figures as _capped

    est = estimate(spec())
    assert _capped(est) == (est, False) and _capped(est)[0] is est


def test_a_sharded_spec_is_never_placed_on_mig_slices() -> None:
    # MIG devices have no peer-to-peer (nvidia-smi mig -lgip prints "P2P No"): TP=2 on two slices
    # is not a configuration NCCL runs, so only whole GPUs are considered.
    tp2 = spec(inference={"maxModelLen": 8192, "maxNumSeqs": 4, "tensorParallelSize": 2})
    present = {"nvidia-a100-80gb-mig-3g.40gb", "nvidia-h100-80gb"}
    a = assess(tp2, present=present)
    assert a.recommendation is not None and a.recommendation.gpu_class == "nvidia-h100-80gb"
    only_mig = spec(
        inference={"maxModelLen": 8192, "maxNumSeqs": 4, "tensorParallelSize": 2},
        placement={"gpuClasses": ["nvidia-a100-80gb-mig-3g.40gb"]},
    )
    rejected = assess(only_mig)
    assert rejected.verdict is Verdict.NoSafeHeadroom
    assert "spec.placement.gpuClasses" in rejected.message and "MIG" in rejected.message
    # One GPU: the present slice that fits is the recommendation.
    one = assess(spec(), present={"nvidia-a100-80gb-mig-3g.40gb"})
    assert one.recommendation is not None
    assert one.recommendation.gpu_class == "nvidia-a100-80gb-mig-3g.40gb"
