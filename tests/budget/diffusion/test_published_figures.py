"""The estimate against published peak-memory figures of diffusion pipelines.

Each test names its source, reproduces the published setting as a spec, and states the tolerance
and why. Where the figure comes from another implementation than diffusers (the HunyuanVideo and
Wan repositories' own scripts) the estimate, which models diffusers 0.42.1, is expected to differ,
and the test pins how much so that docs/accuracy.md and the model cannot drift apart. Figures
written "GB" by their authors are taken as 10^9 bytes unless the source prints GiB.
"""

from __future__ import annotations

import pytest
from tests.budget.diffusion.specs import pipeline_spec

from gpu_sizer.budget import estimate

GIB = 1 << 30
GB = 10**9

SEQ_FP16 = {"offload": "Sequential", "dtype": "float16"}
HUNYUAN_README = {"text_encoder": SEQ_FP16, "text_encoder_2": SEQ_FP16, "vae": SEQ_FP16}


@pytest.mark.parametrize(("height", "width", "published"), [(720, 1280, 60), (544, 960, 45)])
def test_hunyuan_video_readme(height: int, width: int, published: int) -> None:
    """github.com/Tencent/HunyuanVideo README, "Requirements": 720px1280px129f needs 60GB, and
    544px960px129f 45GB, on one GPU, run by ``sample_video.py --use-cpu-offload`` (its
    ``hyvideo/inference.py``: ``enable_sequential_cpu_offload()`` with the transformer in
    ``_exclude_from_cpu_offload``; VAE tiling on and the VAE and text encoders in fp16 by
    default; guidance embedded, no unconditional pass).

    Missed on purpose: the estimate models diffusers' port, whose transformer forward holds
    about 70-78% of what the original ``hyvideo`` code does (the original runs the denoiser under
    ``torch.autocast``, whose float32 layer-norm outputs and bf16 recasts the port does not
    make). Pinned band: 65-85% of the published figure.
    """
    spec = pipeline_spec(
        "hunyuanvideo-community/HunyuanVideo",
        components=HUNYUAN_README,
        task="TextToVideo",
        height=height,
        width=width,
        numFrames=129,
        classifierFreeGuidance=False,
        vaeTiling=True,
    )
    est = estimate(spec)
    assert est.peak_phase == "Denoise"
    ratio = est.per_gpu.total_bytes / (published * GB)
    assert 0.65 <= ratio <= 0.85, ratio


def test_wan21_readme_1_3b_on_a_consumer_gpu() -> None:
    """github.com/Wan-Video/Wan2.1 README: "The T2V-1.3B model requires only 8.19 GB VRAM" for a
    480P (832x480, 81 frames) video, with ``--offload_model True --t5_cpu`` (the DiT offloaded
    before the VAE decode; UMT5 on the CPU; the VAE in float32, ``WanVAE`` default).

    Missed: the estimate's peak is the float32 VAE decode, whose live tensors in diffusers'
    ``AutoencoderKLWan`` (a port of the same ``WanVAE``) are 7.6 GiB at this size
    (tests/budget/diffusion/test_activations.py checks that figure against the real decoder);
    with the VAE's weights and the CUDA context that is above the published 8.19 GB. Pinned:
    the estimate is 25-45% over the figure.
    """
    spec = pipeline_spec(
        "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
        components={"text_encoder": {"device": "Cpu"}, "vae": {"dtype": "float32"}},
        task="TextToVideo",
        height=480,
        width=832,
        numFrames=81,
        offload="Model",
    )
    est = estimate(spec)
    assert est.peak_phase == "VaeDecode"
    ratio = est.per_gpu.total_bytes / (8.19 * GB)
    assert 1.25 <= ratio <= 1.45, ratio


def test_wan21_14b_diffusers_docs_group_offload() -> None:
    """diffusers docs, api/pipelines/wan.md: "The Wan2.1 text-to-video model below requires
    ~13GB of VRAM": UMT5 with ``apply_group_offloading(block_level, num_blocks_per_group=4)``, the
    transformer with ``enable_group_offload(leaf_level, use_stream=True)``, the VAE in float32
    on the GPU, default 832x480 and 81 frames. Block-level grouping finds no ``ModuleList`` at
    the top of ``UMT5EncoderModel`` (``shared``, ``encoder``), so the whole encoder is one
    group: the peak is the text encoding. Tolerance 15% ("~13GB")."""
    spec = pipeline_spec(
        "Wan-AI/Wan2.1-T2V-14B-Diffusers",
        components={
            "text_encoder": {"offload": "Group", "groupOffload": {"numBlocksPerGroup": 4}},
            "transformer": {
                "offload": "Group",
                "groupOffload": {"offloadType": "LeafLevel", "useStream": True},
            },
            "vae": {"dtype": "float32"},
        },
        task="TextToVideo",
        height=480,
        width=832,
        numFrames=81,
    )
    est = estimate(spec)
    assert est.peak_phase == "TextEncode"
    assert est.per_gpu.total_bytes == pytest.approx(13 * GB, rel=0.15)


