"""The fixes a generation workload gets when it fits no allowed class: levers diffusers documents,
offered cheapest first in time per image, each re-estimated with the change applied.

The case the issue names is FLUX.1-dev in bfloat16 at 1024x1024 on a 24 GB card (RTX 4090): its
weights alone (31.4 GiB: T5 8.9, transformer 22.2) exceed the card. The published figures the
fixes rest on are the HF blog "Exploring Quantization Backends in Diffusers" (its FLUX.1-dev
bf16 and fp8-layerwise-casting memory figures are met in test_published_figures.py
``test_flux_dev_quantization_blog``; its timings, 12 s and 13 s) and the timings of the HF blog
"Exploring simple optimizations for SDXL" and diffusers PR #11682 that order them (see
``gpu_sizer.budget.diffusion.fixes``).
"""

from __future__ import annotations

from typing import Any

from tests.budget.diffusion.specs import pipeline_spec

from gpu_sizer.api import GPUWorkloadSpec
from gpu_sizer.budget import estimate
from gpu_sizer.budget.diffusion.fixes import generation_candidates
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.sizing.assessment import Fix, Verdict
from gpu_sizer.sizing.verdict import assess, fits

GIB = 1 << 30
FLUX_DEV = "black-forest-labs/FLUX.1-dev"
RTX_4090 = "nvidia-rtx-4090"


def _flux(**generation: Any) -> GPUWorkloadSpec:
    spec = pipeline_spec(FLUX_DEV, task="TextToImage", width=1024, height=1024, **generation)
    placement = spec.placement.model_copy(update={"gpu_classes": [RTX_4090]})
    return spec.model_copy(update={"placement": placement})


def _phrase(f: Fix) -> str:
    return f.text.split(" (")[0]


def _key(what: str) -> str:
    """A candidate's phrase without its figures; the float8 pair told apart."""
    return what.split(" (")[0] + (" +Model" if "with offload Model" in what else "")


def test_flux_dev_on_a_24gb_card_gets_working_fixes_cheapest_first() -> None:
    a = assess(_flux())
    assert a.verdict is Verdict.NoSafeHeadroom
    working = [_phrase(f) for f in a.fixes if f.fits]
    assert working == [
        "transformer dtype float8_e4m3fn",
        "offload Group",
        "offload Sequential",
    ], a.message
    # fp8 with model offload: the fp8 transformer (14.1 GiB with the bf16 norm-modulation
    # linears layerwise casting skips) is the largest model resident at once.
    first = next(f for f in a.fixes if f.fits)
    assert "with offload Model" in first.text
    alone = [_phrase(f) for f in a.fixes if not f.fits]
    assert alone[:3] == ["vaeTiling true", "transformer dtype float8_e4m3fn", "offload Model"]
    assert a.message.index("float8_e4m3fn (enable_layerwise_casting) with offload Model") < (
        a.message.index("offload Group")
    )
    assert a.message.index("offload Group") < a.message.index("offload Sequential")


def test_every_flux_fix_is_its_changed_spec_re_estimated() -> None:
    spec = _flux()
    a = assess(spec)
    rtx = next(g for g in DEFAULT_CATALOG if g.name == RTX_4090)
    by_text = {_key(f.text): f for f in a.fixes}
    for path, _value, changed, what in generation_candidates(spec):
        key = _key(what)
        if key not in by_text:
            continue  # a searched value that was not the one reported
        f = by_text[key]
        total = estimate(changed).per_gpu.total_bytes
        assert f.field == path
        assert f.required_bytes_per_gpu == total, what
        assert f.fits == fits(rtx, total, spec.placement.min_headroom_fraction), what


def test_flux_fixes_peaks_and_where_they_fall() -> None:
    """The fits, in GiB per GPU: fp8 + Model 15.2 (Denoise: the fp8 transformer), Group 9.7
    (TextEncode: T5EncoderModel's top-level children are ``shared`` and one ``encoder`` stack,
    neither a ModuleList, so block-level group offload onloads T5 whole; diffusers
    hooks/group_offloading.py ``_apply_group_offloading_block_level``), Sequential 2.2 (VaeDecode:
    the bf16 decoder's activations at 1024x1024)."""
    peaks = {}
    for mode, comps in [
        ({"offload": "Model"}, {"transformer": {"dtype": "float8_e4m3fn"}}),
        (
            {
                "offload": "Group",
                "groupOffload": {"offloadType": "BlockLevel", "useStream": True},
            },
            None,
        ),
        ({"offload": "Sequential"}, None),
    ]:
        spec = pipeline_spec(
            FLUX_DEV, components=comps, task="TextToImage", width=1024, height=1024, **mode
        )
        e = estimate(spec)
        peaks[mode["offload"]] = (e.peak_phase, round(e.per_gpu.total_bytes / GIB, 1))
    assert peaks == {
        "Model": ("Denoise", 15.2),
        "Group": ("TextEncode", 9.7),
        "Sequential": ("VaeDecode", 2.2),
    }


def test_batch_is_halved_largest_first_and_slicing_comes_first() -> None:
    """A batch that does not fit gets VAE slicing (free for batches) first, then the largest
    batch size that fits, not every halving."""
    spec = pipeline_spec(
        "stabilityai/stable-diffusion-xl-base-1.0",
        dtype="float16",
        task="TextToImage",
        width=1024,
        height=1024,
        batchSize=32,
    )
    spec = spec.model_copy(
        update={"placement": spec.placement.model_copy(update={"gpu_classes": ["nvidia-l4"]})}
    )
    a = assess(spec)
    assert a.verdict is Verdict.NoSafeHeadroom
    fields = [f.field.rsplit(".", 1)[-1] for f in a.fixes]
    assert fields[0] == "vaeSlicing"
    batches = [f for f in a.fixes if f.field.endswith("batchSize")]
    assert len(batches) == 1 and batches[0].fits
    bigger = batches[0].value * 2
    assert bigger <= 32
    changed = spec.model_copy(
        update={"generation": spec.generation.model_copy(update={"batch_size": bigger})}
    )
    l4 = next(g for g in DEFAULT_CATALOG if g.name == "nvidia-l4")
    assert not fits(l4, estimate(changed).per_gpu.total_bytes, spec.placement.min_headroom_fraction)


def test_no_float8_fix_for_a_denoiser_already_in_float8() -> None:
    spec = _flux()
    assert spec.model.pipeline is not None
    comps = [
        c.model_copy(update={"dtype": "float8_e4m3fn"}) if c.name == "transformer" else c
        for c in spec.model.pipeline.components
    ]
    pipeline = spec.model.pipeline.model_copy(update={"components": comps})
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"pipeline": pipeline})})
    assert not any("float8" in what for *_, what in generation_candidates(spec))
