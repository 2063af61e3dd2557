"""Vision encoders of vision-language models: parameters and profiled activation peak. Pure.

``spec.model.architecture.visionConfig`` is config.json's ``vision_config``; each encoder is laid
out as its ``transformers`` modeling file builds it (exact counts are tested against the
meta-device model):

- ``siglip_vision_model`` (Gemma 3, ``modeling_siglip.py``): a patch Conv2d with bias, learned
  positions for ``(imageSize / patchSize)^2`` patches, LayerNorm blocks with biased q/k/v/out and
  fc1/fc2, a post LayerNorm; Gemma 3's projector is one ``visionHidden x textHidden`` matrix and
  an RMSNorm (``Gemma3MultiModalProjector``).
- ``pixtral`` (Mistral 3, ``modeling_pixtral.py``): a patch Conv2d without bias, ``ln_pre``,
  RMSNorm blocks with unbiased q/k/v/o and a gated MLP; Mistral 3's projector is an RMSNorm, the
  2 x 2 ``patch_merger`` (``visionHidden x spatialMergeSize^2 -> visionHidden``) and two linears
  to the text width (``Mistral3MultiModalProjector``, biases per ``multimodalProjectorBias``).
- ``qwen2_5_vl`` (``modeling_qwen2_5_vl.py``): a Conv3d patch embedding without bias over
  ``temporalPatchSize`` frames, RMSNorm blocks with a biased fused qkv, biased proj and a biased
  gated MLP, and the merger (RMSNorm, ``hidden x merge^2`` square linear, linear to
  ``outHiddenSize``, both biased).
- ``llama4_vision_model`` (``modeling_llama4.py``): class embedding, learned positions for
  ``(imageSize / patchSize)^2 + 1`` tokens, an unbiased patch linear, LayerNorms before and
  after, LayerNorm blocks with biased q/k/v/o and fc1/fc2, the pixel-shuffle adapter
  (``intermediateSize -> projectorInputDim``, ``projectorOutputDim`` square, unbiased) and the
  projector ``visionOutputDim -> textHidden``.

Under tensor parallelism the encoder blocks split like the decoder's (vLLM builds the encoders
of these models from ``QKVParallelLinear``/``ColumnParallelLinear``/``RowParallelLinear``); the
patch embedding, positions, norms and the projector are counted whole on every rank (a planning
simplification: they are under 1% of each encoder). vLLM builds the encoder on every pipeline
stage.

All counts are parameters (elements).
"""

from __future__ import annotations

from gpu_sizer.api import Architecture, VisionConfig

__all__ = [
    "encoder_activation_bytes",
    "encoder_output_bytes",
    "encoder_output_tokens",
    "encoder_params",
    "encoder_profile_patches",
]


