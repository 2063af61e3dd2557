"""Upper bounds of the spec's sizes and lengths, and the bounded field types built on them.

The bounds keep every per-GPU byte count far below int64 (what the API server stores) and bound
the work of one admission review; the CRD's ``maximum``/``maxItems``/``maxLength`` come from them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = [
    "LENGTHS",
    "LIMITS",
    "Count",
    "Elements",
    "Experts",
    "Fraction",
    "Gpus",
    "Heads",
    "Identifier",
    "Inner",
    "Layers",
    "MicroBatch",
    "Name",
    "PositiveInt",
    "Rank",
    "Seqs",
    "State",
    "Tokens",
    "Vocab",
    "Width",
]


#: Upper bounds of the size fields. They are generous (several times the largest published
#: models: Llama-3.1-405B has 126 layers, hidden 16384, vocab 128256; DeepSeek-V3 256 experts;
#: Gemini-class contexts of 10M tokens) and exist so that a typo cannot produce a 40-digit table or
#: a status integer beyond int64 (what the API server stores): with every field at its maximum the
#: per-GPU byte counts stay far below 2**63.
LIMITS: dict[str, int] = {
    "layers": 1024,
    "width": 262_144,
    "intermediate": 1_048_576,
    "heads": 16_384,
    "vocab": 4_194_304,
    "experts": 1024,
    "state": 65_536,
    "tokens": 16_777_216,
    "batchedTokens": 134_217_728,
    "seqs": 65_536,
    "parameters": 10**14,
    "microBatch": 65_536,
    "gpus": 65_536,
    "steps": 1_048_576,
    "rank": 65_536,
}


#: Upper bounds of list lengths (CRD ``maxItems``) and string lengths (``maxLength``) in the spec.
#: They bound the work and the answer of one admission review (a 100,000-entry
#: ``loraTargetModules`` took 13 s to validate and produced a 27 MB denial) and let the API
#: server's CEL cost estimator bound the validation rules. Each is far above real use: the
#: catalog has 15 classes, PEFT targets name at most the 7 projection roles of a block, a
#: Hugging Face repository id is at most 96 + 1 + 96 characters, an image reference at most a
#: 255-character name plus tag or digest.
LENGTHS: dict[str, int] = {
    "identifier": 64,  # model types, rope types, LoRA module names
    "name": 256,  # model names (Hub ids), revisions
    "image": 1024,
    "gpuClass": 63,  # a DNS label, like the class names of the catalog
    "gpuClasses": 64,
    "loraTargetModules": 64,
    "concurrencyLevels": 16,
    "commandArgs": 256,
    "commandArg": 16_384,
    # quantization: Llama-3.1-405B-FP8 lists 511 modules by full name; config groups are few
    "moduleName": 256,
    "moduleNames": 2048,
    "configGroups": 16,
}


PositiveInt = Annotated[int, Field(ge=1, strict=True)]


Layers = Annotated[int, Field(ge=1, le=LIMITS["layers"], strict=True)]


Width = Annotated[int, Field(ge=1, le=LIMITS["width"], strict=True)]


Inner = Annotated[int, Field(ge=1, le=LIMITS["intermediate"], strict=True)]


Heads = Annotated[int, Field(ge=1, le=LIMITS["heads"], strict=True)]


Experts = Annotated[int, Field(ge=1, le=LIMITS["experts"], strict=True)]


Tokens = Annotated[int, Field(ge=1, le=LIMITS["tokens"], strict=True)]


Seqs = Annotated[int, Field(ge=1, le=LIMITS["seqs"], strict=True)]


Gpus = Annotated[int, Field(ge=1, le=LIMITS["gpus"], strict=True)]


Vocab = Annotated[int, Field(ge=1, le=LIMITS["vocab"], strict=True)]


Rank = Annotated[int, Field(ge=1, le=LIMITS["rank"], strict=True)]


MicroBatch = Annotated[int, Field(ge=1, le=LIMITS["microBatch"], strict=True)]


Identifier = Annotated[str, Field(max_length=LENGTHS["identifier"])]


Name = Annotated[str, Field(max_length=LENGTHS["name"])]


Fraction = Annotated[float, Field(strict=True, allow_inf_nan=False)]


"""A finite float on the wire; strict mode still accepts an integer (JSON has one number type) but
not a string or a boolean. NaN and Infinity (which Python's and Go's JSON readers can produce
from ``NaN`` literals or overflowing ones such as ``1e400``) are refused: every comparison with
NaN is false, so a NaN bound would silently pass or fail range checks."""


Count = Annotated[int, Field(ge=0, le=LIMITS["layers"], strict=True)]


State = Annotated[int, Field(ge=1, le=LIMITS["state"], strict=True)]


Elements = Annotated[int, Field(ge=0, le=LIMITS["parameters"], strict=True)]
