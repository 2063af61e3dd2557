"""What cannot run on the CPU is refused before torch is imported when the device is known to be
the CPU (``--device cpu``, or ``auto`` without an NVIDIA device node): the demo runs dozens of
these, and each used to pay for torch's import first. Same reasons and words either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from .conftest import ROOT, TINY_LLAMA, inference_spec

LLAMA_8B = {
    **TINY_LLAMA,
    "numHiddenLayers": 32,
    "hiddenSize": 4096,
    "intermediateSize": 14336,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 8,
    "vocabSize": 128256,
    "maxPositionEmbeddings": 8192,
}

MEASURE_WITHOUT_TORCH = """
import json, sys
from gpu_sizer.api import parse_spec
from gpu_sizer.probe.run import Options, measure
result, code = measure(parse_spec(json.loads(sys.argv[1])), Options(device=sys.argv[2]))
print(json.dumps({"code": code, "torch": "torch" in sys.modules,
                  "result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}))
"""


def _measure(spec: dict[str, Any], device: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", MEASURE_WITHOUT_TORCH, json.dumps(spec), device],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (inference_spec(LLAMA_8B, maxModelLen=8192, maxNumSeqs=16), "the CPU fallback runs tiny"),
        (
            {
                **inference_spec(),
                "model": {"architecture": TINY_LLAMA, "quantization": {"method": "awq", "bits": 4}},
            },
            "synthetic mode builds unquantized weights",
        ),
    ],
)
def test_refused_on_the_cpu_without_importing_torch(spec: dict[str, Any], reason: str) -> None:
    on_cpu = _measure(spec, "cpu")
    assert on_cpu["torch"] is False
    assert on_cpu["code"] == 0
    result = on_cpu["result"]
    assert result["status"] == "Unsupported" and result["device"] == "cpu"
    assert reason in result["message"]
    # The same verdict and words whichever way the probe learns that there is no GPU.
    if not os.path.exists("/dev/nvidiactl"):
        auto = _measure(spec, "auto")
        assert auto["torch"] is False
        assert auto["result"]["status"] == "Unsupported"
        assert auto["result"]["message"] == result["message"]


def test_a_tiny_model_still_runs_on_the_cpu() -> None:
    on_cpu = _measure(inference_spec(), "cpu")
    assert on_cpu["torch"] is True and on_cpu["result"]["status"] == "Succeeded"
