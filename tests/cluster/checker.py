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


@dataclass(frozen=True, slots=True)
class Delivery:
    """One queue delivery a test consumer saw: where, which message, when it came, when it
    was acked (monotonic seconds; None if never)."""

    instance: str
    message: tuple[str, int]
    received_s: float
    acked_s: float | None


@dataclass(frozen=True, slots=True)
class QueueCount:
    lost: int
    duplicated: int
    leased_elsewhere: int  # delivered on one instance while its lease on another was open
    never_acked: int


def check_queue(
    deliveries: Iterable[Delivery], expected: Mapping[str, int], left_in_queues: int = 0
) -> QueueCount:
    """R2: every published message (publisher -> 1..n) delivered and acked once, by one
    instance at a time. `left_in_queues`: messages still queued anywhere at the end (each
    is never acked)."""
    by_message: dict[tuple[str, int], list[Delivery]] = {}
    for delivery in deliveries:
        by_message.setdefault(delivery.message, []).append(delivery)
    wanted = {(p, n) for p, count in expected.items() for n in range(1, count + 1)}
    lost = len(wanted - by_message.keys())
    duplicated = sum(len(found) - 1 for found in by_message.values())
    leased_elsewhere = 0
    for found in by_message.values():
        for first, second in itertools.combinations(sorted(found, key=lambda d: d.received_s), 2):
            end = first.acked_s if first.acked_s is not None else float("inf")
            if first.instance != second.instance and second.received_s < end:
                leased_elsewhere += 1
    never_acked = left_in_queues + sum(
        1 for found in by_message.values() if all(d.acked_s is None for d in found)
    )
    return QueueCount(lost, duplicated, leased_elsewhere, never_acked)
