"""A key the chosen family does not read is refused, naming the families that read it.

The table (``gpu_sizer.api.family_keys``) is checked against ``transformers``' config classes:
a family reads a key exactly when its config class has it, with the exceptions listed here (each
with its reason)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pydantic.alias_generators import to_snake
from tests.architectures import LLAMA_3_8B

from gpu_sizer.api import KNOWN_MODEL_TYPES, InvalidWorkload, parse_spec
from gpu_sizer.api.family_keys import FAMILY_KEYS, MOE_KEYS
from gpu_sizer.api.hf import model_from_hf_config

#: (model type, key) listed although the transformers config class lacks it, and why.
_LISTED_BEYOND_TRANSFORMERS = {
    # the three names of the expert count are accepted by every MoE family (one count)
    **{(mt, k): "alias" for mt in KNOWN_MODEL_TYPES for k in MOE_KEYS[:3]},
    # DeepSeek's own config.json (remote code) carries moe_layer_freq; transformers 5 dropped it
    ("deepseek_v2", "moeLayerFreq"): "remote code",
    ("deepseek_v3", "moeLayerFreq"): "remote code",
    # older Gemma 3 and Nemotron-H config.json files (transformers < 5: layer_types replaced it)
    ("gemma3", "slidingWindowPattern"): "older config.json",
    ("gemma3_text", "slidingWindowPattern"): "older config.json",
    ("nemotron_h", "hybridOverridePattern"): "older config.json",
}
#: (model type, key) in the transformers config class but refused: layers not sized yet.
_REFUSED_THOUGH_IN_TRANSFORMERS = {
    ("nemotron_h", k)
    for k in ("moeIntermediateSize", "nRoutedExperts", "nSharedExperts", "numExpertsPerTok")
}


def _config_keys(model_type: str) -> set[str]:
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    names = set(inspect.signature(cls.__init__).parameters) | set(cls().to_dict())
    text = (getattr(cls, "sub_configs", None) or {}).get("text_config")
    if text is not None and text.__name__ != "AutoConfig":  # mistral3: any text model
        names |= set(inspect.signature(text.__init__).parameters) | set(text().to_dict())
    return names


@pytest.mark.parametrize("model_type", KNOWN_MODEL_TYPES)
def test_the_table_is_the_transformers_config_class(model_type: str) -> None:
    keys = _config_keys(model_type)
    has = {w for w in FAMILY_KEYS if to_snake(w) in keys}
    listed = {w for w, families in FAMILY_KEYS.items() if model_type in families}
    beyond = {w for w in listed - has if (model_type, w) not in _LISTED_BEYOND_TRANSFORMERS}
    refused = {w for w in has - listed if (model_type, w) not in _REFUSED_THOUGH_IN_TRANSFORMERS}
    assert beyond == set() and refused == set()


def _spec(arch: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {"architecture": arch},
        "inference": {"engine": "vllm", "maxModelLen": 4096, "maxNumSeqs": 8},
    }


def test_moe_width_under_mixtral_is_refused_naming_the_families_that_read_it() -> None:
    """Mixtral sizes its experts at intermediateSize: the key would have been ignored (weights
    x7.5 for a user who meant Qwen-MoE's per-expert width)."""
    arch = {**LLAMA_3_8B, "modelType": "mixtral", "numLocalExperts": 8, "numExpertsPerTok": 2,
            "moeIntermediateSize": 1920}  # fmt: skip
    with pytest.raises(InvalidWorkload) as err:
        parse_spec(_spec(arch))
    (problem,) = err.value.problems
    assert problem.path == "spec.model.architecture.moeIntermediateSize"
    assert "qwen3_moe" in problem.message and "deepseek_v3" in problem.message


def test_experts_on_a_dense_family_are_refused() -> None:
    with pytest.raises(InvalidWorkload) as err:
        parse_spec(_spec({**LLAMA_3_8B, "numLocalExperts": 8, "numExpertsPerTok": 2}))
    fields = {p.path for p in err.value.problems}
    assert "spec.model.architecture.numLocalExperts" in fields
    assert "dense" in str(err.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("kvLoraRank", 512), ("slidingWindowPattern", 6), ("firstKDenseReplace", 1),
     ("newDecoderArchitecture", True), ("doLayerNormBefore", False), ("mambaDState", 16)],
)  # fmt: skip
def test_a_family_key_on_llama_is_refused(key: str, value: Any) -> None:
    with pytest.raises(InvalidWorkload) as err:
        parse_spec(_spec({**LLAMA_3_8B, key: value}))
    assert any(p.path.endswith(key) for p in err.value.problems), err.value


def test_defaults_written_out_still_pass() -> None:
    """The mutating webhook re-serialises specs with defaults filled (parallelAttn true)."""
    parse_spec(_spec({**LLAMA_3_8B, "parallelAttn": True, "newDecoderArchitecture": False,
                      "doLayerNormBefore": True}))  # fmt: skip


def test_a_family_without_a_layout_is_not_checked() -> None:
    arch = {**LLAMA_3_8B, "modelType": "my_moe", "numLocalExperts": 8, "numExpertsPerTok": 2,
            "moeIntermediateSize": 1024}  # fmt: skip
    parse_spec({**_spec(arch), "model": {"architecture": arch, "parameterCount": 10**10}})


def test_the_importer_leaves_out_keys_the_family_does_not_read() -> None:
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100,
              "max_position_embeddings": 256, "moe_intermediate_size": 32}  # fmt: skip
    warnings: list[str] = []
    model = model_from_hf_config(config, warnings)
    assert "moeIntermediateSize" not in model["architecture"]
    assert any("moeIntermediateSize" in w for w in warnings)
