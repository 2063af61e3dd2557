"""Published serving figures: engine start-up logs and tables with their exact flags.

Each :class:`Figure` is one engine run someone published (the source names where), as a spec
gpu-sizer sizes, and what the engine logged: its KV cache pool in GiB, or that it refused to
start. ``tests/serving/test_published_figures.py`` checks every one and
``hack/serving-accuracy.py`` tabulates them against NVIDIA's aiconfigurator for
docs/accuracy.md. Flags the source leaves out are the engine's defaults for that release and
GPU (vLLM >= 0.9 on an H100: ``max_num_seqs`` 1024; on smaller GPUs 256), written out here.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_sizer.api import GPUWorkloadSpec, parse_spec
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass
from tests.api.test_hf_quantization import FP8_DYNAMIC, W8A8_INT8
from tests.architectures import (
    GEMMA2_9B,
    LLAMA_2_7B,
    LLAMA_3_8B,
    MIXTRAL_8X7B,
    QWEN2_7B,
    QWEN15_MOE_A27B,
)

MIB = 1 << 20
GIB = 1 << 30
CONFIGS = Path(__file__).parent.parent / "budget" / "configs"
BY_NAME = {c.name: c for c in DEFAULT_CATALOG}

#: llm-d-benchmark's H100 (``config_explorer/empirical-vllm-memory-results.md``: 79.18 GiB total).
H100_LLMD = GPUClass(
    "h100-llmd", "H100 80GB HBM3", 81559 * MIB, ("NVIDIA-H100-80GB-HBM3",), "sxm",
    usable_bytes=round(79.18 * GIB), compute_capability="9.0",
)  # fmt: skip
#: An RTX 3090 as vLLM logs it (vllm-project/vllm#10517: total_gpu_memory=23.58GiB).
RTX3090 = GPUClass(
    "rtx-3090", "GeForce RTX 3090", 24576 * MIB, ("NVIDIA-GeForce-RTX-3090",), "pcie",
    usable_bytes=round(23.58 * 1024) * MIB, compute_capability="8.6",
)  # fmt: skip
#: The 141 GB H20 of vllm-project/recipes#12 (the 0.90 and 0.95 pools differ by 6.99 GiB:
#: 0.05 x 139.8 GiB).
H20_141 = GPUClass(
    "h20-141gb", "H20 141GB", 143771 * MIB, ("NVIDIA-H20",), "sxm",
    usable_bytes=round(139.8 * GIB), compute_capability="9.0",
)  # fmt: skip

#: llm-d-incubation/llm-d-planner's H100 (``accuracy/results/v0.19.0`` logs: total_memory=79.19GiB).
H100_PLANNER = GPUClass(
    "h100-llmd-planner", "H100 80GB HBM3", 81559 * MIB, ("NVIDIA-H100-80GB-HBM3",), "sxm",
    usable_bytes=round(79.19 * GIB), compute_capability="9.0",
)  # fmt: skip
#: The A10G of huggingface/text-generation-inference#653 (EKS, driver 470: nvidia-smi 22731 MiB,
#: the same reporter's #563); usable as NVML's total less the A10 class's own gap (0.50 GiB).
A10G_653 = GPUClass(
    "a10g-653", "NVIDIA A10G", 22731 * MIB, ("NVIDIA-A10G",), "PCIe Gen4 x16, no NVLink",
    usable_bytes=22731 * MIB - (BY_NAME["nvidia-a10g"].memory_bytes
                                - BY_NAME["nvidia-a10g"].usable),
    compute_capability="8.6",
)  # fmt: skip
#: The RTX 4090s of vllm-project/vllm#13061 (V0 logs 0.98 x total = 23.08 GiB: 23.55 GiB).
RTX4090_13061 = GPUClass(
    "rtx-4090-13061", "GeForce RTX 4090", 24564 * MIB, ("NVIDIA-GeForce-RTX-4090",),
    "PCIe Gen4 x16, no NVLink (no peer-to-peer)", usable_bytes=round(23.55 * GIB),
    compute_capability="8.9",
)  # fmt: skip

LLAMA_31_8B = {**LLAMA_3_8B, "maxPositionEmbeddings": 131072,
               "ropeScaling": {"ropeType": "llama3", "factor": 8.0,
                               "originalMaxPositionEmbeddings": 8192}}  # fmt: skip
#: Qwen/Qwen3-0.6B and Qwen/Qwen3-32B config.json.
QWEN3_06B = {"modelType": "qwen3", "numHiddenLayers": 28, "hiddenSize": 1024,
             "intermediateSize": 3072, "numAttentionHeads": 16, "numKeyValueHeads": 8,
             "headDim": 128, "vocabSize": 151936, "maxPositionEmbeddings": 40960,
             "tieWordEmbeddings": True}  # fmt: skip
QWEN3_32B = {"modelType": "qwen3", "numHiddenLayers": 64, "hiddenSize": 5120,
             "intermediateSize": 25600, "numAttentionHeads": 64, "numKeyValueHeads": 8,
             "headDim": 128, "vocabSize": 151936, "maxPositionEmbeddings": 40960,
             "tieWordEmbeddings": False}  # fmt: skip
#: meta-llama/Llama-3.3-70B-Instruct config.json (hf names, for the compressed-tensors import).
LLAMA_33_70B_HF = {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
                   "intermediate_size": 28672, "num_attention_heads": 64,
                   "num_key_value_heads": 8, "vocab_size": 128256,
                   "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                    "original_max_position_embeddings": 8192}}  # fmt: skip
#: Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 config.json (block-wise FP8, 128 x 128).
QWEN3_CODER_480B_HF = {"model_type": "qwen3_moe", "num_hidden_layers": 62, "hidden_size": 6144,
                       "intermediate_size": 8192, "moe_intermediate_size": 2560,
                       "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
                       "num_experts": 160, "num_experts_per_tok": 8, "vocab_size": 151936,
                       "max_position_embeddings": 262144, "tie_word_embeddings": False,
                       "torch_dtype": "bfloat16",
                       "quantization_config": {"quant_method": "fp8",
                                               "weight_block_size": [128, 128]}}  # fmt: skip
#: Qwen/Qwen3-Coder-30B-A3B-Instruct config.json (as tests/budget/test_engines.py sizes it).
QWEN3_CODER_30B = {"modelType": "qwen2_moe", "numHiddenLayers": 48, "hiddenSize": 2048,
                   "intermediateSize": 6144, "moeIntermediateSize": 768, "numAttentionHeads": 32,
                   "numKeyValueHeads": 4, "headDim": 128, "vocabSize": 151936,
                   "maxPositionEmbeddings": 262144, "numLocalExperts": 128,
                   "numExpertsPerTok": 8, "tieWordEmbeddings": False}  # fmt: skip
#: Qwen/Qwen3-235B-A22B-FP8 config.json.
QWEN3_235B_HF = {"model_type": "qwen3_moe", "num_hidden_layers": 94, "hidden_size": 4096,
                 "intermediate_size": 12288, "moe_intermediate_size": 1536,
                 "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
                 "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
                 "max_position_embeddings": 40960, "tie_word_embeddings": False,
                 "torch_dtype": "bfloat16",
                 "quantization_config": {"quant_method": "fp8",
                                         "weight_block_size": [128, 128]}}  # fmt: skip


#: Qwen/Qwen2.5-7B-Instruct config.json (the Qwen2-7B shape, 32,768 positions).
QWEN25_7B = {**QWEN2_7B, "maxPositionEmbeddings": 32768}
#: Qwen/Qwen2.5-72B-Instruct config.json.
QWEN25_72B = {**QWEN2_7B, "numHiddenLayers": 80, "hiddenSize": 8192,
              "intermediateSize": 29568, "numAttentionHeads": 64, "numKeyValueHeads": 8,
              "maxPositionEmbeddings": 32768}  # fmt: skip
#: deepseek-ai/DeepSeek-R1-Distill-Qwen-14B config.json (Qwen2.5-14B's shape).
QWEN25_14B = {**QWEN2_7B, "numHiddenLayers": 48, "hiddenSize": 5120,
              "intermediateSize": 13824, "numAttentionHeads": 40, "numKeyValueHeads": 8,
              "maxPositionEmbeddings": 131072}  # fmt: skip


@dataclass(frozen=True)
class Figure:
    """One published run: ``kv_gib`` the KV pool the engine logged (``None``: not logged),
    ``refused`` whether it refused to start (or ran out of memory starting)."""

    id: str
    source: str
    spec: dict[str, Any]
    gpu: GPUClass
    kv_gib: float | None = None
    refused: bool = False
    moe_or_multi_gpu: bool = False
    #: aiconfigurator's (model id, system, backend version, quantization modes), when it has
    #: the model and GPU; the modes are ``estimate_kv_cache``'s ``gemm_quant_mode`` /
    #: ``moe_quant_mode`` / ``kvcache_quant_mode`` for the checkpoint the run served.
    peer: tuple[str, str, str] | None = None
    peer_quant: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def engine(self) -> str:
        return str(self.spec["inference"].get("engine", "vllm"))

    def parsed(self) -> GPUWorkloadSpec:
        return parse_spec(copy.deepcopy(self.spec))


def _hf(name: str) -> dict[str, Any]:
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    return model_from_hf_config(config, serving=True)


def _model(arch: dict[str, Any] | None = None, **model: Any) -> dict[str, Any]:
    return {"architecture": arch, **model} if arch is not None else model


def _serve(model: dict[str, Any], **inference: Any) -> dict[str, Any]:
    return {"model": copy.deepcopy(model), "inference": {"engine": "vllm", **inference},
            "placement": {"minHeadroomFraction": 0.0}}  # fmt: skip


_LLMD = "llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md (vLLM 0.11, H100)"
_LLMD_ARGS = {"engineVersion": "0.11.0", "gpuMemoryUtilization": 0.9, "maxNumSeqs": 1024}
_LLAMA70_FP8 = model_from_hf_config({**LLAMA_33_70B_HF, "quantization_config": FP8_DYNAMIC},
                                    serving=True)  # fmt: skip
#: aiconfigurator quantization modes of an FP8 checkpoint (per-channel or per-tensor weights,
#: FP8 GEMMs) and of a block-wise FP8 one (128 x 128 blocks, DeepSeek-style).
_FP8 = {"gemm_quant_mode": "fp8"}
_FP8_BLOCK = {"gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block"}
_MXFP4 = {"moe_quant_mode": "w4a16_mxfp4"}
_PLANNER = (
    "llm-d-incubation/llm-d-planner accuracy/results/v0.19.0 (vLLM 0.19.0, H100, "
    "--max-model-len 8192 --gpu-memory-utilization 0.95, default max_num_seqs 1024): "
)
_PLANNER_ARGS = {"engineVersion": "0.19.0", "gpuMemoryUtilization": 0.95, "maxNumSeqs": 1024,
                 "maxModelLen": 8192}  # fmt: skip
_H100_PEER = ("h100_sxm", "0.24.0")


def _mistral_w8a8() -> dict[str, Any]:
    config = json.loads((CONFIGS / "mistral-small-3.1-24b-instruct-2503.json").read_text())
    return model_from_hf_config({**config, "quantization_config": W8A8_INT8}, serving=True)


def _sglang(doc: dict[str, Any]) -> dict[str, Any]:
    doc["inference"]["engine"] = "sglang"
    return doc


def _tgi(doc: dict[str, Any]) -> dict[str, Any]:
    doc["inference"]["engine"] = "tgi"
    return doc


FIGURES: tuple[Figure, ...] = (
    Figure("llmd-gpt-oss-20b", _LLMD, _serve(_hf("gpt-oss-20b"), maxModelLen=16000, **_LLMD_ARGS),
           H100_LLMD, kv_gib=50.28, moe_or_multi_gpu=True,
           peer=("openai/gpt-oss-20b", "h100_sxm", "0.24.0"), peer_quant=_MXFP4),
    Figure("llmd-gpt-oss-120b", _LLMD,
           _serve(_hf("gpt-oss-120b"), maxModelLen=16000, **_LLMD_ARGS), H100_LLMD, kv_gib=3.33,
           moe_or_multi_gpu=True,
           peer=("openai/gpt-oss-120b", "h100_sxm", "0.24.0"), peer_quant=_MXFP4),
    Figure("llmd-llama-3.3-70b-fp8-tp2", _LLMD,
           _serve(_LLAMA70_FP8, maxModelLen=16000, tensorParallelSize=2, **_LLMD_ARGS),
           H100_LLMD, kv_gib=32.0, moe_or_multi_gpu=True,
           peer=("meta-llama/Meta-Llama-3.1-70B", "h100_sxm", "0.24.0"), peer_quant=_FP8),
    Figure("llmd-llama-3.3-70b-fp8-tp1", _LLMD,
           _serve(_LLAMA70_FP8, maxModelLen=16000, **_LLMD_ARGS), H100_LLMD, refused=True,
           peer=("meta-llama/Meta-Llama-3.1-70B", "h100_sxm", "0.24.0"), peer_quant=_FP8),
    Figure("llmd-llama-3.1-8b", _LLMD,
           _serve(_model(LLAMA_31_8B), maxModelLen=16000, **_LLMD_ARGS), H100_LLMD, kv_gib=51.38,
           peer=("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "0.24.0")),
    Figure("llmd-qwen3-0.6b-16k", _LLMD,
           _serve(_model(QWEN3_06B), maxModelLen=16000, **_LLMD_ARGS), H100_LLMD, kv_gib=64.45,
           peer=("Qwen/Qwen3-0.6B", "h100_sxm", "0.24.0")),
    Figure("llmd-qwen3-0.6b-32k", _LLMD,
           _serve(_model(QWEN3_06B), maxModelLen=32000, **_LLMD_ARGS), H100_LLMD, kv_gib=64.45,
           peer=("Qwen/Qwen3-0.6B", "h100_sxm", "0.24.0")),
    Figure("llmd-qwen3-32b-32k", _LLMD,
           _serve(_model(QWEN3_32B), maxModelLen=32000, **_LLMD_ARGS), H100_LLMD, refused=True,
           peer=("Qwen/Qwen3-32B", "h100_sxm", "0.24.0")),
    Figure("llmd-qwen3-32b-16k", _LLMD,
           _serve(_model(QWEN3_32B), maxModelLen=16000, **_LLMD_ARGS), H100_LLMD, kv_gib=4.45,
           peer=("Qwen/Qwen3-32B", "h100_sxm", "0.24.0")),
    Figure("llmd-deepseek-r1-tp1", _LLMD,
           _serve(_hf("deepseek-v3"), maxModelLen=16000, **_LLMD_ARGS), H100_LLMD, refused=True,
           moe_or_multi_gpu=True, peer=("deepseek-ai/DeepSeek-R1", "h100_sxm", "0.24.0")),
    Figure("vllm-27508-gpt-oss-120b",
           "vllm-project/vllm#27508 (0.11.0, H100, --gpu-memory-utilization 0.95 "
           "--max-num-batched-tokens 1024: 'Available KV cache memory: 1.71 GiB', refused)",
           _serve(_hf("gpt-oss-120b"), maxModelLen=131072, maxNumSeqs=1024,
                  maxNumBatchedTokens=1024, gpuMemoryUtilization=0.95, engineVersion="0.11.0"),
           BY_NAME["nvidia-h100-80gb"], kv_gib=1.71, refused=True, moe_or_multi_gpu=True,
           peer=("openai/gpt-oss-120b", "h100_sxm", "0.24.0"), peer_quant=_MXFP4),
    Figure("vllm-23278-gpt-oss-120b",
           "vllm-project/vllm#23278 (2025-08-20, vLLM 0.10.1, H100, defaults: 'Model loading "
           "took 65.9651 GiB', 'Available KV cache memory: -2.14 GiB', refused)",
           _serve(_hf("gpt-oss-120b"), maxModelLen=131072, maxNumSeqs=1024,
                  gpuMemoryUtilization=0.9, engineVersion="0.10.1"),
           BY_NAME["nvidia-h100-80gb"], refused=True, moe_or_multi_gpu=True,
           peer=("openai/gpt-oss-120b", "h100_sxm", "0.24.0"), peer_quant=_MXFP4),
    Figure("vllm-33155-gpt-oss-120b",
           "vllm-project/vllm#33155 (vLLM 0.14.1, one H100, defaults: 'Model loading took 64.38 "
           "GiB', out of memory at start)",
           _serve(_hf("gpt-oss-120b"), maxModelLen=131072, maxNumSeqs=1024,
                  gpuMemoryUtilization=0.9, engineVersion="0.14.1"),
           BY_NAME["nvidia-h100-80gb"], refused=True, moe_or_multi_gpu=True,
           peer=("openai/gpt-oss-120b", "h100_sxm", "0.24.0"), peer_quant=_MXFP4),
    Figure("recipes-12-qwen3-coder-480b-dp8-ep-0.90",
           "vllm-project/recipes#12 (v0.10.1.dev, 8x H20 141 GB, -dp=8 --enable-expert-parallel: "
           "'62.00 GiB KV cache is needed, ... available KV cache memory (48.66 GiB)', refused)",
           _serve(model_from_hf_config(QWEN3_CODER_480B_HF, serving=True), maxModelLen=262144,
                  maxNumSeqs=1024, dataParallelSize=8, enableExpertParallel=True,
                  gpuMemoryUtilization=0.9, engineVersion="0.10.1"),
           H20_141, kv_gib=48.66, refused=True, moe_or_multi_gpu=True),
    Figure("recipes-12-qwen3-coder-480b-dp8-ep-0.95",
           "vllm-project/recipes#12 (the same at --gpu-memory-utilization 0.95: 55.65 GiB, "
           "refused)",
           _serve(model_from_hf_config(QWEN3_CODER_480B_HF, serving=True), maxModelLen=262144,
                  maxNumSeqs=1024, dataParallelSize=8, enableExpertParallel=True,
                  gpuMemoryUtilization=0.95, engineVersion="0.10.1"),
           H20_141, kv_gib=55.65, refused=True, moe_or_multi_gpu=True),
    Figure("vllm-22177-qwen3-coder-30b-bf16-tp8",
           "vllm-project/vllm#22177 (0.10.0, 8x RTX 3090-class 24 GB, TP 8 "
           "--enable-expert-parallel --gpu-memory-utilization 0.85: 12.22 GiB, 534,064 tokens)",
           _serve(_model(QWEN3_CODER_30B), maxModelLen=262144, maxNumSeqs=256,
                  tensorParallelSize=8, enableExpertParallel=True, gpuMemoryUtilization=0.85,
                  engineVersion="0.10.0"),
           RTX3090, kv_gib=12.22, moe_or_multi_gpu=True),
    Figure("vllm-22177-qwen3-coder-30b-fp8-tp8",
           "vllm-project/vllm#22177 (the FP8 checkpoint at 0.70: 12.11 GiB)",
           _serve(_model(QWEN3_CODER_30B, quantization={"method": "fp8"}), maxModelLen=262144,
                  maxNumSeqs=256, tensorParallelSize=8, enableExpertParallel=True,
                  gpuMemoryUtilization=0.70, engineVersion="0.10.0"),
           RTX3090, kv_gib=12.11, moe_or_multi_gpu=True),
    Figure("vllm-10511-llama-3-8b-tp1",
           "vllm-project/vllm#10511 (V0 profiler, H100, 0.9: available_kv_cache_memory 53.29GiB)",
           _serve(_model(LLAMA_3_8B), maxModelLen=8192, maxNumSeqs=256,
                  gpuMemoryUtilization=0.9, engineVersion="0.6.3"),
           BY_NAME["nvidia-h100-80gb"], kv_gib=53.29,
           peer=("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "0.24.0")),
    Figure("vllm-10511-llama-3-8b-tp2",
           "vllm-project/vllm#10511 (the same at -tp 2: 71.29 - 7.48 - 3.58 - 1.26 GiB)",
           _serve(_model(LLAMA_3_8B), maxModelLen=8192, maxNumSeqs=256, tensorParallelSize=2,
                  gpuMemoryUtilization=0.9, engineVersion="0.6.3"),
           BY_NAME["nvidia-h100-80gb"], kv_gib=58.97, moe_or_multi_gpu=True,
           peer=("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "0.24.0")),
    Figure("vllm-10517-llama-3.1-8b-20k",
           "vllm-project/vllm#10517 (V0, RTX 3090, 0.9, max_model_len 20000: "
           "kv_cache_size=3.81GiB)",
           _serve(_model(LLAMA_31_8B), maxModelLen=20000, maxNumSeqs=256,
                  gpuMemoryUtilization=0.9, engineVersion="0.6.3"),
           RTX3090, kv_gib=3.81),
    Figure("vllm-10517-llama-3.1-8b-29k",
           "vllm-project/vllm#10517 (29000: 'larger than the maximum number of tokens ... 23648')",
           _serve(_model(LLAMA_31_8B), maxModelLen=29000, maxNumSeqs=256,
                  gpuMemoryUtilization=0.9, engineVersion="0.6.3"),
           RTX3090, refused=True),
    Figure("myoceane-gpt-oss-20b-a100",
           "myoceane.fr 'vLLM A100 Gemma 4' (vLLM 0.19.0, A100 80GB, --max-model-len 131072 "
           "--gpu-memory-utilization 0.65: 'Available KV cache memory: 36.56 GiB')",
           _serve(_hf("gpt-oss-20b"), maxModelLen=131072, maxNumSeqs=256,
                  gpuMemoryUtilization=0.65, engineVersion="0.19.0"),
           BY_NAME["nvidia-a100-80gb"], kv_gib=36.56, moe_or_multi_gpu=True,
           peer=("openai/gpt-oss-20b", "a100_sxm", "0.14.0"), peer_quant=_MXFP4),
    Figure("vllm-17469-qwen3-30b-a3b-4xa10",
           "vllm-project/vllm#17469 (0.8.5, 4x A10 24 GB, TP 4, max-model-len 1024, max-num-seqs "
           "1: out of memory capturing CUDA graphs; started only with --enforce-eager)",
           {**_serve(_hf("qwen3-30b-a3b"), maxModelLen=1024, maxNumSeqs=1, tensorParallelSize=4,
                     gpuMemoryUtilization=0.9, engineVersion="0.8.5"),
            "placement": {"gpuClasses": ["nvidia-a10g"], "minHeadroomFraction": 0.1}},
           BY_NAME["nvidia-a10g"], refused=True, moe_or_multi_gpu=True),
    # --- llm-d-planner's vLLM 0.19.0 sweep on one H100 node (tags "calibration": the runs the
    # 0.19 constants were fitted on; every other run checks them) ---
    Figure("planner-llama-3.1-8b-tp1", _PLANNER + "'Available KV cache memory: 58.11 GiB'",
           _serve(_model(LLAMA_31_8B), **_PLANNER_ARGS), H100_PLANNER, kv_gib=58.11,
           peer=("meta-llama/Meta-Llama-3.1-8B", *_H100_PEER), tags=("calibration",)),
    Figure("planner-llama-3.1-8b-tp2", _PLANNER + "-tp 2: 63.76 GiB",
           _serve(_model(LLAMA_31_8B), tensorParallelSize=2, **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=63.76, moe_or_multi_gpu=True,
           peer=("meta-llama/Meta-Llama-3.1-8B", *_H100_PEER), tags=("calibration",)),
    Figure("planner-llama-3.1-8b-tp4", _PLANNER + "-tp 4: 67.44 GiB",
           _serve(_model(LLAMA_31_8B), tensorParallelSize=4, **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=67.44, moe_or_multi_gpu=True,
           peer=("meta-llama/Meta-Llama-3.1-8B", *_H100_PEER), tags=("calibration",)),
    Figure("planner-llama-3.1-8b-pp2", _PLANNER + "-pp 2: 66.54 GiB",
           _serve(_model(LLAMA_31_8B), pipelineParallelSize=2, **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=66.54, moe_or_multi_gpu=True,
           peer=("meta-llama/Meta-Llama-3.1-8B", *_H100_PEER)),
    Figure("planner-llama-3.1-8b-kv-fp8", _PLANNER + "--kv-cache-dtype fp8: 58.11 GiB, "
           "952,032 tokens",
           _serve(_model(LLAMA_31_8B), kvCacheDtype="fp8", **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=58.11, peer=("meta-llama/Meta-Llama-3.1-8B", *_H100_PEER),
           peer_quant={"kvcache_quant_mode": "fp8"}),
    Figure("planner-qwen2.5-7b-tp4", _PLANNER + "Qwen2.5-7B-Instruct -tp 4: 67.34 GiB",
           _serve(_model(QWEN25_7B), tensorParallelSize=4, **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=67.34, moe_or_multi_gpu=True),
    Figure("planner-qwen2.5-72b-tp2", _PLANNER + "Qwen2.5-72B-Instruct -tp 2: 3.04 GiB",
           _serve(_model(QWEN25_72B), tensorParallelSize=2, **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=3.04, moe_or_multi_gpu=True),
    Figure("planner-llama-3.3-70b-fp8-tp4", _PLANNER + "RedHatAI Llama-3.3-70B FP8-dynamic "
           "(compressed-tensors) -tp 4: 54.09 GiB",
           _serve(_LLAMA70_FP8, tensorParallelSize=4, **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=54.09, moe_or_multi_gpu=True,
           peer=("meta-llama/Meta-Llama-3.1-70B", *_H100_PEER), peer_quant=_FP8),
    Figure("planner-mixtral-8x7b-tp2", _PLANNER + "Mixtral-8x7B-Instruct -tp 2: 28.44 GiB",
           _serve(_model(MIXTRAL_8X7B), tensorParallelSize=2, **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=28.44, moe_or_multi_gpu=True,
           peer=("mistralai/Mixtral-8x7B-v0.1", *_H100_PEER)),
    Figure("planner-llama-4-scout-tp4", _PLANNER + "Llama-4-Scout-17B-16E -tp 4: 'Model loading "
           "took 53.12 GiB' (2.5 GiB of it the 10M-position RoPE cache), 16.75 GiB",
           _serve(_hf("llama-4-scout-17b-16e-instruct"), tensorParallelSize=4, **_PLANNER_ARGS),
           H100_PLANNER, kv_gib=16.75, moe_or_multi_gpu=True,
           peer=("meta-llama/Llama-4-Scout-17B-16E-Instruct", *_H100_PEER)),
    Figure("planner-gpt-oss-20b-tp2", _PLANNER + "gpt-oss-20b -tp 2 --gpu-memory-utilization "
           "0.9: 59.32 GiB",
           _serve(_hf("gpt-oss-20b"), tensorParallelSize=2,
                  **{**_PLANNER_ARGS, "gpuMemoryUtilization": 0.9}),
           H100_PLANNER, kv_gib=59.32, moe_or_multi_gpu=True,
           peer=("openai/gpt-oss-20b", *_H100_PEER), peer_quant=_MXFP4),
    Figure("planner-qwen3-30b-a3b", _PLANNER + "Qwen3-30B-A3B: 15.41 GiB",
           _serve(_hf("qwen3-30b-a3b"), **_PLANNER_ARGS), H100_PLANNER, kv_gib=15.41,
           moe_or_multi_gpu=True, peer=("Qwen/Qwen3-30B-A3B", *_H100_PEER)),
    Figure("planner-qwen1.5-moe", _PLANNER + "Qwen1.5-MoE-A2.7B: 45.83 GiB",
           _serve(_model(QWEN15_MOE_A27B), **_PLANNER_ARGS), H100_PLANNER, kv_gib=45.83,
           moe_or_multi_gpu=True),
    Figure("planner-deepseek-v2-lite", _PLANNER + "DeepSeek-V2-Lite-Chat (MLA, MoE): 43.61 GiB",
           _serve(_hf("deepseek-v2-lite"), **_PLANNER_ARGS), H100_PLANNER, kv_gib=43.61,
           moe_or_multi_gpu=True),
    Figure("planner-gemma-2-9b", _PLANNER + "gemma-2-9b-it (sliding window): 54.12 GiB",
           _serve(_model(GEMMA2_9B), **_PLANNER_ARGS), H100_PLANNER, kv_gib=54.12),
    Figure("planner-gemma-3-27b", _PLANNER + "gemma-3-27b-it (vision, 5 of 6 layers sliding): "
           "19.53 GiB",
           _serve(_hf("gemma-3-27b-it"), **_PLANNER_ARGS), H100_PLANNER, kv_gib=19.53),
    Figure("planner-mistral-small-w8a8-tp2", _PLANNER + "RedHatAI Mistral-Small-3.1-24B W8A8 "
           "(compressed-tensors) -tp 2: 59.02 GiB",
           _serve(_mistral_w8a8(), tensorParallelSize=2, **_PLANNER_ARGS), H100_PLANNER,
           kv_gib=59.02, moe_or_multi_gpu=True),
    # --- vLLM and SGLang side by side: vllm-project/vllm#21348 (2025-07-22, 4x H100) ---
    Figure("vllm-21348-qwen3-235b-fp8-tp4",
           "vllm-project/vllm#21348 (vLLM of July 2025, 0.9.x, `vllm serve Qwen3-235B-A22B-FP8 "
           "--tensor-parallel-size 4`: 'Available KV cache memory: 8.11 GiB', 178,880 tokens)",
           _serve(model_from_hf_config(QWEN3_235B_HF, serving=True), maxModelLen=40960,
                  maxNumSeqs=1024, tensorParallelSize=4, gpuMemoryUtilization=0.9,
                  engineVersion="0.9.2"),
           BY_NAME["nvidia-h100-80gb"], kv_gib=8.11, moe_or_multi_gpu=True,
           peer=("Qwen/Qwen3-235B-A22B-FP8", *_H100_PEER), peer_quant=_FP8_BLOCK),
    Figure("sglang-21348-qwen3-235b-fp8-tp4",
           "vllm-project/vllm#21348 (SGLang of July 2025, 0.4.9, `--tp 4 --mem-fraction-static "
           "0.93`: 'KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB')",
           _sglang(_serve(model_from_hf_config(QWEN3_235B_HF, serving=True), maxModelLen=40960,
                          maxNumSeqs=1024, tensorParallelSize=4, gpuMemoryUtilization=0.93,
                          engineVersion="0.4.9")),
           BY_NAME["nvidia-h100-80gb"], kv_gib=16.46, moe_or_multi_gpu=True,
           peer=("Qwen/Qwen3-235B-A22B-FP8", "h100_sxm", "0.5.14"), peer_quant=_FP8_BLOCK),
    # --- TGI: huggingface/text-generation-inference#653 (2023-07-19, the image between 0.9.3
    # and 0.9.4 that first sized the blocks from free memory) ---
    Figure("tgi-653-llama-2-7b-a10g",
           "huggingface/text-generation-inference#653 (Llama-2-7b-hf on one A10G, "
           "MAX_INPUT_LENGTH 4095, MAX_BATCH_PREFILL_TOKENS 4096, MAX_TOTAL_TOKENS 4096: "
           "'overwrites the max batch total tokens to 16224', 16,224 x 0.5 MiB)",
           _tgi(_serve(_model(LLAMA_2_7B, dtype="float16"), maxModelLen=4096, maxNumSeqs=128,
                       maxNumBatchedTokens=4096, engineVersion="0.9.4")),
           A10G_653, kv_gib=16224 * 0.5 / 1024),
    # --- V0 on two PCIe RTX 4090s: vllm-project/vllm#13061 (vLLM 0.7.x, 2025-02) ---
    Figure("vllm-13061-r1-distill-qwen-14b-tp2",
           "vllm-project/vllm#13061 (V0, 2x RTX 4090, --tensor_parallel_size 2 "
           "--gpu_memory_utilization 0.98, max_model_len 131072: KV cache 8.69 GiB, 'max seq "
           "len (131072) is larger than the maximum number of tokens ... (81536)', refused)",
           _serve(_model(QWEN25_14B), maxModelLen=131072, maxNumSeqs=256, tensorParallelSize=2,
                  gpuMemoryUtilization=0.98, engineVersion="0.7.2"),
           RTX4090_13061, kv_gib=8.69, refused=True, moe_or_multi_gpu=True),
)  # fmt: skip
