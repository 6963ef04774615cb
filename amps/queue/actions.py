"""Outputs of the queue engine: imperatives the adapter performs, in list order.

Ordering contract (raft `Ready`): a `RecordRemoval` with reason `SENT_AT_MOST_ONCE` that
comes before a `Deliver` or `DeliverBarrier` in the list must be durable before that delivery
is performed: the "sent" removal is logged before the message goes out, so a crash can never
send it twice (Q7). Other removals (acked, expired, barrier delivered) are appended in list
order but need not be durable first: if a crash loses one, its message returns to the queue,
which at-least-once allows, so an adapter may deliver at once rather than wait a commit round.
`PublishDeadLetter` may run after the records before it are durable; nothing depends on it
being early.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntFlag

from amps.queue.fastinit import speed_up


class RemovalReason(Enum):
    """Why a message left the queue; every way out is counted (statistics add up)."""

    ACKED = "acked"
    EXPIRED = "expired"
    SENT_AT_MOST_ONCE = "sent_at_most_once"
    BARRIER_DELIVERED = "barrier_delivered"


class ExpireReason(IntFlag):
    """AMPS_REASON of an expiration; several may hold at once (AMPS-REFERENCE §5.1)."""

    TIME_LIMIT = 1
    FORCED_EXPIRE = 2
    MAX_CANCELS = 4
    MAX_DELIVERIES = 8

    def reason_text(self) -> str:
        """Comma-joined AMPS_REASON words, e.g. ``time_limit,max_deliveries``."""
        return ",".join(r.name.lower() for r in ExpireReason if r in self and r.name)

    def primary(self) -> ExpireReason:
        """The one reason an expiration is counted under (statistics add up per message)."""
        for reason in _PRECEDENCE:
            if reason in self:
                return reason
        raise AssertionError("an expiration has at least one reason")


NO_REASON = ExpireReason(0)
"""The empty reason set (not an expiration)."""

_PRECEDENCE = (
    ExpireReason.FORCED_EXPIRE,
    ExpireReason.MAX_CANCELS,
    ExpireReason.MAX_DELIVERIES,
    ExpireReason.TIME_LIMIT,
)


class Action:
    """Base of every engine output. See the module docstring for the ordering contract."""

    __slots__ = ()  # a plain base: no fields, so no dataclass methods to generate at import


@dataclass(frozen=True, slots=True)
class Deliver(Action):
    """Send message `txid` to the subscription; `lease_deadline_ms` is None for no expiry."""

    sub_id: str
    client_id: str
    txid: int
    lease_deadline_ms: int | None
    delivery_count: int


@dataclass(frozen=True, slots=True)
class DeliverBarrier(Action):
    """Send barrier message `txid` to every listed subscription at once (A3), then forget it."""

    txid: int
    subscriptions: tuple[tuple[str, str], ...]
    """(client_id, sub_id) pairs, in subscription order."""


@dataclass(frozen=True, slots=True)
class RecordRemoval(Action):
    """Append a log record saying `txid` left the queue; must be durable before later delivery.

    `delivery_count` is how many times it was delivered before (0 for an at-most-once send).
    `barrier`: it was a barrier message (A3), whose removal is each instance's own (R6).
    """

    txid: int
    reason: RemovalReason
    expire_reasons: ExpireReason = NO_REASON
    delivery_count: int = 0
    barrier: bool = False


@dataclass(frozen=True, slots=True)
class PublishDeadLetter(Action):
    """Run the queue's on-expire actions for `txid` (e.g. publish to a dead-letter topic)."""

    txid: int
    reasons: ExpireReason


speed_up(Deliver, DeliverBarrier, RecordRemoval, PublishDeadLetter)
