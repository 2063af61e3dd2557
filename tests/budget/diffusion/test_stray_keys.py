"""Unread component config keys: refused when they stand for a key gpu-sizer reads (a misspelt,
snake_case or aliased key would leave the read one at its class default, so the model would be
sized smaller than the one the engine loads), accepted otherwise, as diffusers' from_config
accepts them. The libraries are the oracle for what is a real key: no constructor argument of a
modelled class, and no key of a published config.json, is ever refused."""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic.alias_generators import to_camel
from tests.budget.diffusion.conftest import CONFIG_CLASSES, diffusers, transformers
from tests.diffusers_configs import camel

from gpu_sizer.api import InvalidWorkload, parse_spec
from gpu_sizer.api.components import COMPONENT_CLASSES, config_problems
from gpu_sizer.cli import main

HUB = Path(__file__).resolve().parent / "hub"


def _library_keys(cls: str) -> set[str]:
    """Every key the library's own class takes from a config.json (snake_case)."""
    if cls in CONFIG_CLASSES:
        config = getattr(transformers, CONFIG_CLASSES[cls])
        keys = set(inspect.signature(config.__init__).parameters)
        keys |= set(config().to_dict())  # PretrainedConfig's common keys (architectures...)
        for key, value in config().to_dict().items():
            if key.endswith("_config") and isinstance(value, dict):  # CLIPConfig's towers
                keys |= set(value)
        return keys - {"self", "kwargs"}
    params = inspect.signature(getattr(diffusers, cls).__init__).parameters
    return set(params) - {"self", "kwargs"}


@pytest.mark.parametrize("cls", sorted(COMPONENT_CLASSES))
def test_no_library_key_is_taken_for_a_misspelling(cls: str) -> None:
    """Each constructor argument (or config attribute) of the library class, camelCased and
    given a value of its kind, is either read or accepted unread: never refused as a stray."""
    known = COMPONENT_CLASSES[cls]
    wire = known.wire
    # a flat config's keys of the nested object transformers moves them into are read too
    flat = wire[known.flat_into][1].inner if known.flat_into else {}
    for key in sorted(_library_keys(cls)):
        name = to_camel(key)
        if name in wire or name in flat:
            continue
        problems = config_problems(cls, {name: "anything"})
        assert problems == [], (cls, key, problems)


@pytest.mark.parametrize("folder", sorted(p.name for p in HUB.iterdir() if p.is_dir()))
def test_published_configs_have_no_stray_keys(folder: str) -> None:
    """Every component config.json of every Hub folder kept as test data, camelCased as
    import-diffusers writes it, has no key refused as a stray."""
    for path in sorted((HUB / folder).glob("*/config.json")):
        config = json.loads(path.read_text())
        cls = config.get("_class_name") or (config.get("architectures") or [None])[0]
        if cls not in COMPONENT_CLASSES:
            continue
        wire = camel({k: v for k, v in config.items() if not k.startswith("_")})
        problems = [p for p in config_problems(cls, wire) if "is not a key" in p[1]]
        assert problems == [], (path, problems)


def _read_keys() -> list[tuple[str, str]]:
    return [(cls, name) for cls, known in COMPONENT_CLASSES.items() for name in known.wire]


@pytest.mark.parametrize(("cls", "name"), _read_keys())
def test_every_read_key_misspelt_is_refused_naming_it(cls: str, name: str) -> None:
    """Each key gpu-sizer reads, given snake_case, in lower case, or (when it is long enough for
    one letter to matter little: 8 letters or more) with its last letter dropped, is refused,
    and the message names a key the class reads and the class default it would take."""
    wire = COMPONENT_CLASSES[cls].wire
    snake = wire[name][0]
    variants = {snake, name.lower()} | ({name[:-1]} if len(name) >= 8 else set())
    for variant in sorted(variants - set(wire)):
        problems = config_problems(cls, {variant: 1})
        assert len(problems) == 1, (cls, variant, problems)
        field, message = problems[0]
        assert field == variant
        assert "is not a key" in message and "class default" in message and "write " in message
        target = message.rpartition("write ")[2]
        assert target in wire, (variant, message)
        if variant != name[:-1]:  # case and snake_case name the key exactly
            assert target == name, (variant, message)


@pytest.mark.parametrize("cls", ["T5EncoderModel", "UMT5EncoderModel"])
def test_t5_attribute_map_aliases_are_refused_naming_the_key(cls: str) -> None:
    """transformers' T5Config maps num_hidden_layers onto num_layers (attribute_map), so a file
    giving it loads that depth; gpu-sizer reads num_layers only, so it asks for that name."""
    config = getattr(transformers, CONFIG_CLASSES[cls])(num_hidden_layers=24)
    assert config.num_layers == 24  # the oracle: the alias sets the key gpu-sizer reads
    for alias, key in getattr(transformers, CONFIG_CLASSES[cls]).attribute_map.items():
        assert COMPONENT_CLASSES[cls].aliases[alias] == key
        for spelling in (to_camel(alias), alias):
            [(field, message)] = config_problems(cls, {spelling: 8})
            assert field == spelling
            assert message.endswith(f"write {to_camel(key)}"), message


def test_a_misspelt_key_in_a_spec_is_a_spec_error_naming_its_path() -> None:
    """Wan 2.1 1.3B's transformer with num_layers misspelt: the spec path, the key meant and
    the default it would take (30 layers given, the class default is 40 for this class; any
    difference sizes a model the engine does not load)."""
    body = {
        "model": {
            "name": "wan",
            "dtype": "bfloat16",
            "pipeline": {
                "class": "WanPipeline",
                "components": [
                    {
                        "name": "transformer",
                        "class": "WanTransformer3DModel",
                        "config": {"numLayer": 30},
                    }
                ],
            },
        },
        "generation": {"task": "TextToVideo", "height": 480, "width": 832, "numFrames": 81},
    }
    with pytest.raises(InvalidWorkload) as caught:
        parse_spec(body)
    text = str(caught.value)
    assert "spec.model.pipeline.components[0].config.numLayer" in text
    assert "did you mean numLayers?" in text and "write numLayers" in text


def test_import_diffusers_names_the_file_and_its_snake_case_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Hub folder whose transformer config.json has num_layer for num_layers: the import
    refuses it with one error line naming the file and both keys in the file's spelling."""
    folder = tmp_path / "wan"
    shutil.copytree(HUB / "Wan-AI--Wan2.1-T2V-1.3B-Diffusers", folder)
    path = folder / "transformer" / "config.json"
    config: dict[str, Any] = json.loads(path.read_text())
    config["num_layer"] = config.pop("num_layers")
    path.write_text(json.dumps(config))
    assert main(["import-diffusers", "--name", "wan", str(folder)]) != 0
    err = capsys.readouterr().err
    assert f"{path}: num_layer: is not a key" in err, err
    assert "did you mean num_layers?" in err and "write num_layers" in err, err
