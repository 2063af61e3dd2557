"""Qwen-Image (``QwenImagePipeline``, diffusers 0.42.1) end to end: its components' counts and
refusals, the activation models against the live tensors of the real forwards on the meta
device, the pipeline facts read from the library, and the estimate of the published Hub folder.

Tolerances as in test_activations.py: 10% for the denoiser, 15% for the VAE decode; the text
encoder's live set is counted exactly. The oracle leaves the models' own parameters out
(``live_peak_bytes(exclude=...)``): on the meta device ``F.linear`` returns ``weight.t()``, a
view of the weight's storage, which would otherwise count one weight matrix as an activation.
"""

from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests import diffusers_configs as published
from tests.budget.diffusion.conftest import build_on_meta, diffusers, torch
from tests.budget.diffusion.live import fused_attention, live_peak_bytes
from tests.budget.diffusion.specs import pipeline_spec

from gpu_sizer.api import Architecture, InvalidWorkload, parse_spec
from gpu_sizer.api.components import config_problems, resolved_config
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.budget import estimate
from gpu_sizer.budget.diffusion import generation_estimate
from gpu_sizer.budget.diffusion.decode import DecodeShape, vae_decode_bytes
from gpu_sizer.budget.diffusion.denoise import DenoiseShape, denoiser_forward_bytes
from gpu_sizer.budget.diffusion.parts import parameter_count
from gpu_sizer.budget.diffusion.pipelines import PIPELINES, Guidance
from gpu_sizer.budget.diffusion.registry import KINDS
from gpu_sizer.budget.diffusion.text_encoders import encoder_forward_bytes
from gpu_sizer.budget.params import parameter_count as llm_parameter_count
from gpu_sizer.cli import main

META = torch.device("meta")
BF16 = torch.bfloat16
REPO = "Qwen/Qwen-Image"
HUB = Path(__file__).resolve().parent / "hub" / "Qwen--Qwen-Image"
DIT, VAE, TE = (
    "QwenImageTransformer2DModel",
    "AutoencoderKLQwenImage",
    ("Qwen2_5_VLForConditionalGeneration"),
)


def _m(*shape: int, dtype: Any = BF16) -> Any:
    return torch.empty(*shape, device=META, dtype=dtype)


def _tree(cls: str, config: dict[str, Any]) -> Any:
    return KINDS[cls].build(resolved_config(cls, published.camel(config)))


def _peak(model: Any, call: Any) -> int:
    with torch.no_grad(), fused_attention():
        return live_peak_bytes(lambda: call(model), exclude=[*model.parameters(), *model.buffers()])


