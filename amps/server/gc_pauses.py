"""The cyclic garbage collector's pauses, timed per generation (issue 8). [io: reads the clock]

While a collection runs the event loop runs nothing else, so a replicated batch or a delivery
that is due waits for it: a pause is a latency's tail candidate. `gc.callbacks` are called at
the start and the end of every collection, in the thread that collects.
"""

from __future__ import annotations

import gc
from time import perf_counter_ns
from typing import Any

from amps.server.hops import Histogram


class GcPauses:
    """Times every collection into `histograms[str(generation)]` while installed."""

    def __init__(self, histograms: dict[str, Histogram]) -> None:
        self._histograms = histograms
        self._started_ns = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started_ns = perf_counter_ns()
        elif self._started_ns:
            histogram = self._histograms.get(str(info["generation"]))
            if histogram is not None:
                histogram.add_us((perf_counter_ns() - self._started_ns) // 1000)
            self._started_ns = 0

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
