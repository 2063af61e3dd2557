"""A process and the processes below it, read from ``/proc`` (Linux only), for the webhook
benchmarks: the webhook's verdict workers are grandchildren of its process (forked by the
multiprocessing fork server), and their CPU time and memory are the webhook's."""

from __future__ import annotations

import os
from pathlib import Path


def tree(pid: int) -> list[int]:
    """``pid`` and every live process descended from it."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
    found, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        below = [c for c, p in parents.items() if p == parent and c not in found]
        found.extend(below)
        frontier.extend(below)
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of ``pid`` and the processes below it."""
    ticks = 0
    for each in tree(pid):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def pss_kib(pid: int) -> int:
    """Proportional set size of ``pid`` in KiB (``/proc/PID/smaps_rollup``): pages shared with
    other processes (a fork server's preloaded modules) count in shares, so the figures of a
    tree add up to what it holds."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0
