"""Which exceptions the probe reports as OutOfMemory, and which it lets propagate as bugs."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from gpu_sizer.probe.memory import OutOfMemory, as_out_of_memory


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 4096 bytes"
        ),
        RuntimeError("std::bad_alloc"),  # autograd's backward under an address-space cap
        MemoryError(),
    ],
    ids=["cpu-allocator", "bad-alloc", "memory-error"],
)
def test_allocation_failures_are_out_of_memory(exc: BaseException) -> None:
    oom = as_out_of_memory(exc, "step1.backward1")
    assert isinstance(oom, OutOfMemory)


def test_other_runtime_errors_propagate() -> None:
    assert as_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), "x") is None
