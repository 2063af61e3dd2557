"""Autoencoders (2D and causal 3D video VAEs) as module trees, from their config. Pure.

Each builder mirrors one ``diffusers`` 0.42.1 class (file named in its docstring); the oracle
tests compare parameter and buffer counts with the library's models on the meta device. The
decoder's activation model lives in :mod:`gpu_sizer.budget.diffusion.decode`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from gpu_sizer.budget.diffusion.blocks import timestep_embedding
from gpu_sizer.budget.diffusion.denoisers import UnsupportedConfig
from gpu_sizer.budget.diffusion.parts import (
    Part,
    buffer,
    conv,
    group_norm,
    layer_norm,
    linear,
    module,
    param,
    sequence,
)

__all__ = [
    "autoencoder_kl",
    "autoencoder_kl_cogvideox",
    "autoencoder_kl_hunyuan_video",
    "autoencoder_kl_ltx_video",
    "autoencoder_kl_mochi",
    "autoencoder_kl_qwen_image",
    "autoencoder_kl_wan",
    "qwen_image_as_wan",
]

Config = Mapping[str, Any]
K2 = (3, 3)
K3 = (3, 3, 3)


def _mid_attention(name: str, ch: int) -> Part:
    """The VAE mid-block ``Attention``: one head of ``ch``, group norm, biased projections."""
    return module(
        name,
        group_norm("group_norm", ch),
        linear("to_q", ch, ch),
        linear("to_k", ch, ch),
        linear("to_v", ch, ch),
        sequence("to_out", linear("0", ch, ch)),
    )


# --- AutoencoderKL (SD 1.x/2.x, SDXL, SD3, Flux) ----------------------------------------------


def _resnet_2d(name: str, cin: int, cout: int) -> Part:
    """``resnet.py`` ``ResnetBlock2D`` without a time embedding (``temb_channels=None``)."""
    return module(
        name,
        group_norm("norm1", cin),
        conv("conv1", cin, cout, K2),
        group_norm("norm2", cout),
        conv("conv2", cout, cout, K2),
        conv("conv_shortcut", cin, cout, (1, 1)) if cin != cout else None,
    )


def _mid_2d(ch: int, attention: bool) -> Part:
    """``unets/unet_2d_blocks.py`` ``UNetMidBlock2D`` (``attention_head_dim = ch``)."""
    return module(
        "mid_block",
        sequence("attentions", _mid_attention("0", ch)) if attention else sequence("attentions"),
        sequence("resnets", _resnet_2d("0", ch, ch), _resnet_2d("1", ch, ch)),
    )


def _blocks_2d(channels: list[int], resnets: int, resampler: str) -> list[Part]:
    """The encoder's down blocks or the decoder's up blocks of diffusers' ``Encoder``/``Decoder``
    (``DownEncoderBlock2D``/``UpDecoderBlock2D``): per entry of ``channels``, ``resnets`` ResNet
    blocks from the previous block's width to this one's, and a 3x3 resampling conv on every
    block but the last (named ``resampler``: downsamplers or upsamplers)."""
    blocks = []
    out = channels[0]
    for i, width in enumerate(channels):
        cin, out = out, width
        blocks.append(
            module(
                str(i),
                sequence(
                    "resnets",
                    *(_resnet_2d(str(j), cin if j == 0 else out, out) for j in range(resnets)),
                ),
                sequence(resampler, module("0", conv("conv", out, out, K2)))
                if i < len(channels) - 1
                else None,
            )
        )
    return blocks


def autoencoder_kl(c: Config) -> Part:
    """``autoencoders/autoencoder_kl.py`` ``AutoencoderKL`` with ``autoencoders/vae.py``
    ``Encoder``/``Decoder`` (``DownEncoderBlock2D``, ``UpDecoderBlock2D``)."""
    for kind in c["down_block_types"]:
        if kind != "DownEncoderBlock2D":
            raise UnsupportedConfig(
                f"downBlockTypes entry {kind!r} (supported: DownEncoderBlock2D)"
            )
    for kind in c["up_block_types"]:
        if kind != "UpDecoderBlock2D":
            raise UnsupportedConfig(f"upBlockTypes entry {kind!r} (supported: UpDecoderBlock2D)")
    boc = _levels(c)
    layers, latent = c["layers_per_block"], c["latent_channels"]
    attention = c["mid_block_add_attention"]
    downs = _blocks_2d(boc, layers, "downsamplers")
    encoder = module(
        "encoder",
        conv("conv_in", c["in_channels"], boc[0], K2),
        sequence("down_blocks", *downs),
        _mid_2d(boc[-1], attention),
        group_norm("conv_norm_out", boc[-1]),
        conv("conv_out", boc[-1], 2 * latent, K2),
    )
    rev = boc[::-1]
    ups = _blocks_2d(rev, layers + 1, "upsamplers")
    decoder = module(
        "decoder",
        conv("conv_in", latent, rev[0], K2),
        sequence("up_blocks", *ups),
        _mid_2d(rev[0], attention),
        group_norm("conv_norm_out", boc[0]),
        conv("conv_out", boc[0], c["out_channels"], K2),
    )
    return module(
        "vae",
        encoder,
        decoder,
        conv("quant_conv", 2 * latent, 2 * latent, (1, 1)) if c["use_quant_conv"] else None,
        conv("post_quant_conv", latent, latent, (1, 1)) if c["use_post_quant_conv"] else None,
    )


# --- AutoencoderKLWan (Wan 2.1, Wan 2.2) -------------------------------------------------------


def _wan_rms(name: str, dim: int) -> Part:
    """``WanRMS_norm``: one ``gamma`` per channel (no bias)."""
    return module(name, param("gamma", dim))


def _wan_resnet(name: str, cin: int, cout: int) -> Part:
    """``WanResidualBlock``: RMS norms and causal 3x3x3 convolutions, 1x1x1 shortcut."""
    return module(
        name,
        _wan_rms("norm1", cin),
        conv("conv1", cin, cout, K3),
        _wan_rms("norm2", cout),
        conv("conv2", cout, cout, K3),
        conv("conv_shortcut", cin, cout, (1, 1, 1)) if cin != cout else None,
    )


def _wan_attention(name: str, dim: int) -> Part:
    """``WanAttentionBlock``: per-frame single-head attention with 1x1 convolutions."""
    return module(
        name,
        _wan_rms("norm", dim),
        conv("to_qkv", dim, 3 * dim, (1, 1)),
        conv("proj", dim, dim, (1, 1)),
    )


def _wan_mid(dim: int) -> Part:
    return module(
        "mid_block",
        sequence("attentions", _wan_attention("0", dim)),
        sequence("resnets", _wan_resnet("0", dim, dim), _wan_resnet("1", dim, dim)),
    )


def _wan_resample(name: str, dim: int, mode: str, out: int | None = None) -> Part:
    """``WanResample``: 2D 3x3 convolution, plus a causal 3x1x1 ``time_conv`` for the 3D modes."""
    if mode.startswith("upsample"):
        up = out if out is not None else dim // 2
        time = conv("time_conv", dim, 2 * dim, (3, 1, 1)) if mode == "upsample3d" else None
        return module(name, sequence("resample", conv("1", dim, up, K2)), time)
    time = conv("time_conv", dim, dim, (3, 1, 1)) if mode == "downsample3d" else None
    return module(name, sequence("resample", conv("1", dim, dim, K2)), time)


def autoencoder_kl_wan(c: Config) -> Part:
    """``autoencoders/autoencoder_kl_wan.py`` ``AutoencoderKLWan`` (``WanEncoder3d``,
    ``WanDecoder3d``; ``is_residual`` selects Wan 2.2's residual up/down blocks)."""
    if c["attn_scales"]:
        raise UnsupportedConfig(f"attnScales {list(c['attn_scales'])!r} (Wan VAEs use none)")
    if c["patch_size"] not in (None, 1, 2):
        raise UnsupportedConfig(f"patchSize {c['patch_size']!r}")
    mult = list(c["dim_mult"])
    z, blocks, residual = c["z_dim"], c["num_res_blocks"], c["is_residual"]
    down_t = list(c["temperal_downsample"])
    up_t = down_t[::-1]
    base = c["base_dim"]
    dims = [base * u for u in [1, *mult]]
    enc_blocks: list[Part] = []
    for i, (din, dout) in enumerate(itertools.pairwise(dims)):
        last = i == len(mult) - 1
        if residual:
            parts: list[Part | None] = [
                sequence(
                    "resnets",
                    *(_wan_resnet(str(j), din if j == 0 else dout, dout) for j in range(blocks)),
                )
            ]
            if not last:
                mode = "downsample3d" if down_t[i] else "downsample2d"
                parts.append(_wan_resample("downsampler", dout, mode))
            enc_blocks.append(module(str(len(enc_blocks)), *parts))
        else:
            for _ in range(blocks):
                enc_blocks.append(_wan_resnet(str(len(enc_blocks)), din, dout))
                din = dout
            if not last:
                mode = "downsample3d" if down_t[i] else "downsample2d"
                enc_blocks.append(_wan_resample(str(len(enc_blocks)), dout, mode))
    encoder = module(
        "encoder",
        conv("conv_in", c["in_channels"], dims[0], K3),
        sequence("down_blocks", *enc_blocks),
        _wan_mid(dims[-1]),
        _wan_rms("norm_out", dims[-1]),
        conv("conv_out", dims[-1], 2 * z, K3),
    )
    dbase = c["decoder_base_dim"] or base
    ddims = [dbase * u for u in [mult[-1], *mult[::-1]]]
    up_blocks: list[Part] = []
    for i, (din, dout) in enumerate(itertools.pairwise(ddims)):
        if i > 0 and not residual:
            din = din // 2
        up = i != len(mult) - 1
        up_mode = ("upsample3d" if up_t[i] else "upsample2d") if up else None
        resnets = sequence(
            "resnets",
            *(_wan_resnet(str(j), din if j == 0 else dout, dout) for j in range(blocks + 1)),
        )
        if residual:
            sampler = _wan_resample("upsampler", dout, up_mode, dout) if up_mode else None
            up_blocks.append(module(str(i), resnets, sampler))
        else:
            samplers = (
                sequence("upsamplers", _wan_resample("0", dout, up_mode)) if up_mode else None
            )
            up_blocks.append(module(str(i), resnets, samplers))
    decoder = module(
        "decoder",
        conv("conv_in", z, ddims[0], K3),
        _wan_mid(ddims[0]),
        sequence("up_blocks", *up_blocks),
        _wan_rms("norm_out", ddims[-1]),
        conv("conv_out", ddims[-1], c["out_channels"], K3),
    )
    return module(
        "vae",
        encoder,
        conv("quant_conv", 2 * z, 2 * z, (1, 1, 1)),
        conv("post_quant_conv", z, z, (1, 1, 1)),
        decoder,
    )


def qwen_image_as_wan(c: Config) -> dict[str, Any]:
    """The ``AutoencoderKLWan`` config that builds the same modules as an
    ``AutoencoderKLQwenImage`` config (``autoencoders/autoencoder_kl_qwenimage.py``): its
    encoder, decoder, resnets, attention and resample blocks are Wan 2.1's, module for module,
    without Wan 2.2's residual blocks, patchifying or separate decoder width; its images in and
    out have ``input_channels``, its spatial factor is ``2 ** len(temperal_downsample)``
    (``spatial_compression_ratio``) and its temporal one Wan's 4."""
    return {
        "base_dim": c["base_dim"],
        "decoder_base_dim": None,
        "z_dim": c["z_dim"],
        "dim_mult": c["dim_mult"],
        "num_res_blocks": c["num_res_blocks"],
        "attn_scales": c["attn_scales"],
        "temperal_downsample": c["temperal_downsample"],
        "is_residual": False,
        "in_channels": c["input_channels"],
        "out_channels": c["input_channels"],
        "patch_size": None,
        "scale_factor_temporal": 4,
        "scale_factor_spatial": 2 ** len(c["temperal_downsample"]),
    }


def autoencoder_kl_qwen_image(c: Config) -> Part:
    """``autoencoders/autoencoder_kl_qwenimage.py`` ``AutoencoderKLQwenImage`` (Qwen-Image's
    VAE): :func:`autoencoder_kl_wan` of :func:`qwen_image_as_wan`."""
    return autoencoder_kl_wan(qwen_image_as_wan(c))


# --- AutoencoderKLHunyuanVideo -----------------------------------------------------------------


def _causal(name: str, cin: int, cout: int, kernel: tuple[int, ...]) -> Part:
    """A causal 3D convolution wrapper whose ``nn.Conv3d`` is its ``conv`` child."""
    return module(name, conv("conv", cin, cout, kernel))


def _hunyuan_resnet(name: str, cin: int, cout: int) -> Part:
    """``HunyuanVideoResnetBlockCausal3D``: group norms, causal 3x3x3 convolutions."""
    return module(
        name,
        group_norm("norm1", cin),
        _causal("conv1", cin, cout, K3),
        group_norm("norm2", cout),
        _causal("conv2", cout, cout, K3),
        _causal("conv_shortcut", cin, cout, (1, 1, 1)) if cin != cout else None,
    )


def _hunyuan_mid(ch: int, attention: bool) -> Part:
    return module(
        "mid_block",
        sequence("attentions", _mid_attention("0", ch)) if attention else sequence("attentions"),
        sequence("resnets", _hunyuan_resnet("0", ch, ch), _hunyuan_resnet("1", ch, ch)),
    )


def _levels(c: Config) -> list[int]:
    """``block_out_channels`` when it has one entry per down and up block, as the memory model
    builds the levels; diffusers loops over the block types instead and reads a longer
    ``block_out_channels`` by index (its last entry still sizes the mid block), a model
    gpu-sizer does not size. A shorter one is refused with the spec."""
    boc = list(c["block_out_channels"])
    if not len(boc) == len(c["down_block_types"]) == len(c["up_block_types"]):
        raise UnsupportedConfig(
            f"blockOutChannels ({len(boc)} items), downBlockTypes "
            f"({len(c['down_block_types'])}) and upBlockTypes ({len(c['up_block_types'])}) "
            "differ in length"
        )
    return boc


def _block_types(c: Config, family: str) -> None:
    """The video VAEs' encoder and decoder build only their own block class
    (``<family>DownBlock3D``/``<family>UpBlock3D``); any other name raises in diffusers."""
    for key, kind in (("down_block_types", "down"), ("up_block_types", "up")):
        expected = f"{family}{kind.title()}Block3D"
        for entry in c[key]:
            if entry != expected:
                raise UnsupportedConfig(f"{kind}BlockTypes entry {entry!r} (supported: {expected})")


def autoencoder_kl_hunyuan_video(c: Config) -> Part:
    """``autoencoders/autoencoder_kl_hunyuan_video.py`` ``AutoencoderKLHunyuanVideo``."""
    if c["temporal_compression_ratio"] != 4:
        raise UnsupportedConfig(
            f"temporalCompressionRatio {c['temporal_compression_ratio']} (4 only)"
        )
    _block_types(c, "HunyuanVideo")
    boc = _levels(c)
    n, layers, latent = len(boc), c["layers_per_block"], c["latent_channels"]
    spatial = int(math.log2(c["spatial_compression_ratio"]))
    temporal = int(math.log2(c["temporal_compression_ratio"]))
    attention = c["mid_block_add_attention"]
    downs = []
    out = boc[0]
    for i in range(n):
        cin, out = out, boc[i]
        final = i == n - 1
        sample = i < spatial or (i >= n - 1 - temporal and not final)
        downs.append(
            module(
                str(i),
                sequence(
                    "resnets",
                    *(_hunyuan_resnet(str(j), cin if j == 0 else out, out) for j in range(layers)),
                ),
                sequence("downsamplers", _causal("0", out, out, K3)) if sample else None,
            )
        )
    encoder = module(
        "encoder",
        _causal("conv_in", c["in_channels"], boc[0], K3),
        sequence("down_blocks", *downs),
        _hunyuan_mid(boc[-1], attention),
        group_norm("conv_norm_out", boc[-1]),
        _causal("conv_out", boc[-1], 2 * latent, K3),
    )
    rev = boc[::-1]
    ups = []
    out = rev[0]
    for i in range(n):
        prev, out = out, rev[i]
        final = i == n - 1
        sample = i < spatial or (i >= n - 1 - temporal and not final)
        ups.append(
            module(
                str(i),
                sequence(
                    "resnets",
                    *(
                        _hunyuan_resnet(str(j), prev if j == 0 else out, out)
                        for j in range(layers + 1)
                    ),
                ),
                sequence("upsamplers", _causal("0", out, out, K3)) if sample else None,
            )
        )
    decoder = module(
        "decoder",
        _causal("conv_in", latent, rev[0], K3),
        sequence("up_blocks", *ups),
        _hunyuan_mid(rev[0], attention),
        group_norm("conv_norm_out", boc[0]),
        _causal("conv_out", boc[0], c["out_channels"], K3),
    )
    return module(
        "vae",
        encoder,
        decoder,
        conv("quant_conv", 2 * latent, 2 * latent, (1, 1, 1)),
        conv("post_quant_conv", latent, latent, (1, 1, 1)),
    )


# --- AutoencoderKLCogVideoX --------------------------------------------------------------------


def _spatial_norm(name: str, f: int, zq: int) -> Part:
    """``CogVideoXSpatialNorm3D``: group norm modulated by 1x1x1 convolutions of the latent."""
    return module(
        name,
        group_norm("norm_layer", f),
        _causal("conv_y", zq, f, (1, 1, 1)),
        _causal("conv_b", zq, f, (1, 1, 1)),
    )


def _cog_resnet(name: str, cin: int, cout: int, zq: int | None) -> Part:
    """``CogVideoXResnetBlock3D``: group norms (spatial norms in the decoder), causal 3x3x3
    convolutions, a plain 1x1x1 ``Conv3d`` shortcut."""
    norm1 = group_norm("norm1", cin) if zq is None else _spatial_norm("norm1", cin, zq)
    norm2 = group_norm("norm2", cout) if zq is None else _spatial_norm("norm2", cout, zq)
    return module(
        name,
        norm1,
        norm2,
        _causal("conv1", cin, cout, K3),
        _causal("conv2", cout, cout, K3),
        conv("conv_shortcut", cin, cout, (1, 1, 1)) if cin != cout else None,
    )


def autoencoder_kl_cogvideox(c: Config) -> Part:
    """``autoencoders/autoencoder_kl_cogvideox.py`` ``AutoencoderKLCogVideoX``
    (``CogVideoXEncoder3D``/``CogVideoXDecoder3D``; 2D 3x3 down/up-sampling convolutions)."""
    _block_types(c, "CogVideoX")
    boc = _levels(c)
    n, layers, latent = len(boc), c["layers_per_block"], c["latent_channels"]
    downs = []
    out = boc[0]
    for i in range(n):
        cin, out = out, boc[i]
        downs.append(
            module(
                str(i),
                sequence(
                    "resnets",
                    *(
                        _cog_resnet(str(j), cin if j == 0 else out, out, None)
                        for j in range(layers)
                    ),
                ),
                sequence("downsamplers", module("0", conv("conv", out, out, K2)))
                if i < n - 1
                else None,
            )
        )
    ch = boc[-1]
    encoder = module(
        "encoder",
        _causal("conv_in", c["in_channels"], boc[0], K3),
        sequence("down_blocks", *downs),
        module(
            "mid_block",
            sequence("resnets", _cog_resnet("0", ch, ch, None), _cog_resnet("1", ch, ch, None)),
        ),
        group_norm("norm_out", ch),
        _causal("conv_out", ch, 2 * latent, K3),
    )
    rev = boc[::-1]
    ups = []
    out = rev[0]
    for i in range(n):
        prev, out = out, rev[i]
        ups.append(
            module(
                str(i),
                sequence(
                    "resnets",
                    *(
                        _cog_resnet(str(j), prev if j == 0 else out, out, latent)
                        for j in range(layers + 1)
                    ),
                ),
                sequence("upsamplers", module("0", conv("conv", out, out, K2)))
                if i < n - 1
                else None,
            )
        )
    top = rev[0]
    decoder = module(
        "decoder",
        _causal("conv_in", latent, top, K3),
        module(
            "mid_block",
            sequence(
                "resnets", _cog_resnet("0", top, top, latent), _cog_resnet("1", top, top, latent)
            ),
        ),
        sequence("up_blocks", *ups),
        _spatial_norm("norm_out", rev[-1], latent),
        _causal("conv_out", rev[-1], c["out_channels"], K3),
    )
    return module(
        "vae",
        encoder,
        decoder,
        conv("quant_conv", 2 * latent, 2 * latent, (1, 1, 1)) if c["use_quant_conv"] else None,
        conv("post_quant_conv", latent, latent, (1, 1, 1)) if c["use_post_quant_conv"] else None,
    )


# --- AutoencoderKLLTXVideo ---------------------------------------------------------------------


def _ltx_resnet(
    name: str, cin: int, cout: int, noise: bool = False, timestep: bool = False
) -> Part:
    """``LTXVideoResnetBlock3d``: affine-free RMS norms, causal 3x3x3 convolutions; a layer norm
    and 1x1x1 shortcut when the width changes; noise scales and a modulation table optionally."""
    return module(
        name,
        _causal("conv1", cin, cout, K3),
        _causal("conv2", cout, cout, K3),
        layer_norm("norm3", cin) if cin != cout else None,
        _causal("conv_shortcut", cin, cout, (1, 1, 1)) if cin != cout else None,
        param("per_channel_scale1", cin) if noise else None,
        param("per_channel_scale2", cin) if noise else None,
        param("scale_shift_table", 4 * cin) if timestep else None,
    )


def _ltx_time_embedder(name: str, dim: int) -> Part:
    """``PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0)``: one timestep embedder."""
    return module(name, timestep_embedding("timestep_embedder", 256, dim))


def autoencoder_kl_ltx_video(c: Config) -> Part:
    """``autoencoders/autoencoder_kl_ltx.py`` ``AutoencoderKLLTXVideo`` (LTX-Video 0.9.0/0.9.1:
    ``LTXVideoDownBlock3D`` encoder blocks, optional timestep-conditioned decoder)."""
    p = c["patch_size"]
    if c["patch_size_t"] != 1:
        # LTXVideoEncoder3d/Decoder3d size conv_in and conv_out by patch_size alone, while
        # their forward folds patch_size_t frames into the channels: only 1 builds what runs
        raise UnsupportedConfig(f"patchSizeT {c['patch_size_t']} (1 only)")
    boc = list(c["block_out_channels"])
    layers = list(c["layers_per_block"])
    scaling = list(c["spatio_temporal_scaling"])
    n = len(boc)
    downs = []
    out = boc[0]
    for i in range(n):
        cin = out
        out = boc[i + 1] if i + 1 < n else boc[i]
        downs.append(
            module(
                str(i),
                sequence("resnets", *(_ltx_resnet(str(j), cin, cin) for j in range(layers[i]))),
                sequence("downsamplers", _causal("0", cin, cin, K3)) if scaling[i] else None,
                _ltx_resnet("conv_out", cin, out) if cin != out else None,
            )
        )
    encoder = module(
        "encoder",
        _causal("conv_in", c["in_channels"] * p * p, boc[0], K3),
        sequence("down_blocks", *downs),
        module(
            "mid_block",
            sequence("resnets", *(_ltx_resnet(str(j), out, out) for j in range(layers[-1]))),
        ),
        _causal("conv_out", out, c["latent_channels"] + 1, K3),
    )
    dboc = list(c["decoder_block_out_channels"])[::-1]
    dlayers = list(c["decoder_layers_per_block"])[::-1]
    dscale = list(c["decoder_spatio_temporal_scaling"])[::-1]
    noise = list(c["decoder_inject_noise"])[::-1]
    factors = list(c["upsample_factor"])[::-1]
    timestep = c["timestep_conditioning"]
    top = dboc[0]
    mid = module(
        "mid_block",
        _ltx_time_embedder("time_embedder", top * 4) if timestep else None,
        sequence(
            "resnets",
            *(_ltx_resnet(str(j), top, top, noise[0], timestep) for j in range(dlayers[0])),
        ),
    )
    ups = []
    out = top
    for i in range(len(dboc)):
        cin, out = out // factors[i], dboc[i] // factors[i]
        ups.append(
            module(
                str(i),
                _ltx_time_embedder("time_embedder", out * 4) if timestep else None,
                _ltx_resnet("conv_in", cin, out, noise[i + 1], timestep) if cin != out else None,
                sequence("upsamplers", module("0", _causal("conv", out * factors[i], out * 8, K3)))
                if dscale[i]
                else None,
                sequence(
                    "resnets",
                    *(
                        _ltx_resnet(str(j), out, out, noise[i + 1], timestep)
                        for j in range(dlayers[i + 1])
                    ),
                ),
            )
        )
    decoder = module(
        "decoder",
        _causal("conv_in", c["latent_channels"], top, K3),
        mid,
        sequence("up_blocks", *ups),
        _causal("conv_out", out, c["out_channels"] * p * p, K3),
        param("timestep_scale_multiplier", 1) if timestep else None,
        _ltx_time_embedder("time_embedder", out * 2) if timestep else None,
        param("scale_shift_table", 2 * out) if timestep else None,
    )
    latent = c["latent_channels"]
    return module(
        "vae", encoder, decoder, buffer("latents_mean", latent), buffer("latents_std", latent)
    )


# --- AutoencoderKLMochi ------------------------------------------------------------------------


def _mochi_norm(name: str, ch: int) -> Part:
    """``MochiChunkedGroupNorm3D``: an affine ``nn.GroupNorm(32, ch)`` as ``norm_layer``."""
    return module(name, group_norm("norm_layer", ch))


def _mochi_resnet(name: str, ch: int) -> Part:
    """``MochiResnetBlock3D``: chunked group norms and causal 3x3x3 convolutions, no shortcut
    convolution (input and output widths are equal)."""
    return module(
        name,
        _mochi_norm("norm1", ch),
        _causal("conv1", ch, ch, K3),
        _mochi_norm("norm2", ch),
        _causal("conv2", ch, ch, K3),
    )


def _mochi_vae_attention(name: str, ch: int) -> Part:
    """``Attention(query_dim=ch, heads=ch // 32, dim_head=32, qk_norm="l2")``: bias-free q/k/v,
    a biased output projection, no norm parameters."""
    return module(
        name,
        linear("to_q", ch, ch, False),
        linear("to_k", ch, ch, False),
        linear("to_v", ch, ch, False),
        sequence("to_out", linear("0", ch, ch)),
    )


def _mochi_stage(name: str, ch: int, layers: int, attention: bool, *head: Part) -> Part:
    """``MochiMidBlock3D`` / ``MochiDownBlock3D``: ``layers`` resnets, each followed by a
    chunked norm and an attention when ``attention``; ``head`` is the down block's ``conv_in``."""
    return module(
        name,
        *head,
        sequence("resnets", *(_mochi_resnet(str(i), ch) for i in range(layers))),
        sequence("norms", *(_mochi_norm(str(i), ch) for i in range(layers if attention else 0))),
        sequence(
            "attentions",
            *(_mochi_vae_attention(str(i), ch) for i in range(layers if attention else 0)),
        ),
    )


def autoencoder_kl_mochi(c: Config) -> Part:
    """``autoencoders/autoencoder_kl_mochi.py`` ``AutoencoderKLMochi`` (``MochiEncoder3D``:
    Fourier features, ``proj_in``, down blocks of strided causal convolutions, resnets and
    frame-causal attention; ``MochiDecoder3D``: a 1x1x1 ``conv_in``, resnets and up blocks whose
    ``proj`` Linear expands to ``t x s x s`` times the next width before a depth-to-space
    reshape)."""
    enc, dec = list(c["encoder_block_out_channels"]), list(c["decoder_block_out_channels"])
    layers = list(c["layers_per_block"])
    t, s = list(c["temporal_expansions"]), list(c["spatial_expansions"])
    if math.prod(s) != 8 or math.prod(t) != 6 or c["latent_channels"] != 12:
        raise UnsupportedConfig(
            "spatialExpansions/temporalExpansions/latentChannels other than the published "
            "(2, 2, 2)/(1, 2, 3)/12: MochiPipeline sizes its latents with the literal scale "
            "factors 8 and 6 and denormalizes them as 12 channels (diffusers 0.42.1 "
            "pipeline_mochi.py), so such a VAE is not modelled"
        )
    attn = list(c["add_attention_block"])
    latent = c["latent_channels"]
    downs = [
        _mochi_stage(
            str(i),
            enc[i + 1],
            layers[i + 1],
            attn[i + 1],
            _causal("conv_in", enc[i], enc[i + 1], (t[i], s[i], s[i])),
        )
        for i in range(len(enc) - 1)
    ]
    encoder = module(
        "encoder",
        linear("proj_in", c["in_channels"], enc[0]),
        _mochi_stage("block_in", enc[0], layers[0], attn[0]),
        sequence("down_blocks", *downs),
        _mochi_stage("block_out", enc[-1], layers[-1], attn[-1]),
        _mochi_norm("norm_out", enc[-1]),
        linear("proj_out", enc[-1], 2 * latent, False),
    )
    ups = []
    for i in range(len(dec) - 1):
        cin, cout = dec[-i - 1], dec[-i - 2]
        te, se = t[-i - 1], s[-i - 1]
        ups.append(
            module(
                str(i),
                sequence("resnets", *(_mochi_resnet(str(j), cin) for j in range(layers[-i - 2]))),
                linear("proj", cin, cout * te * se * se),
            )
        )
    decoder = module(
        "decoder",
        conv("conv_in", latent, dec[-1], (1, 1, 1)),
        _mochi_stage("block_in", dec[-1], layers[-1], False),
        sequence("up_blocks", *ups),
        _mochi_stage("block_out", dec[0], layers[0], False),
        linear("proj_out", dec[0], c["out_channels"]),
    )
    return module("vae", encoder, decoder)
