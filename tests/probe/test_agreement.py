"""The estimator and the probe agree by construction.

The synthetic model built on the ``meta`` device (nothing allocated) must have exactly the
parameter count ``gpu_sizer.budget`` computes, for every example workload and for reference
architectures whose published counts are known; its KV cache tensors must hold exactly
``kvCacheBytesPerToken`` bytes per token slot.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import yaml

from gpu_sizer.api import Architecture, GPUWorkloadSpec, parse_spec, parse_workload
from gpu_sizer.budget import estimate
from gpu_sizer.budget.estimate import stage_outer_params
from gpu_sizer.budget.kv_cache import kv_geometry
from gpu_sizer.budget.params import layout as budget_layout
from gpu_sizer.budget.params import stage_layers
from gpu_sizer.probe.inference import (
    BLOCK_SIZE,
    allocate_kv_cache,
    allocate_layer_caches,
    kv_cache_dtype,
)
from gpu_sizer.probe.model import (
    build_model,
    heaviest_stage,
    parameter_count,
    rank_architecture,
)
from tests.example_files import WORKLOAD_FILES

from .conftest import TINY_LLAMA
from .reference_models import REFERENCE
from .test_synthetic import NEW_FAMILIES

EXAMPLES = WORKLOAD_FILES
META = torch.device("meta")


def _example_specs() -> list[Any]:
    specs = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            # pipelines are counted against diffusers' own classes (tests/budget/diffusion)
            if isinstance(doc, dict) and doc.get("kind") == "GPUWorkload":
                if "pipeline" in doc["spec"]["model"]:
                    continue
                specs.append(pytest.param(parse_workload(doc), id=path.stem))
    return specs


def _meta_count(arch: Architecture) -> int:
    return parameter_count(build_model(arch, torch.bfloat16, META))


def test_examples_exist() -> None:
    assert EXAMPLES, "examples/ has no GPUWorkload files"


@pytest.mark.parametrize("spec", _example_specs())
def test_parameter_count_equals_budget_for_every_example(spec: GPUWorkloadSpec) -> None:
    assert spec.model.architecture is not None
    assert _meta_count(spec.model.architecture) == estimate(spec).parameter_count


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_parameter_count_equals_published_and_budget(name: str) -> None:
    arch_doc, published = REFERENCE[name]
    arch = Architecture.model_validate(arch_doc)
    spec = parse_spec(
        {"model": {"architecture": arch_doc}, "inference": {"maxModelLen": 1024, "maxNumSeqs": 1}}
    )
    assert _meta_count(arch) == published
    assert estimate(spec).parameter_count == published


@pytest.mark.parametrize(
    "change",
    [
        {"tieWordEmbeddings": True},
        {"attentionBias": True, "mlpBias": True},
        {
            "modelType": "opt",
            "numKeyValueHeads": 4,
            "doLayerNormBefore": False,
            "wordEmbedProjDim": 32,
        },
        {"modelType": "falcon", "numKeyValueHeads": 1, "parallelAttn": False},
        {"modelType": "falcon", "newDecoderArchitecture": True, "attentionBias": True},
        {"modelType": "gpt_neox", "numKeyValueHeads": 4, "attentionBias": False},
        {
            "modelType": "qwen2_moe",
            "numLocalExperts": 4,
            "numExpertsPerTok": 2,
            "moeIntermediateSize": 32,
            "sharedExpertIntermediateSize": 64,
            "mlpBias": True,
        },
    ],
)
def test_parameter_count_equals_budget_for_flag_variants(change: dict[str, Any]) -> None:
    arch_doc = {**TINY_LLAMA, **change}
    spec = parse_spec(
        {"model": {"architecture": arch_doc}, "inference": {"maxModelLen": 64, "maxNumSeqs": 1}}
    )
    assert spec.model.architecture is not None
    assert _meta_count(spec.model.architecture) == estimate(spec).parameter_count


def _inference_examples() -> list[Any]:
    return [p for p in _example_specs() if p.values[0].inference is not None]


def _cache_bytes(spec: GPUWorkloadSpec) -> tuple[int, int]:
    """(probe's cache bytes, the estimate's geometry for the same slots) on the meta device."""
    inf, whole = spec.inference, spec.model.architecture
    assert inf is not None and whole is not None
    tp, pp = inf.tensor_parallel_size, inf.pipeline_parallel_size
    arch = rank_architecture(whole, tp)  # one GPU's share
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(
        spec.model.dtype.value, torch.bfloat16
    )
    model = build_model(arch, dtype, META, heaviest_stage(arch, pp, tp), tp)
    cache_dtype = kv_cache_dtype(inf.kv_cache_dtype, dtype)
    caches = allocate_layer_caches(
        model, whole, tp, inf.max_num_seqs, inf.max_model_len, cache_dtype, dtype, META
    )
    nbytes = sum(c.tensor.numel() * c.tensor.element_size() for c in caches)
    element = torch.empty((), dtype=cache_dtype).element_size()
    geometry = kv_geometry(
        whole, element, tp, pp, max(2, torch.empty((), dtype=dtype).element_size())
    )
    slots = inf.max_num_seqs * math.ceil(inf.max_model_len / BLOCK_SIZE) * BLOCK_SIZE
    expected = geometry.bytes_per_token * slots + geometry.bytes_per_sequence * inf.max_num_seqs
    assert geometry.bytes_per_token == estimate(spec).kv_cache_bytes_per_token
    return nbytes, expected


@pytest.mark.parametrize("spec", _inference_examples())
@pytest.mark.parametrize("kv", ["auto", "fp8"])
def test_kv_cache_bytes_equal_bytes_per_token_times_slots(spec: GPUWorkloadSpec, kv: str) -> None:
    spec = spec.model_copy(
        update={"inference": spec.inference.model_copy(update={"kv_cache_dtype": kv})}  # type: ignore[union-attr]
    )
    nbytes, expected = _cache_bytes(spec)
    assert nbytes == expected


@pytest.mark.parametrize("arch_doc", NEW_FAMILIES, ids=lambda a: a["modelType"])
@pytest.mark.parametrize("tp", [1, 2])
def test_new_families_agree_per_rank(arch_doc: dict[str, Any], tp: int) -> None:
    """MLA, sinks, shared experts, Mamba-1/2 state and a vision tower: the synthetic rank's
    parameters and cache equal the estimate's."""
    spec = parse_spec(
        {
            "model": {"architecture": arch_doc},
            "inference": {"maxModelLen": 64, "maxNumSeqs": 3, "tensorParallelSize": tp},
        }
    )
    arch = spec.model.architecture
    assert arch is not None
    rank = rank_architecture(arch, tp)
    assert parameter_count(build_model(rank, torch.bfloat16, META, tp=tp)) == (
        budget_layout(arch, tp).total
    )
    nbytes, expected = _cache_bytes(spec)
    assert nbytes == expected


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize(
    "name", ["llama-3-8b", "mixtral-8x7b", "qwen1.5-moe-a2.7b", "gpt-neox-20b", "opt-1.3b"]
)
def test_tensor_parallel_rank_matches_budget_per_rank(name: str, tp: int) -> None:
    arch_doc, _ = REFERENCE[name]
    arch = Architecture.model_validate(arch_doc)
    spec = parse_spec(
        {
            "model": {"architecture": arch_doc},
            "inference": {"maxModelLen": 1024, "maxNumSeqs": 2, "tensorParallelSize": tp},
        }
    )
    rank = rank_architecture(arch, tp)
    assert _meta_count(rank) == budget_layout(arch, tp).total
    cache = allocate_kv_cache(
        rank.num_hidden_layers, 2, 1024, rank.kv_heads, rank.head_size, torch.bfloat16, META
    )
    nbytes = sum(t.numel() * t.element_size() for t in cache)
    assert nbytes == estimate(spec).kv_cache_bytes_per_token * 2 * 1024


