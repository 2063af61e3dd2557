"""``spec.inference``: serving settings, named after vLLM's engine arguments."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool

from gpu_sizer.api.spec.base import _Model
from gpu_sizer.api.spec.bounds import LIMITS, Fraction, Gpus, Layers, Seqs, Tokens
from gpu_sizer.api.spec.enums import Engine, KvCacheDtype

__all__ = ["Inference"]


class Inference(_Model):
    """Serving settings, named after vLLM's engine arguments."""

    engine: Engine = Field(Engine.vllm, description="vllm | transformers | tgi | sglang.")
    max_model_len: Tokens = Field(
        description="Longest sequence (prompt plus output) in tokens (vLLM --max-model-len)."
    )
    max_num_seqs: Seqs = Field(
        description="Sequences resident at once, each up to maxModelLen (vLLM --max-num-seqs)."
    )
    max_num_batched_tokens: (
        Annotated[int, Field(ge=1, le=LIMITS["batchedTokens"], strict=True)] | None
    ) = Field(
        None,
        description="Tokens per forward pass (prefill chunk); default the engine's "
        "(vLLM and SGLang 8192, TGI maxModelLen + 50; transformers prefills every sequence "
        "at once).",
    )
    kv_cache_dtype: KvCacheDtype = Field(
        KvCacheDtype.auto, description="auto (model dtype) | fp8 | fp8_e4m3 | fp8_e5m2."
    )
    tensor_parallel_size: Gpus = Field(
        1, description="GPUs the model is split across by tensor parallelism."
    )
    pipeline_parallel_size: Layers = Field(
        1, description="Pipeline stages (layers split across GPUs)."
    )
    data_parallel_size: Gpus = Field(
        1,
        description="Engine data parallelism (vLLM --data-parallel-size, SGLang --dp): replicas "
        "of the attention layers, each with its own KV cache and batch, tensor x pipeline GPUs "
        "each; a mixture-of-experts model's experts span all data x tensor parallel GPUs "
        "(vLLM). GPUs: tensor x pipeline x data.",
    )
    enable_expert_parallel: StrictBool = Field(
        False,
        description="Mixture-of-experts: split the experts by count across the expert group "
        "(vLLM --enable-expert-parallel over data x tensor parallel GPUs, SGLang --ep-size equal "
        "to --tp) instead of splitting each expert's width.",
    )
    enforce_eager: StrictBool = Field(
        False, description="Disable CUDA graphs (vLLM --enforce-eager); saves their memory pool."
    )
    gpu_memory_utilization: Fraction | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="Pre-allocating engines: the fraction of each GPU the engine takes at start "
        "and carves its KV cache pool from (vLLM --gpu-memory-utilization; SGLang "
        "--mem-fraction-static, the share for weights and KV pool; TGI --cuda-memory-fraction). "
        "Unset: gpu-sizer picks, per GPU class, the largest value up to the engine's default that "
        "leaves spec.placement.minHeadroomFraction free, and reports it in "
        "status.recommendation.engineArgs. Not used by transformers (it allocates on demand).",
    )
    engine_version: str | None = Field(
        None,
        min_length=1,
        max_length=32,
        pattern=r"^v?[0-9]+(\.[0-9]+){0,3}([.+-]?[A-Za-z][A-Za-z0-9]*)?$",
        description="Engine release (e.g. 0.11.0): defaults such as maxNumBatchedTokens, CUDA "
        "graph sizes and what counts inside gpuMemoryUtilization change between versions. "
        "Unset: the newest release gpu-sizer models for the engine (named in "
        "status.estimate.engineVersion).",
    )
    target_concurrency: Fraction | None = Field(
        None,
        gt=0.0,
        le=float(LIMITS["seqs"]),
        description="Pre-allocating engines: how many concurrent requests of maxModelLen tokens "
        "the KV cache pool must hold without preemption; the verdict fails when the pool holds "
        "fewer. Unset: the engine's own start-up condition (vLLM and TGI: one maxModelLen "
        "request; SGLang: a pool of at least one token, shorter pools refuse longer prompts).",
    )

    @property
    def required_concurrency(self) -> float:
        """``targetConcurrency``, or what the engine itself requires to start when unset."""
        if self.target_concurrency is not None:
            return self.target_concurrency
        return 0.0 if self.engine is Engine.sglang else 1.0
