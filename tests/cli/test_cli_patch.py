"""status.recommendation.nodeAffinity / .resources and `gpu-sizer estimate -o patch`.

The snippets and the patch must be valid Kubernetes: they are checked against the Kubernetes
OpenAPI schema with kubernetes-validate, placed where they belong (a Pod's affinity, a container's
resources, a Deployment after the strategic-merge patch is applied).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpu_sizer.api import Basis, RecommendationStatus
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.cli import main
from gpu_sizer.sizing.placement import node_affinity, pod_template_patch, resources, snippets

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FITS = EXAMPLES / "llama-3-8b-vllm-bf16.yaml"
TOO_BIG = EXAMPLES / "llama-3-8b-too-big-for-l4.yaml"
BY_NAME = {c.name: c for c in DEFAULT_CATALOG}
K8S = kubernetes_validate.utils.latest_version()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def deployment(container: str = "server") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"app": "llama"}},
            "template": {
                "metadata": {"labels": {"app": "llama"}},
                "spec": {
                    "containers": [
                        {"name": "sidecar", "image": "busybox"},
                        {
                            "name": container,
                            "image": "vllm/vllm-openai:v0.11.0",
                            "resources": {"limits": {"memory": "64Gi"}},
                        },
                    ]
                },
            },
        },
    }


def strategic_merge(target: Any, patch: Any) -> Any:
    """The part of Kubernetes' strategic merge this patch uses: maps merge, ``containers`` merge
    by ``name``, other lists (``nodeSelectorTerms``) replace (k8s.io/api core/v1 patch tags)."""
    if isinstance(target, dict) and isinstance(patch, dict):
        out = dict(target)
        for key, value in patch.items():
            if key == "containers" and isinstance(value, list):
                by_name = {c["name"]: c for c in out.get(key, [])}
                merged = [strategic_merge(c, next((p for p in value if p["name"] == c["name"]), {}))
                          for c in out.get(key, [])]  # fmt: skip
                merged += [p for p in value if p["name"] not in by_name]
                out[key] = merged
            else:
                out[key] = strategic_merge(out.get(key), value)
        return out
    return copy.deepcopy(patch)


def test_snippets_are_valid_kubernetes_in_a_pod() -> None:
    for name in ("nvidia-l4", "nvidia-h100-80gb", "amd-mi300x", "nvidia-a100-80gb-mig-1g.10gb"):
        cls = BY_NAME[name]
        parts = snippets(cls, 1)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "affinity": {"nodeAffinity": parts["node_affinity"].model_dump(by_alias=True)},
                "containers": [
                    {"name": "c", "image": "x", "resources": parts["resources"].model_dump()}
                ],
            },
        }
        kubernetes_validate.validate(pod, K8S, strict=True)


def test_whole_gpu_and_mig_strategies() -> None:
    h100 = BY_NAME["nvidia-h100-80gb"]
    terms = node_affinity(h100).model_dump(by_alias=True)
    expr = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert expr["matchExpressions"] == [
        {
            "key": "nvidia.com/gpu.product",
            "operator": "In",
            "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"],
        }
    ]
    assert resources(h100, 2).limits == {"nvidia.com/gpu": "2"}
    assert resources(BY_NAME["amd-mi300x"], 8).limits == {"amd.com/gpu": "8"}
    mig = BY_NAME["nvidia-a100-80gb-mig-1g.10gb"]
    # single (GPU Operator default): the MIG product label, one nvidia.com/gpu per slice.
    single = node_affinity(mig).model_dump(by_alias=True)
    values = single["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][0]["values"]
    assert "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb" in values
    assert resources(mig, 1).limits == {"nvidia.com/gpu": "1"}
    # mixed: the whole GPU's product label and GFD's per-profile count label.
    mixed = node_affinity(mig, "mixed").model_dump(by_alias=True)
    exprs = mixed["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ]
    assert "NVIDIA-A100-SXM4-80GB" in exprs[0]["values"]
    assert exprs[1] == {"key": "nvidia.com/mig-1g.10gb.count", "operator": "Gt", "values": ["0"]}
    assert resources(mig, 1, "mixed").limits == {"nvidia.com/mig-1g.10gb": "1"}


def test_status_recommendation_carries_the_snippets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "estimate", str(FITS), "-o", "yaml")
    assert code == 0
    rec = yaml.safe_load(out)["status"]["recommendation"]
    terms = rec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    assert rec["resources"] == {"limits": {"nvidia.com/gpu": str(rec["gpuCount"])}}


def test_patch_applies_to_a_deployment(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "estimate", str(FITS), "-o", "patch", "--container", "server")
    assert code == 0, err
    patch = yaml.safe_load(out)
    patched = strategic_merge(deployment(), patch)
    kubernetes_validate.validate(patched, K8S, strict=True)
    template = patched["spec"]["template"]
    server = next(c for c in template["spec"]["containers"] if c["name"] == "server")
    assert server["resources"]["limits"] == {"memory": "64Gi", "nvidia.com/gpu": "1"}
    assert server["image"] == "vllm/vllm-openai:v0.11.0"
    sidecar = next(c for c in template["spec"]["containers"] if c["name"] == "sidecar")
    assert "resources" not in sidecar
    notes = template["metadata"]["annotations"]
    assert notes["gpusizer.dev/basis"] == "Estimate" and notes["gpusizer.dev/spec-hash"]
    assert template["metadata"]["labels"] == {"app": "llama"}
    expr = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    cls = BY_NAME[notes["gpusizer.dev/gpu-class"]]
    assert expr["values"] == sorted(cls.products)


def test_patch_args_name_the_model_or_are_left_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A strategic merge replaces a container's whole args list: the engine's args go in only
    with the flag that names the model, or a patch applied would start vLLM without one."""
    code, out, err = run(capsys, "estimate", str(FITS), "-o", "patch", "--container", "server")
    assert code == 0, err
    [container] = yaml.safe_load(out)["spec"]["template"]["spec"]["containers"]
    name = yaml.safe_load(FITS.read_text())["spec"]["model"]["name"]
    assert container["args"][0] == f"--model={name}"
    assert any(a.startswith("--gpu-memory-utilization=") for a in container["args"])

    doc = yaml.safe_load(FITS.read_text())
    del doc["spec"]["model"]["name"]
    unnamed = tmp_path / "unnamed.yaml"
    unnamed.write_text(yaml.safe_dump(doc))
    code, out, err = run(capsys, "estimate", str(unnamed), "-o", "patch", "--container", "server")
    assert code == 0, err
    [container] = yaml.safe_load(out)["spec"]["template"]["spec"]["containers"]
    assert "args" not in container
    assert "spec.model.name is not set" in err and "--gpu-memory-utilization=" in err
    own = deployment()
    own["spec"]["template"]["spec"]["containers"][1]["args"] = ["--model=mine", "--port=8000"]
    patched = strategic_merge(own, yaml.safe_load(out))
    server = patched["spec"]["template"]["spec"]["containers"][1]
    assert server["args"] == ["--model=mine", "--port=8000"]


