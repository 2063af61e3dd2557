"""Upper bounds for settings whose only published measurement comes from another implementation.

The estimate models diffusers 0.42.1. Where a setting has been measured only with a model's own
reference code, and that code allocates more than diffusers' port, an estimate of diffusers
alone would admit the workload on a card the only evidence says is too small. Fail safe: the
estimate adds what the reference code allocates beyond diffusers, and says so in a note, until a
diffusers measurement of the setting is published.

Wan 2.2 A14B (two experts) under ``enable_model_cpu_offload``: the Wan-Video/Wan2.2 README's
computational-efficiency table measures ``generate.py --offload_model True`` (one expert on the
GPU at a time, as model offload does) at 59.8 GB for 720P and 41.3 GB for 480P, and says the
720P command needs at least 80 GB. Its ``wan/modules/model.py`` ``WanModel.forward`` expands the
timestep to every token (``t.expand(t.size(0), seq_len)``) and, under float32 autocast, builds
``e`` (``[B, L, dim]``) and ``e0 = time_projection(e)`` (``[B, L, 6, dim]``) in float32; each
``WanAttentionBlock`` adds ``modulation + e`` as another ``[B, L, 6, dim]`` float32 tensor and
keeps the residual stream in float32. diffusers' ``WanTransformer3DModel.forward`` gets one
timestep per sample for A14B (``WanPipeline``'s ``expand_timesteps`` is false): its modulation
is per sample. Without offload diffusers itself has been measured (huggingface/diffusers#12011,
Wan-Video/Wan2.2#42), and group and sequential offload have no counterpart in the reference
code, so the bound applies to model offload only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gpu_sizer.budget.diffusion.denoise import FP32, DenoiseShape, denoiser_tokens

__all__ = ["WAN_MOE_PIPELINES", "wan_reference_margin_bytes"]

#: Pipelines whose two-expert (Wan 2.2 A14B) setting is bounded by the reference code.
WAN_MOE_PIPELINES = ("WanPipeline", "WanImageToVideoPipeline")


def wan_reference_margin_bytes(
    pipeline_class: str,
    options: Mapping[str, Any],
    experts_running: Collection[str],
    config: Mapping[str, Any],
    shape: DenoiseShape,
) -> int:
    """Bytes the Wan 2.2 reference code's denoiser forward holds beyond diffusers' for one
    expert under model offload, or 0 where the bound does not apply.

    The margin is the two per-token float32 modulation tensors (``e0`` and one block's
    ``modulation + e``: ``2 x B x L x 6 x dim x 4`` bytes) and the residual stream's float32
    copy beyond the activation dtype (``B x L x dim x (4 - a)``), with ``L`` the expert's tokens
    per sample. At 1280x720x81 (``L`` = 75,600, ``dim`` 5120, bfloat16) it is 19.4 GB.

    :param pipeline_class: the pipeline's ``_class_name``.
    :param options: ``spec.model.pipeline.config`` (camelCase keys).
    :param experts_running: the denoiser components that run in the call.
    :param config: the expert's ``WanTransformer3DModel`` config (snake_case keys).
    :param shape: the expert's forward pass (batch already doubled for batched guidance).
    """
    if pipeline_class not in WAN_MOE_PIPELINES or len(experts_running) < 2:
        return 0
    if options.get("expandTimesteps"):
        return 0  # diffusers' per-token path is counted by the denoiser itself
    dim = config["num_attention_heads"] * config["attention_head_dim"]
    tokens = shape.batch * denoiser_tokens("WanTransformer3DModel", config, shape)
    tokens = -(-tokens // shape.sequence_split)
    modulation = 2 * tokens * 6 * dim * FP32
    residual = tokens * dim * max(FP32 - shape.act_bytes, 0)
    return int(modulation + residual)
