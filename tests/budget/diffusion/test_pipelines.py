"""What gpu-sizer knows of each pipeline class (budget.diffusion.pipelines) against the
diffusers 0.42.1 classes themselves: the offload chain, the offload exclusions and the
__init__ signature the loader matches model_index.json against."""

from __future__ import annotations

import inspect

import pytest
from tests.budget.diffusion.conftest import diffusers

from gpu_sizer.budget.diffusion.pipelines import PIPELINES


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipeline_class_matches_diffusers(name: str) -> None:
    cls = getattr(diffusers, name)
    kind = PIPELINES[name]
    assert kind.offload_sequence == tuple(cls.model_cpu_offload_seq.split("->"))
    assert kind.exclude_from_offload == tuple(cls._exclude_from_cpu_offload)
    params = inspect.signature(cls.__init__).parameters
    options = {
        k: p.default
        for k, p in params.items()
        if k != "self"
        and p.default is not inspect.Parameter.empty
        and k not in cls._optional_components
    }
    components = tuple(k for k in params if k != "self" and k not in options)
    assert kind.options == options
    assert kind.components == components
    assert set(kind.encode_order) <= set(components)
    # a pipeline without a max_sequence_length argument has no text length to override
    call = inspect.signature(cls.__call__).parameters
    assert (kind.sequence_length is not None) == ("max_sequence_length" in call)
