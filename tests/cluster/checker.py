"""Counts lost, duplicated and out-of-order messages per publisher on one instance."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Count:
    lost: int
    duplicated: int
    out_of_order: int


def check(received: Iterable[tuple[str, int]], expected: Mapping[str, int]) -> dict[str, Count]:
    """`received`: (publisher, n) in arrival order; `expected`: publisher -> how many it sent
    (numbered 1..n). Returns the counts per publisher."""
    seen: dict[str, list[int]] = {p: [] for p in expected}
    for publisher, number in received:
        seen.setdefault(publisher, []).append(number)
    counts = {}
    for publisher, numbers in seen.items():
        total = expected.get(publisher, 0)
        distinct = set(numbers)
        lost = len(set(range(1, total + 1)) - distinct)
        duplicated = len(numbers) - len(distinct)
        out_of_order = sum(1 for a, b in itertools.pairwise(numbers) if b <= a)
        counts[publisher] = Count(lost, duplicated, out_of_order)
    return counts


def assert_clean(counts: Mapping[str, Count], where: str) -> None:
    bad = {p: c for p, c in counts.items() if c != Count(0, 0, 0)}
    assert not bad, f"{where}: {bad}"
