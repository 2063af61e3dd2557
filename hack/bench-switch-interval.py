#!/usr/bin/env python3
"""How late an asyncio event loop runs its timers while worker threads compute, by switch interval.

The webhook computes verdicts in worker threads and answers on the event loop. One interpreter
lock: a thread computing keeps it until the interval set by :func:`sys.setswitchinterval` has
passed and another thread asks for it, and the event loop gives it up at every socket call. This
measures the effect alone: a loop that sleeps 2 ms at a time (a ``time.sleep(0)`` after each
wake-up, standing in for a socket call) beside 0, 1 or 2 threads running pure-Python arithmetic,
at the default 5 ms interval and at the 1 ms the webhook sets
(``gpu_sizer.admission.server.SWITCH_INTERVAL``). Prints the lateness of the timers (p50, p90,
p99, in milliseconds). Bounded: 400 timers per case.

    python hack/bench-switch-interval.py
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

TIMERS = 400
PERIOD_S = 0.002


def compute(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(2000))


async def lateness(threads: int) -> list[float]:
    stop = threading.Event()
    workers = [threading.Thread(target=compute, args=(stop,)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    loop = asyncio.get_running_loop()
    late: list[float] = []
    try:
        for _ in range(TIMERS):
            due = loop.time() + PERIOD_S
            await asyncio.sleep(PERIOD_S)
            time.sleep(0)  # gives the lock up, as a socket call does
            late.append(1000 * (loop.time() - due))
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    return sorted(late)


def main() -> int:
    default = sys.getswitchinterval()
    print(f"{'threads':>7} {'switch ms':>9} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7}")
    try:
        for threads in (0, 1, 2):
            for interval in (0.005, 0.001):
                sys.setswitchinterval(interval)
                late = asyncio.run(lateness(threads))
                p50, p90, p99 = (late[int(q * len(late))] for q in (0.5, 0.9, 0.99))
                print(
                    f"{threads:>7} {1000 * interval:>9.1f} {p50:>7.2f} {p90:>7.2f} {p99:>7.2f}",
                    flush=True,
                )
    finally:
        sys.setswitchinterval(default)
    return 0


if __name__ == "__main__":
    sys.exit(main())
