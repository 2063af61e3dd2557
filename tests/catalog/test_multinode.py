"""A training job wider than one node: workers x GPUs per worker, launchers, bounds."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from tests.architectures import LLAMA_3_8B, LLAMA_3_70B

from gpu_sizer.api import Initialization, parse_spec
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.cli import main
from gpu_sizer.inventory.nodes import ClassCapacity
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.placement import pod_template_patch
from gpu_sizer.sizing.verdict import assess
from gpu_sizer.sizing.workers import MAX_JOB_GPUS, split

H100 = "nvidia-h100-80gb"


def _job(arch: dict[str, Any], dp: int, **parallelism: Any) -> Any:
    return parse_spec(
        {
            "model": {"architecture": arch},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 4096,
                "activationCheckpointing": True,
                "parallelism": {
                    "strategy": "fsdp-full-shard",
                    "dataParallelSize": dp,
                    **parallelism,
                },
            },
            "placement": {"gpuClasses": [H100]},
        }
    )


def test_split_takes_the_largest_divisor_a_node_holds() -> None:
    assert (split(16, 8).workers, split(16, 8).gpus_per_worker) == (2, 8)
    assert (split(64, 8).workers, split(64, 8).gpus_per_worker) == (8, 8)
    assert (split(12, 8).workers, split(12, 8).gpus_per_worker) == (2, 6)
    assert (split(4, 8).workers, split(4, 8).gpus_per_worker) == (1, 4)
    assert (split(7, 4).workers, split(7, 4).gpus_per_worker) == (7, 1)


def test_a_16_gpu_fsdp_job_is_two_workers_of_eight() -> None:
    """Llama-3-8B full fine-tune, FSDP full shard over 16 GPUs: two H100 nodes of 8, each pod
    asking for 8 GPUs, as torchrun --nnodes=2 --nproc-per-node=8 or a PyTorchJob of a Master
    and one Worker."""
    a = assess(_job(LLAMA_3_8B, 16))
    assert a.verdict is Verdict.Fits
    rec = a.recommendation
    assert rec is not None
    assert (rec.gpu_count, rec.worker_count, rec.gpus_per_worker) == (16, 2, 8)
    assert rec.resources is not None and rec.resources.limits == {"nvidia.com/gpu": "8"}
    assert rec.launch is not None
    assert rec.launch.torchrun_args == ["--nnodes=2", "--nproc-per-node=8"]
    assert rec.launch.pytorch_job_replicas == {"Master": 1, "Worker": 1}
    assert rec.launch.job_set_parallelism == rec.launch.leader_worker_set_size == 2
    assert "between nodes" in rec.launch.interconnect
    assert rec.host_memory_bytes_per_worker is not None and rec.host_memory_bytes_per_worker > 0


def test_a_64_gpu_job_is_eight_workers_and_the_patch_is_one_workers_template() -> None:
    """Llama-3-70B over 64 H100s with rank 0 loading (``fsdp_cpu_ram_efficient_loading``, the
    HF blog's recipe for 70B): eight workers of eight GPUs."""
    a = assess(_rank0(_job(LLAMA_3_70B, 64)))
    rec = a.recommendation
    assert a.verdict is Verdict.Fits and rec is not None
    assert (rec.gpu_count, rec.worker_count, rec.gpus_per_worker) == (64, 8, 8)
    patch = pod_template_patch(rec, container="trainer")
    template = patch["spec"]["template"]
    limits = template["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8"}
    annotations = template["metadata"]["annotations"]
    assert annotations["gpusizer.dev/worker-count"] == "8"
    assert annotations["gpusizer.dev/gpus-per-worker"] == "8"
    # Rank 0 stages the fp32 model (4 x 70.55e9 B = 262.9 GiB, the HF blog's "70*4"): the
    # request is that, rounded up to GiB; no memory limit (see pod_template_patch).
    resources = template["spec"]["containers"][0]["resources"]
    assert rec.host_memory_bytes_per_worker == 4 * 70_553_706_496
    assert resources["requests"] == {"memory": "263Gi"}
    assert "memory" not in resources["limits"]


def test_estimate_patch_names_the_workers_on_stderr(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": "fsdp16", "namespace": "training"},
        "spec": _job(LLAMA_3_8B, 16).model_dump(by_alias=True, exclude_none=True, mode="json"),
    }
    path = tmp_path / "fsdp16.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["estimate", str(path), "-o", "patch"]) == 0
    out, err = capsys.readouterr()
    patch = yaml.safe_load(out)
    resources = patch["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": "8"}
    # The default transformers + FSDP load stages the model once per process: 8 x the fp32
    # Llama-3-8B (8,030,261,248 parameters, 239.3 GiB), requested per worker.
    assert resources["requests"] == {"memory": "240Gi"}
    assert "--nnodes=2 --nproc-per-node=8" in err
    assert "requests 240Gi of host memory per worker" in err
    assert main(["estimate", str(path)]) == 0
    table, _ = capsys.readouterr()
    row = table.splitlines()[1]
    assert f"{H100} 2x8" in row and "x16" not in row


def test_a_one_node_job_keeps_its_table_and_gets_its_host_memory(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An 8-GPU FSDP job is one pod: the CLASS cell stays ``CLASS x8``; its worker is the pod,
    whose container requests the host memory of the 8 processes' staged copies."""
    doc = {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": "fsdp8", "namespace": "training"},
        "spec": _job(LLAMA_3_8B, 8).model_dump(by_alias=True, exclude_none=True, mode="json"),
    }
    path = tmp_path / "fsdp8.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["estimate", str(path)]) == 0
    table, _ = capsys.readouterr()
    assert f"{H100} x8 " in table.splitlines()[1]
    assert main(["estimate", str(path), "-o", "patch"]) == 0
    out, err = capsys.readouterr()
    container = yaml.safe_load(out)["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"memory": "240Gi"}
    assert "worker-count" not in str(yaml.safe_load(out)["spec"]["template"]["metadata"])
    assert "one worker's pod template" not in err


def test_gpus_per_node_from_the_spec_and_from_the_cluster() -> None:
    four = assess(_job(LLAMA_3_8B, 16, gpusPerNode=4)).recommendation
    assert four is not None and (four.worker_count, four.gpus_per_worker) == (4, 4)
    cluster = {H100: ClassCapacity(gpus_per_node=4, gpus=64, nodes=16)}
    seen = assess(_job(LLAMA_3_8B, 16), capacity=cluster).recommendation
    assert seen is not None and (seen.worker_count, seen.gpus_per_worker) == (4, 4)


def test_a_job_larger_than_any_cluster_is_not_fits() -> None:
    a = assess(_job(LLAMA_3_8B, 65_536))
    assert a.verdict is Verdict.NoSafeHeadroom and a.recommendation is None
    assert f"{MAX_JOB_GPUS:,}" in a.message and "65,536 GPUs" in a.message
    assert a.message.startswith("spec.training.parallelism")


def test_a_job_larger_than_the_clusters_nodes_of_the_class_is_not_fits() -> None:
    cluster = {H100: ClassCapacity(gpus_per_node=8, gpus=32, nodes=4)}
    a = assess(_job(LLAMA_3_70B, 64), capacity=cluster)
    assert a.verdict is Verdict.NoSafeHeadroom
    assert "the cluster has 32 nvidia-h100-80gb GPUs (4 nodes)" in a.message


def test_tensor_parallelism_stays_within_a_node() -> None:
    a = assess(_job(LLAMA_3_70B, 2, tensorParallelSize=16))
    assert a.verdict is Verdict.NoSafeHeadroom
    assert "tensorParallelSize 16 exceeds the 8 GPUs of one node" in a.message


@pytest.mark.parametrize("cls", [c for c in DEFAULT_CATALOG if not c.is_mig])
def test_every_whole_gpu_class_has_a_node_size(cls: Any) -> None:
    assert 1 <= cls.gpus_per_node <= 64


def _init(spec: Any, init: Initialization) -> Any:
    tr = spec.training
    assert tr is not None
    return spec.model_copy(update={"training": tr.model_copy(update={"initialization": init})})


def _rank0(spec: Any) -> Any:
    return _init(spec, Initialization.RankZeroCpu)


def test_host_memory_per_worker_of_the_default_fsdp_load() -> None:
    """Hugging Face blog "Fine-tuning Llama 2 70B using PyTorch FSDP" (ram-efficient-pytorch-fsdp,
    accelerate 0.22, transformers 4.32): "If each process/rank within a node loads the Llama-70B
    model, it would require 70*4*8 GB ~ 2TB of CPU RAM". The Trainer given a model object
    stages the fp32 model once per rank, so each 8-GPU worker needs about 2 TB; with rank 0
    loading (``fsdp_cpu_ram_efficient_loading``) one copy on the first worker. Left at
    ``initialization: Auto`` the job also counts TRL's ``device_map="auto"`` path (a whole copy
    per process on the node's GPUs), which no 80 GB GPU holds: not Fits, the note says how to
    name the path."""
    params = 70_553_706_496  # Llama-3-70B
    auto = assess(_job(LLAMA_3_70B, 64))
    assert auto.verdict is Verdict.NoSafeHeadroom and auto.recommendation is None
    assert any("device_map 'auto'" in n and "RankZeroCpu" in n for n in auto.estimate.notes)
    rec = assess(_init(_job(LLAMA_3_70B, 64), Initialization.CpuPerRank)).recommendation
    assert rec is not None and rec.host_memory_bytes_per_worker is not None
    assert rec.host_memory_bytes_per_worker == 8 * 4 * params
    assert 2.0e12 < rec.host_memory_bytes_per_worker < 2.4e12
    rec0 = assess(_rank0(_job(LLAMA_3_70B, 64))).recommendation
    assert rec0 is not None and rec0.host_memory_bytes_per_worker == 4 * params
