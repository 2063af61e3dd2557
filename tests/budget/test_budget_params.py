"""Exact parameter counts from the models' official config.json files.

Expected figures are the published counts where a model card or paper gives one, and otherwise
``sum(p.numel() for p in model.parameters())`` of the ``transformers`` model built from the same
config (checked with transformers 5.24 on the meta device while writing these tests).
"""

from __future__ import annotations

import pytest
from tests.architectures import (
    FALCON_7B,
    FALCON_40B,
    FALCON_RW_1B,
    GEMMA2_9B,
    GEMMA_7B,
    GPT_NEOX_20B,
    LLAMA_2_7B,
    LLAMA_2_13B,
    LLAMA_3_8B,
    LLAMA_3_70B,
    MISTRAL_7B,
    MIXTRAL_8X7B,
    OPT_13B,
    OPT_350M,
    PHI3_MINI,
    QWEN2_7B,
    QWEN15_MOE_A27B,
    arch,
)

from gpu_sizer.api import Architecture
from gpu_sizer.budget.params import layout, parameter_count


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Issue 2's figure; PEFT's widely printed "all params: 6,742,609,920" for Llama-2-7b
        # with r=8 q/v adapters is this plus 4,194,304 adapter parameters.
        pytest.param(LLAMA_2_7B, 6_738_415_616, id="llama-2-7b"),
        # Published figure (issue 2 brief); equals the transformers count.
        pytest.param(LLAMA_2_13B, 13_015_864_320, id="llama-2-13b"),
        # Published figure (issue 2; Hub safetensors total); equals the transformers count.
        pytest.param(LLAMA_3_8B, 8_030_261_248, id="llama-3-8b"),
        # Published figure (issue 2 brief); equals the transformers count.
        pytest.param(LLAMA_3_70B, 70_553_706_496, id="llama-3-70b"),
        # Published figure (issue 2; Hub safetensors total); equals the transformers count.
        pytest.param(MISTRAL_7B, 7_241_732_096, id="mistral-7b-v0.1"),
        # Published figure (issue 2 brief; "46.7B"); equals the transformers count.
        pytest.param(MIXTRAL_8X7B, 46_702_792_704, id="mixtral-8x7b"),
        # Published figure (issue 2 brief; "7.6B"); equals the transformers count.
        pytest.param(QWEN2_7B, 7_615_616_512, id="qwen2-7b"),
        # Qwen1.5-MoE-A2.7B: "14.3B parameters in total" (Qwen blog); exact from transformers.
        pytest.param(QWEN15_MOE_A27B, 14_315_784_192, id="qwen1.5-moe-a2.7b"),
        # Published figure (issue 2 brief; "8.54B"); equals the transformers count.
        pytest.param(GEMMA_7B, 8_537_680_896, id="gemma-7b"),
        # Hub "9.24B"; exact figure from the transformers count.
        pytest.param(GEMMA2_9B, 9_241_705_984, id="gemma-2-9b"),
        # Published figure (issue 2 brief; "3.8B"); equals the transformers count.
        pytest.param(PHI3_MINI, 3_821_079_552, id="phi-3-mini"),
        # EleutherAI/gpt-neox-20b model card: 20,556,201,984, counted by the GPT-NeoX framework
        # at tensor-parallel size 2, where the replicated tensors (2 LayerNorms and the 2
        # row-parallel biases per layer = 6 x 6144, plus the final LayerNorm 2 x 6144) appear
        # twice: 20,556,201,984 - (44 x 6 + 2) x 6144 = 20,554,567,680, the HF model's count.
        pytest.param(GPT_NEOX_20B, 20_554_567_680, id="gpt-neox-20b"),
        # Falcon-7B: no exact published figure found ("7B"); transformers count.
        pytest.param(FALCON_7B, 6_921_720_704, id="falcon-7b"),
        # Falcon-40B: no exact published figure found ("40B"); transformers count.
        pytest.param(FALCON_40B, 41_303_293_952, id="falcon-40b"),
        # Falcon-RW-1B (biases, post-attention LayerNorm): transformers count.
        pytest.param(FALCON_RW_1B, 1_311_625_216, id="falcon-rw-1b"),
        # OPT-13B: the OPT paper (Zhang et al. 2022, Table 1) says "13B"; transformers count.
        pytest.param(OPT_13B, 12_853_473_280, id="opt-13b"),
        # OPT-350m (project_in/out, no final LayerNorm): transformers count.
        pytest.param(OPT_350M, 331_196_416, id="opt-350m"),
    ],
)
def test_exact_parameter_count(config: dict[str, object], expected: int) -> None:
    assert parameter_count(arch(config)) == expected


