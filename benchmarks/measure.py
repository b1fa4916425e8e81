"""Wall time, CPU time and the load average around a measured piece of work: every benchmark figure states all
three (issue #28). CPU time is user + system of this process and of the children it waited for; the load
average is the machine's 1-minute figure before and after, since the machine is shared and wall time follows it.

    with measured() as m:
        work()
    m.figures()  # {"wall_s": ..., "cpu_s": ..., "load_1m_before": ..., "load_1m_after": ...}
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


def cpu_seconds() -> float:
    """User + system seconds of this process and of its waited-for children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(slots=True)
class Measured:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    load_1m_before: float = 0.0
    load_1m_after: float = 0.0

    def figures(self) -> dict[str, float]:
        return {
            "wall_s": round(self.wall_s, 4),
            "cpu_s": round(self.cpu_s, 4),
            "load_1m_before": round(self.load_1m_before, 2),
            "load_1m_after": round(self.load_1m_after, 2),
        }


@contextmanager
def measured() -> Iterator[Measured]:
    m = Measured(load_1m_before=os.getloadavg()[0])
    wall, cpu = time.perf_counter(), cpu_seconds()
    try:
        yield m
    finally:
        m.wall_s, m.cpu_s = time.perf_counter() - wall, cpu_seconds() - cpu
        m.load_1m_after = os.getloadavg()[0]


def summary(runs: list[Measured]) -> dict[str, float]:
    """Medians of wall and CPU over repeats, and the range of the load they ran under."""
    loads = [x for r in runs for x in (r.load_1m_before, r.load_1m_after)]
    return {
        "median_wall_s": round(statistics.median(r.wall_s for r in runs), 4),
        "median_cpu_s": round(statistics.median(r.cpu_s for r in runs), 4),
        "load_1m_min": round(min(loads), 2),
        "load_1m_max": round(max(loads), 2),
    }
