"""Architectures taken from the models' official config.json files on the Hugging Face Hub.

The one source of these dicts for the tests and the hack/ scripts (import ``tests.architectures``
with the repository root on ``sys.path``); tests/examples checks that examples/*.yaml use the
same numbers.

Each entry names its source (the repository whose config.json it copies) and keeps only the keys
the memory model reads, camelCased as in ``spec.model.architecture``. Keys the config.json leaves
to the ``transformers`` config class default (e.g. Falcon's ``tie_word_embeddings``, GPT-NeoX's
``attention_bias``) are left out here too, so that the family defaults are exercised.
"""

from __future__ import annotations

from typing import Any

from gpu_sizer.api import Architecture

#: huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
LLAMA_2_7B: dict[str, Any] = {
    "modelType": "llama",
    "numHiddenLayers": 32,
    "hiddenSize": 4096,
    "intermediateSize": 11008,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 32,
    "vocabSize": 32000,
    "tieWordEmbeddings": False,
    "maxPositionEmbeddings": 4096,
}
#: huggingface.co/meta-llama/Llama-2-13b-hf/blob/main/config.json
LLAMA_2_13B: dict[str, Any] = {
    **LLAMA_2_7B,
    "numHiddenLayers": 40,
    "hiddenSize": 5120,
    "intermediateSize": 13824,
    "numAttentionHeads": 40,
    "numKeyValueHeads": 40,
}
#: huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
LLAMA_3_8B: dict[str, Any] = {
    "modelType": "llama",
    "numHiddenLayers": 32,
    "hiddenSize": 4096,
    "intermediateSize": 14336,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 8,
    "vocabSize": 128256,
    "tieWordEmbeddings": False,
    "maxPositionEmbeddings": 8192,
}
#: huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json
LLAMA_3_2_1B: dict[str, Any] = {
    "modelType": "llama",
    "numHiddenLayers": 16,
    "hiddenSize": 2048,
    "intermediateSize": 8192,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 8,
    "headDim": 64,
    "vocabSize": 128256,
    "maxPositionEmbeddings": 131072,
    "tieWordEmbeddings": True,
}
#: huggingface.co/meta-llama/Llama-3.1-405B-Instruct-FP8/blob/main/config.json (the bf16
#: release's shape; its quantization_config is in tests/budget/test_budget_quantization.py)
LLAMA_3_1_405B: dict[str, Any] = {
    "modelType": "llama",
    "numHiddenLayers": 126,
    "hiddenSize": 16384,
    "intermediateSize": 53248,
    "numAttentionHeads": 128,
    "numKeyValueHeads": 8,
    "vocabSize": 128256,
    "maxPositionEmbeddings": 131072,
    "ropeScaling": {"ropeType": "llama3", "factor": 8.0, "originalMaxPositionEmbeddings": 8192},
}
#: huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json
LLAMA_3_70B: dict[str, Any] = {
    **LLAMA_3_8B,
    "numHiddenLayers": 80,
    "hiddenSize": 8192,
    "intermediateSize": 28672,
    "numAttentionHeads": 64,
    "numKeyValueHeads": 8,
}
#: huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
MISTRAL_7B: dict[str, Any] = {
    "modelType": "mistral",
    "numHiddenLayers": 32,
    "hiddenSize": 4096,
    "intermediateSize": 14336,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 8,
    "vocabSize": 32000,
    "tieWordEmbeddings": False,
    "maxPositionEmbeddings": 32768,
    "slidingWindow": 4096,
}
#: huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
MIXTRAL_8X7B: dict[str, Any] = {
    "modelType": "mixtral",
    "numHiddenLayers": 32,
    "hiddenSize": 4096,
    "intermediateSize": 14336,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 8,
    "vocabSize": 32000,
    "tieWordEmbeddings": False,
    "maxPositionEmbeddings": 32768,
    "numLocalExperts": 8,
    "numExpertsPerTok": 2,
}
#: huggingface.co/Qwen/Qwen2-7B/blob/main/config.json (sliding window off: use_sliding_window
#: is false there, so slidingWindow is left out)
QWEN2_7B: dict[str, Any] = {
    "modelType": "qwen2",
    "numHiddenLayers": 28,
    "hiddenSize": 3584,
    "intermediateSize": 18944,
    "numAttentionHeads": 28,
    "numKeyValueHeads": 4,
    "vocabSize": 152064,
    "tieWordEmbeddings": False,
    "maxPositionEmbeddings": 131072,
}
#: huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json (num_experts -> numLocalExperts)
QWEN15_MOE_A27B: dict[str, Any] = {
    "modelType": "qwen2_moe",
    "numHiddenLayers": 24,
    "hiddenSize": 2048,
    "intermediateSize": 5632,
    "moeIntermediateSize": 1408,
    "sharedExpertIntermediateSize": 5632,
    "numAttentionHeads": 16,
    "numKeyValueHeads": 16,
    "vocabSize": 151936,
    "tieWordEmbeddings": False,
    "maxPositionEmbeddings": 8192,
    "numLocalExperts": 60,
    "numExpertsPerTok": 4,
}
#: huggingface.co/google/gemma-7b/blob/main/config.json (no tie_word_embeddings key: GemmaConfig
#: default, tied)
GEMMA_7B: dict[str, Any] = {
    "modelType": "gemma",
    "numHiddenLayers": 28,
    "hiddenSize": 3072,
    "intermediateSize": 24576,
    "numAttentionHeads": 16,
    "numKeyValueHeads": 16,
    "headDim": 256,
    "vocabSize": 256000,
    "maxPositionEmbeddings": 8192,
}
#: huggingface.co/google/gemma-2-9b/blob/main/config.json
GEMMA2_9B: dict[str, Any] = {
    "modelType": "gemma2",
    "numHiddenLayers": 42,
    "hiddenSize": 3584,
    "intermediateSize": 14336,
    "numAttentionHeads": 16,
    "numKeyValueHeads": 8,
    "headDim": 256,
    "vocabSize": 256000,
    "maxPositionEmbeddings": 8192,
    "slidingWindow": 4096,
}
#: huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
PHI3_MINI: dict[str, Any] = {
    "modelType": "phi3",
    "numHiddenLayers": 32,
    "hiddenSize": 3072,
    "intermediateSize": 8192,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 32,
    "vocabSize": 32064,
    "tieWordEmbeddings": False,
    "maxPositionEmbeddings": 4096,
    "slidingWindow": 2047,
}
#: huggingface.co/EleutherAI/gpt-neox-20b/blob/main/config.json
GPT_NEOX_20B: dict[str, Any] = {
    "modelType": "gpt_neox",
    "numHiddenLayers": 44,
    "hiddenSize": 6144,
    "intermediateSize": 24576,
    "numAttentionHeads": 64,
    "vocabSize": 50432,
    "tieWordEmbeddings": False,
    "maxPositionEmbeddings": 2048,
}
#: huggingface.co/tiiuae/falcon-7b/blob/main/config.json (multi_query: true -> one KV head; no
#: ffn_hidden_size key: 4 x hidden_size; no max_position_embeddings key: 2048)
FALCON_7B: dict[str, Any] = {
    "modelType": "falcon",
    "numHiddenLayers": 32,
    "hiddenSize": 4544,
    "intermediateSize": 4 * 4544,
    "numAttentionHeads": 71,
    "numKeyValueHeads": 1,
    "vocabSize": 65024,
    "maxPositionEmbeddings": 2048,
}
#: huggingface.co/tiiuae/falcon-40b/blob/main/config.json (new_decoder_architecture, n_head_kv 8)
FALCON_40B: dict[str, Any] = {
    "modelType": "falcon",
    "numHiddenLayers": 60,
    "hiddenSize": 8192,
    "intermediateSize": 4 * 8192,
    "numAttentionHeads": 128,
    "numKeyValueHeads": 8,
    "vocabSize": 65024,
    "maxPositionEmbeddings": 2048,
    "newDecoderArchitecture": True,
}
#: huggingface.co/tiiuae/falcon-rw-1b/blob/main/config.json (sequential attention and MLP with a
#: post-attention LayerNorm, ``bias: true`` -> attentionBias, multi-head KV, ALiBi)
FALCON_RW_1B: dict[str, Any] = {
    "modelType": "falcon",
    "numHiddenLayers": 24,
    "hiddenSize": 2048,
    "intermediateSize": 4 * 2048,
    "numAttentionHeads": 32,
    "vocabSize": 50304,
    "maxPositionEmbeddings": 2048,
    "parallelAttn": False,
    "attentionBias": True,
}
#: huggingface.co/facebook/opt-13b/blob/main/config.json (ffn_dim -> intermediateSize)
OPT_13B: dict[str, Any] = {
    "modelType": "opt",
    "numHiddenLayers": 40,
    "hiddenSize": 5120,
    "intermediateSize": 20480,
    "numAttentionHeads": 40,
    "vocabSize": 50272,
    "maxPositionEmbeddings": 2048,
    "wordEmbedProjDim": 5120,
}
#: huggingface.co/facebook/opt-350m/blob/main/config.json (project_in/out, post-layer-norm)
OPT_350M: dict[str, Any] = {
    "modelType": "opt",
    "numHiddenLayers": 24,
    "hiddenSize": 1024,
    "intermediateSize": 4096,
    "numAttentionHeads": 16,
    "vocabSize": 50272,
    "maxPositionEmbeddings": 2048,
    "wordEmbedProjDim": 512,
    "doLayerNormBefore": False,
}
#: huggingface.co/facebook/opt-1.3b/blob/main/config.json
OPT_1_3B: dict[str, Any] = {
    "modelType": "opt",
    "numHiddenLayers": 24,
    "hiddenSize": 2048,
    "intermediateSize": 8192,
    "numAttentionHeads": 32,
    "vocabSize": 50272,
    "maxPositionEmbeddings": 2048,
    "tieWordEmbeddings": True,
}


def arch(data: dict[str, Any]) -> Architecture:
    """The validated Architecture of one of the dicts above."""
    return Architecture.model_validate(data)
