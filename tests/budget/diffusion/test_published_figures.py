"""The estimate against published peak-memory figures of diffusion pipelines.

Each test names its source, reproduces the published setting as a spec, and states the tolerance
and why. Where the figure comes from another implementation than diffusers (the HunyuanVideo and
Wan repositories' own scripts) the estimate, which models diffusers 0.42.1, is expected to differ,
and the test pins how much so that docs/accuracy.md and the model cannot drift apart. Figures
written "GB" by their authors are taken as 10^9 bytes unless the source prints GiB.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.budget.diffusion.specs import pipeline_spec

from gpu_sizer.api import EstimateStatus, parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

GIB = 1 << 30
GB = 10**9


def allocated(est: EstimateStatus) -> int:
    """What ``torch.cuda.max_memory_allocated()`` reports: the peak phase's weights,
    quantization metadata and activations, without the CUDA context, library workspaces and
    the caching allocator's reserve that ``total_bytes`` adds (those are outside the allocator's
    allocated count)."""
    p = est.per_gpu
    return p.weights_bytes + p.quantization_overhead_bytes + p.activation_bytes


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
    480P (832x480, 81 frames) video, the "peak GPU memory" of its computational-efficiency table
    (4090, ``--offload_model True --t5_cpu``: the DiT offloaded before the VAE decode, UMT5 on
    the CPU, the VAE in float32, ``WanVAE`` default).

    The peak is the float32 VAE decode: diffusers' ``AutoencoderKLWan`` is a port of the same
    ``WanVAE`` (one latent frame per decoder call, the same causal caches and ``torch.cat`` of
    the output), whose live tensors at this size are 7.6 GiB (checked against the real decoder
    in test_activations.py), plus its 0.47 GiB of float32 weights. The figure matches that as
    GiB of allocated memory (``max_memory_allocated() / 2**30``, the repository's own unit):
    the CUDA context and the allocator's reserve the estimate's total adds are not in it (the
    estimate's total, 9.6 GiB, is what a card must have). Tolerance 5%."""
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
    assert allocated(est) == pytest.approx(8.19 * GIB, rel=0.05)


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


SD3_MEDIUM = "stabilityai/stable-diffusion-3-medium-diffusers"


def _without(spec_repo: str, name: str, dtype: str, **generation: Any) -> Any:
    spec = pipeline_spec(spec_repo, dtype, **generation)
    assert spec.model.pipeline is not None
    comps = [c for c in spec.model.pipeline.components if c.name != name]
    pipeline = spec.model.pipeline.model_copy(update={"components": comps})
    return spec.model_copy(update={"model": spec.model.model_copy(update={"pipeline": pipeline})})


@pytest.mark.parametrize(
    ("offload", "t5", "published", "tolerance"),
    [("Model", True, 12.0645, 0.03), ("Model", False, 4.266, 0.05), ("None", True, 18.765, 0.10)],
    ids=["offloading", "offloading-no-t5", "default"],
)
def test_sd3_medium_blog_memory_table(
    offload: str, t5: bool, published: float, tolerance: float
) -> None:
    """huggingface.co/blog/sd3 (huggingface/blog sd3.md), "Summary of Memory Optimizations": SD3
    medium in float16 on an A100 80GB, the pipeline call's defaults (1024x1024, guidance 7.0:
    the negative prompt encoded and guidance batched, T5 ``max_sequence_length`` 256), "Memory
    (GB)": Default 18.765, Offloading (``enable_model_cpu_offload``) 12.0645, Offloading + no T5
    (``text_encoder_3=None``) 4.266. Read as ``max_memory_allocated() / 2**30`` (the blog's
    benchmark gist; the match below is at that unit).

    With model offload the peak is not one encoder alone: ``text_encoder`` (CLIP-L) is the first
    model of ``model_cpu_offload_seq``, so its hook offloads nothing and the negative prompt's
    CLIP passes run while T5-XXL is still on the GPU (10.75 GiB in float16, its ``wo``
    projections kept in float32 by transformers' ``_keep_in_fp32_modules``) next to CLIG-G
    (1.29 GiB). Without T5 the peak is the 2B transformer's denoising pass."""
    spec = (
        pipeline_spec(SD3_MEDIUM, "float16", offload=offload, **IMAGE_1024)
        if t5
        else _without(SD3_MEDIUM, "text_encoder_3", "float16", offload=offload, **IMAGE_1024)
    )
    est = estimate(spec)
    assert allocated(est) == pytest.approx(published * GIB, rel=tolerance)
    if offload == "Model" and t5:
        assert est.peak_phase == "TextEncode"


