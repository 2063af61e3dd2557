"""For random valid serving specs, sizing never raises, and the CLI, the webhook and the operator
give the same verdict.

Specs are drawn over what serving sizing branches on: the engine and its release (modelled,
unlisted between, older and newer than any modelled), tensor, pipeline, data and expert
parallelism, the engine's memory fraction, ``targetConcurrency``, KV cache dtype, quantized
checkpoints (compressed-tensors included), MoE, sliding-window and MLA families from their
config.json, GPU classes and headroom. Each valid one goes through the three entry points:

* ``gpu-sizer estimate -o json`` in-process (its exit status and the ``Ready`` condition of the
  status it prints);
* the validating webhook's pure decision (:func:`gpu_sizer.admission.verdict.review`);
* the operator's pure decision after estimating (:func:`gpu_sizer.lifecycle.plan_spec`).

and :func:`gpu_sizer.sizing.verdict.assess_or_raise` must not raise on any of them. Examples are
bounded (CI runs on two loaded cores): the strategies favour the regimes, not the volume.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpu_sizer.admission.verdict import Outcome, review
from gpu_sizer.api import InvalidWorkload, parse_spec, spec_hash
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.cli import main
from gpu_sizer.lifecycle import Config, Workload, plan_spec
from gpu_sizer.policy.namespace import Policy
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess, assess_or_raise
from tests.admission.specs import spec_documents
from tests.api.test_hf_quantization import FP8_DYNAMIC, W4A16, W8A8_INT8
from tests.architectures import LLAMA_3_2_1B, LLAMA_3_8B
from tests.serving.figures import CONFIGS, QWEN3_06B, QWEN3_CODER_30B

OPEN = Policy().for_namespace({})
CLASS_NAMES = [c.name for c in DEFAULT_CATALOG if not c.is_mig]
#: config.json files of the regimes issue 28 models (MoE with experts over ranks, sliding window,
#: MLA, MXFP4, hybrid Mamba).
_CONFIGS = ["gpt-oss-20b", "qwen3-30b-a3b", "deepseek-v2-lite", "gemma-3-1b-it",
            "nvidia-nemotron-nano-9b-v2", "llama-4-scout-17b-16e-instruct"]  # fmt: skip
_LLAMA_8B_HF = {
    "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}  # fmt: skip


def _models() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"architecture": a} for a in (LLAMA_3_8B, LLAMA_3_2_1B)]
    out += [{"architecture": QWEN3_06B}, {"architecture": QWEN3_CODER_30B}]
    out += [
        model_from_hf_config(json.loads((CONFIGS / f"{n}.json").read_text()), serving=True)
        for n in _CONFIGS
    ]
    out += [
        model_from_hf_config({**_LLAMA_8B_HF, "quantization_config": qc}, serving=True)
        for qc in (FP8_DYNAMIC, W8A8_INT8, W4A16)
    ]
    return out


MODELS = _models()
VERSIONS = {
    "vllm": [None, "0.6.3.post1", "0.7.3", "0.8.5", "0.9.2", "0.10.1", "0.11.0", "0.14.1",
             "0.19.1", "0.30.0"],
    "sglang": [None, "0.4.6", "0.4.10", "0.5.3", "0.5.23", "0.9.0"],
    "tgi": [None, "1.4.0", "2.0.4", "2.4.1", "3.0.1", "3.3.7", "4.0.0"],
    "transformers": [None],
}  # fmt: skip


@st.composite
def serving_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A serving ``.spec`` over the regimes above (not always valid: callers filter)."""
    model = dict(draw(st.sampled_from(MODELS)))
    arch = model["architecture"]
    context = arch["maxPositionEmbeddings"]
    if arch.get("ropeScaling"):
        context *= int(arch["ropeScaling"]["factor"])
    engine = draw(st.sampled_from(["vllm", "vllm", "sglang", "tgi", "transformers"]))
    inf: dict[str, Any] = {
        "engine": engine,
        "maxModelLen": draw(st.integers(256, min(context, 131_072))),
        "maxNumSeqs": draw(st.sampled_from([1, 8, 64, 256, 1024])),
    }
    version = draw(st.sampled_from(VERSIONS[engine]))
    if version is not None:
        inf["engineVersion"] = version
    for key, values in (
        ("tensorParallelSize", st.sampled_from([1, 2, 4, 8])),
        ("pipelineParallelSize", st.sampled_from([1, 2])),
        ("dataParallelSize", st.sampled_from([1, 2, 8])),
        ("enableExpertParallel", st.booleans()),
        ("gpuMemoryUtilization", st.sampled_from([0.5, 0.8, 0.9, 0.95])),
        ("kvCacheDtype", st.sampled_from(["auto", "fp8"])),
        ("enforceEager", st.booleans()),
        ("maxNumBatchedTokens", st.sampled_from([1024, 8192, 16384])),
    ):
        if draw(st.integers(0, 2)) == 0:
            inf[key] = draw(values)
    if draw(st.booleans()):
        inf["targetConcurrency"] = float(draw(st.integers(1, inf["maxNumSeqs"])))
    placement: dict[str, Any] = {
        "minHeadroomFraction": draw(st.sampled_from([0.0, 0.05, 0.1, 0.2])),
    }
    if draw(st.booleans()):
        placement["gpuClasses"] = draw(
            st.lists(st.sampled_from(CLASS_NAMES), min_size=1, max_size=3, unique=True)
        )
    return {"model": model, "inference": inf, "placement": placement}