def _block(
    hidden: int,
    inner: int,
    attn_width: int,
    tp: int,
    *,
    bias: bool,
    gated: bool,
    layer_norm: bool,
) -> int:
    """One pre-norm encoder block on one rank: q/k/v/o, MLP and two norms (elements)."""
    a = attn_width // tp
    i = -(-inner // tp)
    params = 3 * hidden * a + a * hidden
    params += (3 if gated else 2) * hidden * i
    if bias:
        # column-parallel biases split; row-parallel (o, down) biases replicated
        params += 3 * a + hidden + (2 if gated else 1) * i + hidden
    params += 2 * (2 * hidden if layer_norm else hidden)
    return params


def encoder_params(arch: Architecture, tp: int = 1) -> int:
    """Parameters of the vision encoder and projector on one tensor-parallel rank; 0 without one.

    :param arch: the model's shape; its ``visionConfig`` describes the encoder.
    :param tp: tensor-parallel degree.
    """
    vc = arch.vision_config
    if vc is None:
        return 0
    text = arch.hidden_size
    kind = vc.model_type
    if kind == "siglip_vision_model":
        return _siglip(vc, text, tp)
    if kind == "pixtral":
        return _pixtral(arch, vc, text, tp)
    if kind == "qwen2_5_vl":
        return _qwen2_5_vl(vc, tp)
    return _llama4(vc, text, tp)


def _siglip(vc: VisionConfig, text: int, tp: int) -> int:
    h, p = vc.hidden_size, vc.patch_size
    patches = ((vc.image_size or 224) // p) ** 2
    stem = vc.channels * p * p * h + h + patches * h + 2 * h
    block = _block(h, vc.intermediate_size, h, tp, bias=True, gated=False, layer_norm=True)
    projector = h * text + h
    return stem + vc.layers * block + projector


def _pixtral(arch: Architecture, vc: VisionConfig, text: int, tp: int) -> int:
    h, p = vc.hidden_size, vc.patch_size
    width = vc.heads * (vc.head_dim or h // vc.heads)
    stem = vc.channels * p * p * h + h
    block = _block(h, vc.intermediate_size, width, tp, bias=False, gated=True, layer_norm=False)
    merge = arch.spatial_merge_size or 2
    bias = bool(arch.multimodal_projector_bias)
    projector = h + h * merge * merge * h + h * text + text * text + (2 * text if bias else 0)
    return stem + vc.layers * block + projector


def _qwen2_5_vl(vc: VisionConfig, tp: int) -> int:
    h, p = vc.hidden_size, vc.patch_size
    stem = vc.channels * (vc.temporal_patch_size or 2) * p * p * h
    block = _block(h, vc.intermediate_size, h, tp, bias=True, gated=True, layer_norm=False)
    merged = h * (vc.spatial_merge_size or 2) ** 2
    out = vc.out_hidden_size or h
    merger = h + merged * merged + merged + merged * out + out
    return stem + vc.layers * block + merger


def _llama4(vc: VisionConfig, text: int, tp: int) -> int:
    h, p = vc.hidden_size, vc.patch_size
    positions = ((vc.image_size or 336) // p) ** 2 + 1
    stem = h + positions * h + vc.channels * p * p * h + 2 * (2 * h)
    block = _block(h, vc.intermediate_size, h, tp, bias=True, gated=False, layer_norm=True)
    proj_in = vc.projector_input_dim or 4096
    proj_out = vc.projector_output_dim or 4096
    adapter = vc.intermediate_size * proj_in + proj_out * proj_out
    projector = (vc.vision_output_dim or proj_out) * text
    return stem + vc.layers * block + adapter + projector


#: Largest image each encoder's processor produces, in pixels (side x side), when vLLM profiles
#: the encoder with the image that has the most features: Qwen2.5-VL's ``max_pixels`` 12,845,056
#: (``Qwen2VLImageProcessor``, the checkpoints' preprocessor_config.json); SigLIP's fixed
#: ``imageSize`` (Gemma 3, pan-and-scan off by default); Pixtral's ``imageSize`` (1540);
#: Llama 4's 16 tiles of ``imageSize`` plus the global tile (vLLM ``Llama4ProcessingInfo``
#: ``max_patches`` 16).
QWEN2_5_VL_MAX_PIXELS = 12_845_056
LLAMA4_MAX_TILES = 16


def encoder_profile_patches(arch: Architecture) -> int:
    """Patches the encoder sees for the largest single image (what vLLM profiles with), or 0."""
    vc = arch.vision_config
    if vc is None:
        return 0
    p = vc.patch_size
    if vc.model_type == "qwen2_5_vl":
        return QWEN2_5_VL_MAX_PIXELS // (p * p)
    side = (vc.image_size or 224) // p
    if vc.model_type == "llama4_vision_model":
        return (LLAMA4_MAX_TILES + 1) * (side * side + 1)
    return side * side


def encoder_output_tokens(arch: Architecture) -> int:
    """Language-model tokens the largest image becomes (after merging or pooling)."""
    vc = arch.vision_config
    if vc is None:
        return 0
    patches = encoder_profile_patches(arch)
    if vc.model_type == "qwen2_5_vl":
        return patches // (vc.spatial_merge_size or 2) ** 2
    if vc.model_type == "pixtral":
        return patches // (arch.spatial_merge_size or 2) ** 2
    if vc.model_type == "llama4_vision_model":
        ratio = vc.pixel_shuffle_ratio or 0.5
        return int(patches * ratio * ratio)
    return 256  # Gemma 3: mm_tokens_per_image (average-pooled to 16 x 16)


def encoder_activation_bytes(arch: Architecture, tp: int, act_bytes: int) -> int:
    """Peak activation bytes of encoding the largest image on one rank (0 without an encoder).

    Per patch, inside one pre-norm block: the residual and normed hidden, then either the
    attention's q, k, v and output (``width / tp`` each) and the projected output, or the MLP's
    gate, up and product (``inner / tp`` each) and the down output; the encoder's attention
    kernels (FlashAttention, xformers) keep no patches x patches matrix. Qwen2.5-VL's vLLM
    encoder all-gathers the fused qkv over the tensor-parallel ranks before splitting heads and
    applies rotary embeddings to q and k in float32 (``Qwen2_5_VisionAttention``), which adds
    ``3 x width`` and ``2 x 2 x width / tp`` elements. Plus the pixel values, sent as float32 by
    the processor and cast to the model dtype.
    """
    vc = arch.vision_config
    if vc is None:
        return 0
    h = vc.hidden_size
    width = vc.heads * (vc.head_dim or h // vc.heads)
    a = width // tp
    inner = -(-vc.intermediate_size // tp)
    attention = 2 * h + 3 * a + a + h
    if vc.model_type == "qwen2_5_vl":
        attention += 3 * width + 2 * 2 * a
    gated = vc.model_type in ("pixtral", "qwen2_5_vl")
    mlp = 2 * h + (3 if gated else 2) * inner + h
    frames = (vc.temporal_patch_size or 2) if vc.model_type == "qwen2_5_vl" else 1
    pixels = vc.channels * vc.patch_size**2 * frames
    patches = encoder_profile_patches(arch)
    return patches * (max(attention, mlp) * act_bytes + pixels * (4 + act_bytes))


def encoder_output_bytes(arch: Architecture, act_bytes: int) -> int:
    """The largest image's embeddings, kept for the language model's forward pass (bytes)."""
    return encoder_output_tokens(arch) * arch.hidden_size * act_bytes