def test_llama_2_7b_by_hand() -> None:
    """The Llama layout spelled out: embeddings, 32 x (attention + SwiGLU MLP + 2 RMSNorms)."""
    h, inter, vocab, layers = 4096, 11008, 32000, 32
    per_layer = 4 * h * h + 3 * h * inter + 2 * h
    assert parameter_count(arch(LLAMA_2_7B)) == layers * per_layer + 2 * vocab * h + h


def test_family_default_ties_gemma_unless_the_spec_says_otherwise() -> None:
    tied = parameter_count(arch(GEMMA_7B))
    untied = parameter_count(arch({**GEMMA_7B, "tieWordEmbeddings": False}))
    assert untied - tied == 256000 * 3072


def test_gpt_neox_biases_are_on_by_default() -> None:
    with_bias = parameter_count(arch(GPT_NEOX_20B))
    without = parameter_count(arch({**GPT_NEOX_20B, "attentionBias": False}))
    assert with_bias - without == 44 * (3 * 6144 + 6144)


def test_tensor_parallel_rank_holds_its_share() -> None:
    """Llama-3-70B over 8 ranks: 64/8 query heads, 8/8 KV heads, MLP and vocabulary split."""
    whole = layout(arch(LLAMA_3_70B))
    rank = layout(arch(LLAMA_3_70B), tp=8)
    assert rank.groups[0].matrix_params * 8 == whole.groups[0].matrix_params
    assert rank.embedding * 8 == whole.embedding
    # norms replicated
    assert rank.groups[0].vectors == whole.groups[0].vectors


def test_kv_heads_replicate_when_fewer_than_ranks() -> None:
    """Llama-3-8B (8 KV heads) on 16 ranks keeps one KV head per rank (vLLM QKVParallelLinear)."""
    rank = layout(arch({**LLAMA_3_8B, "numAttentionHeads": 32}), tp=16)
    k = next(lin for lin in rank.linears if lin.role == "k")
    assert k.out_features == 128


def test_moe_router_and_experts() -> None:
    lay = layout(arch(MIXTRAL_8X7B))
    router = next(lin for lin in lay.linears if lin.role == "router")
    assert (router.in_features, router.out_features) == (4096, 8)
    assert not router.quantizable
    experts = [lin for lin in lay.linears if lin.copies == 8]
    assert {lin.name for lin in experts} == {"w1", "w2", "w3"}


@pytest.mark.parametrize("config", [GEMMA_7B, GPT_NEOX_20B], ids=["gemma-7b", "gpt-neox-20b"])
def test_family_defaults_survive_reserialisation(config: dict[str, object]) -> None:
    # The mutating webhook stores the spec with every default filled; a family default (Gemma's
    # tied embeddings, GPT-NeoX's biases) must not flip because the field is now present.
    original = arch(config)
    round_tripped = Architecture.model_validate(original.model_dump(mode="json", by_alias=True))
    assert parameter_count(round_tripped) == parameter_count(original)


def test_lora_target_names_cover_every_module_the_budget_knows() -> None:
    """The API's list of LoRA targets (validated on admission) names every adapted module."""
    from tests import architectures

    from gpu_sizer.api import LORA_TARGET_MODULES

    archs = [
        Architecture.model_validate(v)
        for v in vars(architectures).values()
        if isinstance(v, dict) and "modelType" in v
    ]
    assert len(archs) > 10
    for candidate in archs:
        for linear in layout(candidate).linears:
            if linear.role != "router":
                assert linear.name in LORA_TARGET_MODULES, (candidate.model_type, linear.name)
