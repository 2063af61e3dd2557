"""`gpu-sizer estimate` on a generation size the diffusers pipeline refuses: exit 2 and one line
naming the field, the divisor and the sizes to use; on a size it rounds: estimated, with a note."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_sizer.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_refused_height_exits_2_with_the_field_and_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load((EXAMPLES / "sd15-txt2img-l4.yaml").read_text())
    doc["spec"]["generation"]["height"] = 515
    path = tmp_path / "sd15-515.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2
    name = f"{doc['metadata']['namespace']}/{doc['metadata']['name']}"
    assert err.splitlines() == [
        f"{path}: {name}: spec.generation.height: StableDiffusionPipeline refuses height 515: "
        "height and width must be divisible by 8 (diffusers 0.42.1 "
        "StableDiffusionPipeline.check_inputs); use height 512 or 520"
    ]


def test_rounded_size_is_estimated_with_a_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load((EXAMPLES / "flux1-dev-1024.yaml").read_text())
    doc["spec"]["generation"]["width"] = 1000
    path = tmp_path / "flux-1000.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, _ = run(capsys, "estimate", "-o", "yaml", str(path))
    assert code in (0, 1)  # estimated: fits or not, never refused
    notes = yaml.safe_load(out)["status"]["estimate"]["notes"]
    assert any("FluxPipeline rounds 1024x1000" in n and "sized at 1024x992" in n for n in notes)
