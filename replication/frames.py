"""What two instances say to each other over a link, as plain values (protobuf stops in
replication/convert.py). [core]

A link is one bidirectional stream per pair of instances. Each side opens with a `Hello`; after
both hellos, each side sends `Batch`es of the records it replicates to the other and answers the
other's batches with cumulative `Ack`s once their records are durable. `Heartbeat`s keep an idle
link known to be alive. A side that refuses the link says why in a `Refusal` and closes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amps.log.records import Record

PROTOCOL_VERSION = 1


@dataclass(frozen=True, slots=True)
class OriginPosition:
    """What the receiver holds from one origin over one link (R10).

    `origin_txid`: the origin's own txid of the last record held from that origin over this
    link. `upstream_txid`: the sender's local txid of that same record, a hint that lets the
    sender resume without scanning its log (checked against the log before it is trusted).
    """

    origin: str
    origin_txid: int
    upstream_txid: int


@dataclass(frozen=True, slots=True)
class TopicDigest:
    """One `Topic` a side replicates to the other: name (literal or regex), type, filter."""

    name: str
    message_type: str
    filter: str = ""


@dataclass(frozen=True, slots=True)
class QueueDigest:
    """One queue a side defines (replicated or not), as its peer must define it too (R8).

    `holders`: (instance, group) of this side and of each of its destinations that takes the
    queue, so the peer can check that it passes their records through to its other holders.
    `filter` and `initial_owner` are "" when the queue has none.
    """

    name: str
    kind: str
    message_type: str
    underlying_topic: str
    filter: str = ""
    initial_owner: str = ""
    holders: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Digest:
    """What a side replicates to its peer (R8). `sends` is False when it has no destination
    for the peer (one-way replication); `queues` are every queue the side defines, whether it
    replicates them to the peer or not (replication/topology.py compares them)."""

    sends: bool
    topics: tuple[TopicDigest, ...] = ()
    sync: bool = False
    queues: tuple[QueueDigest, ...] = ()


@dataclass(frozen=True, slots=True)
class AckPolicy:
    """How a side asks the receiver of its batches to acknowledge them. `interval_ms` 0: at
    once (a sync destination not downgraded, a side that does not send, an older peer); else at
    most `interval_ms` after a batch is durable (`AckConflationInterval` of an async link), and
    at once when the unacknowledged batches or bytes reach half the sender's window."""

    interval_ms: int = 0
    window_batches: int = 0
    window_bytes: int = 0


ACK_AT_ONCE = AckPolicy()


@dataclass(frozen=True, slots=True)
class Hello:
    """The first frame each side sends: who it is, who it expects, what it replicates and,
    per origin, what it already holds from the peer over this link."""

    protocol_version: int
    instance: str
    group: str
    expected_peer: str  # the destination's Name this side dialled; "" when it accepted
    expected_group: str  # the destination's Group; "" when it accepted
    digest: Digest
    positions: tuple[OriginPosition, ...] = ()
    ack_policy: AckPolicy = ACK_AT_ONCE


@dataclass(frozen=True, slots=True)
class Batch:
    """Records of the sender's log in its txid order, and how far the sender has read.

    Every record the destination should get among txids <= `through_txid` is in this batch
    or an earlier one, so an ack of `through_txid` covers the records that were not sent.
    """

    batch_id: int
    through_txid: int
    records: Sequence[Record]  # a tuple, or as received: amps.log.received.ReceivedFrames


@dataclass(frozen=True, slots=True)
class Ack:
    """Cumulative: every batch up to `through_txid` of the receiver's peer is durable here."""

    through_txid: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Sent on an idle link; `heard` is the sender's reachability table: for each instance it
    heard from (directly or through passthrough), how long ago in milliseconds. A sender with
    a destination for the receiver adds its `heads` (per origin, the newest record of it in
    its durable log) and `acked_through_txid` (its txid up to which the receiver holds all it
    takes): the receiver's per-origin lag (replication/origins.py). `ack_policy` restates the
    sender's (sent at once when a downgrade or upgrade changes it)."""

    heard: tuple[tuple[str, int], ...] = ()
    heads: tuple[OriginPosition, ...] = ()
    acked_through_txid: int = 0
    ack_policy: AckPolicy = ACK_AT_ONCE


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a side refuses the link (a `REFUSALS` code) and a message naming both instances."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class TransferRequest:
    """R4: `requester` asks `owner` for messages of `queue`, named by bookmark (`keys`: one
    step's requests in one frame). Never logged: a lost request is a refusal, and the requester
    asks again. An instance that is not the owner forwards it towards the owner (passthrough)
    while `hops_left` > 0. `request_id` is unique per requester: each instance forwards and
    answers a request once (`routing.RequestsSeen`); 0 (an older peer) is never de-duplicated."""

    queue: str
    keys: tuple[tuple[int, int], ...]
    requester: str
    owner: str
    hops_left: int
    request_id: int = 0


Frame = Hello | Batch | Ack | Heartbeat | Refusal | TransferRequest
