"""Every example parses, validates against the generated CRD (schema and CEL), and gets the
verdict it was written for from the one assessment path."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from tests import architectures
from tests.example_files import WORKLOAD_FILES

from gpu_sizer.api import parse_workload
from gpu_sizer.api.crd import VALIDATION_RULES, build_crd
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = WORKLOAD_FILES

#: file -> (verdict, GPUs per replica). Classes are left to the memory model.
EXPECTED: dict[str, tuple[Verdict, int]] = {
    "llama-3-8b-vllm-bf16.yaml": (Verdict.Fits, 1),
    "llama-3.1-8b-vllm-32k-h100.yaml": (Verdict.Fits, 1),
    "llama-3-70b-vllm-fp8-tp4.yaml": (Verdict.Fits, 4),
    "llama-3.1-405b-fp8-vllm-tp8.yaml": (Verdict.Fits, 8),
    "mixtral-8x7b-awq.yaml": (Verdict.Fits, 1),
    "qwen2-7b-tgi.yaml": (Verdict.Fits, 1),
    "phi-3-mini-transformers-l4.yaml": (Verdict.Fits, 1),
    "llama-2-13b-lora.yaml": (Verdict.Fits, 1),
    "llama-2-70b-qlora-48gb.yaml": (Verdict.Fits, 1),
    "llama-2-7b-full-fsdp-8gpu.yaml": (Verdict.Fits, 8),
    "llama-3-8b-too-big-for-l4.yaml": (Verdict.NoSafeHeadroom, 1),
    "qwen3-8b-vllm.yaml": (Verdict.Fits, 1),
    "qwen3-30b-a3b-vllm-tp2.yaml": (Verdict.Fits, 2),
    "deepseek-v2-lite-vllm.yaml": (Verdict.Fits, 1),
    "deepseek-v3-fp8-vllm-tp8.yaml": (Verdict.Fits, 8),
    "gpt-oss-20b-vllm.yaml": (Verdict.Fits, 1),
    "gemma-3-27b-it-vllm.yaml": (Verdict.Fits, 1),
    "gemma-3-1b-it-l4.yaml": (Verdict.Fits, 1),
    "llama-4-scout-vllm-tp4.yaml": (Verdict.Fits, 4),
    "mistral-small-3.1-24b-vllm.yaml": (Verdict.Fits, 1),
    "qwen2.5-vl-72b-a100-40gb-tp4.yaml": (Verdict.NoSafeHeadroom, 4),
    "qwen2.5-vl-7b-vllm.yaml": (Verdict.Fits, 1),
    "granite-3.3-8b-vllm.yaml": (Verdict.Fits, 1),
    "olmo-2-7b-vllm.yaml": (Verdict.Fits, 1),
    "glm-4.5-air-vllm-tp4.yaml": (Verdict.Fits, 4),
    "phi-4-vllm.yaml": (Verdict.Fits, 1),
    "nemotron-nano-9b-v2-vllm.yaml": (Verdict.Fits, 1),
    "jamba-v0.1-vllm-tp2.yaml": (Verdict.Fits, 2),
    "sd15-txt2img-l4.yaml": (Verdict.Fits, 1),
    "sdxl-base-1024-batch4.yaml": (Verdict.Fits, 1),
    "sd35-large-1024.yaml": (Verdict.Fits, 1),
    "flux1-dev-1024.yaml": (Verdict.Fits, 1),
    "flux1-schnell-48gb-offload.yaml": (Verdict.Fits, 1),
    "wan21-t2v-1.3b-480p-4090.yaml": (Verdict.Fits, 1),
    "wan21-t2v-14b-720p.yaml": (Verdict.Fits, 1),
    "wan21-i2v-14b-720p-offload.yaml": (Verdict.Fits, 1),
    "wan22-t2v-a14b-720p-too-big-for-48gb.yaml": (Verdict.NoSafeHeadroom, 1),
    "hunyuanvideo-720p-129f.yaml": (Verdict.Fits, 1),
    "cogvideox-5b-l4.yaml": (Verdict.Fits, 1),
    "ltx-video-768x512-161f.yaml": (Verdict.Fits, 1),
    "mochi-1-preview-480p.yaml": (Verdict.Fits, 1),
    "qwen-image-1024.yaml": (Verdict.Fits, 1),
}


def test_every_example_has_an_expectation_and_a_readme_line() -> None:
    names = {p.name for p in EXAMPLES}
    assert names == set(EXPECTED)
    assert len(names) >= 8
    readme = (ROOT / "examples" / "README.md").read_text()
    listed = set(re.findall(r"^- `([^`]+\.yaml)`", readme, flags=re.M))
    assert listed == names


def _load(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, "one workload per file"
    doc: dict[str, Any] = docs[0]
    return doc


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_names_its_config_source(path: Path) -> None:
    text = path.read_text()
    assert re.search(r"config\.json of \S+/\S+ on the Hugging Face Hub", text), path.name
    model_id = _load(path)["spec"]["model"]["name"]
    assert model_id in text.split("apiVersion:")[0]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_verdict(path: Path) -> None:
    spec = parse_workload(_load(path))
    verdict, gpus = EXPECTED[path.name]
    a = assess(spec)
    assert (a.verdict, a.estimate.gpu_count) == (verdict, gpus), a.message
    if verdict is Verdict.Fits:
        assert a.recommendation is not None and a.recommendation.gpu_count == gpus
        allowed = spec.placement.gpu_classes
        assert not allowed or a.recommendation.gpu_class in allowed
    else:
        assert any(f.fits for f in a.fixes), "the no-headroom example should show working fixes"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_accepted_by_the_crd(path: Path) -> None:
    doc = _load(path)
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.Draft4Validator(schema).validate(doc)
    env = celpy.Environment()
    for where, rules in VALIDATION_RULES.items():
        node: Any = doc["spec"]
        for part in filter(None, where.split(".")):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue
        for rule in rules:
            program = env.program(env.compile(rule["rule"]))
            assert program.evaluate({"self": celpy.json_to_cel(node)}), rule["message"]


#: example -> the tests' architecture of the same checkpoint shape (tests/architectures.py). Left
#: out: Llama-2-70B (no shared entry) and Qwen2-7B-Instruct (its config.json differs from the
#: base Qwen2-7B's in maxPositionEmbeddings, 32768 vs 131072).
SAME_SHAPE: dict[str, dict[str, Any]] = {
    "llama-3-8b-vllm-bf16.yaml": architectures.LLAMA_3_8B,
    "llama-3-8b-too-big-for-l4.yaml": architectures.LLAMA_3_8B,
    "llama-3-70b-vllm-fp8-tp4.yaml": architectures.LLAMA_3_70B,
    "llama-2-7b-full-fsdp-8gpu.yaml": architectures.LLAMA_2_7B,
    "llama-2-13b-lora.yaml": architectures.LLAMA_2_13B,
    "mixtral-8x7b-awq.yaml": architectures.MIXTRAL_8X7B,
    "phi-3-mini-transformers-l4.yaml": architectures.PHI3_MINI,
}


@pytest.mark.parametrize("name", sorted(SAME_SHAPE))
def test_example_architecture_matches_the_shared_test_figures(name: str) -> None:
    # One set of config.json figures: the examples and the tests/benchmarks must not drift apart.
    given = _load(ROOT / "examples" / name)["spec"]["model"]["architecture"]
    assert architectures.arch(given) == architectures.arch(SAME_SHAPE[name])


#: example -> the published config.json it was read from (tests/budget/configs/).
FROM_CONFIG: dict[str, str] = {
    "qwen3-8b-vllm.yaml": "qwen3-8b",
    "qwen3-30b-a3b-vllm-tp2.yaml": "qwen3-30b-a3b",
    "deepseek-v2-lite-vllm.yaml": "deepseek-v2-lite",
    "deepseek-v3-fp8-vllm-tp8.yaml": "deepseek-v3",
    "gpt-oss-20b-vllm.yaml": "gpt-oss-20b",
    "gemma-3-27b-it-vllm.yaml": "gemma-3-27b-it",
    "gemma-3-1b-it-l4.yaml": "gemma-3-1b-it",
    "llama-4-scout-vllm-tp4.yaml": "llama-4-scout-17b-16e-instruct",
    "mistral-small-3.1-24b-vllm.yaml": "mistral-small-3.1-24b-instruct-2503",
    "qwen2.5-vl-72b-a100-40gb-tp4.yaml": "qwen2.5-vl-72b-instruct",
    "qwen2.5-vl-7b-vllm.yaml": "qwen2.5-vl-7b-instruct",
    "granite-3.3-8b-vllm.yaml": "granite-3.3-8b-instruct",
    "olmo-2-7b-vllm.yaml": "olmo-2-1124-7b",
    "glm-4.5-air-vllm-tp4.yaml": "glm-4.5-air",
    "phi-4-vllm.yaml": "phi-4",
    "nemotron-nano-9b-v2-vllm.yaml": "nvidia-nemotron-nano-9b-v2",
    "jamba-v0.1-vllm-tp2.yaml": "jamba-v0.1",
}


@pytest.mark.parametrize("name", sorted(FROM_CONFIG))
def test_example_architecture_is_import_hf_configs_reading(name: str) -> None:
    """The example's architecture is what ``import-hf-config`` writes for the published file."""
    from gpu_sizer.api.hf import model_from_hf_config

    config = json.loads((ROOT / "tests/budget/configs" / f"{FROM_CONFIG[name]}.json").read_text())
    config.pop("_source")
    model = _load(ROOT / "examples" / name)["spec"]["model"]
    imported = model_from_hf_config(config)
    assert architectures.arch(model["architecture"]) == architectures.arch(imported["architecture"])
    # the checkpoint's quantization as stored (quantization_config), when it has one
    assert model.get("quantization") == imported.get("quantization")


