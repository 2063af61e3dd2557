"""Parse vLLM's startup memory report from its log. Pure.

vLLM reports what it measured while starting (``vllm/v1/worker/gpu_worker.py``,
``gpu_model_runner.py``, ``vllm/v1/core/kv_cache_utils.py``; V0: ``vllm/worker/worker.py``,
``model_runner.py``, ``executor``). The lines differ across versions, so each figure has one
pattern per known form:

- weights: ``Model loading took 14.99 GiB and 4.36 seconds`` (V1) or
  ``Loading model weights took 14.9888 GB`` (V0/early V1: "GB" there means GiB, it divides by
  2^30: ``vllm/utils.py`` ``GiB_bytes``);
- KV cache memory: ``Available KV cache memory: 54.96 GiB`` (V1), ``kv_cache_size=3.81GiB``
  (V0 "Memory profiling results") or ``the rest of the memory reserved for KV Cache is 54.96GiB``;
- KV cache size: ``GPU KV cache size: 450,224 tokens`` (V1) or ``# GPU blocks: 1952`` (V0);
- concurrency: ``Maximum concurrency for 8,192 tokens per request: 54.96x``;
- profile detail: ``PyTorch activation peak memory takes 1.23GiB``, ``non_torch_memory takes
  0.12GiB`` / ``non_torch_memory=0.35GiB``, ``total_gpu_memory=23.58GiB`` /
  ``total_gpu_memory (79.22GiB)``, ``Graph capturing finished in 37 secs, took 0.45 GiB``.

Feed lines one at a time to :class:`VllmLogParser`; the last value of each figure wins (tensor
parallel workers each print their own; the head rank's comes last in practice, and every rank
holds the same shard sizes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from gpu_sizer.measurement.result import VllmReport

__all__ = ["VllmLogParser", "parse_vllm_log"]

_GIB = 1 << 30
_UNITS = {"gb": _GIB, "gib": _GIB, "mib": 1 << 20, "mb": 1 << 20, "kib": 1 << 10}
_SIZE = r"([0-9][0-9.]*)\s*(GiB|GB|MiB|MB|KiB)"


def _bytes(value: str, unit: str) -> int:
    return round(float(value) * _UNITS[unit.lower()])


def _int(text: str) -> int:
    return int(text.replace(",", "").replace("_", ""))


_Setter = Callable[[VllmReport, re.Match[str]], None]


def _size(field: str) -> _Setter:
    def setter(report: VllmReport, m: re.Match[str]) -> None:
        setattr(report, field, _bytes(m.group(1), m.group(2)))

    return setter


def _count(field: str) -> _Setter:
    def setter(report: VllmReport, m: re.Match[str]) -> None:
        setattr(report, field, _int(m.group(1)))

    return setter


def _concurrency(report: VllmReport, m: re.Match[str]) -> None:
    report.max_concurrency_tokens = _int(m.group(1))
    report.max_concurrency = float(m.group(2))


_PATTERNS: list[tuple[re.Pattern[str], _Setter]] = [
    (re.compile(r"Model loading took " + _SIZE), _size("model_loading_bytes")),
    (re.compile(r"Loading model weights took " + _SIZE), _size("model_loading_bytes")),
    (re.compile(r"model weights take " + _SIZE), _size("model_loading_bytes")),
    (re.compile(r"Available KV cache memory:\s*" + _SIZE), _size("kv_cache_bytes")),
    (re.compile(r"kv_cache_size=" + _SIZE), _size("kv_cache_bytes")),
    (re.compile(r"reserved for KV Cache is " + _SIZE), _size("kv_cache_bytes")),
    (re.compile(r"GPU KV cache size:\s*([0-9][0-9,_]*) tokens"), _count("kv_cache_tokens")),
    (re.compile(r"# GPU blocks:\s*([0-9][0-9,_]*)"), _count("gpu_blocks")),
    (
        re.compile(r"Maximum concurrency for ([0-9][0-9,_]*) tokens per request:\s*([0-9.]+)x"),
        _concurrency,
    ),
    (re.compile(r"activation peak memory takes " + _SIZE), _size("activation_peak_bytes")),
    (re.compile(r"non_torch_memory(?: takes |=)" + _SIZE), _size("non_torch_bytes")),
    (re.compile(r"total_gpu_memory(?:=| \()" + _SIZE), _size("total_gpu_bytes")),
    (re.compile(r"Graph capturing finished in .*?took " + _SIZE), _size("cuda_graph_bytes")),
]


class VllmLogParser:
    """Incremental parser: :meth:`feed` each log line, read :attr:`report`."""

    def __init__(self) -> None:
        self.report = VllmReport()
        self.matched = False

    def feed(self, line: str) -> None:
        """Fold one log line into the report (lines without a figure are ignored)."""
        for pattern, setter in _PATTERNS:
            m = pattern.search(line)
            if m:
                setter(self.report, m)
                self.matched = True

    def result(self) -> VllmReport | None:
        """The report, or ``None`` when no line carried a figure (not a vLLM log)."""
        return self.report if self.matched else None


def parse_vllm_log(lines: Iterable[str]) -> VllmReport | None:
    """Parse a whole log; ``None`` when it holds no vLLM memory report."""
    parser = VllmLogParser()
    for line in lines:
        parser.feed(line)
    return parser.result()