def test_patch_for_several_documents_and_a_workload_without_recommendation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "estimate", str(FITS), str(TOO_BIG), "-o", "patch")
    assert code == 1  # the too-big example has no safe headroom: no patch for it
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert len(docs) == 1 and out.startswith("# ")
    assert "no patch: NoSafeHeadroom" in err
    # The container defaults to the GPUWorkload's name.
    name = yaml.safe_load(FITS.read_text())["metadata"]["name"]
    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["name"] == name


def test_patch_needs_the_snippets() -> None:
    rec = RecommendationStatus(
        gpu_class="nvidia-l4",
        gpu_count=1,
        gpu_memory_bytes=1,
        required_bytes_per_gpu=1,
        headroom_fraction=0.5,
        basis=Basis.Estimate,
    )
    with pytest.raises(ValueError, match="nodeAffinity"):
        pod_template_patch(rec, container="c")


def test_gitops_doc_sample_is_the_cli_output(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "gitops.md").read_text()
    section = text.split("## Rendering the recommendation", 1)[1]
    sample = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    code, out, _ = run(capsys, "estimate", str(FITS), "-o", "patch", "--container", "server")
    assert code == 0
    produced = yaml.safe_load(out)
    # The spec hash follows the spec's normalization, which other changes may move.
    for doc in (sample, produced):
        doc["spec"]["template"]["metadata"]["annotations"].pop("gpusizer.dev/spec-hash")
    assert sample == produced


def test_mixed_strategy_flag_sets_the_mig_resource(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A small model pinned to a MIG slice: the snippets and the patch follow --mig-strategy
    # (NVIDIA k8s-device-plugin README, "MIG strategies").
    doc = yaml.safe_load(FITS.read_text())
    doc["spec"]["placement"] = {"gpuClasses": ["nvidia-a100-80gb-mig-7g.80gb"]}
    path = tmp_path / "mig.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = run(capsys, "estimate", str(path), "-o", "yaml")
    assert code == 0, err
    single = yaml.safe_load(out)["status"]["recommendation"]
    assert single["gpuClass"] == "nvidia-a100-80gb-mig-7g.80gb"
    assert single["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    code, out, err = run(capsys, "estimate", str(path), "-o", "yaml", "--mig-strategy", "mixed")
    assert code == 0, err
    mixed = yaml.safe_load(out)["status"]["recommendation"]
    assert mixed["resources"] == {"limits": {"nvidia.com/mig-7g.80gb": "1"}}
    exprs = mixed["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    assert exprs[1]["key"] == "nvidia.com/mig-7g.80gb.count"
    code, out, err = run(
        capsys, "estimate", str(path), "-o", "patch", "--mig-strategy", "mixed", "--container", "s"
    )
    assert code == 0, err
    patch = yaml.safe_load(out)
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/mig-7g.80gb": "1"}}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-o", "patch", "--container", "Bad Name!"], "--container 'Bad Name!': not a container"),
        (["-o", "patch", "--container", "a" * 64], "(DNS-1123 label)"),
        (["--container", "server"], "--container needs -o patch"),
        (["-o", "yaml", "--container", "server"], "--container needs -o patch"),
    ],
)
def test_container_flag_is_checked(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, "estimate", str(FITS), *argv)
    assert code == 2
    assert out == ""
    assert message in err


def test_calibration_without_usable_records_warns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "estimate", str(FITS), "--calibration", "apply")
    assert code == 0
    assert "--calibration apply without --records: there are no records" in err
    records = tmp_path / "records.yaml"
    records.write_text(FITS.read_text())  # a workload never measured: no usable record
    code, _, err = run(capsys, "estimate", str(FITS), "--records", str(records))
    assert code == 0
    assert f"Warning: 0 usable records in {records}" in err
