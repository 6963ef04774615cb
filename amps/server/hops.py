"""Per-hop statistics: where a message's time goes inside the instance (issue 14).

The hops of a queue message between its consumer's ack and the next delivery, and of a frame
on its way out: handling a received frame (the server loop), the queue step of an ack (engine
and the deliveries it frees, encoded), waiting in the outbox, gRPC taking the frame, and the
removal record becoming durable (lazily, Q15: no delivery waits for it); a commit's trips to
the journal's writer thread and back. Counters say which way
the deliveries went. And a replicated batch's hops (issue 8): on the sender, records durable ->
batch handed to the link's writer -> written -> acknowledged by the peer; on the receiver, batch
received -> durable here. Read through the admin interface (`/amps/instance`, key `hops`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Span:
    """Count, total and maximum of one hop's durations, in nanoseconds."""

    __slots__ = ("count", "max_ns", "total_ns")

    def __init__(self) -> None:
        self.count = 0
        self.total_ns = 0
        self.max_ns = 0

    def add(self, duration_ns: int) -> None:
        self.count += 1
        self.total_ns += duration_ns
        if duration_ns > self.max_ns:
            self.max_ns = duration_ns

    def as_json(self) -> dict[str, Any]:
        mean_us = self.total_ns / self.count / 1000 if self.count else 0.0
        return {
            "count": self.count,
            "mean_us": round(mean_us, 1),
            "max_us": round(self.max_ns / 1000, 1),
            "total_us": self.total_ns // 1000,
        }


# Histogram bucket bounds in microseconds: sixteen per doubling from 64 us (each bound ~4.4 %
# above the one before: a 10 ms target needs finer than 20 %) to past ten minutes; a percentile
# is read as its bucket's upper bound.
_BOUNDS_US: tuple[int, ...] = tuple(round(64 * 2 ** (k / 16)) for k in range(16 * 24))


class Histogram:
    """Durations in log-spaced buckets: count, mean, max and percentiles (to ~4.4 %), for a
    figure whose tail matters (a replication lag target is a p99)."""

    __slots__ = ("buckets", "count", "max_us", "total_us")

    def __init__(self) -> None:
        self.buckets = [0] * (len(_BOUNDS_US) + 1)
        self.count = 0
        self.total_us = 0
        self.max_us = 0

    def add_us(self, duration_us: int) -> None:
        self.buckets[bisect_left(_BOUNDS_US, duration_us)] += 1
        self.count += 1
        self.total_us += duration_us
        if duration_us > self.max_us:
            self.max_us = duration_us

    def add_since_us(self, now_us: int, timestamps_us: list[int]) -> None:
        """One duration per timestamp, up to `now_us` (a run of records made durable). The
        timestamps never decrease (the journal raises each to the one before), so the durations
        never increase: each bucket's share is found by bisection, not record by record."""
        count = len(timestamps_us)
        if not count:
            return
        buckets, bounds = self.buckets, _BOUNDS_US
        start = 0
        while start < count:
            bucket = bisect_left(bounds, now_us - timestamps_us[start])
            # The durations from `start` on at most the bound below this bucket's are below it.
            end = (
                bisect_left(timestamps_us, now_us - bounds[bucket - 1], start) if bucket else count
            )
            buckets[bucket] += end - start
            start = end
        self.count += count
        self.total_us += now_us * count - sum(timestamps_us)
        longest = now_us - timestamps_us[0]
        if longest > self.max_us:
            self.max_us = longest

    def percentile_us(self, fraction: float) -> int:
        """The upper bound of the bucket holding that fraction of the durations (0: none)."""
        if not self.count:
            return 0
        rank, seen = fraction * self.count, 0
        for index, count in enumerate(self.buckets):
            seen += count
            if seen >= rank and count:
                return _BOUNDS_US[index] if index < len(_BOUNDS_US) else self.max_us
        return self.max_us

    def as_json(self) -> dict[str, Any]:
        mean_us = self.total_us / self.count if self.count else 0.0
        return {
            "count": self.count,
            "mean_us": round(mean_us, 1),
            "max_us": self.max_us,
            "total_us": self.total_us,
            "p50_us": self.percentile_us(0.5),
            "p90_us": self.percentile_us(0.9),
            "p99_us": self.percentile_us(0.99),
            "buckets": {
                str(bound): count
                for bound, count in zip((*_BOUNDS_US, "inf"), self.buckets, strict=True)
                if count
            },
        }


# A replicated batch on its receiver, stage by stage (issue 8): `arrival` from its first
# record's timestamp (accepted at its origin) to the batch read here: the origin's commit and
# fsync, its link's send (the sender's stages, from the same instant) and the way through both
# gRPC stacks; then `apply` read -> appended here (the link core, de-duplication, the journal
# append), `commit_wait` appended -> its commit handed to the journal's writer (behind a commit
# in flight, the commit callback's turn), `handoff` -> the writer thread running it (its
# wake-up, the GIL), `write` its writes, `fsync`, `return` the writer done -> its result on the
# event loop, `dispatch` -> this batch acknowledged (the commit's dispatch before the links).
# Stages after `arrival` add up to `replicated_durable`; `arrival` plus them to the
# `replicated_lag` of the batch's first record.
RECEIVER_STAGES = (
    "arrival", "apply", "commit_wait", "handoff", "write", "fsync", "return", "dispatch",
)  # fmt: skip


