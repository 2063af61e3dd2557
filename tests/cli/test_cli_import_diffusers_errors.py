"""`gpu-sizer import-diffusers` reports a bad value where the user can fix it: the file and its
own snake_case key (``unet/config.json: norm_num_groups``), not the spec path the import
builds; and it warns of a key a JSON object repeats, which diffusers' loader resolves silently
to the last value."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from gpu_sizer.cli import main

HUB = Path(__file__).resolve().parents[1] / "budget" / "diffusion" / "hub"


def _folder(tmp_path: Path, repo: str) -> Path:
    root = tmp_path / repo
    shutil.copytree(HUB / repo, root)
    return root


def _edit(path: Path, **changes: object) -> None:
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config, indent=2))


def _run(capsys: pytest.CaptureFixture[str], root: Path) -> tuple[int, str, str]:
    code = main(["import-diffusers", str(root), "--name", "x"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_a_component_value_is_reported_in_its_file_with_its_own_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, "stable-diffusion-v1-5--stable-diffusion-v1-5")
    _edit(root / "unet" / "config.json", norm_num_groups=7)
    checker = root / "safety_checker" / "config.json"
    vision = json.loads(checker.read_text())["vision_config"]
    _edit(checker, vision_config={**vision, "num_attention_heads": 15})
    code, out, err = _run(capsys, root)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert f"{root}/unet/config.json: norm_num_groups: 7 must divide" in err, err
    assert f"{root}/safety_checker/config.json: vision_config.hidden_size: 1024 must be" in err
    assert not any("spec.model" in line for line in lines), err


def test_a_pipeline_option_is_reported_in_model_index_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, "Wan-AI--Wan2.2-T2V-A14B-Diffusers")
    _edit(root / "model_index.json", boundary_ratio=1.5)
    code, _, err = _run(capsys, root)
    assert code == 2
    assert f"{root}/model_index.json: boundary_ratio: must be between 0 and 1" in err, err


def test_a_repeated_key_is_warned_of_and_the_last_value_used_as_diffusers_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, "stable-diffusion-v1-5--stable-diffusion-v1-5")
    path = root / "vae" / "config.json"
    text = path.read_text()
    assert '"latent_channels": 4,' in text
    path.write_text(
        text.replace('"latent_channels": 4,', '"latent_channels": 8,\n  "latent_channels": 4,')
    )
    code, out, err = _run(capsys, root)
    assert code == 0, err
    assert "Warning: vae/config.json: key 'latent_channels' appears more than once" in err
    doc = yaml.safe_load(out)
    vae = next(c for c in doc["spec"]["model"]["pipeline"]["components"] if c["name"] == "vae")
    assert vae["config"]["latentChannels"] == 4
