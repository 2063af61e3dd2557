"""Out-of-memory is a result: the real allocator failure under a memory cap, exit 0.

The probe runs in a subprocess with ``--memory-limit-bytes``: on the CPU that sets RLIMIT_AS to
the address space in use after startup plus the limit, so the KV cache allocation really fails
in PyTorch's CPU allocator ("DefaultCPUAllocator: can't allocate memory: you tried to allocate N
bytes") and the probe's OOM path handles the genuine exception.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_sizer.measurement.result import MAX_TERMINATION_MESSAGE_BYTES, parse_result
from gpu_sizer.probe.memory import requested_bytes

from .conftest import TINY_LLAMA, inference_spec, run_probe, training_spec

pytestmark = pytest.mark.probe

MIB = 1 << 20


def test_kv_cache_oom_under_an_address_space_cap(tmp_path: Path) -> None:
    arch = {**TINY_LLAMA, "numKeyValueHeads": 4, "maxPositionEmbeddings": 4096}
    spec = inference_spec(arch, maxModelLen=4096, maxNumSeqs=256, maxNumBatchedTokens=4096)
    # One layer's cache: 2 x 256 seqs x 4096 tokens x 4 kv heads x 16 x 2 bytes = 256 MiB.
    layer_bytes = 2 * 256 * 4096 * 4 * 16 * 2
    code, result, log, proc = run_probe(
        spec,
        "--memory-limit-bytes",
        str(64 * MIB),
        "--cpu-max-bytes",
        str(4 << 30),
        tmp_path=tmp_path,
    )
    assert code == 0, proc.stderr
    assert result["status"] == "OutOfMemory"
    assert result["outOfMemory"] is True
    assert result["oomPhase"] == "kv-cache"
    assert result["oomRequestedBytes"] == layer_bytes
    assert "can't allocate memory" in result["message"]
    assert [p["name"] for p in result["phases"]] == ["load", "kv-cache"]
    assert any("RLIMIT_AS" in n for n in result["notes"])
    compact = parse_result(log)
    assert compact.out_of_memory and len(log.encode()) < MAX_TERMINATION_MESSAGE_BYTES


def test_training_oom_names_the_phase(tmp_path: Path) -> None:
    arch = {**TINY_LLAMA, "vocabSize": 32000, "maxPositionEmbeddings": 4096}
    # The forward pass alone (float32 logits of 8 x 4096 x 32000 are 4 GiB) exceeds 256 MiB.
    spec = training_spec(arch, microBatchSize=8, sequenceLength=4096)
    code, result, _, proc = run_probe(
        spec, "--memory-limit-bytes", str(256 * MIB), tmp_path=tmp_path
    )
    assert code == 0, proc.stderr
    assert result["status"] == "OutOfMemory"
    assert result["oomPhase"] == "step1.forward1"
    # Activations pile up until one allocation fails; its size is the allocator's exact figure.
    assert isinstance(result["oomRequestedBytes"], int) and result["oomRequestedBytes"] > 0
    assert result["phases"][-1]["name"] == "step1.forward1"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.10 GiB of which 1.06 GiB is free.",
            2 << 30,
        ),
        ("CUDA out of memory. Tried to allocate 896.00 MiB (GPU 0; 23.65 GiB total)", 896 * MIB),
        (
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 268435456 bytes. Error code 12",
            268435456,
        ),
        ("something else", None),
    ],
)
def test_requested_bytes_from_allocator_messages(message: str, expected: int | None) -> None:
    assert requested_bytes(message) == expected


@pytest.mark.parametrize(
    ("spec", "limit"),
    [(inference_spec(), 1000), (inference_spec(), 4 * MIB), (training_spec(), 1000)],
    ids=["inference-1000", "inference-4MiB", "training-1000"],
)
def test_a_cap_too_small_for_the_runtime_still_ends_in_a_result(
    tmp_path: Path, spec: dict[str, object], limit: int
) -> None:
    # Before the fix: libgomp "Thread creation failed" (exit 1) or a SIGSEGV in oneDNN, no
    # result at all. The tiny model may still fit in memory the process had already mapped.
    code, result, log, proc = run_probe(
        spec, "--device", "cpu", "--memory-limit-bytes", str(limit), tmp_path=tmp_path
    )
    assert code == 0, proc.stderr[-2000:]
    assert result["status"] in ("Succeeded", "OutOfMemory"), result
    assert any("RLIMIT_AS" in n for n in result["notes"])
    assert parse_result(log).status == result["status"]


def test_a_kv_cache_over_a_tiny_cap_is_out_of_memory(tmp_path: Path) -> None:
    spec = inference_spec(maxNumSeqs=256, maxNumBatchedTokens=256)  # 8 MiB of KV cache
    code, result, _, proc = run_probe(
        spec, "--device", "cpu", "--memory-limit-bytes", "1000", tmp_path=tmp_path
    )
    assert code == 0, proc.stderr[-2000:]
    assert result["status"] == "OutOfMemory" and result["oomPhase"] == "kv-cache", result
