"""Which engine releases load which model families at all. Pure.

A release that predates a family's support refuses to start ("Model architectures [...] are not
supported for now", vLLM ``model_executor/models/registry.py`` ``_raise_for_unsupported``), so
sizing it with the release's memory rules would admit a server that never starts. Only what a
public source shows is listed; a family absent here is taken as served by every modeled release.
"""

from __future__ import annotations

import re
from typing import Final

from gpu_sizer.api import Engine

__all__ = ["unserved_reason"]

#: (engine, model type) -> (first release that serves it, the source that shows it).
FIRST_SERVED: Final[dict[tuple[Engine, str], tuple[str, str]]] = {
    (Engine.vllm, "gpt_oss"): (
        "0.10.1",
        "vllm-project/vllm#22259 (GptOssForCausalLM, shipped as the 0.10.1+gptoss wheel and in "
        "0.10.1; vllm-project/vllm#23278 starts it on 0.10.1)",
    ),
    (Engine.vllm, "llama4"): (
        "0.8.3",
        "vllm-project/vllm#16345 (Llama 4 served from 0.8.3; kubeai-project/kubeai#495 moved "
        "to 0.8.3 for it)",
    ),
}

#: (engine, model type) -> the source that shows no release serves it.
NEVER_SERVED: Final[dict[tuple[Engine, str], str]] = {
    (Engine.tgi, "gpt_oss"): "huggingface/text-generation-inference#3309 (open: no gpt-oss "
    "support)",
}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.lstrip("v").split("+")[0])[:3])


def unserved_reason(engine: Engine, version: str | None, model_type: str) -> str | None:
    """Why ``engine`` at ``version`` (``None``: the newest modeled release) does not load
    ``model_type``, with the fix, or ``None`` when it does (or nothing says otherwise)."""
    never = NEVER_SERVED.get((engine, model_type))
    if never is not None:
        return (
            f"{engine.value} does not serve model type {model_type!r} ({never}): use vllm or sglang"
        )
    first = FIRST_SERVED.get((engine, model_type))
    if first is None or version is None or _key(version) >= _key(first[0]):
        return None
    return (
        f"{engine.value} {version} does not load model type {model_type!r}: it is served from "
        f"{first[0]} ({first[1]}); set inference.engineVersion to {first[0]} or later"
    )
