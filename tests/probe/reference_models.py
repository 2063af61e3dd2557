"""Reference architectures (config.json values) with the parameter counts their publishers give.

Each count is what ``model.num_parameters()`` reports for the Hugging Face checkpoint, as shown
on the model card's "Model size"/safetensors metadata (exact integers from the safetensors index
``total_size`` divided by the dtype width where the card rounds). Sources: the model cards and
config.json files of meta-llama/Meta-Llama-3-8B, meta-llama/Llama-2-7b-hf,
mistralai/Mistral-7B-v0.1, mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen2-7B, Qwen/Qwen1.5-MoE-A2.7B,
google/gemma-7b, google/gemma-2-9b, microsoft/Phi-3-mini-4k-instruct, EleutherAI/gpt-neox-20b,
tiiuae/falcon-7b, facebook/opt-1.3b.
"""

from __future__ import annotations

from typing import Any

from tests.architectures import (
    FALCON_7B,
    GEMMA2_9B,
    GEMMA_7B,
    GPT_NEOX_20B,
    LLAMA_2_7B,
    LLAMA_3_8B,
    MISTRAL_7B,
    MIXTRAL_8X7B,
    OPT_1_3B,
    PHI3_MINI,
    QWEN2_7B,
    QWEN15_MOE_A27B,
)

REFERENCE: dict[str, tuple[dict[str, Any], int]] = {
    "llama-3-8b": (LLAMA_3_8B, 8_030_261_248),
    "llama-2-7b": (LLAMA_2_7B, 6_738_415_616),
    "mistral-7b-v0.1": (MISTRAL_7B, 7_241_732_096),
    "mixtral-8x7b": (MIXTRAL_8X7B, 46_702_792_704),
    "qwen2-7b": (QWEN2_7B, 7_615_616_512),
    "qwen1.5-moe-a2.7b": (QWEN15_MOE_A27B, 14_315_784_192),
    "gemma-7b": (GEMMA_7B, 8_537_680_896),
    "gemma-2-9b": (GEMMA2_9B, 9_241_705_984),
    "phi-3-mini-4k": (PHI3_MINI, 3_821_079_552),
    "gpt-neox-20b": (GPT_NEOX_20B, 20_554_567_680),
    "falcon-7b": (FALCON_7B, 6_921_720_704),
    "opt-1.3b": (OPT_1_3B, 1_315_758_080),
}