IMAGE_1024 = {"task": "TextToImage", "height": 1024, "width": 1024}
COG_VIDEO = {"task": "TextToVideo", "height": 480, "width": 720, "numFrames": 49}


def _cogvideox_2b(**generation: Any) -> Any:
    """THUDM/CogVideoX-2b: the CogVideoXTransformer3DModel defaults are its transformer (30
    layers of 30 heads x 64, sincos position embeddings), with CogVideoX's T5-XXL and VAE."""
    from tests.diffusers_configs import COGVIDEOX_VAE, T5_XXL, camel

    return parse_spec(
        {
            "model": {
                "name": "THUDM/CogVideoX-2b",
                "dtype": "float16",
                "pipeline": {
                    "class": "CogVideoXPipeline",
                    "components": [
                        {"name": "text_encoder", "class": "T5EncoderModel",
                         "config": camel(T5_XXL)},
                        {"name": "transformer", "class": "CogVideoXTransformer3DModel"},
                        {"name": "vae", "class": "AutoencoderKLCogVideoX",
                         "config": camel(COGVIDEOX_VAE)},
                    ],
                },
            },
            "generation": generation,
        }
    )  # fmt: skip


def test_cogvideox_2b_diffusers_docs_model_offload_and_tiling() -> None:
    """diffusers docs, api/pipelines/cogvideox.md, memory table: CogVideoX-2b in float16,
    720x480, 49 frames: "enable_tiling: 11GB (with enable_model_cpu_offload)" (the docs' replication
    gist prints ``max_memory_allocated() / 1024**3``). With the VAE tiled, the peak is the T5-XXL
    encode: in float16 transformers keeps T5's ``wo`` in float32, 10.75 GiB of weights.
    Tolerance 5%. (The table's untiled rows, 19 and 33 GB, were measured with the August 2024
    CogVideoX VAE before its frame-batched decode and are not used.)"""
    est = estimate(_cogvideox_2b(offload="Model", vaeTiling=True, **COG_VIDEO))
    assert est.peak_phase == "TextEncode"
    assert allocated(est) == pytest.approx(11 * GIB, rel=0.05)


def test_cogvideox_5b_readme_model_offload_and_tiling_is_two_models_at_once() -> None:
    """zai-org/CogVideo README at commit f047689 (2024-08-27) and the CogVideoX-5b model card of
    that week: "BF16: 26GB using SAT / 20.7GB* using diffusers", * = ``enable_model_cpu_offload()``
    and ``pipe.vae.enable_tiling()``, 720x480, 49 frames, guidance 6 (batched).

    Missed on purpose, pinned: 20.7 GB is the bfloat16 weights of T5-XXL (9.52 GB) and of the 5B
    transformer (11.14 GB) together, 20.66 GB. diffusers 0.42.1 never holds them together under
    model offload: the transformer's hook (prev_module_hook = text_encoder's) offloads T5
    before moving the transformer in, and the figure of diffusers' own docs for the 2B model in
    the same setting (11 GB, test above) is T5 alone. The estimate models 0.42.1: its peak is
    the transformer's pass with T5 gone, 69% of the README's figure (pinned at 62-72%)."""
    est = estimate(
        pipeline_spec("THUDM/CogVideoX-5b", offload="Model", vaeTiling=True, **COG_VIDEO)
    )
    denoise = next(p for p in est.phases or [] if p.name == "Denoise")
    assert denoise.resident == "transformer"
    assert 0.62 <= allocated(est) / (20.7 * GB) <= 0.72


