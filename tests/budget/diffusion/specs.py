"""GPUWorkload specs of the published pipelines (tests/diffusers_configs.py) for the tests."""

from __future__ import annotations

from typing import Any

from tests.diffusers_configs import OPTIONS, PIPELINES, camel

from gpu_sizer.api import GPUWorkloadSpec, parse_spec

__all__ = ["pipeline_spec"]


def pipeline_spec(
    repo: str,
    dtype: str = "bfloat16",
    components: dict[str, dict[str, Any]] | None = None,
    **generation: Any,
) -> GPUWorkloadSpec:
    """The spec of ``repo``'s pipeline with ``generation`` fields; ``components`` adds fields to
    named components (``{"vae": {"dtype": "float32"}}``)."""
    cls, parts = PIPELINES[repo]
    comps = []
    for name, component, config in parts:
        entry: dict[str, Any] = {"name": name, "class": component, "config": camel(config)}
        entry.update((components or {}).get(name, {}))
        comps.append(entry)
    return parse_spec(
        {
            "model": {
                "name": repo,
                "dtype": dtype,
                "pipeline": {
                    "class": cls,
                    "components": comps,
                    "config": camel(OPTIONS.get(repo, {})),
                },
            },
            "generation": generation,
        }
    )