# A replicated batch on its sender, from its first record's timestamp (accepted here, or at its
# origin for a passthrough), stage by stage: `commit` -> its commit handed to the journal's
# writer (the append, a commit in flight, the commit callback's turn), `handoff`, `write`, `fsync`
# and `return` as on a receiver, `dispatch` -> the batch made for the link (the commit's
# dispatch before the links; for a batch not made durable by the latest commit, a link catching
# up, all of its wait), `link` -> gRPC took it (behind the link's earlier frames).
SENDER_STAGES = ("commit", "handoff", "write", "fsync", "return", "dispatch", "link")


def _histograms(names: tuple[str, ...]) -> Callable[[], dict[str, Histogram]]:
    """A dataclass field's factory: one histogram per name."""
    return lambda: {name: Histogram() for name in names}


@dataclass(slots=True)
class HopStatistics:
    """The instance's per-hop timings and the ways its deliveries went."""

    # A received frame's commands handled, start to end (includes the queue steps below).
    frame_handling: Span = field(default_factory=Span)
    # An ack's queue step: engine, removal record appended, freed deliveries encoded and queued.
    queue_ack_step: Span = field(default_factory=Span)
    # The first entry queued in an empty outbox -> its frame handed to gRPC.
    outbox_wait: Span = field(default_factory=Span)
    # gRPC taking a frame (the write in flight: the response generator is suspended).
    frame_write: Span = field(default_factory=Span)
    # A lazily committed removal record (ack, expiry) appended -> durable.
    removal_durable: Span = field(default_factory=Span)
    # A commit handed to the journal's writer thread -> that thread running it, and the writer
    # done -> its result handled on the event loop: thread wake-ups, and the waits for the GIL
    # behind the event loop's work, that every commit pays beside its fsync.
    journal_handoff: Span = field(default_factory=Span)
    journal_return: Span = field(default_factory=Span)
    # Replication sender: the local log durable -> the batch carrying those records queued for
    # the link's writer (waits here when the link's window of unacknowledged batches is full).
    link_send_wait: Span = field(default_factory=Span)
    # The batch queued for the writer -> gRPC took it (behind earlier frames of the link).
    link_write: Span = field(default_factory=Span)
    # The batch written -> the peer's ack of it (the peer's append and fsync, the way back).
    link_ack_wait: Histogram = field(default_factory=Histogram)
    # The batch's first record durable here -> the peer's ack of the batch (the three hops
    # above end to end): what a sync destination adds to a publisher's persisted ack.
    link_acked: Histogram = field(default_factory=Histogram)
    # Replication receiver: a batch received -> durable here (its ack is queued then).
    replicated_durable: Histogram = field(default_factory=Histogram)
    # Replication receiver: each replicated publish, its origin's timestamp (the publish
    # accepted there) -> durable here: the replication lag. Wall clocks: between two
    # machines it includes their offset.
    replicated_lag: Histogram = field(default_factory=Histogram)
    replicated_stages: dict[str, Histogram] = field(default_factory=_histograms(RECEIVER_STAGES))
    replicated_send_stages: dict[str, Histogram] = field(default_factory=_histograms(SENDER_STAGES))
    # The cyclic garbage collector's pauses, per generation (amps.server.gc_pauses): the event
    # loop runs nothing else meanwhile.
    gc_pauses: dict[str, Histogram] = field(default_factory=_histograms(("0", "1", "2")))
    # Deliveries queued in the queue step of the ack that made room for them: no timer, no
    # commit between the ack and the delivery.
    deliveries_after_ack: int = 0
    # Deliveries held until the journal was durable (after an at-most-once removal only).
    deliveries_held_for_commit: int = 0
    # Frames taken as soon as something was queued (nothing in flight), and frames taken after a
    # write with what was queued during it (coalesced under load).
    frames_idle: int = 0
    frames_coalesced: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "frame_handling": self.frame_handling.as_json(),
            "queue_ack_step": self.queue_ack_step.as_json(),
            "outbox_wait": self.outbox_wait.as_json(),
            "frame_write": self.frame_write.as_json(),
            "removal_durable": self.removal_durable.as_json(),
            "journal_handoff": self.journal_handoff.as_json(),
            "journal_return": self.journal_return.as_json(),
            "link_send_wait": self.link_send_wait.as_json(),
            "link_write": self.link_write.as_json(),
            "link_ack_wait": self.link_ack_wait.as_json(),
            "link_acked": self.link_acked.as_json(),
            "replicated_durable": self.replicated_durable.as_json(),
            "replicated_lag": self.replicated_lag.as_json(),
            "replicated_stages": {n: h.as_json() for n, h in self.replicated_stages.items()},
            "replicated_send_stages": {
                n: h.as_json() for n, h in self.replicated_send_stages.items()
            },
            "gc_pauses": {n: h.as_json() for n, h in self.gc_pauses.items()},
            "deliveries_after_ack": self.deliveries_after_ack,
            "deliveries_held_for_commit": self.deliveries_held_for_commit,
            "frames_idle": self.frames_idle,
            "frames_coalesced": self.frames_coalesced,
        }