GENERATION = [p for p in EXAMPLES if "pipeline" in _load(p)["spec"]["model"]]


@pytest.mark.parametrize("path", GENERATION, ids=lambda p: p.name)
def test_generation_example_is_the_published_pipeline(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every pipeline example is what ``gpu-sizer import-diffusers`` writes from the published
    Hub folder (tests/budget/diffusion/hub: model_index.json and each component's config.json):
    same class, options, components and config values; the example adds only how it runs
    (component dtype, offload, device)."""
    from gpu_sizer.cli import main

    model = _load(path)["spec"]["model"]
    folder = Path(__file__).resolve().parents[1] / "budget" / "diffusion" / "hub"
    folder = folder / model["name"].replace("/", "--")
    assert main(["import-diffusers", str(folder), "--name", "x"]) == 0
    imported = yaml.safe_load(capsys.readouterr().out)["spec"]["model"]["pipeline"]
    given = model["pipeline"]
    assert given["class"] == imported["class"]
    assert given.get("config", {}) == imported.get("config", {})
    assert [c["name"] for c in given["components"]] == [c["name"] for c in imported["components"]]
    for ours, theirs in zip(given["components"], imported["components"], strict=True):
        assert ours["class"] == theirs["class"]
        assert ours["config"] == theirs["config"], ours["name"]
        extra = set(ours) - {"name", "class", "config"}
        assert extra <= {"dtype", "offload", "groupOffload", "device"}, extra
