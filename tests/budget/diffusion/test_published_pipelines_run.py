"""Every published pipeline folder and every generation example passes each combination check
(latent channels, text-conditioning width, Wan 2.2 experts): the checks refuse only what
diffusers cannot run, and these pipelines are what people run. Each check's own oracle (a tiny
pipeline called on the CPU) is in test_latent_channels.py, test_text_width.py and
test_pipeline_runs.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from gpu_sizer.api import parse_workload
from gpu_sizer.api.spec.generation import Pipeline
from gpu_sizer.api.spec.latent_channels import channel_problems
from gpu_sizer.api.spec.pipeline_runs import expert_problems
from gpu_sizer.api.spec.text_width import text_problems
from gpu_sizer.cli import main

ROOT = Path(__file__).resolve().parents[3]
HUB = Path(__file__).parent / "hub"

CHECKS: Final[dict[str, Callable[[Pipeline], list[tuple[str, str]]]]] = {
    "channels": channel_problems,
    "text width": text_problems,
    "experts": expert_problems,
}


def _problems(pipeline: Pipeline | None) -> dict[str, list[tuple[str, str]]]:
    assert pipeline is not None
    return {name: found for name, check in CHECKS.items() if (found := check(pipeline))}


@pytest.mark.parametrize("folder", sorted(p.name for p in HUB.iterdir() if (p / "vae").is_dir()))
def test_every_published_folder_passes(folder: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import-diffusers", "--name", "x", str(HUB / folder)]) == 0
    pipeline = parse_workload(yaml.safe_load(capsys.readouterr().out)).model.pipeline
    assert _problems(pipeline) == {}


def _generation_docs(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "GPUWorkload"]
    return [d for d in docs if "pipeline" in d["spec"]["model"]]


EXAMPLES: Final = [p for p in sorted((ROOT / "examples").glob("*.yaml")) if _generation_docs(p)]


def test_the_examples_include_generation_pipelines() -> None:
    assert len(EXAMPLES) >= 10, EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes(path: Path) -> None:
    for doc in _generation_docs(path):
        assert _problems(parse_workload(doc).model.pipeline) == {}
