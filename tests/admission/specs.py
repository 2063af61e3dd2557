"""Hypothesis strategies for GPUWorkload ``.spec`` documents as a user writes them, and policies.

Unlike the budget's property tests, which write every key to exercise the memory model, these
leave most keys out, as users do, so that every default (pydantic's, the namespace policy's, the
engine's ``maxNumBatchedTokens``) is exercised, and they set the rest to any value the API accepts.
Architectures are the real config.json figures of ``tests.architectures``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from gpu_sizer.api.spec import MAX_MIN_HEADROOM_FRACTION
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.policy.namespace import EffectivePolicy
from tests import architectures

ARCHITECTURES: list[dict[str, Any]] = [
    value
    for name, value in vars(architectures).items()
    if name.isupper() and isinstance(value, dict) and "modelType" in value
]
CLASS_NAMES = [c.name for c in DEFAULT_CATALOG]
FRACTIONS = st.sampled_from([0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, MAX_MIN_HEADROOM_FRACTION])


def _maybe(
    draw: st.DrawFn, target: dict[str, Any], key: str, values: st.SearchStrategy[Any]
) -> None:
    """Set ``target[key]`` to a drawn value about half of the time (users leave keys out)."""
    if draw(st.booleans()):
        target[key] = draw(values)


def _context(arch: dict[str, Any] | None) -> int:
    return 131_072 if arch is None else int(arch["maxPositionEmbeddings"])


@st.composite
def models(draw: st.DrawFn) -> dict[str, Any]:
    model: dict[str, Any] = {}
    if draw(st.integers(0, 4)):
        model["architecture"] = dict(draw(st.sampled_from(ARCHITECTURES)))
    else:
        model["parameterCount"] = draw(st.integers(1, 400 * 10**9))
    _maybe(draw, model, "revision", st.sampled_from(["62bd457b6fe961a42a631306577e622c83876cb6"]))
    _maybe(draw, model, "name", st.sampled_from(["org/model"]))
    _maybe(draw, model, "dtype", st.sampled_from(["bfloat16", "float16", "float32"]))
    if draw(st.integers(0, 3)) == 0:
        model["quantization"] = draw(
            st.sampled_from(
                [
                    {"method": "awq"},
                    {"method": "gptq", "bits": 4, "groupSize": 128},
                    {"method": "gptq", "bits": 8, "groupSize": -1, "descAct": True},
                    {"method": "fp8"},
                    {"method": "bitsandbytes-nf4"},
                ]
            )
        )
    return model


@st.composite
def inference(draw: st.DrawFn, arch: dict[str, Any] | None) -> dict[str, Any]:
    seqs = draw(st.integers(1, 1024))
    inf: dict[str, Any] = {
        "maxModelLen": draw(st.integers(1, min(_context(arch), 65_536))),
        "maxNumSeqs": seqs,
    }
    _maybe(draw, inf, "engine", st.sampled_from(["vllm", "transformers", "tgi", "sglang"]))
    _maybe(draw, inf, "maxNumBatchedTokens", st.integers(seqs, 200_000))
    _maybe(draw, inf, "kvCacheDtype", st.sampled_from(["auto", "fp8", "fp8_e5m2"]))
    _maybe(draw, inf, "tensorParallelSize", st.sampled_from([1, 2, 4, 8]))
    _maybe(draw, inf, "pipelineParallelSize", st.sampled_from([1, 2]))
    _maybe(draw, inf, "enforceEager", st.booleans())
    return inf


@st.composite
def training(draw: st.DrawFn, arch: dict[str, Any] | None) -> dict[str, Any]:
    tr: dict[str, Any] = {
        "microBatchSize": draw(st.integers(1, 16)),
        "sequenceLength": draw(st.integers(1, min(_context(arch), 16_384))),
    }
    _maybe(draw, tr, "gradientAccumulationSteps", st.integers(1, 64))
    _maybe(draw, tr, "precision", st.sampled_from(["fp32", "bf16-mixed", "bf16-true"]))
    _maybe(draw, tr, "optimizer", st.sampled_from(["adamw", "adamw-8bit", "sgd", "lion"]))
    _maybe(draw, tr, "activationCheckpointing", st.booleans())
    _maybe(draw, tr, "flashAttention", st.booleans())
    if arch is not None and draw(st.booleans()):
        finetuning: dict[str, Any] = {"method": draw(st.sampled_from(["full", "lora"]))}
        _maybe(draw, finetuning, "loraRank", st.integers(1, 256))
        _maybe(draw, finetuning, "loraTargetModules", st.sampled_from([["q_proj"], ["all-linear"]]))
        tr["finetuning"] = finetuning
    if draw(st.booleans()):
        strategy = draw(st.sampled_from(["none", "ddp", "fsdp-full-shard", "zero2", "zero3"]))
        parallelism: dict[str, Any] = {"strategy": strategy}
        if strategy != "none":
            _maybe(draw, parallelism, "dataParallelSize", st.sampled_from([1, 2, 8, 64]))
        tr["parallelism"] = parallelism
    return tr


@st.composite
def spec_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A ``.spec`` mapping with some keys set, most left to their defaults. Not always valid
    (a quantization may not divide the architecture's widths): callers filter with the API."""
    model = draw(models())
    arch = model.get("architecture")
    doc: dict[str, Any] = {"model": model}
    if draw(st.integers(0, 2)):
        doc["inference"] = draw(inference(arch))
    else:
        doc["training"] = draw(training(arch))
    if draw(st.booleans()):
        measurement: dict[str, Any] = {}
        _maybe(draw, measurement, "mode", st.sampled_from(["Synthetic", "Disabled"]))
        _maybe(draw, measurement, "timeoutSeconds", st.integers(30, 86_400))
        if "inference" in doc:
            seqs = doc["inference"]["maxNumSeqs"]
            _maybe(
                draw, measurement, "concurrencyLevels", st.lists(st.integers(1, seqs), max_size=4)
            )
        doc["measurement"] = measurement
    if draw(st.booleans()):
        placement: dict[str, Any] = {}
        _maybe(draw, placement, "gpuClasses", st.lists(st.sampled_from(CLASS_NAMES), unique=True))
        _maybe(draw, placement, "minHeadroomFraction", FRACTIONS)
        doc["placement"] = placement
    return doc


@st.composite
def effective_policies(draw: st.DrawFn) -> EffectivePolicy:
    """What a namespace's policy can resolve to: bounds, a default between them, classes."""
    floor, default, maximum = sorted(draw(st.lists(FRACTIONS, min_size=3, max_size=3)))
    allowed = draw(st.none() | st.sets(st.sampled_from(CLASS_NAMES), min_size=1))
    return EffectivePolicy(
        allowed_classes=None if allowed is None else frozenset(allowed),
        default_min_headroom_fraction=default,
        min_headroom_fraction_floor=floor,
        max_min_headroom_fraction=max(maximum, 0.05),
    )