def test_ltx_video_diffusers_docs_group_offload() -> None:
    """diffusers docs, api/pipelines/ltx_video.md: "The LTX-Video model below requires ~10GB of
    VRAM": the transformer stored in float8 (``enable_layerwise_casting``) with leaf-level group
    offload and streams, T5 with block-level groups of 2, the VAE with leaf-level groups;
    768x512, 161 frames. Tolerance 15%."""
    spec = pipeline_spec(
        "Lightricks/LTX-Video",
        components={
            "transformer": {
                "dtype": "float8_e4m3fn",
                "offload": "Group",
                "groupOffload": {"offloadType": "LeafLevel", "useStream": True},
            },
            "text_encoder": {"offload": "Group", "groupOffload": {"numBlocksPerGroup": 2}},
            "vae": {"offload": "Group", "groupOffload": {"offloadType": "LeafLevel"}},
        },
        task="TextToVideo",
        height=512,
        width=768,
        numFrames=161,
    )
    assert estimate(spec).per_gpu.total_bytes == pytest.approx(10 * GB, rel=0.15)


def test_cogvideox_5b_readme_minimum() -> None:
    """github.com/THUDM/CogVideo README, model table: CogVideoX-5B "diffusers BF16: from 5GB*",
    the asterisk: with ``pipe.enable_sequential_cpu_offload()``, ``pipe.vae.enable_slicing()``
    and ``pipe.vae.enable_tiling()``; 720x480, 49 frames, guidance batched. Tolerance 25%: a
    "from" figure, rounded to whole GB."""
    spec = pipeline_spec(
        "THUDM/CogVideoX-5b",
        task="TextToVideo",
        height=480,
        width=720,
        numFrames=49,
        offload="Sequential",
        vaeSlicing=True,
        vaeTiling=True,
    )
    assert estimate(spec).per_gpu.total_bytes == pytest.approx(5 * GB, rel=0.25)


SDXL = {"task": "TextToImage", "height": 1024, "width": 1024, "batchSize": 4}


@pytest.mark.parametrize(
    ("dtype", "changes", "published"),
    [("float16", {}, 21.72), ("float32", {"attentionBackend": "math"}, 28.09)],
    ids=["fp16-sdpa", "fp32-unoptimized"],
)
def test_sdxl_blog(dtype: str, changes: dict[str, str], published: float) -> None:
    """huggingface.co/blog/simple_sdxl_optimizations (A100 40GB, four 1024x1024 images per
    call): "fp16 + SDPA (default)" 21.72 and "unoptimized pipeline" (fp32,
    ``set_default_attn_processor``: the score matrix materialised) 28.09, in the post's "GB"
    printed from ``max_memory_allocated() / 1024**3`` (GiB). Tolerance 10%.

    The post's offload and slicing rows are not tested: they disagree among themselves (VAE
    slicing with sequential offload reports 11.47, more than slicing alone, 15.40, minus the 6.9
    GiB of weights sequential offload removes) and the estimate stays 30-65% under them
    (docs/accuracy.md)."""
    spec = pipeline_spec("stabilityai/stable-diffusion-xl-base-1.0", dtype, **SDXL, **changes)
    assert estimate(spec).per_gpu.total_bytes == pytest.approx(published * GIB, rel=0.10)


FLUX_1024 = {"task": "TextToImage", "height": 1024, "width": 1024, "classifierFreeGuidance": False}


@pytest.mark.parametrize(
    ("transformer", "loaded", "peak"),
    [({}, 31.447, 36.166), ({"dtype": "float8_e4m3fn"}, 23.682, 28.451)],
    ids=["bf16", "fp8-layerwise-casting"],
)
def test_flux_dev_quantization_blog(
    transformer: dict[str, str], loaded: float, peak: float
) -> None:
    """huggingface.co/blog/diffusers-quantization (huggingface/blog ``diffusers-quantization.md``,
    one H100 80GB): FLUX.1-dev with ``pipe.to("cuda")``, 1024x1024, guidance 3.5 (distilled: no
    unconditional pass), ``max_sequence_length`` 512, printed from
    ``torch.cuda.max_memory_reserved() / 1024**3`` (GiB, reserved by the caching allocator).
    BF16: "Memory after loading ~31.447 GB", "Peak memory 36.166 GB". FP8 layerwise casting of
    the transformer (``enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn,
    compute_dtype=torch.bfloat16)``): 23.682 and 28.451; the norms' modulation Linears stay in
    bfloat16 (the "norm" skip pattern), 3.2 B of the 11.9 B parameters.

    Weights: every component resident, 2% tolerance. Peak: the estimate counts live tensors,
    the figure is what the allocator reserved (blocks rounded up, freed blocks kept cached);
    tolerance 12% below, none above."""
    spec = pipeline_spec(
        "black-forest-labs/FLUX.1-dev", components={"transformer": transformer}, **FLUX_1024
    )
    est = estimate(spec)
    weights = max(p.weights_bytes for p in est.phases or [])
    assert weights == pytest.approx(loaded * GIB, rel=0.02)
    assert 0.88 <= est.per_gpu.total_bytes / (peak * GIB) <= 1.0


def test_wan21_1_3b_diffusers_docs_model_offload() -> None:
    """diffusers docs v0.33, api/pipelines/wan.md, "Text to Video Generation": "The following
    example requires 11GB VRAM to run" for Wan-AI/Wan2.1-T2V-1.3B-Diffusers loaded in bfloat16
    with ``pipe.enable_model_cpu_offload()`` (default 832x480, 81 frames). Under model offload
    one model is on the GPU at a time, and the largest is the UMT5-XXL encoder (5.68 B
    parameters, 10.6 GiB in bf16): the peak is the text encoding. Tolerance 10% ("11GB")."""
    spec = pipeline_spec(
        "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
        task="TextToVideo",
        height=480,
        width=832,
        numFrames=81,
        offload="Model",
    )
    est = estimate(spec)
    assert est.peak_phase == "TextEncode"
    assert est.per_gpu.total_bytes == pytest.approx(11 * GB, rel=0.10)
