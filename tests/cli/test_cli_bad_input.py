"""Inputs a fresh user gets wrong: each ends in one line naming the file and exit 2, never a
traceback, a hang or a silent pass."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from gpu_sizer.cli import main

ROOT = Path(__file__).resolve().parents[2]
FITS = ROOT / "examples" / "llama-3-8b-vllm-bf16.yaml"
JUNK = bytes(range(256)) * 4

#: Nine levels of ten aliases: 10**9 leaves once walked, a few hundred bytes of text.
BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.parametrize("command", [["estimate", str(FITS)], ["catalog"]])
def test_catalog_that_is_not_utf8(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    junk = tmp_path / "junk.yaml"
    junk.write_bytes(JUNK)
    code, _, err = run(capsys, command[0], "--catalog", str(junk), *command[1:])
    assert code == 2
    assert err.splitlines() == [f"{junk}: cannot read: not UTF-8 (byte 128: invalid start byte)"]


def test_workload_file_that_is_not_utf8(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    junk = tmp_path / "junk.yaml"
    junk.write_bytes(JUNK)
    code, _, err = run(capsys, "estimate", str(junk))
    assert code == 2 and err.startswith(f"{junk}: cannot read: not UTF-8")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("where", ["metadata", "command"])
def test_alias_bomb_is_refused_quickly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str
) -> None:
    doc = yaml.safe_load(FITS.read_text())
    body = yaml.safe_dump(doc)
    bomb = tmp_path / "bomb.yaml"
    if where == "metadata":
        bomb.write_text(body.replace("metadata:\n", "metadata:\n  labels:\n" + _indent(BOMB, 4), 1))
    else:
        bomb.write_text(
            BOMB.replace("a0:", "x-anchors:\n  a0:", 1).replace("\na", "\n  a")
            + body
            + "  measurement:\n    mode: Command\n    command: *a9\n"
        )
    code, _, err = run(capsys, "estimate", str(bomb))
    assert code == 2
    assert "invalid YAML" in err and "aliases" in err


def _indent(text: str, n: int) -> str:
    return "".join(" " * n + line + "\n" for line in text.splitlines())


def test_duplicate_key_names_its_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = FITS.read_text().replace("maxNumSeqs: ", "maxNumSeqs: 1\n    maxNumSeqs: ", 1)
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    line = (
        next(i for i, text_line in enumerate(text.splitlines(), 1) if "maxNumSeqs" in text_line) + 1
    )
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2
    assert err.strip() == f"{path}: line {line}: invalid YAML: duplicate key maxNumSeqs"


@pytest.mark.parametrize("content", ["", "---\n", "---\n---\n", "# only a comment\n"])
def test_empty_input_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str
) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(content)
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2 and "no YAML documents" in err


def test_dev_null_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "estimate", os.devnull)
    assert code == 2


def test_endless_input_is_refused_at_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """``/dev/zero`` never ends: it is read up to the bound the webhook puts on a request body
    (8 MiB) and refused with that size, instead of growing until the machine runs out."""
    from gpu_sizer.yamlio import MAX_FILE_BYTES

    code, _, err = run(capsys, "estimate", "/dev/zero")
    assert code == 2
    assert err.startswith("/dev/zero: cannot read: larger than 8388608 bytes (8 MiB)"), err
    assert MAX_FILE_BYTES == 8 << 20


def test_file_over_the_bound_is_refused_and_one_at_it_is_read(tmp_path: Path) -> None:
    from gpu_sizer.yamlio import UnreadableFile, read_text

    at = tmp_path / "at.yaml"
    at.write_bytes(b"#" * 1000)
    assert read_text(at, limit=1000) == "#" * 1000
    with pytest.raises(UnreadableFile, match="larger than 999 bytes"):
        read_text(at, limit=999)


def test_directory_without_yaml_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("x")
    code, _, err = run(capsys, "estimate", str(tmp_path))
    assert code == 2 and err.startswith(f"{tmp_path}: no *.yaml, *.yml or *.json files")


def test_other_kinds_are_skipped_with_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"
    path = tmp_path / "mixed.yaml"
    path.write_text(
        FITS.read_text() + "---\n" + FITS.read_text().replace("chat", "chat-2") + "---\n" + cm
    )
    code, out, err = run(capsys, "estimate", str(path))
    assert code == 0 and out.count("llama-3-8b-chat") == 2
    skipped = [line for line in err.splitlines() if "skipped" in line]
    assert skipped == [f"Warning: {path}: settings: kind ConfigMap is not a GPUWorkload; skipped"]


def test_namespaces_of_the_workloads_are_skipped_quietly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A directory made for `kubectl apply -f` (examples/) carries its workloads' Namespaces:
    no warning for them; alone they are still no GPUWorkload (exit 2, a CI gate cannot pass)."""
    ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: inference}\n"
    (tmp_path / "00-namespaces.yaml").write_text(ns)
    (tmp_path / "w.yaml").write_text(FITS.read_text())
    code, out, err = run(capsys, "estimate", str(tmp_path))
    assert code == 0 and "llama-3-8b-chat" in out and "Namespace" not in err
    code, _, err = run(capsys, "estimate", str(tmp_path / "00-namespaces.yaml"))
    assert code == 2 and "No GPUWorkload documents found." in err


