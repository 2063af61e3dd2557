"""The request mix of the webhook benchmark: GPUWorkloads as clusters send them, and their verdicts.

Twenty bodies, each an example workload from ``examples/`` (a few changed so that they are denied
the way users' specs are): half LLM serving (on vLLM, TGI and transformers),
a fifth training (LoRA, QLoRA, FSDP, a full fine-tune that fits no GPU unsharded), the rest
image and video diffusion; four of the twenty (20 %) are denials with computed fixes, one per
kind of workload and a second serving one. Each body says which verdict it is there to measure;
:func:`expected` runs ``gpu-sizer estimate -o json`` on the mix and refuses a body whose verdict
is not the intended one, so a change to the memory model cannot silently turn the denials into
admissions (which happened once: a ``maxNumSeqs`` that became a cap under the KV-pool semantics).
The expected denial message is the ``Ready`` condition message the CLI writes, which the webhook
must send word for word (the parity tests check the same for the examples).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
#: The namespace every body is sent for; the benchmark's policy gives it the default headroom
#: (0.10), the same as ``gpu-sizer estimate`` applies, so verdicts and messages are comparable.
NAMESPACE = "bench"

Change = Callable[[dict[str, Any]], None]


def _unsharded(spec: dict[str, Any]) -> None:
    """Full fine-tune without FSDP: 16 bytes per parameter of weights, gradients, master
    weights and Adam's moments on one GPU (about 100 GiB for 7B): fits no 80 GB class."""
    spec["training"]["parallelism"] = {"strategy": "none", "dataParallelSize": 1}


@dataclass(frozen=True)
class Body:
    """One GPUWorkload of the mix: ``example`` under ``examples/``, optionally changed."""

    label: str
    kind: str  # serving | training | diffusion
    example: str
    admit: bool  # the verdict this body is in the mix to measure
    change: Change | None = None

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load((EXAMPLES / self.example).read_text())
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": self.label, "namespace": NAMESPACE}
        if self.change is not None:
            self.change(doc["spec"])
        return doc


MIX: tuple[Body, ...] = (
    Body("llama-3-8b-vllm", "serving", "llama-3-8b-vllm-bf16.yaml", True),
    Body("qwen3-30b-a3b-tp2", "serving", "qwen3-30b-a3b-vllm-tp2.yaml", True),
    Body("qwen2-7b-tgi", "serving", "qwen2-7b-tgi.yaml", True),
    Body("gemma-3-27b-vllm", "serving", "gemma-3-27b-it-vllm.yaml", True),
    Body("mixtral-8x7b-awq", "serving", "mixtral-8x7b-awq.yaml", True),
    Body("llama-3.1-8b-32k", "serving", "llama-3.1-8b-vllm-32k-h100.yaml", True),
    Body("phi-3-mini-hf", "serving", "phi-3-mini-transformers-l4.yaml", True),
    Body("deepseek-v2-lite", "serving", "deepseek-v2-lite-vllm.yaml", True),
    Body("llama-3-8b-on-l4", "serving", "llama-3-8b-too-big-for-l4.yaml", False),
    Body("qwen2.5-vl-72b-40gb", "serving", "qwen2.5-vl-72b-a100-40gb-tp4.yaml", False),
    Body("llama-2-13b-lora", "training", "llama-2-13b-lora.yaml", True),
    Body("llama-2-70b-qlora", "training", "llama-2-70b-qlora-48gb.yaml", True),
    Body("llama-2-7b-fsdp8", "training", "llama-2-7b-full-fsdp-8gpu.yaml", True),
    Body("llama-2-7b-full-1gpu", "training", "llama-2-7b-full-fsdp-8gpu.yaml", False, _unsharded),
    Body("flux1-dev", "diffusion", "flux1-dev-1024.yaml", True),
    Body("sdxl-batch4", "diffusion", "sdxl-base-1024-batch4.yaml", True),
    Body("sd15", "diffusion", "sd15-txt2img-l4.yaml", True),
    Body("wan21-1.3b-480p", "diffusion", "wan21-t2v-1.3b-480p-4090.yaml", True),
    Body("wan21-14b-720p", "diffusion", "wan21-t2v-14b-720p.yaml", True),
    Body("wan22-a14b-48gb", "diffusion", "wan22-t2v-a14b-720p-too-big-for-48gb.yaml", False),
)


@dataclass(frozen=True)
class Expected:
    """What the webhook must answer for a body: ``allowed``, and for a denial its message."""

    allowed: bool
    message: str | None


class MixError(Exception):
    """A body's verdict is not the one it is in the mix to measure."""


def expected(bodies: tuple[Body, ...] = MIX) -> list[Expected]:
    """Each body's answer per ``gpu-sizer estimate -o json`` (the real CLI, in a subprocess).

    :raises MixError: a body's verdict differs from :attr:`Body.admit`, or the CLI failed.
    """
    with tempfile.TemporaryDirectory(prefix="bench-mix-") as tmp:
        path = Path(tmp) / "mix.yaml"
        path.write_text(yaml.safe_dump_all([b.document() for b in bodies]))
        run = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from gpu_sizer.cli import main; sys.exit(main(sys.argv[1:]))",
                "estimate",
                str(path),
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if run.returncode not in (0, 1):
        raise MixError(f"gpu-sizer estimate exited {run.returncode}: {run.stderr.strip()}")
    items = json.loads(run.stdout)["items"]
    answers: list[Expected] = []
    wrong: list[str] = []
    for body, item in zip(bodies, items, strict=True):
        ready = next(c for c in item["status"]["conditions"] if c["type"] == "Ready")
        allowed = item["status"]["phase"] != "Rejected"
        if allowed is not body.admit:
            wrong.append(
                f"{body.label} ({body.example}): meant to be "
                f"{'admitted' if body.admit else 'denied'}, gpu-sizer estimate says "
                f"{item['status']['phase']}: {ready['message']}"
            )
        answers.append(Expected(allowed, None if allowed else ready["message"]))
    if wrong:
        raise MixError("bodies whose verdict is not the one they measure:\n" + "\n".join(wrong))
    return answers


def review(doc: dict[str, Any], uid: str, name: str) -> bytes:
    """An AdmissionReview v1 CREATE of ``doc`` (renamed ``name``), as the API server sends it."""
    obj = {**doc, "metadata": {**doc["metadata"], "name": name, "uid": uid}}
    resource = {"group": "gpusizer.dev", "version": "v1alpha1", "resource": "gpuworkloads"}
    kind = {"group": "gpusizer.dev", "version": "v1alpha1", "kind": "GPUWorkload"}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": kind,
                "resource": resource,
                "requestKind": kind,
                "requestResource": resource,
                "name": name,
                "namespace": NAMESPACE,
                "operation": "CREATE",
                "userInfo": {
                    "username": "bench",
                    "uid": "1",
                    "groups": ["system:authenticated"],
                },
                "object": obj,
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
    ).encode()


def distinct(doc: dict[str, Any], i: int) -> dict[str, Any]:
    """``doc`` with a model name no other request carries (informational: same verdict and
    message), so that nothing keyed on the spec has seen it before."""
    spec = copy.deepcopy(doc["spec"])
    base = spec["model"].get("name") or "model"
    spec["model"]["name"] = f"{base}-{i}"
    return {**doc, "spec": spec}