def _nested(**changes: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(published.QWEN2_5_VL_7B)
    for key, inner in changes.items():
        config[key] = {**config[key], **inner}
    return config


# --- counts ----------------------------------------------------------------------------------

#: Variants the published configs do not exercise (counted in test_components.py).
VARIANTS = [
    (TE, _nested() | {"tie_word_embeddings": True}),
    (TE, _nested(vision_config={"depth": 0, "spatial_merge_size": 1})),
    (TE, _nested(text_config={"num_key_value_heads": None})),
    (DIT, {**published.QWEN_IMAGE, "use_additional_t_cond": True, "out_channels": None}),
    (DIT, {**published.QWEN_IMAGE, "num_layers": 0, "zero_cond_t": True}),
    (VAE, {**published.QWEN_IMAGE_VAE, "base_dim": 64, "dim_mult": [1, 2, 2],
           "temperal_downsample": [True, False], "input_channels": 4}),
]  # fmt: skip


def test_the_text_encoder_counts_as_the_llm_side_counts_qwen2_5_vl_7b() -> None:
    """Qwen-Image's text encoder is Qwen2.5-VL-7B-Instruct whole: the diffusion module tree and
    the LLM-serving count of that checkpoint's config.json (budget.params with budget.vision,
    tests/budget/configs) agree, vision tower and lm_head included."""
    doc = json.loads(
        (Path(__file__).parents[1] / "configs/qwen2.5-vl-7b-instruct.json").read_text()
    )
    arch = Architecture.model_validate(model_from_hf_config(doc)["architecture"])
    assert parameter_count(_tree(TE, published.QWEN2_5_VL_7B)) == llm_parameter_count(arch)


def test_a_flat_qwen2_5_vl_config_is_read_as_transformers_reads_it() -> None:
    """Qwen2.5-VL-7B-Instruct's own config.json is flat (no text_config): transformers moves
    its text keys into text_config (Qwen2_5_VLConfig.__post_init__), so the library's model of
    it, and gpu-sizer's count, are the 7B model's, not text_config's 72B defaults; and that
    flat file given as a component counts what Qwen-Image's nested text_encoder config does."""
    doc = json.loads(
        (Path(__file__).parents[1] / "configs/qwen2.5-vl-7b-instruct.json").read_text()
    )
    flat = {k: v for k, v in doc.items() if not k.startswith("_")}
    assert "text_config" not in flat
    model = build_on_meta(TE, flat)
    ours = parameter_count(_tree(TE, flat))
    assert ours == sum(p.numel() for p in model.parameters())
    assert ours == parameter_count(_tree(TE, published.QWEN2_5_VL_7B)) < 9 * 10**9
    problems = config_problems(TE, published.camel({**flat, "num_attention_heads": 5}))
    assert problems and all(key.startswith("textConfig.") for key, _ in problems), problems


# --- refusals --------------------------------------------------------------------------------

REFUSED = [
    (DIT, {"guidanceEmbeds": True}, "guidanceEmbeds"),
    (DIT, {"useAdditionalTCond": True}, "useAdditionalTCond"),
    (DIT, {"axesDimsRope": [16, 56, 48]}, "attentionHeadDim"),
    (DIT, {"axesDimsRope": [16, 56]}, "axesDimsRope"),
    (VAE, {"temperalDownsample": [False, True]}, "temperalDownsample"),
    (TE, {"textConfig": {"numAttentionHeads": 12}}, "textConfig.hiddenSize"),
    (TE, {"textConfig": {"numKeyValueHeads": 3}}, "textConfig.numKeyValueHeads"),
    (TE, {"visionConfig": {"numHeads": 3}}, "visionConfig.hiddenSize"),
    (TE, {"textConfig": {"numAttentionHeads": 56, "numKeyValueHeads": 8}},
     "textConfig.numAttentionHeads"),
]  # fmt: skip


@pytest.mark.parametrize(("cls", "change", "key"), REFUSED)
def test_configs_the_pipeline_cannot_run_are_refused_at_their_key(
    cls: str, change: dict[str, Any], key: str
) -> None:
    base = published.camel(
        {DIT: published.QWEN_IMAGE, VAE: published.QWEN_IMAGE_VAE, TE: published.QWEN2_5_VL_7B}[cls]
    )
    config = {k: {**base[k], **v} if isinstance(v, dict) else v for k, v in change.items()}
    assert config_problems(cls, base) == []
    assert [k for k, _ in config_problems(cls, {**base, **config})] == [key]


def test_a_text_head_the_default_mrope_section_does_not_split_really_fails() -> None:
    """Oracle for the head-128 refusal: the library's Qwen2.5-VL with a 64-wide text head (56
    heads over 3584) and the config's default mrope_section fails at its first forward."""
    config = _nested(
        text_config={"num_hidden_layers": 1, "num_attention_heads": 56, "num_key_value_heads": 8},
        vision_config={"depth": 1},
    )
    model = build_on_meta(TE, config, BF16)
    ids = torch.zeros(1, 8, dtype=torch.long, device=META)
    with torch.no_grad(), pytest.raises(RuntimeError, match="split"):
        model(input_ids=ids)


def test_guidance_embeds_really_fails_at_the_first_step() -> None:
    """Oracle for the guidanceEmbeds refusal: the library's forward, given a guidance as
    QwenImagePipeline passes it when the config says guidance_embeds, raises a TypeError."""
    config = {**published.QWEN_IMAGE, "num_layers": 1, "guidance_embeds": True}
    model = build_on_meta(DIT, config, BF16)
    with torch.no_grad(), pytest.raises(TypeError):
        model(hidden_states=_m(1, 16, 64), encoder_hidden_states=_m(1, 8, 3584),
              timestep=torch.tensor([0.5], device=META), img_shapes=[[(1, 4, 4)]],
              guidance=torch.tensor([4.0], device=META))  # fmt: skip


# --- activations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latent", "text", "batch"),
    [((128, 128), 512, 1), ((64, 64), 512, 1), ((32, 32), 1024, 1), ((166, 96), 300, 1),
     ((128, 128), 40, 2)],
)  # fmt: skip
def test_denoiser_forward(latent: tuple[int, int], text: int, batch: int) -> None:
    """Two of the 60 dual-stream blocks (the loop frees the previous block's) at the latent
    grids of 1024x1024, 512x512, 256x256 with the longest prompt, 1328x768 and a batch of two;
    tokens are the pipeline's 2x2-packed latents."""
    config = {**published.QWEN_IMAGE, "num_layers": 2}
    model = build_on_meta(DIT, config, BF16)
    lh, lw = latent
    n = (lh // 2) * (lw // 2)
    inputs = {"hidden_states": _m(batch, n, 64), "encoder_hidden_states": _m(batch, text, 3584),
              "timestep": torch.tensor([0.5] * batch, device=META),
              "img_shapes": [[(1, lh // 2, lw // 2)]] * batch, "return_dict": False}  # fmt: skip
    measured = _peak(model, lambda m: m(**inputs))
    shape = DenoiseShape(batch, 1, lh, lw, text, 2)
    modelled = denoiser_forward_bytes(DIT, resolved_config(DIT, published.camel(config)), shape)
    assert modelled == pytest.approx(measured, rel=0.10), (modelled, measured)


def test_a_per_token_modulation_is_not_sized() -> None:
    config = resolved_config(DIT, published.camel({**published.QWEN_IMAGE, "zero_cond_t": True}))
    with pytest.raises(ValueError, match="zeroCondT"):
        denoiser_forward_bytes(DIT, config, DenoiseShape(1, 1, 128, 128, 512, 2))


@pytest.mark.parametrize(
    ("latent", "tiling"), [((128, 128), False), ((64, 96), False), ((128, 128), True)]
)
def test_vae_decode_of_one_frame(latent: tuple[int, int], tiling: bool) -> None:
    """``vae.decode`` of the one-frame latent QwenImagePipeline unpacks ([B, 16, 1, h, w])."""
    model = build_on_meta(VAE, published.QWEN_IMAGE_VAE, BF16)
    if tiling:
        model.enable_tiling()
    z = _m(1, 16, 1, *latent)
    measured = _peak(model, lambda m: m.decode(z))
    shape = DecodeShape(1, 1, *latent, 2, tiling, False)
    config = resolved_config(VAE, published.camel(published.QWEN_IMAGE_VAE))
    modelled = vae_decode_bytes(VAE, config, shape)
    assert modelled == pytest.approx(measured, rel=0.15), (modelled, measured)


@pytest.mark.parametrize(
    ("layers", "vocab", "tokens", "batch"),
    [(2, 152064, 1058, 1), (28, 152064, 1058, 1), (4, 152064, 300, 2), (3, 1024, 500, 1)],
)
def test_text_encoder_forward(layers: int, vocab: int, tokens: int, batch: int) -> None:
    """The forward QwenImagePipeline._get_qwen_prompt_embeds runs (``output_hidden_states``,
    the config's ``use_cache``, logits over every token), at the template plus the longest
    prompt (34 + 1024 tokens), for all 28 layers and for a small vocabulary whose peak is the
    last layer's MLP instead of the logits. Without a padding mask, as a batch of one prompt
    runs (SDPA skips the all-ones mask)."""
    config = _nested(
        text_config={"num_hidden_layers": layers, "vocab_size": vocab}, vision_config={"depth": 1}
    )
    model = build_on_meta(TE, config, BF16)
    ids = torch.zeros(batch, tokens, dtype=torch.long, device=META)
    measured = _peak(model, lambda m: m(input_ids=ids, output_hidden_states=True))
    resolved = resolved_config(TE, published.camel(config))
    assert encoder_forward_bytes(TE, resolved, batch, tokens, 2) == measured


# --- the pipeline ----------------------------------------------------------------------------


def test_pipeline_facts_are_the_librarys() -> None:
    """QwenImagePipeline 0.42.1: the template's 34 tokens are dropped after encoding up to
    tokenizer_max_length 1024 prompt tokens; the denoiser sees max_sequence_length (512 by
    default); true CFG calls the transformer a second time (``neg_noise_pred``); the call's
    default size is default_sample_size x vae_scale_factor."""
    cls = diffusers.QwenImagePipeline
    pipe = cls(scheduler=None, vae=None, text_encoder=None, tokenizer=None, transformer=None)
    kind = PIPELINES["QwenImagePipeline"]
    assert kind.template_tokens == {"text_encoder": pipe.prompt_template_encode_start_idx}
    assert kind.text_tokens == {"text_encoder": pipe.tokenizer_max_length}
    call = inspect.signature(cls.__call__).parameters
    assert kind.denoiser_tokens == kind.sequence_length == call["max_sequence_length"].default
    assert kind.guidance is Guidance.Sequential
    assert "neg_noise_pred = self.transformer(" in inspect.getsource(cls.__call__)
    from gpu_sizer.api.diffusers_import import CALL_DEFAULTS

    side = pipe.default_sample_size * pipe.vae_scale_factor
    assert CALL_DEFAULTS["QwenImagePipeline"] == (side, side, None)


def test_max_sequence_length_above_1024_is_refused() -> None:
    doc = pipeline_spec(REPO, task="TextToImage", height=1024, width=1024).model_dump(
        by_alias=True, exclude_none=True
    )
    parse_spec({**doc, "generation": {**doc["generation"], "maxSequenceLength": 1024}})
    with pytest.raises(InvalidWorkload, match="refuses maxSequenceLength 1025"):
        parse_spec({**doc, "generation": {**doc["generation"], "maxSequenceLength": 1025}})


def test_the_encoder_runs_its_whole_length_whatever_max_sequence_length_says() -> None:
    """max_sequence_length cuts prompt_embeds after the text encoder ran: a shorter one
    shrinks the denoiser's text, not the encode."""

    def phases(**extra: Any) -> dict[str, int]:
        spec = pipeline_spec(REPO, task="TextToImage", height=1024, width=1024, **extra)
        return {p.name.value: p.activation_bytes for p in estimate(spec).phases}

    full, short = phases(), phases(maxSequenceLength=128)
    assert short["TextEncode"] == full["TextEncode"]
    assert short["Denoise"] < full["Denoise"]


def _imported(capsys: pytest.CaptureFixture[str], **changes: Any) -> Any:
    """``gpu-sizer import-diffusers`` of the unmodified Hub folder, with ``changes`` to the
    named components' configs."""
    assert main(["import-diffusers", "--name", "qwen-image", str(HUB)]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    for comp in doc["spec"]["model"]["pipeline"]["components"]:
        comp["config"].update(changes.get(comp["name"], {}))
    return parse_spec(doc["spec"])


def test_the_published_hub_folder_is_fully_sized(capsys: pytest.CaptureFixture[str]) -> None:
    status, missing = generation_estimate(_imported(capsys))
    assert missing == []
    assert status.parameter_count == sum(
        parameter_count(_tree(cls, config)) for _, cls, config in published.PIPELINES[REPO][1]
    )
    assert [p.name.value for p in status.phases] == ["TextEncode", "Denoise", "VaeDecode"]


@pytest.mark.parametrize(
    ("component", "change", "path"),
    [
        ("transformer", {"inChannels": 16}, "inChannels"),
        ("transformer", {"outChannels": 64}, "outChannels"),
        ("transformer", {"jointAttentionDim": 4096}, "jointAttentionDim"),
    ],
)
def test_components_that_do_not_fit_together_are_refused(
    capsys: pytest.CaptureFixture[str], component: str, change: dict[str, Any], path: str
) -> None:
    with pytest.raises(InvalidWorkload) as caught:
        _imported(capsys, **{component: change})
    assert [p.path.rsplit(".", 1)[-1] for p in caught.value.problems] == [path]


def test_a_folder_with_a_flat_text_encoder_config_imports_as_the_published_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Qwen2.5-VL-7B-Instruct's own flat config.json as the text encoder's: import-diffusers
    nests its text keys as transformers does, so the folder sizes as the published one."""
    import shutil

    hub = Path(__file__).parent / "hub" / "Qwen--Qwen-Image"
    root = tmp_path / "flat"
    shutil.copytree(hub, root)
    flat = Path(__file__).parents[1] / "configs/qwen2.5-vl-7b-instruct.json"
    shutil.copy(flat, root / "text_encoder" / "config.json")
    figures = []
    for folder in (hub, root):
        assert main(["import-diffusers", "--name", "x", str(folder)]) == 0
        doc = yaml.safe_load(capsys.readouterr().out)
        figures.append(estimate(parse_spec(doc["spec"])).per_gpu)
    assert figures[0] == figures[1]
