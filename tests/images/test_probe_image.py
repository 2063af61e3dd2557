"""The probe image as built (``docker/probe.Dockerfile``), run as the measurement Job runs it.

The command, environment and security context come from the operator's own Job manifest
(:func:`gpu_sizer.measurement.job.job_manifest`) for a tiny spec, so what runs here is what a
cluster would start, on the CPU: the image's ``python`` on PATH, user 65532, a read-only root
filesystem and an emptyDir at ``/tmp``. The one change is the termination-message path: kubelet
bind-mounts a host file at ``/dev/termination-log``; here ``/dev`` is the host's, so the probe's
``--termination-log`` points into the ``/tmp`` volume instead. The result is then judged by the
measurement protocol (DESIGN.md): one JSON document on stdout, the same compact and under 4096
bytes in the termination log, honest about the device (``device: cpu``, NVML unavailable with the
reason), and readable by the operator image's own parser.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpu_sizer.api import parse_spec, spec_hash
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.measurement.job import GIB, JobRequest, job_manifest, job_name
from gpu_sizer.measurement.result import (
    MAX_TERMINATION_MESSAGE_BYTES,
    RESULT_SCHEMA,
    parse_result,
)
from tests.images.buildah import Container, Store, Volume, run_leftovers
from tests.probe.conftest import inference_spec, training_spec

L4 = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-l4")
TERMINATION_LOG = "/tmp/termination-log"
PARSE = """
import json, sys
from gpu_sizer.measurement.result import parse_result
result = parse_result(open(sys.argv[1], encoding="utf-8").read())
print(json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True)))
"""


def job_container(spec: dict[str, Any], image: str) -> dict[str, Any]:
    """The probe container of the Job the operator would create for ``spec`` on an L4."""
    parsed = parse_spec(spec)
    digest = spec_hash(parsed)
    request = JobRequest(
        namespace="ml-team",
        workload="tiny",
        workload_uid="00000000-0000-0000-0000-000000000001",
        spec_hash=digest,
        gpu_class=L4,
        gpus=1,
        memory_bytes=4 * GIB,
        image=image,
        name=job_name("tiny", digest, L4.name, 4 * GIB),
    )
    container: dict[str, Any] = job_manifest(parsed, request)["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def emptydir(tmp_path: Path, name: str = "tmp") -> Volume:
    folder = tmp_path / name
    folder.mkdir()
    folder.chmod(0o1777)
    return Volume(folder, "/tmp")


@pytest.fixture(scope="module")
def job_run(
    probe: Container, probe_image: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The Job's probe command for a tiny Llama, run once in the probe image."""
    container = job_container(inference_spec(), probe_image)
    assert container["image"] == probe_image
    command = list(container["command"])
    command[command.index("--termination-log") + 1] = TERMINATION_LOG
    env = {e["name"]: e["value"] for e in container["env"]}
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["runAsNonRoot"] is True
    tmp = emptydir(tmp_path_factory.mktemp("probe-job"))
    assert [m["mountPath"] for m in container["volumeMounts"]] == [tmp.path]
    before = probe.run_entries()
    proc = probe.run(command, env=env, volumes=[tmp], user=f"{context['runAsUser']}", timeout=600)
    return {
        "proc": proc,
        "tmp": tmp,
        "leftovers": run_leftovers(before, probe),
        "termination": (tmp.host / "termination-log").read_text(encoding="utf-8")
        if (tmp.host / "termination-log").exists()
        else "",
    }


def test_entry_point_is_the_jobs_command(store: Store, probe_image: str) -> None:
    config = store.inspect(probe_image)["OCIv1"]["config"]
    assert config["Entrypoint"] == ["python", "-m", "gpu_sizer.probe"]
    assert job_container(inference_spec(), probe_image)["command"][:3] == config["Entrypoint"]


def test_the_jobs_command_measures_on_the_cpu_and_says_so(job_run: dict[str, Any]) -> None:
    proc = job_run["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Read-only file system" not in proc.stderr, proc.stderr[-3000:]
    result = json.loads(proc.stdout)  # exactly one JSON document, nothing else on stdout
    assert result["schema"] == RESULT_SCHEMA
    assert result["status"] == "Succeeded", result.get("message")
    assert result["mode"] == "Synthetic"
    assert result["device"] == "cpu" and result["gpuCount"] == 0
    assert result["gpuClass"] == L4.name
    assert result["peakRssBytes"] > 0 and result["weightsBytes"] > 0
    assert "peakAllocatedBytes" not in result  # no GPU figure is made up on the CPU
    nvml = result["nvml"]
    assert nvml["available"] is False and nvml["reason"], nvml
    assert result["torchVersion"]


def test_the_termination_message_is_the_compact_result(job_run: dict[str, Any]) -> None:
    text = job_run["termination"]
    assert text, "no termination log written"
    assert len(text.encode("utf-8")) < MAX_TERMINATION_MESSAGE_BYTES == 4096
    assert "\n" not in text.strip()  # compact
    compact = parse_result(text)  # what the operator does with the pod's message
    full = json.loads(job_run["proc"].stdout)
    assert compact.status == full["status"] and compact.device == full["device"]
    assert compact.peak_rss_bytes == full["peakRssBytes"]
    assert compact.nvml is not None and compact.nvml.available is False


def test_the_operator_image_reads_the_probe_images_result(
    operator: Container, job_run: dict[str, Any]
) -> None:
    """The two images agree on the protocol: the operator image's parser takes the message the
    probe image wrote."""
    tmp = job_run["tmp"]
    given = Volume(tmp.host, "/in", read_only=True)
    scratch = emptydir(tmp.host.parent, "operator-tmp")
    proc = operator.run(["python", "-c", PARSE, "/in/termination-log"], volumes=[given, scratch])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parsed = json.loads(proc.stdout)
    assert parsed["schema"] == RESULT_SCHEMA and parsed["device"] == "cpu"
    assert parsed["status"] == "Succeeded"


def test_nothing_is_written_outside_tmp(job_run: dict[str, Any]) -> None:
    assert job_run["leftovers"] == []
    written = sorted(p.name for p in job_run["tmp"].host.iterdir())
    assert "termination-log" in written


def test_gpu_sizer_probe_trains_on_the_cpu(probe: Container, tmp_path: Path) -> None:
    """The CLI entry point too (``gpu-sizer probe``), on a tiny training spec."""
    tmp = emptydir(tmp_path)
    (tmp.host / "spec.json").write_text(json.dumps(training_spec()))
    proc = probe.run(
        ["gpu-sizer", "probe", "--spec", "/tmp/spec.json", "--device", "cpu",
         "--termination-log", TERMINATION_LOG],
        volumes=[tmp],
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "Succeeded" and result["device"] == "cpu", result.get("message")
    assert result["trainableParameterCount"] > 0
