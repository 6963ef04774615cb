"""Counters and the frozen statistics snapshot (trio `statistics()`, AMPS-REFERENCE §5.3).

Every way a message leaves is counted, so that at any time:
``entered_total == acked_total + expired_total + sent_at_most_once_total
+ barrier_delivered_total + depth + inactive_count``.
An expiration is counted once, under its primary reason (see `ExpireReason.primary`).
"""

from __future__ import annotations

from dataclasses import dataclass

from amps.queue.actions import ExpireReason


class Counters:
    """Cumulative counters since start (or restore); mutated by the engine only."""

    __slots__ = (
        "acked_total",
        "barrier_delivered_total",
        "cancelled_total",
        "delivered_total",
        "entered_total",
        "expired_by_reason",
        "expired_leases_total",
        "redelivered_total",
        "sent_at_most_once_total",
    )

    def __init__(self) -> None:
        self.entered_total = 0
        self.delivered_total = 0
        self.redelivered_total = 0
        self.acked_total = 0
        self.cancelled_total = 0
        self.sent_at_most_once_total = 0
        self.barrier_delivered_total = 0
        self.expired_leases_total = 0
        self.expired_by_reason: dict[ExpireReason, int] = dict.fromkeys(ExpireReason, 0)

    @property
    def expired_total(self) -> int:
        """Messages expired, whatever the reason."""
        return sum(self.expired_by_reason.values())


@dataclass(frozen=True, slots=True)
class QueueStatistics:
    """A point-in-time view of one queue engine."""

    depth: int
    """Active messages not yet removed, leased or not, and the messages held here that another
    instance owns (R2) (AMPS `queue_depth`)."""
    leased_count: int
    """Leased, unacknowledged messages; at-most-once: sent, not yet acked (AMPS `backlog`)."""
    deliverable_count: int
    """Active messages not leased (what a `sow` may return, barrier permitting)."""
    inactive_count: int
    """Messages beyond TargetQueueDepth (AMPS `inactive_message_count`)."""
    deferred_ack_count: int
    """Acks held for messages not yet in the queue (AMPS `deferred_ack_count`)."""
    oldest_message_age_ms: int | None
    """Age of the oldest message not removed (AMPS `seconds_behind`)."""
    oldest_lease_age_ms: int | None
    """Age of the oldest current lease (AMPS `age_of_oldest_lease`)."""
    subscription_count: int
    entered_total: int
    delivered_total: int
    redelivered_total: int
    acked_total: int
    cancelled_total: int
    expired_total: int
    expired_time_limit_total: int
    expired_forced_total: int
    expired_max_cancels_total: int
    expired_max_deliveries_total: int
    sent_at_most_once_total: int
    barrier_delivered_total: int
    expired_leases_total: int
    """Leases that ran out (AMPS `expired_leases`)."""
