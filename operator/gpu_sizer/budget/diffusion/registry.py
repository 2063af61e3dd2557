"""The component classes gpu-sizer sizes: builder, float32-kept modules, group-offload blocks.

One entry per class of :data:`gpu_sizer.api.components.COMPONENT_CLASSES`; adding a class means
adding its config keys there, its builder (and its activation model) here, and its oracle test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpu_sizer.budget.diffusion import denoisers, text_encoders, vaes
from gpu_sizer.budget.diffusion.parts import Part

__all__ = ["KINDS", "Kind"]


@dataclass(frozen=True)
class Kind:
    """How to build a class's module tree, and the class attributes that change its memory.

    :param build: resolved config -> module tree.
    :param keep_fp32: ``ModelMixin._keep_in_fp32_modules``: parameters kept in float32 when the
        model is loaded in 16 bits.
    :param block_modules: ``ModelMixin._group_offload_block_modules``: children whose lists are
        grouped too under block-level group offloading.
    """

    build: Callable[[Mapping[str, Any]], Part]
    keep_fp32: tuple[str, ...] = ()
    block_modules: tuple[str, ...] = ()


_VAE_BLOCKS: Final = ("quant_conv", "post_quant_conv", "encoder", "decoder")

KINDS: Final[dict[str, Kind]] = {
    "UNet2DConditionModel": Kind(denoisers.unet_2d_condition),
    "SD3Transformer2DModel": Kind(denoisers.sd3_transformer),
    "FluxTransformer2DModel": Kind(denoisers.flux_transformer),
    "WanTransformer3DModel": Kind(
        denoisers.wan_transformer,
        keep_fp32=("rope", "time_embedder", "scale_shift_table", "norm1", "norm2", "norm3"),
    ),
    "HunyuanVideoTransformer3DModel": Kind(denoisers.hunyuan_video_transformer),
    "CogVideoXTransformer3DModel": Kind(denoisers.cogvideox_transformer),
    "LTXVideoTransformer3DModel": Kind(denoisers.ltx_video_transformer),
    "AutoencoderKL": Kind(vaes.autoencoder_kl, block_modules=_VAE_BLOCKS),
    "AutoencoderKLWan": Kind(vaes.autoencoder_kl_wan, block_modules=_VAE_BLOCKS),
    "AutoencoderKLHunyuanVideo": Kind(vaes.autoencoder_kl_hunyuan_video),
    "AutoencoderKLCogVideoX": Kind(vaes.autoencoder_kl_cogvideox),
    "AutoencoderKLLTXVideo": Kind(vaes.autoencoder_kl_ltx_video),
    "CLIPTextModel": Kind(text_encoders.clip_text_model),
    "CLIPTextModelWithProjection": Kind(text_encoders.clip_text_model_with_projection),
    "CLIPVisionModel": Kind(text_encoders.clip_vision_model),
    "T5EncoderModel": Kind(text_encoders.t5_encoder_model),
    "UMT5EncoderModel": Kind(text_encoders.umt5_encoder_model),
    "LlamaModel": Kind(text_encoders.llama_model),
}
