"""gpu_sizer.yamlio: the one YAML loader (bounded aliases, unique keys, readable file errors)."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import yaml

from gpu_sizer import yamlio
from gpu_sizer.yamlio import (
    MAX_EXPANDED_NODES,
    UnreadableFile,
    YamlError,
    load,
    load_all,
    read_text,
)


def bomb(levels: int, width: int = 10) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_before_it_expands() -> None:
    with pytest.raises(YamlError, match="aliases") as info:
        load(bomb(9))
    assert info.value.line is not None


def test_ordinary_aliases_still_load() -> None:
    data = load("base: &b {maxModelLen: 8192}\nother: *b\nmerged: {<<: *b, maxNumSeqs: 4}\n")
    assert data["other"] == {"maxModelLen": 8192}
    assert data["merged"] == {"maxModelLen": 8192, "maxNumSeqs": 4}
    assert len(load(bomb(4))["a3"]) == 10  # 10**4 nodes: far under the bound
    assert MAX_EXPANDED_NODES >= 10**4


def test_duplicate_keys_name_the_line() -> None:
    with pytest.raises(YamlError) as info:
        load("spec:\n  inference:\n    maxNumSeqs: 16\n    maxNumSeqs: 64\n")
    assert str(info.value) == "line 4: duplicate key maxNumSeqs"


def test_documents_and_single_document() -> None:
    assert load_all("---\n---\na: 1\n") == [None, {"a": 1}]
    assert load("") is None
    with pytest.raises(YamlError, match="expected one YAML document, found 2"):
        load("a: 1\n---\nb: 2\n")


def test_unsafe_tags_are_refused() -> None:
    with pytest.raises(YamlError):
        load("!!python/object/apply:os.system ['true']\n")


def test_read_text_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"ok\xff")
    with pytest.raises(UnreadableFile, match=r"^not UTF-8 \(byte 2: invalid start byte\)$"):
        read_text(junk)
    with pytest.raises(UnreadableFile, match="No such file or directory"):
        read_text(tmp_path / "missing")
    with pytest.raises(UnreadableFile, match="Is a directory"):
        read_text(tmp_path)


BAD = [
    "a: b: c\n",
    "a: [1, 2\n",
    "spec:\n  x: 1\n  x: 2\n",
    "- a\nb: 1\n",
    "\tx: 1\n",
    'a: "unterminated\n',
    "a: !!binary 'not base64!'\n",
    "a: *nowhere\n",
    bomb(9),
    "[" * 300 + "]" * 300,
]


@pytest.mark.skipif(not yamlio._CLoader, reason="PyYAML built without libyaml")
def test_the_c_loader_reads_what_the_python_one_reads() -> None:
    """libyaml parses (issue 17); what is accepted, the values and their types, and every
    message are those of the pure-Python loader."""
    examples = sorted((Path(__file__).resolve().parents[2] / "examples").rglob("*.yaml"))
    assert examples
    for path in examples:
        text = path.read_text()
        assert load_all(text) == list(yaml.load_all(text, Loader=yamlio._Loader)), path
    text = "a: 0x1F\nb: 1_000\nc: yes\nd: 2026-11-30\ne: .inf\nf: ~\ng: '1'\nh: 1e3\n"
    assert load(text) == yaml.load(text, Loader=yamlio._Loader)
    for bad in BAD:
        with pytest.raises(YamlError) as fast:
            load_all(bad)
        with pytest.raises(YamlError) as slow, mock.patch.object(yamlio, "_CLoader", None):
            load_all(bad)
        assert str(fast.value) == str(slow.value), bad
        assert fast.value.line == slow.value.line, bad