def test_only_other_kinds_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n")
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2 and "No GPUWorkload documents found." in err


def test_same_name_twice_warns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    changed = FITS.read_text().replace("maxNumSeqs: 16", "maxNumSeqs: 32")
    assert changed != FITS.read_text()
    path.write_text(FITS.read_text() + "---\n" + changed)
    code, out, err = run(capsys, "estimate", str(path))
    assert code == 0
    assert (
        f"Warning: {path}: inference/llama-3-8b-chat: the same namespace/name is twice in "
        f"{path} (documents 1 and 2); applying both keeps only the last"
    ) in err
    assert out.count("inference/llama-3-8b-chat ") == 2  # two different specs, two rows


def test_same_document_twice_is_estimated_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(FITS.read_text() + "---\n" + FITS.read_text())
    code, out, err = run(capsys, "estimate", str(path))
    assert code == 0
    assert (
        f"Warning: {path}: inference/llama-3-8b-chat: the same document is twice in {path} "
        "(documents 1 and 2); estimated once"
    ) in err
    assert out.count("inference/llama-3-8b-chat ") == 1


def test_same_name_in_two_files_warns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(FITS.read_text())
    (tmp_path / "b.yaml").write_text(FITS.read_text())
    code, _, err = run(capsys, "estimate", str(tmp_path))
    assert code == 0
    assert f"the same document is also in {tmp_path / 'a.yaml'}; estimated once" in err


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ("x", "metadata: must be an object"),
        ({"name": "Bad Name"}, "metadata.name: 'Bad Name' is not a valid name"),
        ({"name": "ok", "namespace": "ML_Team"}, "metadata.namespace: 'ML_Team' is not a valid"),
    ],
)
def test_invalid_metadata(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, metadata: object, expected: str
) -> None:
    doc = yaml.safe_load(FITS.read_text())
    doc["metadata"] = metadata
    path = tmp_path / "meta.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2 and expected in err


def test_estimate_notes_are_printed_as_warnings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(FITS.read_text())
    del doc["spec"]["model"]["architecture"]
    doc["spec"]["model"]["parameterCount"] = 8_000_000_000
    path = tmp_path / "bare.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 3  # incomplete: the KV cache is not counted
    assert "inference/llama-3-8b-chat: incomplete estimate: KV cache not counted" in err
    doc["spec"]["model"]["quantization"] = {"method": "awq"}
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 3
    assert "Warning: inference/llama-3-8b-chat: quantized weights are approximate" in err


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("apiVersion: v1\nmetadata: {name: x\n  spec: [\n", "line 3: invalid YAML"),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("apiVersion: v1\nkind: Config\nclusters: 5\n", "clusters must be a list"),
    ],
)
def test_accuracy_malformed_kubeconfig(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, reason: str
) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    kubeconfig.write_text(text)
    code, _, err = run(capsys, "accuracy", "--from-cluster", "--kubeconfig", str(kubeconfig))
    assert code == 2
    assert err.startswith(f"--kubeconfig {kubeconfig}: not a kubeconfig: ")
    assert reason in err


@pytest.mark.parametrize("flag", ["--kubeconfig", "--context"])
def test_accuracy_cluster_flags_need_from_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    code, _, err = run(capsys, "accuracy", str(FITS), flag, "x")
    assert code == 2
    assert err.strip() == f"{flag} needs --from-cluster"


