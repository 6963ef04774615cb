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
    link_ack_wait: Span = field(default_factory=Span)
    # Replication receiver: a batch received -> durable here (its ack is queued then).
    replicated_durable: Span = field(default_factory=Span)
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
            "replicated_durable": self.replicated_durable.as_json(),
            "deliveries_after_ack": self.deliveries_after_ack,
            "deliveries_held_for_commit": self.deliveries_held_for_commit,
            "frames_idle": self.frames_idle,
            "frames_coalesced": self.frames_coalesced,
        }
