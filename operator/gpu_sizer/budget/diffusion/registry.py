"""The component classes gpu-sizer sizes: builder, float32-kept modules, group-offload blocks.

One entry per class of :data:`gpu_sizer.api.components.COMPONENT_CLASSES`; adding a class means
adding its config keys there, its builder (and its activation model) here, and its oracle test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpu_sizer.budget.diffusion import denoisers, text_encoders, vaes
from gpu_sizer.budget.diffusion.parts import DEFAULT_SKIP_CASTING, Part

__all__ = ["KINDS", "Kind"]


@dataclass(frozen=True)
class Kind:
    """How to build a class's module tree, and the class attributes that change its memory.

    :param build: resolved config -> module tree.
    :param keep_fp32: ``ModelMixin._keep_in_fp32_modules``: parameters kept in float32 when the
        model is loaded in 16 bits.
    :param block_modules: ``ModelMixin._group_offload_block_modules``: children whose lists are
        grouped too under block-level group offloading.
    :param skip_casting: ``ModelMixin._skip_layerwise_casting_patterns``: module-name patterns
        ``enable_layerwise_casting`` leaves in the compute dtype, besides the defaults.
    :param keep_fp32_fp16: ``transformers`` ``PreTrainedModel._keep_in_fp32_modules``: kept in
        float32 only when the model is loaded in float16 (transformers 5.24
        ``modeling_utils.py`` ``_get_dtype_plan``: "only used to avoid bf16 -> fp16 casting
        precision issues"); T5's and UMT5's ``wo`` projections, a fifth of T5-XXL's weights.
    """

    build: Callable[[Mapping[str, Any]], Part]
    keep_fp32: tuple[str, ...] = ()
    block_modules: tuple[str, ...] = ()
    skip_casting: tuple[str, ...] = ()
    keep_fp32_fp16: tuple[str, ...] = ()

    def fp32_modules(self, element_bytes: int, float16: bool) -> tuple[str, ...]:
        """The module names kept in float32 when loading at ``element_bytes`` per element."""
        if element_bytes >= 4:
            return ()
        return (*self.keep_fp32, *self.keep_fp32_fp16) if float16 else self.keep_fp32

    @property
    def casting_skips(self) -> tuple[str, ...]:
        """Every pattern ``enable_layerwise_casting`` skips for this class (``diffusers``
        0.42.1 ``ModelMixin.enable_layerwise_casting``: the defaults, ``_keep_in_fp32_modules``
        and ``_skip_layerwise_casting_patterns``)."""
        return (*DEFAULT_SKIP_CASTING, *self.keep_fp32, *self.skip_casting)


_VAE_BLOCKS: Final = ("quant_conv", "post_quant_conv", "encoder", "decoder")

KINDS: Final[dict[str, Kind]] = {
    "UNet2DConditionModel": Kind(denoisers.unet_2d_condition, skip_casting=("norm",)),
    "SD3Transformer2DModel": Kind(denoisers.sd3_transformer, skip_casting=("pos_embed", "norm")),
    "FluxTransformer2DModel": Kind(denoisers.flux_transformer, skip_casting=("pos_embed", "norm")),
    "WanTransformer3DModel": Kind(
        denoisers.wan_transformer,
        keep_fp32=("rope", "time_embedder", "scale_shift_table", "norm1", "norm2", "norm3"),
        skip_casting=("patch_embedding", "condition_embedder", "norm"),
    ),
    "HunyuanVideoTransformer3DModel": Kind(
        denoisers.hunyuan_video_transformer,
        skip_casting=("x_embedder", "context_embedder", "norm"),
    ),
    "CogVideoXTransformer3DModel": Kind(
        denoisers.cogvideox_transformer, skip_casting=("patch_embed", "norm")
    ),
    "LTXVideoTransformer3DModel": Kind(denoisers.ltx_video_transformer, skip_casting=("norm",)),
    "MochiTransformer3DModel": Kind(
        denoisers.mochi_transformer, skip_casting=("patch_embed", "norm")
    ),
    "QwenImageTransformer2DModel": Kind(
        denoisers.qwen_image_transformer, skip_casting=("pos_embed", "norm")
    ),
    "AutoencoderKL": Kind(vaes.autoencoder_kl, block_modules=_VAE_BLOCKS),
    "AutoencoderKLWan": Kind(vaes.autoencoder_kl_wan, block_modules=_VAE_BLOCKS),
    "AutoencoderKLQwenImage": Kind(vaes.autoencoder_kl_qwen_image),
    "AutoencoderKLHunyuanVideo": Kind(vaes.autoencoder_kl_hunyuan_video),
    "AutoencoderKLCogVideoX": Kind(vaes.autoencoder_kl_cogvideox),
    "AutoencoderKLLTXVideo": Kind(vaes.autoencoder_kl_ltx_video),
    "AutoencoderKLMochi": Kind(vaes.autoencoder_kl_mochi),
    "CLIPTextModel": Kind(text_encoders.clip_text_model),
    "CLIPTextModelWithProjection": Kind(text_encoders.clip_text_model_with_projection),
    "CLIPVisionModel": Kind(text_encoders.clip_vision_model),
    "CLIPVisionModelWithProjection": Kind(text_encoders.clip_vision_model_with_projection),
    "T5EncoderModel": Kind(text_encoders.t5_encoder_model, keep_fp32_fp16=("wo",)),
    "UMT5EncoderModel": Kind(text_encoders.umt5_encoder_model, keep_fp32_fp16=("wo",)),
    "StableDiffusionSafetyChecker": Kind(text_encoders.stable_diffusion_safety_checker),
    "LlamaModel": Kind(text_encoders.llama_model),
    "Qwen2_5_VLForConditionalGeneration": Kind(text_encoders.qwen2_5_vl_for_conditional_generation),
}
