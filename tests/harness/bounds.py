"""Bounds for fuzz tests (issue 11): memory allocated while one input is handled."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def peak_memory_below(limit_bytes: int) -> Iterator[None]:
    """Fail when the Python allocations made inside the block peak above `limit_bytes`.

    Counts what is allocated while the block runs (tracemalloc), not what existed before, so a
    decoder that sizes a buffer from a length field it has not checked is caught here.
    """
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= limit_bytes, f"peak {peak:,} bytes > {limit_bytes:,} for one input"