RECORD = ROOT / "tests" / "fixtures" / "gpumeasurement-l4.yaml"


def _record(tmp_path: Path, name: str, **changes: object) -> Path:
    """The fixture record with ``changes`` ("spec.result.peakDeviceUsedBytes": value)."""
    data = yaml.safe_load(RECORD.read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        target = data
        for key in parents:
            target = target[key]
        target[leaf] = value
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "(document 1): must be a YAML/JSON object"),
        ("just a string\n", "(document 1): must be a YAML/JSON object"),
        ("apiVersion: v1\nkind: List\nitems: 5\n", "kind List: items must be a list"),
    ],
)
def test_accuracy_input_that_is_not_objects(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(text)
    code, _, err = run(capsys, "accuracy", str(path))
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"{path}: {message}")


def test_accuracy_empty_list_is_no_record(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    code, _, err = run(capsys, "accuracy", str(path))
    assert code == 1
    assert "no measured GPUWorkload in the input" in err


def test_accuracy_misspelt_record_kind(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _record(tmp_path, "r.yaml", kind="GPUMeasurment")
    code, _, err = run(capsys, "accuracy", str(path))
    assert code == 2
    assert "kind GPUMeasurment: did you mean GPUMeasurement?" in err


def test_accuracy_reads_json_in_directories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "r.json").write_text(json.dumps(yaml.safe_load(RECORD.read_text())))
    code, out, _ = run(capsys, "accuracy", str(tmp_path))
    assert code == 0
    assert "nvidia-l4" in out


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("spec.estimate.perGpu.totalBytes", "lots", "must be an integer number of bytes"),
        ("spec.result.peakDeviceUsedBytes", 10**30, "is not a per-GPU figure"),
        ("spec.result.peakDeviceUsedBytes", -5, "is not a per-GPU figure"),
    ],
)
def test_accuracy_rejects_absurd_byte_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, field: str, value: object, message: str
) -> None:
    path = _record(tmp_path, "r.yaml", **{field: value})
    code, out, err = run(capsys, "accuracy", str(path))
    assert code == 2
    assert f": {field}: " in err
    assert message in err
    assert "-100.0 %" not in out


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("maxModelLen", "spec.inference.maxModelLen: required: must be an integer (null given)"),
        (
            "tensorParallelSize",
            "spec.inference.tensorParallelSize: must be an integer (null given; remove the "
            "field to use the default)",
        ),
    ],
)
def test_null_says_required_or_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, field: str, message: str
) -> None:
    data = yaml.safe_load(FITS.read_text())
    data["spec"]["inference"][field] = None
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2
    assert err.strip().endswith(message)


def test_accuracy_malformed_kubeconfig_env(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    kubeconfig.write_text("a: {b\n  c: [\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    code, _, err = run(capsys, "accuracy", "--from-cluster")
    assert code == 2
    assert err.startswith(f"KUBECONFIG {kubeconfig}: not a kubeconfig: line 2: invalid YAML")


@pytest.mark.parametrize("command", [["estimate", str(FITS)], ["catalog"]])
@pytest.mark.parametrize("text", ["", "\n# only a comment\n", "---\n"])
def test_an_empty_catalog_file_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str], text: str
) -> None:
    # An empty file is a wrong path or an unrendered value, not a wish for the defaults.
    empty = tmp_path / "catalog.yaml"
    empty.write_text(text)
    code, out, err = run(capsys, command[0], "--catalog", str(empty), *command[1:])
    assert code == 2 and out == ""
    assert f"{empty}: empty catalog file" in err and "leave --catalog out" in err


def test_a_catalog_without_classes_keeps_the_defaults(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # What the chart renders when its catalog value overrides nothing.
    path = tmp_path / "catalog.yaml"
    path.write_text("replaceDefaults: false\nclasses: []\n")
    code, out, _ = run(capsys, "estimate", "--catalog", str(path), str(FITS))
    assert code == 0 and "nvidia-l4" in out


def test_no_workload_documents_names_the_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n")
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2 and f"{path}: No GPUWorkload documents found." in err


def test_the_same_file_twice_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "estimate", str(FITS), str(FITS))
    assert code == 0 and out.count("inference/llama-3-8b-chat ") == 1
    assert f"the same document is twice on the command line ({FITS}); estimated once" in err
    assert "documents 1 and 1" not in err
