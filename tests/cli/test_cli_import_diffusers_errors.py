"""`gpu-sizer import-diffusers` reports a bad value where the user can fix it: the file and its
own snake_case key (``unet/config.json: norm_num_groups``), not the spec path the import
builds; and it warns of a key a JSON object repeats, which diffusers' loader resolves silently
to the last value."""

from __future__ import annotations

import json
import re
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
    assert f"error: {root}/unet/config.json: norm_num_groups: 7 must divide every " in err, err
    assert "block_out_channels entry (320 is not a multiple" in err, err
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


SD15 = "stable-diffusion-v1-5--stable-diffusion-v1-5"
WAN = "Wan-AI--Wan2.1-T2V-1.3B-Diffusers"
#: A camelCase word: a spec name where the user reads a snake_case config.json.
CAMEL = re.compile(r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b")


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """stderr's lines of an import that must be refused as bad input: exit 2, nothing on
    stdout, each line kubectl's ``error: ...``."""
    code = main(["import-diffusers", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code == 2 and out == "", err
    lines = err.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err
    return lines


def test_a_component_config_that_is_not_utf8_is_named_not_model_index_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, SD15)
    (root / "vae" / "config.json").write_bytes(b'{"latent_channels": "\xff"}')
    (line,) = _refused(capsys, str(root), "--name", "x")
    assert line.startswith(f"error: {root}/vae/config.json: cannot read: not UTF-8 (byte 21"), line
    assert "re-save it as UTF-8" in line and "model_index.json" not in line


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not JSON: the file is empty; download it again"),
        ("  \n", "not JSON: the file is empty; download it again"),
        ('{\n  "_class_name": "StableDiffusionPipeline",\n  nope', "not JSON: Expecting"),
    ],
)
def test_a_model_index_json_that_is_not_json_is_named_with_the_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, reason: str
) -> None:
    root = _folder(tmp_path, SD15)
    (root / "model_index.json").write_text(text)
    (line,) = _refused(capsys, str(root), "--name", "x")
    assert line.startswith(f"error: {root}/model_index.json: {reason}"), line
    if text.strip():
        assert "at line 3, column 3; fix it there" in line, line


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--height", "7", "must be >= 8, not 7"),
        ("--height", "100000", "must be <= 16384, not 100000"),
        ("--width", "100", "WanPipeline refuses width 100: height and width must be divisible"),
        ("--dtype", "fp17", "must be one of 'float32', 'bfloat16'"),
        ("--num-frames", "100000", "must be <= 10000, not 100000"),
        ("--batch-size", "5000", "must be <= 1024, not 5000"),
        ("--model-id", "m" * 300, "must be at most 256 characters long, not 300"),
    ],
)
def test_a_bad_flag_value_is_reported_as_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    root = _folder(tmp_path, WAN)
    (line,) = _refused(capsys, str(root), "--name", "x", flag, value)
    assert line.startswith(f"error: {flag}: {message}"), line
    assert "spec." not in line and str(root) not in line


def test_a_default_the_folder_makes_invalid_names_the_flag_that_overrides_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, "THUDM--CogVideoX-5b")
    _edit(root / "transformer" / "config.json", patch_size=7)
    lines = _refused(capsys, str(root), "--name", "x")
    assert [line.split(": CogVideoXPipeline refuses")[0] for line in lines] == [
        f"error: {root}: --height not given, so the pipeline's call default",
        f"error: {root}: --width not given, so the pipeline's call default",
    ]
    assert all(line.endswith("to choose another") for line in lines), lines


@pytest.mark.parametrize(
    ("repo", "component", "changes", "expected"),
    [
        (
            SD15,
            "text_encoder",
            {"num_attention_heads": 7},
            "hidden_size: 768 must be a multiple of num_attention_heads (7)",
        ),
        (
            SD15,
            "unet",
            {"layers_per_block": [1, 2]},
            "layers_per_block: must have 4 items (one per down_block_types entry), not 2",
        ),
        (
            SD15,
            "vae",
            {"block_out_channels": [128]},
            "block_out_channels: must have at least 4 items (one per down_block_types and "
            "up_block_types entry), not 1",
        ),
        (SD15, "unet", {"norm_num_groups": 7}, "norm_num_groups: 7 must divide every "),
        (WAN, "transformer", {"patch_size": [1, 0, 2]}, "patch_size: item 1 must be at least 1"),
    ],
)
def test_a_component_config_problem_is_said_in_the_files_snake_case_keys(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    repo: str,
    component: str,
    changes: dict[str, object],
    expected: str,
) -> None:
    root = _folder(tmp_path, repo)
    _edit(root / component / "config.json", **changes)
    (line,) = _refused(capsys, str(root), "--name", "x")
    assert line.startswith(f"error: {root}/{component}/config.json: {expected}"), line
    assert not CAMEL.findall(line.removeprefix(f"error: {root}")), line


def test_a_use_default_values_that_is_not_a_list_names_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, SD15)
    _edit(root / "unet" / "config.json", _use_default_values="cross_attention_dim")
    (line,) = _refused(capsys, str(root), "--name", "x")
    assert line == (
        f"error: {root}/unet/config.json: _use_default_values must be a list of config keys"
    )


def test_model_index_json_given_for_its_folder_imports_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, SD15)
    code, by_folder, _ = _run(capsys, root)
    assert code == 0
    code, by_file, err = _run(capsys, root / "model_index.json")
    assert code == 0, err
    assert by_file == by_folder


def test_another_file_given_for_the_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, SD15)
    (line,) = _refused(capsys, str(root / "vae" / "config.json"), "--name", "x")
    assert line == (
        f"error: {root}/vae/config.json: is a file; import-diffusers expects the pipeline "
        "folder, the one holding model_index.json"
    )


@pytest.mark.parametrize(
    ("repo", "task", "runs"),
    [
        (SD15, "TextToVideo", "runs TextToImage, not TextToVideo; pass --task TextToImage"),
        (SD15, "ImageToVideo", "runs TextToImage, not ImageToVideo; pass --task TextToImage"),
        (WAN, "TextToImage", "runs TextToVideo, not TextToImage; pass --task TextToVideo"),
        (
            "Qwen--Qwen-Image",
            "TextToVideo",
            "runs TextToImage, not TextToVideo; pass --task TextToImage",
        ),
    ],
)
def test_a_task_the_pipeline_class_cannot_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], repo: str, task: str, runs: str
) -> None:
    root = _folder(tmp_path, repo)
    cls = json.loads((root / "model_index.json").read_text())["_class_name"]
    (line,) = _refused(capsys, str(root), "--name", "x", "--task", task)
    assert line.startswith(
        f"error: --task {task}: pipeline class {cls} ({root}/model_index.json) {runs}"
    ), line


def test_a_video_task_for_an_unknown_class_needs_the_frame_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path, SD15)
    _edit(root / "model_index.json", _class_name="MyVideoPipeline")
    argv = [str(root), "--name", "x", "--height", "512", "--width", "512", "--task", "TextToVideo"]
    (line,) = _refused(capsys, *argv)
    assert line.endswith("give --num-frames too"), line
    assert main(["import-diffusers", *argv, "--num-frames", "9"]) == 0
    generation = yaml.safe_load(capsys.readouterr().out)["spec"]["generation"]
    assert (generation["task"], generation["numFrames"]) == ("TextToVideo", 9)
