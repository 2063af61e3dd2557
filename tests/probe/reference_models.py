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

REFERENCE: dict[str, tuple[dict[str, Any], int]] = {
    "llama-3-8b": (
        dict(
            modelType="llama",
            numHiddenLayers=32,
            hiddenSize=4096,
            intermediateSize=14336,
            numAttentionHeads=32,
            numKeyValueHeads=8,
            vocabSize=128256,
            maxPositionEmbeddings=8192,
        ),
        8_030_261_248,
    ),
    "llama-2-7b": (
        dict(
            modelType="llama",
            numHiddenLayers=32,
            hiddenSize=4096,
            intermediateSize=11008,
            numAttentionHeads=32,
            vocabSize=32000,
            maxPositionEmbeddings=4096,
        ),
        6_738_415_616,
    ),
    "mistral-7b-v0.1": (
        dict(
            modelType="mistral",
            numHiddenLayers=32,
            hiddenSize=4096,
            intermediateSize=14336,
            numAttentionHeads=32,
            numKeyValueHeads=8,
            vocabSize=32000,
            maxPositionEmbeddings=32768,
            slidingWindow=4096,
        ),
        7_241_732_096,
    ),
    "mixtral-8x7b": (
        dict(
            modelType="mixtral",
            numHiddenLayers=32,
            hiddenSize=4096,
            intermediateSize=14336,
            numAttentionHeads=32,
            numKeyValueHeads=8,
            vocabSize=32000,
            maxPositionEmbeddings=32768,
            numLocalExperts=8,
            numExpertsPerTok=2,
        ),
        46_702_792_704,
    ),
    "qwen2-7b": (
        dict(
            modelType="qwen2",
            numHiddenLayers=28,
            hiddenSize=3584,
            intermediateSize=18944,
            numAttentionHeads=28,
            numKeyValueHeads=4,
            vocabSize=152064,
            maxPositionEmbeddings=131072,
        ),
        7_615_616_512,
    ),
    "qwen1.5-moe-a2.7b": (
        dict(
            modelType="qwen2_moe",
            numHiddenLayers=24,
            hiddenSize=2048,
            intermediateSize=5632,
            numAttentionHeads=16,
            numKeyValueHeads=16,
            vocabSize=151936,
            maxPositionEmbeddings=8192,
            numLocalExperts=60,
            numExpertsPerTok=4,
            moeIntermediateSize=1408,
            sharedExpertIntermediateSize=5632,
        ),
        14_315_784_192,
    ),
    "gemma-7b": (
        dict(
            modelType="gemma",
            numHiddenLayers=28,
            hiddenSize=3072,
            intermediateSize=24576,
            numAttentionHeads=16,
            numKeyValueHeads=16,
            headDim=256,
            vocabSize=256000,
            maxPositionEmbeddings=8192,
            tieWordEmbeddings=True,
        ),
        8_537_680_896,
    ),
    "gemma-2-9b": (
        dict(
            modelType="gemma2",
            numHiddenLayers=42,
            hiddenSize=3584,
            intermediateSize=14336,
            numAttentionHeads=16,
            numKeyValueHeads=8,
            headDim=256,
            vocabSize=256000,
            maxPositionEmbeddings=8192,
            tieWordEmbeddings=True,
            slidingWindow=4096,
        ),
        9_241_705_984,
    ),
    "phi-3-mini-4k": (
        dict(
            modelType="phi3",
            numHiddenLayers=32,
            hiddenSize=3072,
            intermediateSize=8192,
            numAttentionHeads=32,
            numKeyValueHeads=32,
            vocabSize=32064,
            maxPositionEmbeddings=4096,
        ),
        3_821_079_552,
    ),
    "gpt-neox-20b": (
        dict(
            modelType="gpt_neox",
            numHiddenLayers=44,
            hiddenSize=6144,
            intermediateSize=24576,
            numAttentionHeads=64,
            vocabSize=50432,
            maxPositionEmbeddings=2048,
        ),
        20_554_567_680,
    ),
    "falcon-7b": (
        dict(
            modelType="falcon",
            numHiddenLayers=32,
            hiddenSize=4544,
            intermediateSize=18176,
            numAttentionHeads=71,
            numKeyValueHeads=1,
            vocabSize=65024,
            maxPositionEmbeddings=2048,
            tieWordEmbeddings=True,
        ),
        6_921_720_704,
    ),
    "opt-1.3b": (
        dict(
            modelType="opt",
            numHiddenLayers=24,
            hiddenSize=2048,
            intermediateSize=8192,
            numAttentionHeads=32,
            vocabSize=50272,
            maxPositionEmbeddings=2048,
            tieWordEmbeddings=True,
        ),
        1_315_758_080,
    ),
}