@pytest.mark.parametrize("pp", [2, 3, 4])
@pytest.mark.parametrize("name", ["llama-3-8b", "gemma-7b", "opt-1.3b", "qwen2-7b"])
def test_pipeline_stage_matches_budget(name: str, pp: int) -> None:
    arch_doc, _ = REFERENCE[name]
    arch = Architecture.model_validate(arch_doc)
    layers = -(-arch.num_hidden_layers // pp)
    lay = budget_layout(arch, 1, stage_layers(arch, pp))
    stage = heaviest_stage(arch, pp)
    built = parameter_count(build_model(arch, torch.bfloat16, META, stage))
    outer = stage_outer_params(lay, pp, arch.word_embed_proj_dim or arch.hidden_size)
    assert stage.layers == layers
    assert built == lay.layer_total + outer
    spec = parse_spec(
        {
            "model": {"architecture": arch_doc},
            "inference": {"maxModelLen": 1024, "maxNumSeqs": 2, "pipelineParallelSize": pp},
        }
    )
    cache = allocate_kv_cache(layers, 2, 1024, arch.kv_heads, arch.head_size, torch.bfloat16, META)
    nbytes = sum(t.numel() * t.element_size() for t in cache)
    assert nbytes == estimate(spec).kv_cache_bytes_per_token * 2 * 1024