def _cli(doc: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    obj = {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": doc,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.yaml"
        path.write_text(yaml.safe_dump(obj))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["estimate", str(path), "-o", "json"])
    printed = json.loads(out.getvalue()) if out.getvalue().strip() else None
    return code, printed


_EXIT = {Verdict.Fits: 0, Verdict.NoSafeHeadroom: 1, Verdict.Incomplete: 3}
_OUTCOMES = {
    Verdict.Fits: {Outcome.Allowed, Outcome.AllowedWithWarnings},
    Verdict.NoSafeHeadroom: {Outcome.NoSafeHeadroom},
    Verdict.Incomplete: {Outcome.AllowedIncomplete},
}


def _check(doc: dict[str, Any]) -> None:
    try:
        spec = parse_spec(doc)
    except InvalidWorkload:
        assume(False)
        return
    assessment = assess_or_raise(spec)  # never raises on a valid spec
    assert assessment.verdict in _EXIT, assessment.message
    assert assess(spec).verdict is assessment.verdict

    code, printed = _cli(doc)
    assert code == _EXIT[assessment.verdict], (code, assessment.message)
    assert printed is not None
    ready = next(c for c in printed["status"]["conditions"] if c["type"] == "Ready")

    answer = review(doc, namespace="default", policy=OPEN, catalog=DEFAULT_CATALOG)
    assert answer.outcome in _OUTCOMES[assessment.verdict], (answer, assessment.message)
    if assessment.verdict is Verdict.NoSafeHeadroom:
        assert answer.message == assessment.message == ready["message"]
    if assessment.verdict is Verdict.Incomplete:
        assert answer.warnings[0] == assessment.message

    workload = Workload("w", "default", 1, spec, spec_hash(spec), None)
    plan = plan_spec(
        workload,
        assessment,
        Config(catalog=DEFAULT_CATALOG),
        present=None,
        now="2026-12-01T00:00:00Z",
        job_name=lambda cls, mem, retry: f"w-{cls}-{retry}",
        memory_bytes=8 << 30,
    )
    if assessment.verdict is Verdict.Incomplete:
        assert plan.status.phase.value != "Ready"  # a lower bound never makes it Ready
    if assessment.verdict is Verdict.NoSafeHeadroom:
        operator_ready = next(c for c in plan.status.conditions if c.type == "Ready")
        assert operator_ready.message == ready["message"]
        assert plan.status.phase.value == "Rejected"
    else:
        assert plan.status.phase.value != "Rejected"


_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


@_SETTINGS
@given(serving_documents())
def test_serving_specs_get_one_verdict_everywhere(doc: dict[str, Any]) -> None:
    _check(doc)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(spec_documents())
def test_specs_as_users_write_them_get_one_verdict_everywhere(doc: dict[str, Any]) -> None:
    if "placement" not in doc:
        doc["placement"] = {}
    doc["placement"].setdefault("minHeadroomFraction", 0.1)  # the webhook's policy default
    _check(doc)
