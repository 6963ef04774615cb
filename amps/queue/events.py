"""Inputs of the queue engine: facts in the past tense, frozen and slotted (STYLE §4.2).

The adapter evaluates every expression; the engine only sees precomputed facts: the queue
Filter has already admitted a `MessagePublished`, its Priority and BarrierExpression are
evaluated, and subscription or ack filters arrive as opaque `matches(txid)` predicates (the
adapter reads and caches message bodies by txid).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from amps.queue.actions import ExpireReason, RemovalReason
from amps.queue.fastinit import speed_up

Bookmark = tuple[int, int]
"""(publisher_id, seq): names one message in the log forever (L1)."""

TxidPredicate = Callable[[int], bool]


class AckOption(Enum):
    """The `opts` of a queue `sow_delete` (Q10–Q12)."""

    NONE = "none"
    CANCEL = "cancel"
    EXPIRE = "expire"


@dataclass(frozen=True, slots=True)
class MessagePublished:
    """A message the queue Filter admitted was logged; txids increase with log order.

    `timestamp_ms` is in the same monotonic time base as `now_ms` (the adapter converts).
    `priority` is the Priority value as u64 (0 when absent or not numeric, A2).
    `expiration_ms` is the message's own expiration, which overrides the queue Expiration.
    `elsewhere`: another instance owns it (R2): kept for acks and barriers, not delivered here
    until an `OwnershipMoved` says it is owned here.
    """

    txid: int
    publisher_id: int
    seq: int
    timestamp_ms: int
    priority: int = 0
    is_barrier: bool = False
    expiration_ms: int | None = None
    elsewhere: bool = False


@dataclass(frozen=True, slots=True)
class Subscribed:
    """A queue subscription arrived; a known (client_id, sub_id) is an atomic replace.

    `max_backlog=None` means the option was not given (then 1, Q8). `matches=None` means the
    subscription has no content filter.
    """

    sub_id: str
    client_id: str
    max_backlog: int | None = None
    matches: TxidPredicate | None = None


@dataclass(frozen=True, slots=True)
class Unsubscribed:
    """A subscription ended; its leases break at once and their messages return (Q6)."""

    sub_id: str
    client_id: str


@dataclass(frozen=True, slots=True)
class ClientDisconnected:
    """The client's connection is gone; every lease it held breaks at once (Q6)."""

    client_id: str


@dataclass(frozen=True, slots=True)
class Acked:
    """A `sow_delete` naming bookmarks (Q10), with an optional cancel/expire option (Q11, Q12)."""

    client_id: str
    bookmarks: Sequence[Bookmark]
    option: AckOption = AckOption.NONE


@dataclass(frozen=True, slots=True)
class AckedByFilter:
    """A `sow_delete` with a filter: acks every active message it matches, leased or not (Q10)."""

    client_id: str
    matches: TxidPredicate
    option: AckOption = AckOption.NONE


@dataclass(frozen=True, slots=True)
class OwnershipMoved:
    """The message became owned here (`owned_here`) or by another instance (R2, R5, R7).

    Given up: an inactive message is reached first (A4: the rows up to it are activated); a
    leased one keeps its lease, and when the lease ends it stays for its owner. Taken: it is
    delivered here in its turn, or expired now if it is past its expiration (the owner's own
    reason, Q13). A message not in the queue is ignored.
    """

    bookmark: Bookmark
    owned_here: bool


@dataclass(frozen=True, slots=True)
class MessageRemoved:
    """Recovery: the log says this message already left (give `txid` or `bookmark`)."""

    reason: RemovalReason
    txid: int | None = None
    bookmark: Bookmark | None = None
    expire_reasons: ExpireReason = ExpireReason.TIME_LIMIT
    """Only read when `reason` is EXPIRED."""


Event = (
    MessagePublished
    | Subscribed
    | Unsubscribed
    | ClientDisconnected
    | Acked
    | AckedByFilter
    | MessageRemoved
    | OwnershipMoved
)

speed_up(
    MessagePublished,
    Subscribed,
    Unsubscribed,
    ClientDisconnected,
    Acked,
    AckedByFilter,
    MessageRemoved,
    OwnershipMoved,
)
