"""Reading the GPUWorkload (and GPUMeasurement) documents the offline commands are given.

Files, directories (their ``*.yaml``, ``*.yml`` and ``*.json``, sorted) and ``-`` for stdin,
multi-document YAML and ``kind: List`` exports, as ``kubectl apply -f`` reads them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = ["Doc", "read_docs", "row_name"]


@dataclass
class Doc:
    """One document of the input: where it came from and its parsed data."""

    source: str
    index: int
    data: Any

    @property
    def name(self) -> str:
        meta = self.data.get("metadata") if isinstance(self.data, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            ns = meta.get("namespace")
            return f"{ns}/{meta['name']}" if isinstance(ns, str) and ns else meta["name"]
        return f"(document {self.index + 1})"


def _expand(paths: Sequence[str]) -> Iterator[str]:
    for path in paths:
        p = Path(path)
        if path != "-" and p.is_dir():
            yield from sorted(
                str(f)
                for f in p.iterdir()
                if f.suffix in (".yaml", ".yml", ".json") and f.is_file()
            )
        else:
            yield path


def read_docs(
    paths: Sequence[str], err: TextIO, *, records: bool = False
) -> tuple[list[Doc], bool]:
    """Every GPUWorkload document of ``paths`` (and GPUMeasurement with ``records``); the bool
    says whether some input was unusable.

    Like ``kubectl apply -f``, each document is handled on its own: a document of another kind
    (a ConfigMap next to the workload) is skipped with a warning and does not change the exit
    status; a Namespace (the workloads' own, created by the same ``kubectl apply -f``) is
    skipped without one. Input that holds no document at all (an empty file, a directory
    without YAML files) is an error, so that a CI gate pointed at a wrong path cannot pass.
    """
    from gpu_sizer.api import KIND
    from gpu_sizer.api.workload import is_near_kind
    from gpu_sizer.yamlio import UnreadableFile, YamlError, load_all, read_text

    docs: list[Doc] = []
    failed = False
    for path in paths:
        files = list(_expand([path]))
        if not files:
            print(f"{path}: no *.yaml, *.yml or *.json files in this directory", file=err)
            failed = True
        for file in files:
            source = "(stdin)" if file == "-" else file
            try:
                loaded = load_all(read_text(file))
            except UnreadableFile as exc:
                print(f"{source}: cannot read: {exc}", file=err)
                failed = True
                continue
            except YamlError as exc:
                where = f"line {exc.line}: " if exc.line is not None else ""
                print(f"{source}: {where}invalid YAML: {exc.message}", file=err)
                failed = True
                continue
            index = 0
            found = False
            for data in loaded:
                if data is None:
                    continue
                items = [data]
                if isinstance(data, dict) and data.get("kind") == "List":
                    if not isinstance(data.get("items"), list):
                        print(f"{source}: kind List: items must be a list", file=err)
                        failed = found = True
                        continue
                    items = data["items"]
                    found = True  # an empty List is an export of nothing, not empty input
                for item in items:
                    doc = Doc(source, index, item)
                    index += 1
                    kind = item.get("kind") if isinstance(item, dict) else None
                    accepted = (KIND, "GPUMeasurement") if records else (KIND,)
                    if records and not isinstance(item, dict):
                        print(
                            f"{source}: {doc.name}: must be a YAML/JSON object (a GPUWorkload "
                            f"or GPUMeasurement), not {type(item).__name__}",
                            file=err,
                        )
                        failed = True
                        continue
                    near = difflib.get_close_matches(str(kind), accepted, n=1, cutoff=0.8)
                    if records and isinstance(kind, str) and kind not in accepted and near:
                        print(
                            f"{source}: {doc.name}: kind {kind}: did you mean {near[0]}?", file=err
                        )
                        failed = True
                        continue
                    # The namespaces a directory for `kubectl apply -f` creates for its
                    # workloads (examples/00-namespaces.yaml) belong there: no warning.
                    if kind == "Namespace":
                        continue
                    # A misspelt GPUWorkload (GpuWorkload) is a typo to report, not another kind.
                    if isinstance(kind, str) and kind not in accepted and not is_near_kind(kind):
                        print(
                            f"Warning: {source}: {doc.name}: kind {kind} is not a {KIND}; skipped",
                            file=err,
                        )
                        continue
                    found = True
                    docs.append(doc)
            if not found and index == 0:
                print(f"{source}: no YAML documents (empty input)", file=err)
                failed = True
    return docs, failed


def row_name(doc: Doc) -> str:
    """``namespace/name`` as ``kubectl apply`` would create it (``default`` when unset)."""
    meta = doc.data.get("metadata") if isinstance(doc.data, dict) else None
    if not isinstance(meta, dict):
        return doc.name
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
