"""Activation models against the live tensors of the real diffusers forward passes.

Each case runs the published config's model (two blocks: one block's live set is what the model
counts, the loop frees the previous block's) on the meta device at a real output size, and
compares the peak of its live tensors (tests/budget/diffusion/live.py) with
``gpu_sizer.budget.diffusion``'s figure. Tolerances: 10% for denoisers (their live set is
counted statement by statement), 15% for VAE decoders (a live-set walk with one calibration
factor per class, decode.py ``_CALIBRATION``, fitted to the same traces).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests import diffusers_configs as published
from tests.budget.diffusion.conftest import build_on_meta, torch
from tests.budget.diffusion.live import fused_attention, live_peak_bytes

from gpu_sizer.api.components import resolved_config
from gpu_sizer.budget.diffusion.decode import DecodeShape, vae_decode_bytes
from gpu_sizer.budget.diffusion.denoise import DenoiseShape, denoiser_forward_bytes

META = torch.device("meta")
BF16 = torch.bfloat16


def _m(*shape: int, dtype: Any = BF16) -> Any:
    return torch.empty(*shape, device=META, dtype=dtype)


def _t(*values: float) -> Any:
    return torch.tensor(values, device=META)


def _live(model: Any, call: Callable[[Any], Any]) -> int:
    with torch.no_grad(), fused_attention():
        return live_peak_bytes(lambda: call(model))


def _denoiser(
    cls: str, config: dict[str, Any], inputs: dict[str, Any], shape: DenoiseShape
) -> None:
    model = build_on_meta(cls, config, BF16)
    measured = _live(model, lambda m: m(**inputs, return_dict=False))
    modelled = denoiser_forward_bytes(cls, resolved_config(cls, published.camel(config)), shape)
    assert modelled == pytest.approx(measured, rel=0.10), (modelled, measured)


def test_wan_14b_720p_81_frames() -> None:
    f, h, w, t = 21, 90, 160, 226
    inputs = {"hidden_states": _m(1, 16, f, h, w), "timestep": _t(500),
              "encoder_hidden_states": _m(1, t, 4096)}  # fmt: skip
    config = {**published.WAN21_T2V_14B, "num_layers": 2}
    _denoiser("WanTransformer3DModel", config, inputs, DenoiseShape(1, f, h, w, t, 2))


def test_wan_1_3b_480p_81_frames() -> None:
    f, h, w, t = 21, 60, 104, 226
    inputs = {"hidden_states": _m(1, 16, f, h, w), "timestep": _t(500),
              "encoder_hidden_states": _m(1, t, 4096)}  # fmt: skip
    config = {**published.WAN21_T2V_1_3B, "num_layers": 2}
    _denoiser("WanTransformer3DModel", config, inputs, DenoiseShape(1, f, h, w, t, 2))


def test_hunyuan_video_544p_129_frames() -> None:
    f, h, w, t = 33, 68, 120, 256
    inputs = {"hidden_states": _m(1, 16, f, h, w), "timestep": _t(500.0),
              "encoder_hidden_states": _m(1, t, 4096),
              "encoder_attention_mask": torch.ones(1, t, device=META),
              "pooled_projections": _m(1, 768), "guidance": _t(6000.0)}  # fmt: skip
    config = {**published.HUNYUAN_VIDEO, "num_layers": 1, "num_single_layers": 1}
    _denoiser("HunyuanVideoTransformer3DModel", config, inputs, DenoiseShape(1, f, h, w, t, 2))


def test_flux_dev_1024() -> None:
    n, t = 64 * 64, 512
    inputs = {"hidden_states": _m(1, n, 64), "encoder_hidden_states": _m(1, t, 4096),
              "pooled_projections": _m(1, 768), "timestep": _t(0.5),
              "img_ids": torch.zeros(n, 3, device=META), "txt_ids": torch.zeros(t, 3, device=META),
              "guidance": _t(3.5)}  # fmt: skip
    config = {**published.FLUX_DEV, "num_layers": 2, "num_single_layers": 2}
    _denoiser("FluxTransformer2DModel", config, inputs, DenoiseShape(1, 1, 128, 128, t, 2))


def test_sd35_large_1024_with_guidance() -> None:
    inputs = {"hidden_states": _m(2, 16, 128, 128), "encoder_hidden_states": _m(2, 333, 4096),
              "pooled_projections": _m(2, 2048), "timestep": _t(500, 500)}  # fmt: skip
    config = {**published.SD35_LARGE, "num_layers": 3}
    _denoiser("SD3Transformer2DModel", config, inputs, DenoiseShape(2, 1, 128, 128, 333, 2))


def test_cogvideox_5b_480p_49_frames_with_guidance() -> None:
    tokens = 13 * 30 * 45
    rotary = (_m(tokens, 64, dtype=torch.float32), _m(tokens, 64, dtype=torch.float32))
    inputs = {"hidden_states": _m(2, 13, 16, 60, 90), "encoder_hidden_states": _m(2, 226, 4096),
              "timestep": _t(500, 500), "image_rotary_emb": rotary}  # fmt: skip
    config = {**published.COGVIDEOX_5B, "num_layers": 2}
    _denoiser("CogVideoXTransformer3DModel", config, inputs, DenoiseShape(2, 13, 60, 90, 226, 2))


def test_ltx_video_768x512_161_frames_with_guidance() -> None:
    n = 21 * 16 * 24
    inputs = {"hidden_states": _m(2, n, 128), "encoder_hidden_states": _m(2, 128, 4096),
              "timestep": _t(500, 500), "encoder_attention_mask": torch.ones(2, 128, device=META),
              "num_frames": 21, "height": 16, "width": 24}  # fmt: skip
    config = {**published.LTX_VIDEO_090, "num_layers": 2}
    _denoiser("LTXVideoTransformer3DModel", config, inputs, DenoiseShape(2, 21, 16, 24, 128, 2))


@pytest.mark.parametrize(
    ("config", "latent", "hidden"),
    [(published.SDXL_UNET, 128, 2048), (published.SD15_UNET, 64, 768)],
    ids=["sdxl-1024", "sd15-512"],
)
def test_unet_with_guidance(config: dict[str, Any], latent: int, hidden: int) -> None:
    inputs: dict[str, Any] = {"sample": _m(2, 4, latent, latent), "timestep": _t(500),
                              "encoder_hidden_states": _m(2, 77, hidden)}  # fmt: skip
    if "addition_embed_type" in config:
        inputs["added_cond_kwargs"] = {"text_embeds": _m(2, 1280), "time_ids": _m(2, 6)}
    shape = DenoiseShape(2, 1, latent, latent, 77, 2)
    _denoiser("UNet2DConditionModel", config, inputs, shape)


DECODES = [
    ("AutoencoderKL", published.SDXL_VAE, (4, 4, 128, 128), torch.float32, False, False),
    ("AutoencoderKL", published.SDXL_VAE, (4, 4, 128, 128), torch.float16, False, True),
    ("AutoencoderKL", published.VAE_16CH, (1, 16, 128, 128), BF16, False, False),
    ("AutoencoderKLWan", published.WAN21_VAE, (1, 16, 21, 60, 104), torch.float32, False, False),
    ("AutoencoderKLWan", published.WAN21_VAE, (1, 16, 21, 90, 160), BF16, False, False),
    ("AutoencoderKLHunyuanVideo", published.HUNYUAN_VIDEO_VAE, (1, 16, 9, 32, 32), torch.float16,
     False, False),
    ("AutoencoderKLCogVideoX", published.COGVIDEOX_VAE, (1, 16, 13, 60, 90), BF16, False, False),
    ("AutoencoderKLLTXVideo", published.LTX_VIDEO_090_VAE, (1, 128, 21, 16, 24), BF16, False,
     False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("cls", "config", "latent", "dtype", "tiling", "slicing"),
    DECODES,
    ids=[f"{d[0]}-{'x'.join(map(str, d[2]))}-{d[3]}".replace("torch.", "") for d in DECODES],
)
def test_vae_decode(
    cls: str,
    config: dict[str, Any],
    latent: tuple[int, ...],
    dtype: Any,
    tiling: bool,
    slicing: bool,
) -> None:
    model = build_on_meta(cls, config, dtype)
    if tiling:
        model.enable_tiling()
    if slicing:
        model.enable_slicing()
    z = _m(*latent, dtype=dtype)
    measured = _live(model, lambda m: m.decode(z))
    batch, _, *grid = latent
    frames, h, w = grid if len(grid) == 3 else (1, *grid)
    element = torch.empty(0, dtype=dtype).element_size()
    shape = DecodeShape(batch, frames, h, w, element, tiling, slicing)
    modelled = vae_decode_bytes(cls, resolved_config(cls, published.camel(config)), shape)
    assert modelled == pytest.approx(measured, rel=0.15), (modelled, measured)
