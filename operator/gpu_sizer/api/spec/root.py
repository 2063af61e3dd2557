"""``GPUWorkloadSpec``: the whole spec, and the rules that span its areas (exactly one of
inference, training or generation; parallelism that divides the model's heads; a diffusion
pipeline only with ``spec.generation``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from gpu_sizer.api.spec.architecture import Architecture
from gpu_sizer.api.spec.base import _Model, _Problems
from gpu_sizer.api.spec.enums import Engine, FinetuningMethod, ParallelStrategy, QuantizationMethod
from gpu_sizer.api.spec.generation import Generation
from gpu_sizer.api.spec.inference import Inference
from gpu_sizer.api.spec.latent_channels import channel_problems
from gpu_sizer.api.spec.measurement import Measurement
from gpu_sizer.api.spec.model import Model
from gpu_sizer.api.spec.output_size import output_size
from gpu_sizer.api.spec.pipeline_runs import (
    class_mismatches,
    context_parallel_problems,
    device_problems,
    expert_problems,
    offload_conflict,
    ulysses_problems,
)
from gpu_sizer.api.spec.placement import Placement
from gpu_sizer.api.spec.text_width import text_problems
from gpu_sizer.api.spec.training import Training

__all__ = ["GPUWorkloadSpec", "spec_to_wire"]


class GPUWorkloadSpec(_Model):
    """A model and how it runs: exactly one of ``inference`` or ``training``."""

    model: Model = Field(description="The model that is loaded.")
    inference: Inference | None = Field(None, description="Serving configuration.")
    training: Training | None = Field(None, description="Training configuration.")
    generation: Generation | None = Field(
        None, description="Image or video generation with a diffusion pipeline."
    )
    measurement: Measurement = Field(
        default_factory=lambda: Measurement(), description="Measurement Job settings."
    )
    placement: Placement = Field(
        default_factory=lambda: Placement(), description="Allowed GPUs and headroom."
    )

    @model_validator(mode="after")
    def _check(self) -> GPUWorkloadSpec:
        problems = _Problems()
        set_ = [k for k in ("inference", "training", "generation") if getattr(self, k) is not None]
        if len(set_) > 1:
            both = "both " if len(set_) == 2 else "all "
            problems.add(
                set_[-1],
                " and ".join(f"spec.{k}" for k in set_) + f" are {both}set; set exactly one "
                "(one GPUWorkload sizes one workload)",
            )
        elif not set_:
            problems.add(
                "inference",
                "set exactly one of spec.inference (serving a language model), spec.training "
                "(training or fine-tuning) or spec.generation (image or video generation)",
            )
        _check_pipeline(problems, self)
        arch = self.model.architecture
        if self.inference is not None:
            inf = self.inference
            if arch is not None:
                _check_tensor_parallel(
                    problems, arch, inf.tensor_parallel_size, "inference.tensorParallelSize"
                )
                if inf.max_model_len > arch.max_context:
                    problems.add(
                        "inference.maxModelLen",
                        f"maxModelLen {inf.max_model_len} exceeds the model's context of "
                        f"{arch.max_context} tokens (maxPositionEmbeddings, rope scaling "
                        "included); lower it or set model.architecture.ropeScaling",
                    )
                if inf.pipeline_parallel_size > arch.num_hidden_layers:
                    problems.add(
                        "inference.pipelineParallelSize",
                        f"pipelineParallelSize {inf.pipeline_parallel_size} exceeds the "
                        f"{arch.num_hidden_layers} layers",
                    )
                if inf.enable_expert_parallel and arch.experts is None:
                    problems.add(
                        "inference.enableExpertParallel",
                        f"model type {arch.model_type!r} as given has no experts: expert "
                        "parallelism applies to mixture-of-experts models (set the expert count "
                        "and numExpertsPerTok, or drop enableExpertParallel)",
                    )
            if inf.engine is Engine.tgi and (
                inf.data_parallel_size > 1 or inf.enable_expert_parallel
            ):
                problems.add(
                    "inference.dataParallelSize"
                    if inf.data_parallel_size > 1
                    else "inference.enableExpertParallel",
                    "TGI has no data or expert parallelism (its shards are tensor-parallel "
                    "only): run replicas as separate deployments, or use vllm or sglang",
                )
            if inf.engine is Engine.transformers and inf.data_parallel_size > 1:
                problems.add(
                    "inference.dataParallelSize",
                    "transformers serves one model copy per process: run replicas as separate "
                    "deployments (dataParallelSize applies to vllm and sglang)",
                )
            for i, level in enumerate(self.measurement.concurrency_levels):
                if level > inf.max_num_seqs:
                    problems.add(
                        f"measurement.concurrencyLevels[{i}]",
                        f"concurrency level {level} exceeds inference.maxNumSeqs "
                        f"({inf.max_num_seqs}): the engine never runs more sequences at once",
                    )
            if inf.target_concurrency is not None and inf.target_concurrency > inf.max_num_seqs:
                problems.add(
                    "inference.targetConcurrency",
                    f"targetConcurrency ({inf.target_concurrency:g}) exceeds maxNumSeqs "
                    f"({inf.max_num_seqs}): the engine never runs more sequences at once; raise "
                    "maxNumSeqs or lower targetConcurrency",
                )
            if inf.gpu_memory_utilization is not None and inf.engine is Engine.transformers:
                problems.add(
                    "inference.gpuMemoryUtilization",
                    "transformers allocates on demand and takes no fixed fraction of the GPU; "
                    "gpuMemoryUtilization applies to vllm, sglang and tgi (remove it)",
                )
            if (
                inf.max_num_batched_tokens is not None
                and inf.max_num_batched_tokens < inf.max_num_seqs
            ):
                problems.add(
                    "inference.maxNumBatchedTokens",
                    f"maxNumBatchedTokens ({inf.max_num_batched_tokens}) must be at least "
                    f"maxNumSeqs ({inf.max_num_seqs}): each decode step batches one token per "
                    "sequence",
                )
        if self.training is not None:
            tr = self.training
            par = tr.parallelism
            if arch is not None:
                _check_tensor_parallel(
                    problems,
                    arch,
                    par.tensor_parallel_size,
                    "training.parallelism.tensorParallelSize",
                )
                if tr.sequence_length > arch.max_context:
                    problems.add(
                        "training.sequenceLength",
                        f"sequenceLength {tr.sequence_length} exceeds the model's context of "
                        f"{arch.max_context} tokens",
                    )
                if par.pipeline_parallel_size > arch.num_hidden_layers:
                    problems.add(
                        "training.parallelism.pipelineParallelSize",
                        f"pipelineParallelSize {par.pipeline_parallel_size} exceeds the "
                        f"{arch.num_hidden_layers} layers",
                    )
            sharded = par.strategy not in (ParallelStrategy.none,)
            if par.data_parallel_size > 1 and not sharded:
                problems.add(
                    "training.parallelism.strategy",
                    f"dataParallelSize {par.data_parallel_size} needs a strategy "
                    "(ddp, fsdp-*, zero1/2/3); 'none' runs one replica",
                )
            if tr.finetuning.method is FinetuningMethod.qlora:
                q = self.model.quantization
                if q is None:
                    problems.add(
                        "model.quantization",
                        "qlora trains adapters on a 4-bit NF4 base: set model.quantization to "
                        "{method: bitsandbytes-nf4, bits: 4}, or use finetuning method lora for "
                        "a bf16/fp16 base",
                    )
                elif q.method is not QuantizationMethod.bitsandbytes_nf4:
                    problems.add(
                        "training.finetuning.method",
                        "qlora trains adapters on a bitsandbytes-nf4 base; set "
                        "model.quantization.method to bitsandbytes-nf4 or use lora",
                    )
            if tr.finetuning.method is not FinetuningMethod.full and arch is None:
                problems.add(
                    "training.finetuning.method",
                    f"{tr.finetuning.method.value} needs model.architecture to size the adapters",
                )
        q = self.model.quantization
        if (
            arch is not None
            and q is not None
            and q.method in (QuantizationMethod.gptq, QuantizationMethod.awq)
            and q.group_size is not None
            and q.group_size > 0
        ):
            widths = {"hiddenSize": arch.hidden_size, "intermediateSize": arch.intermediate_size}
            if arch.moe_intermediate_size is not None:
                widths["moeIntermediateSize"] = arch.moe_intermediate_size
            bad = [f"{k} ({v})" for k, v in widths.items() if v % q.group_size]
            if bad:
                problems.add(
                    "model.quantization.groupSize",
                    f"groupSize {q.group_size} must divide the input features of every "
                    f"quantized projection; it does not divide {' and '.join(bad)}",
                )
        problems.raise_if_any()
        return self

    @property
    def gpu_count(self) -> int:
        """GPUs one replica uses: only the parallelism the spec declares."""
        if self.generation is not None:
            return self.generation.parallelism.gpu_count
        if self.inference is not None:
            inf = self.inference
            return inf.tensor_parallel_size * inf.pipeline_parallel_size * inf.data_parallel_size
        assert self.training is not None
        return self.training.parallelism.gpus


def _check_tensor_parallel(problems: _Problems, arch: Architecture, tp: int, field: str) -> None:
    """vLLM's rule: heads split evenly; KV heads split evenly or are replicated evenly; Mamba-2
    heads split evenly and B/C groups split evenly or are a single replicated group."""
    if arch.num_attention_heads % tp != 0:
        problems.add(
            field,
            f"tensorParallelSize {tp} must divide numAttentionHeads ({arch.num_attention_heads})",
        )
    kv = arch.kv_heads
    if kv % tp != 0 and tp % kv != 0:
        problems.add(
            field,
            f"tensorParallelSize {tp} must divide numKeyValueHeads ({kv}) or be a multiple of it",
        )
    if arch.model_type == "nemotron_h":
        # vLLM mamba_mixer2.py MambaMixer2.__init__ asserts both; the defaults are
        # NemotronHConfig's (128 heads, 8 groups).
        heads = arch.mamba_num_heads or 128
        groups = arch.n_groups or 8
        if heads % tp != 0:
            problems.add(field, f"tensorParallelSize {tp} must divide mambaNumHeads ({heads})")
        if groups % tp != 0 and groups != 1:
            problems.add(
                field,
                f"tensorParallelSize {tp} must divide nGroups ({groups}), or nGroups must be 1",
            )


def _check_pipeline(problems: _Problems, spec: GPUWorkloadSpec) -> None:
    """A pipeline is generated with (spec.generation); spec.generation needs one; its denoisers
    take the latents its class hands them (:mod:`gpu_sizer.api.spec.latent_channels`) and the
    text embeddings of its encoders' width (:mod:`gpu_sizer.api.spec.text_width`); every
    expert a timestep goes to is there and the offload modes can be mixed
    (:mod:`gpu_sizer.api.spec.pipeline_runs`); the
    output size is one the pipeline's class accepts (:mod:`gpu_sizer.api.spec.output_size`)."""
    pipeline = spec.model.pipeline
    if spec.generation is not None and pipeline is None:
        problems.add(
            "model.pipeline",
            "spec.generation runs a diffusion pipeline: give spec.model.pipeline (its class and "
            "components; gpu-sizer import-diffusers writes it)",
        )
    if pipeline is not None:
        # components that each build but cannot run together: the first step would fail
        # (read as the classes the pipeline expects; another class in their place leaves the
        # estimate Incomplete instead, and would be blamed on the wrong key here)
        found = expert_problems(pipeline) + device_problems(pipeline)
        mismatched = class_mismatches(pipeline)
        for i, message, fix in mismatched:
            found.append((f"components[{i}].class", f"{message}; {fix}"))
        if not mismatched:
            found = channel_problems(pipeline) + found + text_problems(pipeline)
        for field, message in found:
            problems.add(f"model.pipeline.{field}", message)
    gen = spec.generation
    if pipeline is not None and gen is not None:
        conflict = offload_conflict(pipeline, gen.offload)
        if conflict is not None:
            problems.add(f"model.pipeline.components[{conflict[0]}].offload", conflict[1])
        par = gen.parallelism
        split = "ulyssesDegree" if par.ulysses_degree > 1 else "ringDegree"
        for message in context_parallel_problems(pipeline, par.ulysses_degree * par.ring_degree):
            problems.add(f"generation.parallelism.{split}", message)
        for message in ulysses_problems(pipeline, par.ulysses_degree):
            problems.add("generation.parallelism.ulyssesDegree", message)
    if pipeline is not None and gen is not None:
        # a size the pipeline's __call__ refuses: the workload would never start
        size = output_size(
            pipeline,
            gen.task.video,
            gen.height,
            gen.width,
            gen.num_frames,
            gen.max_sequence_length,
        )
        for field, message in size.refused:
            problems.add(field, message)
    if pipeline is not None and spec.generation is None:
        where = "inference" if spec.inference is not None else "training"
        if spec.inference is not None or spec.training is not None:
            problems.add(
                where,
                f"spec.model.pipeline is a diffusion pipeline: spec.{where} sizes language "
                "models; use spec.generation (fine-tuning a pipeline's denoiser is not sized "
                "yet)",
            )


def spec_to_wire(spec: GPUWorkloadSpec) -> dict[str, Any]:
    """The spec as camelCase JSON-compatible data, defaults filled, ``None`` fields dropped."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)