def test_cogvideox_5b_without_fused_attention_allocates_the_logged_score_matrix() -> None:
    """zai-org/CogVideo#204: CogVideoX-5B in bfloat16 on a V100 32GB (no bfloat16 kernels for
    flash or memory-efficient SDPA there, so PyTorch takes its math path), model offload and VAE
    tiling: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 56.50 GiB." That
    allocation is one attention call's score matrix: 2 samples (batched guidance) x 48 heads x
    17,776 tokens (226 text + 13 x 30 x 45 video) squared x 2 bytes. The estimate's
    attentionBackend math holds that matrix and its softmax."""
    est = estimate(
        pipeline_spec(
            "THUDM/CogVideoX-5b",
            offload="Model",
            vaeTiling=True,
            attentionBackend="math",
            **COG_VIDEO,
        )
    )
    scores = 2 * 48 * (226 + 13 * 30 * 45) ** 2 * 2
    assert round(scores / GIB, 2) == 56.50
    denoise = next(p for p in est.phases or [] if p.name == "Denoise")
    assert denoise.activation_bytes >= 2 * scores
    assert denoise.activation_bytes < 2 * scores + 4 * GIB


WAN22 = "Wan-AI/Wan2.2-T2V-A14B-Diffusers"
WAN_720P = {"task": "TextToVideo", "height": 720, "width": 1280, "numFrames": 81}


def test_wan22_diffusers_without_offload_runs_out_of_memory_in_the_decode_on_80gb() -> None:
    """Wan-Video/Wan2.2#42: "the diffusers T2V 14B at 720*1280 OOMs on an A100-SXM-80GB, in the
    decode part" (the model card's recipe: ``pipe.to("cuda")``, the VAE in float32). Both experts
    stay resident (53.3 GiB) next to UMT5 and the VAE: the denoising passes fit an 80 GB card
    (79.2 GiB usable), the float32 decode at 1280x720x81 does not."""
    est = estimate(pipeline_spec(WAN22, components={"vae": {"dtype": "float32"}}, **WAN_720P))
    usable = 79.22 * GIB
    phases = {(p.name, p.running): p for p in est.phases or []}
    assert phases[("Denoise", "transformer")].total_bytes < usable
    assert phases[("Denoise", "transformer_2")].total_bytes < usable
    assert phases[("VaeDecode", "vae")].total_bytes > usable
    assert est.peak_phase == "VaeDecode"


def test_wan22_i2v_both_experts_resident_diffusers_issue() -> None:
    """huggingface/diffusers#12011 (Wan 2.2 A14B image-to-video OOM): a maintainer's A100 run of
    the PR's script, ``WanImageToVideoPipeline.from_pretrained("Wan-AI/Wan2.2-I2V-A14B-Diffusers",
    torch_dtype=bfloat16).to(device)``, 480x832 (max_area), 81 frames: "the VRAM its around
    72.9GB", the reporter 78.9GB. Both experts resident (Wan 2.2 I2V conditions on the VAE latents
    of the image, 36 input channels, no CLIP encoder; boundary_ratio 0.9). Tolerance 10% of the
    maintainer's figure (read as GB; the thread does not say how it was read)."""
    from tests.diffusers_configs import UMT5_XXL, WAN21_T2V_14B, WAN21_VAE, camel

    expert = camel({**WAN21_T2V_14B, "in_channels": 36})
    spec = parse_spec(
        {
            "model": {
                "name": "Wan-AI/Wan2.2-I2V-A14B-Diffusers",
                "dtype": "bfloat16",
                "pipeline": {
                    "class": "WanImageToVideoPipeline",
                    "config": {"boundaryRatio": 0.9},
                    "components": [
                        {"name": "text_encoder", "class": "UMT5EncoderModel",
                         "config": camel(UMT5_XXL)},
                        {"name": "transformer", "class": "WanTransformer3DModel", "config": expert},
                        {"name": "transformer_2", "class": "WanTransformer3DModel",
                         "config": expert},
                        {"name": "vae", "class": "AutoencoderKLWan", "config": camel(WAN21_VAE)},
                    ],
                },
            },
            "generation": {"task": "ImageToVideo", "height": 480, "width": 832, "numFrames": 81},
        }
    )  # fmt: skip
    est = estimate(spec)
    assert est.per_gpu.total_bytes == pytest.approx(72.9 * GB, rel=0.10)


