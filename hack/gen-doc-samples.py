"""Regenerate the samples in the docs from today's code: ``python hack/gen-doc-samples.py``.

A sample a doc shows (``gpu-sizer estimate`` output, a webhook's denial, a table of estimates)
is written between ``<!-- generated: NAME -->`` and ``<!-- end generated -->`` lines, and this
script rewrites every such block with what the code produces now, so a doc cannot show the
output of an older memory model. ``--check`` rewrites nothing and exits 1 naming the blocks
that differ (``tests/docs/test_doc_samples.py`` runs the same check).

Everything runs in this process, without a cluster: the CLI's ``estimate`` (the status the
operator writes before measuring), the validating webhook's :func:`review` and the pod
webhook's :func:`review_pod` on that status, over the files in ``examples/``. Timestamps are
not part of any sample, so the output depends on the code and the examples only.

Run with ``PYTHONPATH=operator:testbed`` (the demo's workloads are the testbed's).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
#: The docs that hold generated blocks.
DOCS = ("README.md", "docs/admission.md", "docs/memory-model.md", "docs/benchmarks.md")

BLOCK = re.compile(
    r"(?P<open><!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)"
    r"(?P<close><!-- end generated -->)",
    re.DOTALL,
)
GIB = 2**30


class UnknownBlock(ValueError):
    """A doc names a generated block this script has no generator for."""


def _cli(*argv: str) -> tuple[int, str, str]:
    """``gpu-sizer ARGV`` in this process: (exit status, stdout, stderr)."""
    from gpu_sizer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _objects(*paths: str | Path) -> list[dict[str, Any]]:
    """``gpu-sizer estimate -o json PATHS``: the objects with the status before measuring."""
    code, out, err = _cli("estimate", "-o", "json", *map(str, paths))
    if code == 2:
        raise ValueError(f"gpu-sizer estimate refused the input: {err}")
    data = json.loads(out)
    return list(data["items"]) if data.get("kind") == "List" else [data]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- README.md -----------------------------------------------------------------------------


def estimate_examples() -> str:
    """``gpu-sizer estimate examples/``: the table's first rows and one workload's verdict."""
    _, out, err = _cli("estimate", _rel(EXAMPLES))
    rows = out.splitlines()
    verdict = [line for line in err.splitlines() if line.startswith("inference/llama-3-8b-on-l4: ")]
    lines = ["$ gpu-sizer estimate examples/", *rows[:4], "...", *verdict]
    return "```console\n" + "\n".join(lines) + "\n```\n"


def recommendation_llama_3_8b_chat() -> str:
    """The recommendation of ``examples/llama-3-8b-vllm-bf16.yaml`` as kubectl prints it."""
    (obj,) = _objects(EXAMPLES / "llama-3-8b-vllm-bf16.yaml")
    meta, rec = obj["metadata"], obj["status"]["recommendation"]
    term = rec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expr = term["nodeSelectorTerms"][0]["matchExpressions"][0]
    values = ", ".join(expr["values"])
    limits = ", ".join(f"{k}: {v}" for k, v in rec["resources"]["limits"].items())
    return (
        "```sh\n"
        f"kubectl get gpuw -n {meta['namespace']} {meta['name']} \\\n"
        "  -o jsonpath='{.status.recommendation.gpuClass} x{.status.recommendation.gpuCount}"
        '{"\\n"}\'\n'
        f"# {rec['gpuClass']} x{rec['gpuCount']}   ->  in the Deployment's pod template:\n"
        f"#   affinity.nodeAffinity...matchExpressions: [{{key: {expr['key']}, operator: "
        f"{expr['operator']},\n"
        f"#                                               values: [{values}]}}]\n"
        f"#   containers[0].resources.limits: {{{limits}}}\n"
        "```\n"
    )


# --- docs/admission.md ---------------------------------------------------------------------

TOO_BIG = EXAMPLES / "llama-3-8b-too-big-for-l4.yaml"
CHAT = EXAMPLES / "llama-3-8b-vllm-bf16.yaml"


def _review(path: Path) -> Any:
    from gpu_sizer.admission.verdict import review
    from gpu_sizer.catalog import DEFAULT_CATALOG
    from gpu_sizer.policy.namespace import Policy

    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return review(
        doc["spec"],
        namespace=doc["metadata"]["namespace"],
        policy=Policy().for_namespace({}),
        catalog=DEFAULT_CATALOG,
    )


def apply_too_big_for_l4() -> str:
    """What ``kubectl apply`` prints when the validating webhook denies the L4 example."""
    answer = _review(TOO_BIG)
    rel = _rel(TOO_BIG)
    return (
        "```text\n"
        f"$ kubectl apply -f {rel}\n"
        f'Error from server: error when creating "{rel}": admission webhook '
        f'"validate.gpuworkloads.gpusizer.dev" denied the request: {answer.message}\n'
        "```\n"
    )


def _pod(workload: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload}-7d9f-x2k4q",
            "labels": {"app": "llama", "gpusizer.dev/workload": workload},
        },
        "spec": {"containers": [{"name": "server", "image": image}]},
    }


def _review_pod(path: Path, enforcement: str) -> Any:
    from gpu_sizer.admission.pods import review_pod
    from gpu_sizer.catalog import DEFAULT_CATALOG
    from gpu_sizer.policy.namespace import PodEnforcement

    (obj,) = _objects(path)
    meta = obj["metadata"]
    return review_pod(
        _pod(meta["name"], "vllm/vllm-openai:v0.19.1"),
        meta["namespace"],
        obj,
        enforcement=PodEnforcement(enforcement),
        catalog=DEFAULT_CATALOG,
    )


def pod_mutated() -> str:
    """The pod webhook's answer for a pod of the (still Estimated) chat workload, policy Warn."""
    answer = _review_pod(CHAT, "Warn")
    pod = copy.deepcopy(answer.pod)
    name = pod["metadata"].pop("name")
    excerpt = {"metadata": pod["metadata"], "spec": pod["spec"]}
    text = yaml.safe_dump(excerpt, sort_keys=False, default_flow_style=False)
    warnings = "\n".join(f"Warning: {w}" for w in answer.warnings)
    return (
        "```yaml\n"
        f"# kubectl get pod {name} -o yaml (excerpt)\n"
        f"{text}```\n\n"
        "with the admission warning (kubectl prints it on `kubectl run`/`apply` of a bare pod; "
        "for\ncontroller-created pods it is in the API server's audit log):\n\n"
        f"```\n{warnings}\n```\n"
    )


