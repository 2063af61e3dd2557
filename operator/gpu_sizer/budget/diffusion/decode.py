"""Activation bytes of a VAE decode (and of a VAE encode, for image-to-video). Pure.

The decoder runs at inference, so its peak is one stage's live set at that stage's resolution,
plus what the decode loop keeps (decoded chunks, feature caches). For each stage the live set is
read from the class's ``diffusers`` 0.42.1 source (elements of the given channel widths at that
stage's voxel count), with three recurring effects:

- a ResNet block holds its input while ``norm -> SiLU -> conv`` runs, and at the end the
  shortcut, the block output and their sum: ``Cin + max(2 Cin, Cin + Cout, 4 Cout)``;
- causal 3D convolutions copy their input to pad it in time (``F.pad`` in the Hunyuan, LTX and
  CogVideoX wrappers; ``torch.cat`` with the cached frames in Wan's ``WanCausalConv3d``): one
  more ``Cin`` while the convolution runs;
- up-sampling holds the input, the interpolated copy (two for Hunyuan's and CogVideoX's
  first-frame split and concatenation) and the convolution output at the new resolution.

Video decoders differ in how much of the video one decoder call sees, which is what makes the
VAE decode the peak of many video pipelines:

- ``AutoencoderKLWan._decode``: one latent frame per call with a two-frame feature cache per
  causal convolution; the output grows by ``torch.cat`` (old and new output together);
- ``AutoencoderKLCogVideoX._decode``: two latent frames per call (the first call also takes the
  odd remainder), with ``conv_cache``; outputs concatenated at the end;
- ``AutoencoderKLHunyuanVideo``: ``use_framewise_decoding`` is on by default: temporal tiles of
  ``tile_sample_min_num_frames`` (16) samples (5 latent frames) every 12 samples; every decoded
  tile is kept for blending. The mid-block attention builds a causal mask
  (``prepare_causal_attention_mask``) of ``tokens x tokens`` in the VAE dtype, through a
  boolean comparison and a float32 ``torch.where``: quadratic in the tile's latent tokens,
  which is why HunyuanVideo needs ``enable_tiling()``;
- ``AutoencoderKLLTXVideo``: the whole video in one call unless tiling is enabled;
- ``AutoencoderKL`` (images): the whole batch at once unless slicing (one image per call) or
  tiling.

``enable_tiling()`` (``vaeTiling``) decodes spatial tiles of each class's
``tile_sample_min_height/width`` (512 px for ``AutoencoderKL``; 256 for Wan and HunyuanVideo;
512 for LTX; half the configured sample size for CogVideoX) and keeps the decoded tiles of a row
for blending; ``enable_slicing()`` (``vaeSlicing``) decodes one batch element at a time.
``tests/budget/diffusion`` checks each class against PyTorch's CPU allocation trace of the real
decoder in float32 on small configs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpu_sizer.budget.diffusion.vaes import qwen_image_as_wan

__all__ = [
    "DecodeShape",
    "latent_geometry",
    "vae_decode_bytes",
    "vae_encode_bytes",
]

Config = Mapping[str, Any]


@dataclass(frozen=True)
class DecodeShape:
    """A decode: latent grid of ``batch`` samples, and the VAE's dtype and memory options.

    ``frames``, ``height`` and ``width`` are latent sizes; ``act_bytes`` the VAE dtype's bytes.
    """

    batch: int
    frames: int
    height: int
    width: int
    act_bytes: int
    tiling: bool = False
    slicing: bool = False


def latent_geometry(cls: str, c: Config) -> tuple[int, int, int]:
    """(spatial factor, temporal factor, latent channels) of a VAE class and config: pixels per
    latent cell per side, frames per latent frame after the first, channels of the latent."""
    if cls == "AutoencoderKL":
        return 2 ** (len(c["block_out_channels"]) - 1), 1, c["latent_channels"]
    if cls == "AutoencoderKLWan":
        return c["scale_factor_spatial"], c["scale_factor_temporal"], c["z_dim"]
    if cls == "AutoencoderKLQwenImage":
        return latent_geometry("AutoencoderKLWan", qwen_image_as_wan(c))
    if cls == "AutoencoderKLHunyuanVideo":
        return c["spatial_compression_ratio"], c["temporal_compression_ratio"], c["latent_channels"]
    if cls == "AutoencoderKLCogVideoX":
        spatial = 2 ** (len(c["block_out_channels"]) - 1)
        return spatial, int(c["temporal_compression_ratio"]), c["latent_channels"]
    if cls == "AutoencoderKLLTXVideo":
        scaled = sum(1 for s in c["spatio_temporal_scaling"] if s)
        return c["patch_size"] * 2**scaled, c["patch_size_t"] * 2**scaled, c["latent_channels"]
    if cls == "AutoencoderKLMochi":
        return (
            math.prod(c["spatial_expansions"]),
            math.prod(c["temporal_expansions"]),
            c["latent_channels"],
        )
    raise KeyError(cls)


#: Measured over modelled live set of the decoder chain, per class: the live tensors of the
#: published config's real ``diffusers`` decoder, run on PyTorch's meta device at full output
#: sizes with every operator's outputs tracked until they are freed
#: (``tests/budget/diffusion/live.py``), divided by :func:`_chain`'s count. They absorb what the
#: walk does not spell out: the latent's spatial-norm interpolations (CogVideoX), the
#: depth-to-space copies (LTX), the first-frame split copies. Kernel workspaces (cuDNN) are not
#: tensors and are not in them; docs/accuracy.md tracks the GPU check.
_CALIBRATION: Final[dict[str, float]] = {
    "AutoencoderKL": 1.0,
    "AutoencoderKLWan": 0.84,
    "AutoencoderKLQwenImage": 0.93,
    "AutoencoderKLHunyuanVideo": 0.88,
    "AutoencoderKLCogVideoX": 1.23,
    "AutoencoderKLLTXVideo": 1.46,
}
#: Decoded tiles of a row are all kept for blending before the row is cut and concatenated
#: (``tiled_decode``): about one more output's worth, plus the overlap.
_TILES_KEPT: Final = 1.5


def _resnet(cin: int, cout: int, pad: int) -> int:
    """Elements per voxel of a ResNet block (see the module docstring)."""
    return cin + max(
        2 * cin + pad * cin, cin + pad * cin + cout, 2 * cout + pad * cout + cout, 4 * cout
    )


def _conv_cache(channels: list[int], convs: int, frames: int, h: int, w: int) -> int:
    """Elements of the causal-convolution feature caches: ``frames`` frames of each
    convolution's input, ``convs`` convolutions per block; ``channels[0]`` (mid block) and
    ``channels[1]`` (first up block) at the latent grid, the grid doubling per later block."""
    total = 0
    for i, d in enumerate(channels):
        if i >= 2:
            h, w = h * 2, w * 2
        total += convs * frames * d * h * w
    return total


def _sample_frames(latent: int, temporal: int) -> int:
    return (latent - 1) * temporal + 1 if temporal > 1 else latent


def _tile(latent_h: int, latent_w: int, tile_latent: int, tiling: bool) -> tuple[int, int]:
    if not tiling:
        return latent_h, latent_w
    return min(latent_h, tile_latent), min(latent_w, tile_latent)


def _chain(
    channels: list[int],
    spatial_ups: list[bool],
    temporal_ups: list[bool],
    layers: int,
    pad: int,
    up_copies: int,
) -> Callable[[int, int, int], int]:
    """The live-set peak of a decoder's up path, as a function of (frames, height, width) at
    the latent resolution: ``channels[0]`` at the latent grid (conv_in, mid block), then for each
    up block ``i`` its ResNets into ``channels[i + 1]`` and, when flagged, an up-sampling."""

    def peak(frames: int, h: int, w: int) -> int:
        top = channels[0]
        best = _resnet(top, top, pad) * frames * h * w
        prev = top
        for i, out in enumerate(channels[1:]):
            vox = frames * h * w
            best = max(best, _resnet(prev, out, pad) * vox, _resnet(out, out, pad) * vox)
            prev = out
            if i < len(spatial_ups) and (spatial_ups[i] or temporal_ups[i]):
                nf = frames * 2 if temporal_ups[i] else frames
                nh, nw = (h * 2, w * 2) if spatial_ups[i] else (h, w)
                out_vox = nf * nh * nw
                best = max(best, out * vox + (up_copies + 1 + pad) * out * out_vox)
                frames, h, w = nf, nh, nw
        last = frames * h * w
        return max(best, 3 * channels[-1] * last)

    return peak


def _kl(c: Config, s: DecodeShape) -> int:
    """``AutoencoderKL`` (``vae.py`` ``Decoder``): 2D, no padding copies; mid-block attention
    over the latent pixels of each image through SDPA. ``force_upcast`` is the pipeline's
    business (it decides ``act_bytes``)."""
    boc = list(c["block_out_channels"])[::-1]
    n = len(boc)
    chain = _chain([boc[0], *boc], [True] * (n - 1), [False] * (n - 1), c["layers_per_block"], 0, 0)
    h, w = _tile(s.height, s.width, 512 // 2 ** (n - 1), s.tiling)
    batch = 1 if s.slicing or s.tiling else s.batch
    peak = _CALIBRATION["AutoencoderKL"] * batch * chain(1, h, w)
    if s.tiling:
        f = 2 ** (n - 1)
        peak += _TILES_KEPT * s.batch * 3 * (s.height * f) * (s.width * f)
    return int(peak * s.act_bytes)


def _wan(c: Config, s: DecodeShape) -> int:
    """``AutoencoderKLWan``: one latent frame per decoder call (four output frames after the
    first), a feature cache of two frames per causal convolution input, the output concatenated
    call by call. Wan 2.2's residual decoder (``is_residual``) keeps a copy of each up block's
    input for its ``DupUp3D`` shortcut."""
    mult = list(c["dim_mult"])
    base = c["decoder_base_dim"] or c["base_dim"]
    dims = [base * u for u in [mult[-1], *mult[::-1]]]
    ups = list(c["temperal_downsample"])[::-1]
    n = len(mult)
    spatial_ups = [True] * (n - 1)
    residual = c["is_residual"]
    chain = _chain(dims, spatial_ups, ups, c["num_res_blocks"], 1, 1)
    h, w = _tile(
        s.height,
        s.width,
        256 // (c["scale_factor_spatial"] // (2 if c["patch_size"] else 1)),
        s.tiling,
    )
    batch = 1 if s.slicing else s.batch
    step = chain(1, h, w) * (2 if residual else 1)
    cache = _conv_cache(dims, 2 * (c["num_res_blocks"] + 1), 2, h, w)
    out_frames = _sample_frames(s.frames, c["scale_factor_temporal"])
    fs = c["scale_factor_spatial"]
    output = 2 * 3 * out_frames * (s.height * fs) * (s.width * fs)
    return int(
        (batch * (_CALIBRATION["AutoencoderKLWan"] * step + cache) + s.batch * output) * s.act_bytes
    )


def _qwen_image(c: Config, s: DecodeShape) -> int:
    """``AutoencoderKLQwenImage``: Wan 2.1's decoder (``autoencoder_kl_qwenimage.py``
    ``QwenImageDecoder3d``, the same causal convolutions and feature cache), which
    ``QwenImagePipeline`` calls on one latent frame: that frame is the first chunk of
    ``_decode``'s loop, for which ``QwenImageResample``'s ``upsample3d`` skips its time
    convolution (no frame doubling) and each cache entry holds the one frame there is
    (``x[:, :, -min(CACHE_T, x.shape[2]):]``); the output is that one decoded frame and its
    ``torch.clamp`` copy."""
    w = qwen_image_as_wan(c)
    mult = list(w["dim_mult"])
    dims = [w["base_dim"] * u for u in [mult[-1], *mult[::-1]]]
    n = len(mult)
    chain = _chain(dims, [True] * (n - 1), [False] * (n - 1), w["num_res_blocks"], 1, 1)
    fs = w["scale_factor_spatial"]
    h, wd = _tile(s.height, s.width, 256 // fs, s.tiling)
    batch = 1 if s.slicing else s.batch
    cache = _conv_cache(dims, 2 * (w["num_res_blocks"] + 1), 1, h, wd)
    output = 2 * 3 * (s.height * fs) * (s.width * fs)
    live = _CALIBRATION["AutoencoderKLQwenImage"] * chain(1, h, wd)
    peak = batch * (live + cache) + s.batch * output
    if s.tiling:
        peak += _TILES_KEPT * s.batch * 3 * (s.height * fs) * (s.width * fs)
    return int(peak * s.act_bytes)


def _hunyuan(c: Config, s: DecodeShape) -> int:
    """``AutoencoderKLHunyuanVideo``: framewise temporal tiles (5 latent frames), spatial tiles
    of 32 latents with ``vaeTiling``; the causal mask of the mid-block attention costs
    ``tokens^2 x (1 + 4 + a)`` bytes while it is built."""
    boc = list(c["block_out_channels"])[::-1]
    n = len(boc)
    spatial = int(math.log2(c["spatial_compression_ratio"]))
    temporal = int(math.log2(c["temporal_compression_ratio"]))
    spatial_ups = [i < spatial for i in range(n - 1)]
    temporal_ups = [i >= n - 1 - temporal for i in range(n - 1)]
    chain = _chain([boc[0], *boc], spatial_ups, temporal_ups, c["layers_per_block"], 1, 2)
    frames = min(s.frames, 5)
    h, w = _tile(s.height, s.width, 32, s.tiling)
    batch = 1 if s.slicing else s.batch
    tokens = frames * h * w
    mask = tokens * tokens * (1 + 4 + s.act_bytes) if c["mid_block_add_attention"] else 0
    fs = c["spatial_compression_ratio"]
    out_frames = _sample_frames(s.frames, c["temporal_compression_ratio"])
    video = 3 * out_frames * (s.height * fs) * (s.width * fs)
    tiles = (16 + 1) / 12
    live = _CALIBRATION["AutoencoderKLHunyuanVideo"] * chain(frames, h, w)
    return int(batch * (live * s.act_bytes + mask) + s.batch * video * (1 + tiles) * s.act_bytes)


def _cogvideox(c: Config, s: DecodeShape) -> int:
    """``AutoencoderKLCogVideoX``: two latent frames per decoder call (three for the first when
    the count is odd), spatial norms conditioned on the latent, ``conv_cache`` of two frames per
    causal convolution, outputs concatenated at the end."""
    boc = list(c["block_out_channels"])[::-1]
    n = len(boc)
    level = int(math.log2(c["temporal_compression_ratio"]))
    chain = _chain(
        [boc[0], *boc],
        [True] * (n - 1),
        [i < level for i in range(n - 1)],
        c["layers_per_block"],
        1,
        2,
    )
    frames = 2 + (s.frames % 2) if s.frames > 1 else 1
    spatial = 2 ** (n - 1)
    h, w = _tile(s.height, s.width, 240 // spatial, s.tiling)
    batch = 1 if s.slicing else s.batch
    out_frames = _sample_frames(s.frames, int(c["temporal_compression_ratio"]))
    video = 3 * out_frames * (s.height * spatial) * (s.width * spatial)
    calls = 2 if s.frames > frames else 1  # a later call holds the previous call's cache too
    cache = calls * _conv_cache([boc[0], *boc], 2 * (c["layers_per_block"] + 1), 2, h, w)
    live = _CALIBRATION["AutoencoderKLCogVideoX"] * chain(frames, h, w)
    tiles = (
        _TILES_KEPT * 3 * out_frames * (s.height * spatial) * (s.width * spatial) if s.tiling else 0
    )
    return int((batch * (live + cache) + 2 * s.batch * video + tiles) * s.act_bytes)


def _ltx(c: Config, s: DecodeShape) -> int:
    """``AutoencoderKLLTXVideo``: the whole video per call (spatial tiles of 16 latents with
    ``vaeTiling``); up-sampling is a convolution to 8x the channels followed by a depth-to-space
    permutation copy; the output is unpatchified (a copy) from ``3 x patch^2`` channels."""
    dboc = list(c["decoder_block_out_channels"])[::-1]
    factors = list(c["upsample_factor"])[::-1]
    scale = list(c["decoder_spatio_temporal_scaling"])[::-1]
    channels = [dboc[0], *(b // f for b, f in zip(dboc, factors, strict=True))]
    chain = _chain(channels, scale, scale, 1, 1, 1)
    h, w = _tile(
        s.height, s.width, 512 // (c["patch_size"] * 2 ** sum(1 for x in scale if x)), s.tiling
    )
    batch = 1 if s.slicing else s.batch
    p = c["patch_size"]
    spatial, temporal, _ = latent_geometry("AutoencoderKLLTXVideo", c)
    out_frames = _sample_frames(s.frames, temporal)
    video = 3 * out_frames * (s.height * spatial) * (s.width * spatial)
    del p
    live = _CALIBRATION["AutoencoderKLLTXVideo"] * chain(s.frames, h, w)
    return int((batch * live + 2 * s.batch * video) * s.act_bytes)


def _mochi_stage(channels: int, frames: int, h: int, w: int) -> int:
    """Elements of a ``MochiResnetBlock3D`` causal convolution at ``channels`` over a
    ``frames x h x w`` grid: four tensors of the grid (the block input, held by the stage's
    loop, the chunked group norm's and SiLU's outputs, the convolution output), the
    replicate-padded copy (``F.pad``, one frame more before and one pixel each side: ``(frames +
    2) x (h + 2) x (w + 2)``), and ``CogVideoXSafeConv3d``'s split when the padded input is
    over its 2 "GB" (``numel * 2 / 1024**3 > 2``): ``torch.chunk`` into ``int(gb / 2) + 1``
    parts along time, every part after the first copied with the last ``kernel - 1`` (2)
    frames of the one before (``torch.cat``), and each part's output kept until the final
    ``torch.cat``: a second output's worth."""
    grid = frames * h * w
    padded_frames = frames + 2
    plane = (h + 2) * (w + 2)
    padded = channels * padded_frames * plane
    total = 4 * channels * grid + padded
    gb = padded * 2 / 1024**3
    if gb > 2:
        parts = int(gb / 2) + 1
        first = -(-padded_frames // parts)  # torch.chunk's part size
        copies = padded_frames - first + 2 * (math.ceil(padded_frames / first) - 1)
        total += channels * copies * plane + channels * grid
    return total


def _mochi_chain(c: Config, frames: int, h: int, w: int) -> int:
    """The largest live set of ``MochiDecoder3D`` over a latent grid: each stage's resnets at
    its width and resolution (:func:`_mochi_stage`), and each up block's ``proj``
    (``Linear(cin, cout * t * s * s)`` on a channels-last copy) and its depth-to-space
    ``contiguous`` copy, beside the block input."""
    dec = list(c["decoder_block_out_channels"])
    t, s = list(c["temporal_expansions"]), list(c["spatial_expansions"])
    best = _mochi_stage(dec[-1], frames, h, w)
    for i in range(len(dec) - 1):
        cin, cout = dec[-i - 1], dec[-i - 2]
        te, se = t[-i - 1], s[-i - 1]
        best = max(best, _mochi_stage(cin, frames, h, w))
        grid = frames * h * w
        expanded = cout * te * se * se * grid
        best = max(best, 2 * cin * grid + 2 * expanded)
        frames, h, w = frames * te, h * se, w * se
    return max(best, _mochi_stage(dec[0], frames, h, w))


def _mochi(c: Config, s: DecodeShape) -> int:
    """``AutoencoderKLMochi._decode``: the whole latent video in one decoder call (framewise
    decoding is off by default and only the private ``_enable_framewise_decoding`` turns it
    on), so the last stage runs ``128`` channels over every output frame before the first
    ``temporal_compression - 1`` are dropped (a view: the storage keeps them). With
    ``vaeTiling`` (``tiled_decode``) spatial tiles of ``tile_sample_min_height/width`` 256
    pixels (32 latents) every 192 (24 latents) are decoded whole in time, and every decoded
    tile is kept in ``rows`` until the blended rows are concatenated: about the output again
    with the overlaps, plus the blended rows and the final ``torch.cat``."""
    spatial, temporal, _ = latent_geometry("AutoencoderKLMochi", c)
    batch = 1 if s.slicing else s.batch
    full_frames = s.frames * temporal
    out_frames = _sample_frames(s.frames, temporal)
    video = 3 * out_frames * (s.height * spatial) * (s.width * spatial)
    tile, stride = 256 // spatial, 192 // spatial  # tile_sample_min/stride in latents
    if not s.tiling or (s.height <= tile and s.width <= tile):
        live = _mochi_chain(c, s.frames, s.height, s.width)
        return int(
            (batch * live + s.batch * (3 * full_frames * s.height * s.width * spatial**2))
            * s.act_bytes
        )
    tiles = 0
    for i in range(0, s.height, stride):
        for j in range(0, s.width, stride):
            th, tw = min(tile, s.height - i), min(tile, s.width - j)
            tiles += 3 * full_frames * th * tw * spatial**2
    live = _mochi_chain(c, s.frames, min(tile, s.height), min(tile, s.width))
    # one sample's tiles at a time with slicing (decode splits the batch before tiled_decode)
    return int((batch * (live + tiles) + 2 * s.batch * video) * s.act_bytes)


_DECODERS: dict[str, Callable[[Config, DecodeShape], int]] = {
    "AutoencoderKL": _kl,
    "AutoencoderKLWan": _wan,
    "AutoencoderKLQwenImage": _qwen_image,
    "AutoencoderKLHunyuanVideo": _hunyuan,
    "AutoencoderKLCogVideoX": _cogvideox,
    "AutoencoderKLLTXVideo": _ltx,
    "AutoencoderKLMochi": _mochi,
}


def vae_decode_bytes(cls: str, c: Config, shape: DecodeShape) -> int:
    """Peak transient bytes of ``vae.decode`` for ``shape`` (output included).

    :raises KeyError: ``cls`` is not a supported VAE class.
    """
    return int(_DECODERS[cls](c, shape))


def vae_encode_bytes(cls: str, c: Config, shape: DecodeShape) -> int:
    """Peak transient bytes of ``vae.encode`` of an input of the same sample size (the
    conditioning video of image-to-video pipelines, the input image of image-to-image).

    The encoder mirrors the decoder at the same resolutions with about the same widths, so the
    decoder's live set is taken for it.
    """
    return vae_decode_bytes(cls, c, shape)