@pytest.mark.parametrize(("height", "width", "published"), [(720, 1280, 59.8), (480, 832, 41.3)])
def test_wan22_readme_table_bounds_model_offload(height: int, width: int, published: float) -> None:
    """Wan-Video/Wan2.2 README, "Computational Efficiency" table (assets/comp_effic.png):
    T2V-A14B on one GPU (A100/H100/H20), ``--offload_model True --convert_model_dtype``: peak
    59.8 GB at 720P, 41.3 GB at 480P; the README says the 720P command "can run on a GPU with at
    least 80GB VRAM".

    The authors' ``generate.py`` keeps one expert on the GPU at a time, as
    ``enable_model_cpu_offload`` does, but its ``WanModel.forward`` expands the timestep to
    every token and builds the modulation in float32 per token (``e0``: ``[B, L, 6, dim]``;
    another ``[B, L, 6, dim]`` float32 sum in every block) and keeps the residual stream in
    float32: 19.4 GB at 720P (L = 75,600), 8.4 GB at 480P (L = 32,760). diffusers' port passes
    one timestep per sample for A14B, so diffusers alone would come out at 62-79% of the table,
    and no diffusers measurement of this setting is published. Fail safe, the estimate counts
    the reference code's margin (gpu_sizer.budget.diffusion.bounds): its allocated peak is
    within 7% of the table and its total (with the CUDA context and the allocator's reserve)
    covers it."""
    spec = pipeline_spec(
        WAN22,
        components={"vae": {"dtype": "float32"}},
        offload="Model",
        task="TextToVideo",
        height=height,
        width=width,
        numFrames=81,
    )
    est = estimate(spec)
    assert allocated(est) == pytest.approx(published * GB, rel=0.07)
    assert est.per_gpu.total_bytes >= published * GB
    assert est.peak_phase == "Denoise"
    assert any(n.startswith("upper bound: each Wan 2.2 expert") for n in est.notes or [])


FORTY_EIGHT_GB = [c for c in DEFAULT_CATALOG if 40 * GIB < c.memory_bytes < 50 * GIB]


@pytest.mark.parametrize("mode", ["None", "Model"])
def test_wan22_a14b_at_720p_fits_no_48gb_card_where_the_authors_say_80gb(mode: str) -> None:
    """The Wan 2.2 README: the A14B 720P command, with or without ``--offload_model``, "can run
    on a GPU with at least 80GB VRAM" (measured 59.8 GB with offload). Without offload diffusers
    keeps both experts (Wan-Video/Wan2.2#42: out of memory on 80 GB); with model offload one
    expert and the bound above. Neither fits any 48 GB class of the catalog (RTX A6000, L40S)."""
    assert len(FORTY_EIGHT_GB) >= 2
    kw = {} if mode == "None" else {"offload": mode}
    spec = pipeline_spec(WAN22, components={"vae": {"dtype": "float32"}}, **WAN_720P, **kw)
    a = assess(spec, FORTY_EIGHT_GB)
    assert a.verdict is Verdict.NoSafeHeadroom, a.message
    assert all(a.estimate.per_gpu.total_bytes > c.usable for c in FORTY_EIGHT_GB)


@pytest.mark.parametrize("mode", ["Group", "Sequential"])
def test_wan22_a14b_streamed_offload_is_outside_the_authors_statement(mode: str) -> None:
    """Group and sequential offload have no counterpart in the authors' code (it moves whole
    models), so their 80 GB does not bound them: diffusers streams the running expert's weights
    block by block and the peak is the activations, the float32 VAE decode at 1280x720x81, whose
    model is checked against Wan 2.1's published 8.19 GB (same VAE, above). These fit a 48 GB
    card with neither expert resident."""
    spec = pipeline_spec(WAN22, components={"vae": {"dtype": "float32"}}, offload=mode, **WAN_720P)
    a = assess(spec, FORTY_EIGHT_GB)
    assert a.verdict is Verdict.Fits, a.message
    assert a.estimate.per_gpu.weights_bytes < 1 * GIB
    assert a.estimate.peak_phase == "VaeDecode"