def pod_denied_rejected() -> str:
    """The pod webhook's denial, under ``Enforce``, of a pod of the rejected L4 example."""
    answer = _review_pod(TOO_BIG, "Enforce")
    return (
        "```\n"
        'Error creating: admission webhook "mutate.pods.gpusizer.dev" denied the request: '
        f"{answer.message}\n"
        "```\n"
    )


# --- docs/memory-model.md ------------------------------------------------------------------

#: Rows of the representative table: an example, or an example with changes (path, changes,
#: label). Changes are dotted spec paths.
_ESTIMATE_ROWS: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("llama-3-8b-vllm-bf16.yaml", {}, "Llama-3-8B, vLLM bf16, 8192 tokens"),
    ("llama-3.1-8b-vllm-32k-h100.yaml", {}, "Llama-3.1-8B, vLLM, 32k tokens"),
    ("llama-3-70b-vllm-fp8-tp4.yaml", {}, "Llama-3-70B, vLLM fp8, TP 4"),
    ("mixtral-8x7b-awq.yaml", {}, "Mixtral-8x7B AWQ, vLLM"),
    ("qwen3-30b-a3b-vllm-tp2.yaml", {}, "Qwen3-30B-A3B, vLLM, TP 2"),
    ("llama-2-13b-lora.yaml", {}, "Llama-2-13B LoRA"),
    ("llama-2-70b-qlora-48gb.yaml", {}, "Llama-2-70B QLoRA"),
    ("llama-2-7b-full-fsdp-8gpu.yaml", {}, "Llama-2-7B full, FSDP full-shard x 8"),
    (
        "llama-2-7b-full-fsdp-8gpu.yaml",
        {"training.parallelism.strategy": "zero2"},
        "the same, ZeRO-2 x 8",
    ),
    (
        "llama-2-7b-full-fsdp-8gpu.yaml",
        {
            "training.parallelism.strategy": "zero3",
            "training.offload": {"optimizer": "Cpu"},
        },
        "the same, ZeRO-3 x 8, CPU optimizer offload",
    ),
    (
        "llama-2-7b-full-fsdp-8gpu.yaml",
        {"training.parallelism.strategy": "ddp", "training.microBatchSize": 1},
        "the same, DDP x 8, micro-batch 1",
    ),
)
_COLUMNS = (
    ("weightsBytes", "weights"),
    ("quantizationOverheadBytes", "quant. metadata"),
    ("kvCacheBytes", "KV cache"),
    ("activationBytes", "activations"),
    ("gradientBytes", "gradients"),
    ("optimizerStateBytes", "optimizer"),
    ("masterWeightBytes", "master"),
    ("communicationBufferBytes", "comm. buffers"),
    ("runtimeOverheadBytes", "runtime"),
    ("totalBytes", "total"),
)


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        doc = doc.setdefault(key, {})
    doc[last] = value


