"""The result document: JSON schema, parsing, and the 4096-byte termination message."""

from __future__ import annotations

import json

import jsonschema
import pytest

from gpu_sizer.measurement.result import (
    MAX_TERMINATION_MESSAGE_BYTES,
    RESULT_SCHEMA,
    InvalidResult,
    NvmlDevice,
    NvmlInfo,
    PhaseResult,
    ProbeResult,
    compact_message,
    parse_result,
)

GIB = 1 << 30


def _big_result(phases: int = 200, message_len: int = 3000) -> ProbeResult:
    return ProbeResult(
        status="OutOfMemory",
        mode="Synthetic",
        device="cuda",
        gpu_count=8,
        peak_allocated_bytes=70 * GIB,
        peak_reserved_bytes=72 * GIB,
        peak_device_used_bytes=79 * GIB,
        out_of_memory=True,
        oom_phase="decode@256",
        oom_requested_bytes=2 * GIB,
        message="CUDA out of memory. " + "x" * message_len,
        notes=["a long caveat " * 20] * 5,
        nvml=NvmlInfo(
            available=True,
            device_name="NVIDIA H100 80GB HBM3",
            total_bytes=80 * GIB,
            devices=[
                NvmlDevice(
                    index=i,
                    name="NVIDIA H100 80GB HBM3",
                    total_bytes=80 * GIB,
                    peak_used_bytes=79 * GIB,
                    baseline_used_bytes=GIB,
                )
                for i in range(8)
            ],
            process_peak_bytes={str(1000 + i): GIB for i in range(50)},
        ),
        phases=[
            PhaseResult(
                name=f"decode@{i}",
                seconds=1.25,
                peak_allocated_bytes=i * GIB // 4,
                peak_reserved_bytes=i * GIB // 3,
                peak_device_used_bytes=i * GIB // 2,
            )
            for i in range(phases)
        ],
    )


def test_output_validates_against_the_published_json_schema() -> None:
    schema = ProbeResult.model_json_schema(by_alias=True)
    doc = json.loads(compact_message(_big_result(phases=3, message_len=10)))
    jsonschema.validate(doc, schema)
    assert doc["schema"] == RESULT_SCHEMA
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "status": "Exploded"}, schema)


def test_compact_message_fits_in_4096_bytes_and_keeps_the_peaks() -> None:
    result = _big_result()
    assert len(json.dumps(result.model_dump(mode="json", by_alias=True))) > 10_000
    text = compact_message(result)
    assert len(text.encode()) < MAX_TERMINATION_MESSAGE_BYTES
    back = parse_result(text)
    assert back.peak_allocated_bytes == 70 * GIB
    assert back.peak_reserved_bytes == 72 * GIB
    assert back.peak_device_used_bytes == 79 * GIB
    assert back.out_of_memory and back.oom_phase == "decode@256"
    assert back.oom_requested_bytes == 2 * GIB
    assert back.phases_omitted == 200 - len(back.phases)
    # The first phase and the most expensive one survive.
    names = [p.name for p in back.phases]
    assert "decode@0" in names and "decode@199" in names


def test_compact_message_drops_nothing_when_it_fits() -> None:
    result = _big_result(phases=3, message_len=10)
    result.nvml = NvmlInfo(available=False, reason="NVML unavailable: no driver")
    result.notes = ["one"]
    assert parse_result(compact_message(result)) == result


def test_multibyte_text_is_counted_in_bytes() -> None:
    result = _big_result(phases=5, message_len=0)
    result.message = "é" * 3000  # 6000 bytes in UTF-8, 3000 characters
    text = compact_message(result)
    assert len(text.encode("utf-8")) < MAX_TERMINATION_MESSAGE_BYTES


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("", "not JSON"),
        ("{truncated", "not JSON"),
        ('{"schema": "other/v1"}', "not a gpusizer.dev/probe-result/v1"),
        (json.dumps({"schema": RESULT_SCHEMA, "status": "Succeeded"}), "invalid probe result"),
    ],
)
def test_parse_result_rejects_other_documents(message: str, error: str) -> None:
    with pytest.raises(InvalidResult, match=error):
        parse_result(message)