def _row_objects() -> list[tuple[str, str, dict[str, Any]]]:
    """(example file, label, estimated object) for each row of the representative table."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, (name, changes, _) in enumerate(_ESTIMATE_ROWS):
            doc = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
            for dotted, value in changes.items():
                _set(doc["spec"], dotted, value)
            path = Path(tmp) / f"{i:02d}.yaml"
            path.write_text(yaml.safe_dump(doc), encoding="utf-8")
            paths.append(path)
        objects = _objects(*paths)
    return [
        (name, label, obj) for (name, _, label), obj in zip(_ESTIMATE_ROWS, objects, strict=True)
    ]


def representative_estimates() -> str:
    """The memory model's table of representative estimates, per GPU in GiB."""
    head = ["workload (example)", "class", *(t for _, t in _COLUMNS), "peak phase", "host/node"]
    lines = [
        "| " + " | ".join(head) + " |",
        "|---|---|" + "---:|" * len(_COLUMNS) + "---|---:|",
    ]
    for name, label, obj in _row_objects():
        status = obj["status"]
        est, rec = status["estimate"], status.get("recommendation") or {}
        per = est["perGpu"]
        where = f"{rec['gpuClass']} x{rec['gpuCount']}" if rec else f"no class ({status['phase']})"
        engine = (rec.get("engineArgs") or {}).get("--gpu-memory-utilization")
        if engine is not None:
            where += f" at {engine}"
        tokens = est.get("kvCacheTokens")
        if tokens:
            label += f" ({tokens:,} tokens in the pool)"
        cells = [f"{label} (`{name}`)", where]
        cells += [f"{per[key] / GIB:.2f}" for key, _ in _COLUMNS]
        cells.append(est.get("peakPhase") or "-")
        host = est.get("hostBytesPerNode")
        cells.append(f"{host / GIB:.0f}" if host else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --- docs/benchmarks.md --------------------------------------------------------------------


def demo_size() -> str:
    """What ``gpu-sizer demo`` applies: the examples' workloads and its built-in ones."""
    from gpu_sizer_testbed import demo

    examples = len(demo._load(EXAMPLES))
    names = ", ".join(f"`{w['metadata']['name']}`" for w in demo.BUILT_IN)
    return (
        f"`gpu-sizer demo` applies the {examples} GPUWorkloads of `examples/` and "
        f"{len(demo.BUILT_IN)} built-in tiny\nworkloads ({names}) that the local probe "
        "measures on the CPU.\n"
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "estimate-examples": estimate_examples,
    "recommendation-llama-3-8b-chat": recommendation_llama_3_8b_chat,
    "apply-too-big-for-l4": apply_too_big_for_l4,
    "pod-mutated": pod_mutated,
    "pod-denied-rejected": pod_denied_rejected,
    "representative-estimates": representative_estimates,
    "demo-size": demo_size,
}


def render(text: str, cache: dict[str, str] | None = None) -> str:
    """``text`` with every generated block rewritten from today's code.

    :raises UnknownBlock: a block whose name has no generator.
    """
    cache = {} if cache is None else cache

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise UnknownBlock(f"<!-- generated: {name} --> has no generator in {__file__}")
        if name not in cache:
            cache[name] = GENERATORS[name]()
        return match["open"] + cache[name] + match["close"]

    return BLOCK.sub(body, text)


def drifted(docs: Sequence[str] = DOCS) -> dict[str, str]:
    """``{doc: rendered text}`` for each doc whose generated blocks differ from today's code."""
    cache: dict[str, str] = {}
    out = {}
    for rel in docs:
        text = (ROOT / rel).read_text(encoding="utf-8")
        new = render(text, cache)
        if new != text:
            out[rel] = new
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on drift")
    args = parser.parse_args(argv)
    changed = drifted()
    for rel, text in changed.items():
        if args.check:
            print(f"{rel}: generated samples differ from today's output", file=sys.stderr)
        else:
            (ROOT / rel).write_text(text, encoding="utf-8")
            print(f"rewrote {rel}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
