"""One replication link between this instance and one peer, as a sans-IO state machine. [core]

Rule 1: this file decides what crosses a link and when; it does no I/O and reads no clock
(`now_ms` is an argument). The log is read through the narrow `LogView`; appending what the
peer sends is the adapter's job (`Apply`), through the instance's one de-duplicating path.
Rule 2: only durable records are sent, and a batch is acknowledged only once every record in
it is durable on the receiver (`RecordsDurable` comes from the adapter after its fsync). So a
position a side reports in its `Hello` is always on disk, and resuming from it loses nothing.
Rule 3: the sender sends at once while fewer than `window_batches` batches and `window_bytes`
bytes are unacknowledged, and lets records gather into the next batch while the window is full
(`should_send_now`): an idle link adds no delay and a busy one pays one gRPC message per batch,
not per record. The window is wide enough to cover the receiver's fsync: a batch held back
until an ack arrives misses the receiver's next group commit and waits a whole fsync more.
While the sender reads its journal (the peer is further behind than the record cache: a
catch-up) its window in bytes is `catch_up_window_bytes`, so it is not left waiting for acks of
a peer that applies ~100 MiB/s, and a step sends at most `catch_up_batches_per_step` batches
(`wants_to_send`: the adapter steps again at once), so the adapter's loop, which also moves the
stream's bytes, turns between batches.
Rule 5: acks are cumulative. The receiver of a sync link (not downgraded) acknowledges each
batch once it is durable: a publisher's persisted ack waits for it. The receiver of an async
link acknowledges at most `AckConflationInterval` later (`AckPolicy`, from the sender's Hello
and restated at once in a heartbeat when a downgrade or upgrade changes it), and at once when
the batches or bytes it has not acknowledged reach half the sender's window, so conflating
never makes the sender hold records back (Rule 3). An ack not sent when the stream breaks is
only a position the sender resumes before: the Hello reports what is held (Rule 2).
Rule 4: one link per pair carries both directions. Either side may have a destination for the
other (two-way), or only one side (one-way); the other side then only acknowledges.

States: IDLE (no stream) -> HELLO_SENT (we dialled and sent our Hello) or ACCEPTED (the peer
dialled; we answer its Hello with ours) -> READY (both Hellos exchanged, records flow) -> IDLE
on `Disconnected`, on a refusal either way, or when the peer is silent for `peer_timeout_ms`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from itertools import accumulate
from operator import itemgetter
from typing import Protocol

from amps.log.bookmarks import Bookmark
from amps.log.received import ChosenFrames, ReceivedFrames
from amps.log.records import PublishRecord, QueueRecord, Record
from replication.frames import (
    ACK_AT_ONCE,
    PROTOCOL_VERSION,
    Ack,
    AckPolicy,
    Batch,
    Digest,
    Frame,
    Heartbeat,
    Hello,
    OriginPosition,
    Refusal,
    TransferRequest,
)
from replication.origins import OriginHeads, OriginLags
from replication.positions import PositionBook
from replication.reachability import Reachability
from replication.routing import NO_DIGEST, Route
from replication.topology import Topology

# Refusal codes, each with what it means; docs/reference/errors.md lists them (amps.tools).
REFUSALS: dict[str, str] = {
    "protocol": "the peer speaks another replication protocol version, or sent a frame out "
    "of order (before its Hello, a batch out of txid order, an ack of no batch in flight)",
    "self": "the peer has this instance's own Name (a link to itself, or two instances "
    "configured with one Name)",
    "wrong_peer": "the instance reached is not the one the destination names",
    "group_mismatch": "the peer's Group differs from the destination's Group",
    "duplicate_link": "a link between these two instances is already up (one per pair)",
    "identity": "the peer's certificate does not name the instance it claims to be "
    "(amps-replication-secure)",
    "unknown_peer": "the peer is neither a destination of this instance nor allowed by the "
    "replication transport's AllowedInstance / AllowedGroup (amps-replication-secure)",
    "queue_topology": "the two instances' queues disagree (R8): a queue replicated one way "
    "only, a queue on one side and not on the other, a different kind, UnderlyingTopic, "
    "MessageType, Filter or InitialOwner, or a destination that does not pass through the "
    "group of a holder of the queue behind the peer (replication/topology.py)",
}


# A peer may ask for no longer than AMPS allows (AckConflationInterval < 1s), so what it has
# not had acknowledged stays bounded in time.
MAX_ACK_INTERVAL_MS = 1000

# Instants kept for the age of unacknowledged records (`_track_unacked`): one per commit seen
# while the peer is behind, so a peer down for hours does not grow them without bound.
_MAX_DURABLE_MARKS = 1024

# What a record that is not a publish (an ack, a transfer) counts for in a link's window and
# in the receiver's count of it (Rule 5): small, and not worth measuring record by record.
_OTHER_RECORD_BYTES = 64
_FRAME_LENGTH = itemgetter(2)  # of a ReceivedFrames head: the frame's payload length


class LinkState(Enum):
    IDLE = "idle"
    HELLO_SENT = "hello_sent"
    ACCEPTED = "accepted"
    READY = "ready"


class LogView(Protocol):
    """What a link needs of the local log: durable records by txid."""

    @property
    def first_txid(self) -> int: ...

    @property
    def durable_txid(self) -> int: ...

    def read(self, from_txid: int, max_records: int) -> Sequence[Record]:
        """Records from `from_txid` on, at most `max_records` (a prefix: the caller reads on);
        a `ReceivedFrames` when they come from the journal's segments as frames."""
        ...


@dataclass(frozen=True, slots=True)
class LinkLimits:
    """Bounds of one link; units in the names."""

    max_batch_records: int = 1000
    max_batch_bytes: int = 1 << 20
    # Batches sent and not yet acknowledged: at a steady rate a batch leaves per local commit
    # and an ack comes back per commit of the receiver, so a window of a few batches fills
    # whenever the receiver's fsync takes a few of ours; the bytes bound the memory instead.
    window_batches: int = 64
    window_bytes: int = 8 << 20
    # While reading the journal: a peer catching up takes ~100 MiB/s and acknowledges once
    # durable, and at 8 MiB the sender refilled the window at every ack, then waited for the
    # next one (docs/benchmarks.md, "Catch-up: the window, the loop and the read posted
    # ahead"). Not for live records: under a full-rate publisher the 8 MiB window lets a
    # link's records gather while the peer is behind, leaving the publishers the loop.
    catch_up_window_bytes: int = 32 << 20
    heartbeat_interval_ms: int = 1000
    peer_timeout_ms: int = 10_000
    max_reads_per_step: int = 4
    # While reading the journal, one batch per step: reading and checking a batch of 1 MiB from
    # disk holds the adapter's event loop for milliseconds, and gRPC's writes only progress
    # when that loop turns.
    catch_up_batches_per_step: int = 1


# -- events (facts, past tense) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connected:
    """A stream to the peer is open: we dialled it, or the peer did (its Hello comes next)."""

    dialled: bool


@dataclass(frozen=True, slots=True)
class FrameReceived:
    frame: Frame


@dataclass(frozen=True, slots=True)
class LogAdvanced:
    """The local log's durable txid moved on (or the adapter asks the sender to go on)."""


@dataclass(frozen=True, slots=True)
class RecordsDurable:
    """Batches of the peer's are durable here, one commit's worth: per batch, in order, the
    peer txid it ends at and the local txid it is durable at or before (0: not known). One
    event per commit and link, so one ack covers them all (Rule 5)."""

    batches: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Disconnected:
    reason: str


@dataclass(frozen=True, slots=True)
class SyncChanged:
    """An administrator or an action downgraded (True) or upgraded (False) the destination."""

    downgraded: bool
    reason: str


Event = Connected | FrameReceived | LogAdvanced | RecordsDurable | Disconnected | SyncChanged

# -- actions (imperatives) -------------------------------------------------------------------
# Contract: perform in list order. `Send(Ack)` is only ever produced after `RecordsDurable`, so
# the adapter never has to hold an ack back; `Apply` must be followed, once its records are
# durable, by a `RecordsDurable` that names its `through_txid` (with the other batches the same
# commit made durable: at most one ack comes of it).


@dataclass(frozen=True, slots=True)
class Send:
    frame: Frame


@dataclass(frozen=True, slots=True)
class Apply:
    """Append the peer's records under local txids (de-duplicated), in order."""

    records: Sequence[Record]
    through_txid: int


@dataclass(frozen=True, slots=True)
class PeerAcked:
    """The destination holds every record it should get up to local txid `through_txid`."""

    through_txid: int


@dataclass(frozen=True, slots=True)
class Close:
    """End the stream; `refused` when this side (or the peer) refused the link."""

    reason: str
    refused: bool = False
    code: str = ""  # the refusal's code (REFUSALS), when refused


@dataclass(frozen=True, slots=True)
class RequestArrived:
    """The peer sent a transfer request (R4): the adapter hands it to the queue, or forwards
    it towards its owner."""

    request: TransferRequest


Action = Send | Apply | PeerAcked | Close | RequestArrived


@dataclass(frozen=True, slots=True)
class LinkStatistics:
    """A snapshot for metrics and `amps admin replication`."""

    peer: str
    state: str
    sends: bool
    sync: bool
    downgraded: bool
    acked_through_txid: int
    behind_records: int
    oldest_unacked_ms: int
    batches_sent: int
    records_sent: int
    batches_received: int
    records_received: int
    received_through_txid: int
    resyncs: int
    sync_changes: int
    last_heard_ms: int | None
    acks_sent: int = 0  # acks this side sent for the peer's batches (Rule 5 conflates them)


def _order_and_ends(
    records: Sequence[Record], previous: int
) -> tuple[bool, int, dict[str, tuple[int, int]]]:
    """Whether the txids strictly increase after `previous`, the last txid, and each origin's
    last (origin txid, txid). One pass over the records (this runs for every replicated
    record); a batch received as frames had it computed while it was checked."""
    if type(records) is ReceivedFrames:
        if not records:
            return True, previous, {}
        first = records.heads[0][4]
        return records.increasing and first > previous, records.last_txid, records.ends
    last_txid = previous
    ends: dict[str, tuple[int, int]] = {}
    for record in records:
        txid = record.txid
        if txid <= last_txid:
            return False, last_txid, ends
        last_txid = txid
        ends[record.origin_instance] = (record.origin_txid, txid)
    return True, last_txid, ends


def _records_bytes(records: Sequence[Record]) -> int:
    """A batch's size as the sender counts it in its window (`LinkCore._choose`)."""
    return sum(len(r.data) if type(r) is PublishRecord else _OTHER_RECORD_BYTES for r in records)


def should_send_now(
    in_flight_batches: int, in_flight_bytes: int, limits: LinkLimits, *, catching_up: bool = False
) -> bool:
    """Send now while the window has room; under load records gather into the next batch."""
    window_bytes = limits.catch_up_window_bytes if catching_up else limits.window_bytes
    return in_flight_batches < limits.window_batches and in_flight_bytes < window_bytes


class LinkCore:
    """The link to one peer: handshake, batches with flow control, acks, heartbeats."""

    def __init__(
        self,
        local: str,
        group: str,
        log: LogView,
        routes: Mapping[str, Route],
        book: PositionBook,
        peer: str,
        *,
        limits: LinkLimits | None = None,
        reachability: Reachability | None = None,
        topology: Topology | None = None,
        heads: OriginHeads | None = None,
        lags: OriginLags | None = None,
    ) -> None:
        self.local = local
        self.group = group
        self.log = log
        self.book = book
        self.peer = peer
        self.limits = limits or LinkLimits()
        self.reachability = reachability or Reachability(local)
        self.topology = topology
        # Per-origin lag: this instance's heads (sent in heartbeats) and what peers' say.
        self.heads = heads
        self.lags = lags
        self.state = LinkState.IDLE
        self.downgraded = False
        self.close_reason = ""
        # (code, message) of the last refusal either way, until the link is next up
        self.refusal: tuple[str, str] | None = None
        self.refusals = 0  # refusals either way, ever
        self._connected_ms = 0
        # sender: the destination configured for this peer, if any (one-way links have none)
        self._route: Route | None = routes.get(peer)
        self._cursor = 0  # next local txid to read
        # (batch_id, through_txid, size_bytes) of each batch sent and not yet acknowledged
        self._in_flight: deque[tuple[int, int, int]] = deque()
        self._in_flight_bytes = 0
        self._next_batch_id = 1
        self.acked_through_txid = 0
        # (durable txid, when first seen durable) ascending, past what the peer acknowledged:
        # the oldest unacknowledged record's age comes from the first (a downgrade reads it).
        self._durable_marks: deque[tuple[int, int]] = deque()
        self._more = False
        self._catching_up = False  # the last read came from the journal, not the record cache
        # receiver: per batch (through_txid, the last record of each origin in it, size_bytes)
        self._pending_positions: deque[tuple[int, dict[str, OriginPosition], int]] = deque()
        self._pending_bytes = 0
        self.received_through_txid = 0
        # receiver: the peer's AckPolicy (Rule 5), and the durable batches not yet acknowledged
        self._peer_policy = ACK_AT_ONCE
        self._owed_through = 0  # the last durable batch's through_txid, 0: no ack owed
        self._owed_batches = 0
        self._owed_bytes = 0
        self._ack_due_ms: int | None = None
        self._acks_sent = 0
        # counters and timers
        self._batches_sent = 0
        self._records_sent = 0
        self._batches_received = 0
        self._records_received = 0
        self._resyncs = 0
        self._sync_changes = 0
        self._last_sent_ms = 0
        self._last_heartbeat_ms = 0
        self._last_heard_ms: int | None = None

    # -- dispatch ----------------------------------------------------------------------------

    def handle(self, event: Event, now_ms: int) -> list[Action]:
        """Apply one event; return what the adapter must do, in order."""
        match event:
            case Connected(dialled):
                return self._on_connected(dialled, now_ms)
            case FrameReceived(frame):
                if self.state is LinkState.IDLE:
                    return []  # a frame that raced the close
                self._last_heard_ms = now_ms
                self.reachability.heard_directly(self.peer, now_ms)
                return self._on_frame(frame, now_ms)
            case LogAdvanced():
                if self.state is not LinkState.READY:
                    return self._skip_unwanted(now_ms)
                return self._fill(now_ms)
            case RecordsDurable(batches):
                return self._on_records_durable(batches, now_ms)
            case Disconnected(reason):
                self._reset(reason)
                return []
            case SyncChanged(downgraded, _):
                if not self.sync or downgraded == self.downgraded:
                    return []
                self.downgraded = downgraded
                self._sync_changes += 1
                if self.state is not LinkState.READY:
                    return []  # the next Hello carries the new policy
                # Rule 5: the receiver learns at once, so an upgrade leaves no ack waiting.
                self._last_heartbeat_ms = now_ms
                return [self._send(self._heartbeat(now_ms), now_ms)]
        raise AssertionError(f"unknown event {event!r}")

    def on_deadline(self, now_ms: int) -> list[Action]:
        """Heartbeat an idle link; close a link whose peer has gone silent; send a conflated
        ack whose interval is over."""
        if self.state is LinkState.IDLE:
            return []
        heard = self._last_heard_ms if self._last_heard_ms is not None else self._connected_ms
        if now_ms - heard >= self.limits.peer_timeout_ms:
            reason = f"no frame from {self.peer or 'the peer'} for {now_ms - heard} ms"
            self._reset(reason)
            return [Close(reason)]
        actions: list[Action] = []
        if self._ack_due_ms is not None and now_ms >= self._ack_due_ms:
            actions.append(self._send_ack(now_ms))
        if self.state is LinkState.READY and (
            now_ms - self._last_heartbeat_ms >= self.limits.heartbeat_interval_ms
        ):
            # Also on a busy link: the heartbeat carries the reachability table onwards.
            self._last_heartbeat_ms = now_ms
            actions.append(self._send(self._heartbeat(now_ms), now_ms))
        return actions

    def _heartbeat(self, now_ms: int) -> Heartbeat:
        heard = self.reachability.table(now_ms)
        if not self.sends:
            return Heartbeat(heard)
        if self.heads is None:
            return Heartbeat(heard, ack_policy=self.ack_policy)
        return Heartbeat(heard, self.heads.positions(), self.acked_through_txid, self.ack_policy)

    @property
    def ack_policy(self) -> AckPolicy:
        """How the peer is to acknowledge this side's batches (Rule 5)."""
        route = self._route
        if route is None or (route.sync and not self.downgraded):
            return ACK_AT_ONCE
        return AckPolicy(
            route.ack_conflation_interval_ms,
            self.limits.window_batches,
            self.limits.window_bytes,
        )

    def next_deadline_ms(self) -> int | None:
        """When `on_deadline` next has work, or None while there is no stream."""
        if self.state is LinkState.IDLE:
            return None
        heard = self._last_heard_ms if self._last_heard_ms is not None else self._connected_ms
        deadline = heard + self.limits.peer_timeout_ms
        if self.state is LinkState.READY:
            deadline = min(deadline, self._last_heartbeat_ms + self.limits.heartbeat_interval_ms)
        if self._ack_due_ms is not None:
            deadline = min(deadline, self._ack_due_ms)
        return deadline

    @property
    def sends(self) -> bool:
        """Whether this side has a destination for the peer."""
        return self._route is not None

    @property
    def sync(self) -> bool:
        return self._route is not None and self._route.sync

    @property
    def wants_to_send(self) -> bool:
        """The last step stopped early with more to send: post `LogAdvanced` again."""
        return self._more

    # -- connection and handshake ------------------------------------------------------------

    def _on_connected(self, dialled: bool, now_ms: int) -> list[Action]:
        assert self.state is LinkState.IDLE, self.state
        self._connected_ms = now_ms
        self._last_heard_ms = None
        self.close_reason = ""
        if not dialled:
            self.state = LinkState.ACCEPTED
            return []
        self.state = LinkState.HELLO_SENT
        return [self._send(self._hello(dialled=True), now_ms)]

    def _hello(self, *, dialled: bool) -> Hello:
        route = self._route
        return Hello(
            protocol_version=PROTOCOL_VERSION,
            instance=self.local,
            group=self.group,
            expected_peer=self.peer if dialled else "",
            expected_group=route.group if dialled and route is not None else "",
            digest=self._digest(),
            positions=self.book.positions(self.peer),
            ack_policy=self.ack_policy,
        )

    def _digest(self) -> Digest:
        digest = self._route.digest if self._route is not None else NO_DIGEST
        if self.topology is None:
            return digest
        return replace(digest, queues=self.topology.queues)

    def _on_frame(self, frame: Frame, now_ms: int) -> list[Action]:
        if isinstance(frame, Hello):
            return self._on_hello(frame, now_ms)
        if isinstance(frame, Refusal):
            reason = f"by {self.peer}: {frame.message}"
            self._reset(reason)
            self._refused(frame.code, reason)
            return [Close(reason, refused=True, code=frame.code)]
        if self.state is not LinkState.READY:
            return self._refuse("protocol", f"{frame.__class__.__name__} before Hello")
        if isinstance(frame, Batch):
            return self._on_batch(frame)
        if isinstance(frame, Ack):
            return self._on_ack(frame.through_txid, now_ms)
        if isinstance(frame, TransferRequest):
            return [RequestArrived(frame)]
        assert isinstance(frame, Heartbeat)
        self.reachability.heard_via(frame.heard, now_ms)
        if self.lags is not None and frame.heads:
            self.lags.heard(self.peer, frame.heads, frame.acked_through_txid, now_ms)
        return self._peer_policy_changed(frame.ack_policy, now_ms)

    def _on_hello(self, hello: Hello, now_ms: int) -> list[Action]:
        if self.state is LinkState.READY:
            return self._refuse("protocol", "a second Hello")
        problem = self._check_hello(hello)
        if problem is not None:
            return self._refuse(*problem)
        actions: list[Action] = []
        if self.state is LinkState.ACCEPTED:
            actions.append(self._send(self._hello(dialled=False), now_ms))
        self.state = LinkState.READY
        self.refusal = None
        self._last_heartbeat_ms = now_ms
        self._peer_policy = hello.ack_policy
        self._start_sending(hello.positions)
        actions.extend(self._fill(now_ms))
        return actions

    def _check_hello(self, hello: Hello) -> tuple[str, str] | None:
        both = f"{self.local} (group {self.group}) and {hello.instance} (group {hello.group})"
        if hello.protocol_version != PROTOCOL_VERSION:
            return "protocol", f"{both}: protocol {hello.protocol_version}, not {PROTOCOL_VERSION}"
        if hello.instance == self.local:
            return "self", f"{both}: the peer has this instance's Name {self.local!r}"
        if hello.instance != self.peer:
            return "wrong_peer", f"{both}: the destination names {self.peer!r}"
        if hello.expected_peer and hello.expected_peer != self.local:
            return "wrong_peer", f"{both}: the peer's destination names {hello.expected_peer!r}"
        route = self._route
        if route is not None and route.group != hello.group:
            return "group_mismatch", f"{both}: the destination's Group is {route.group!r}"
        if hello.expected_group and hello.expected_group != self.group:
            return (
                "group_mismatch",
                f"{both}: the peer's destination Group is {hello.expected_group!r}",
            )
        if self.topology is not None:
            problem = self.topology.check(self._digest(), hello.instance, hello.group, hello.digest)
            if problem is not None:
                return "queue_topology", f"{both}: {problem}"
        return None

    def _refuse(self, code: str, message: str) -> list[Action]:
        assert code in REFUSALS, code
        self._reset(f"refused: {message}")
        self._refused(code, message)
        return [Send(Refusal(code, message)), Close(message, refused=True, code=code)]

    def _refused(self, code: str, message: str) -> None:
        self.refusal = (code, message)
        self.refusals += 1

    def send_request(self, request: TransferRequest, now_ms: int) -> list[Action]:
        """Send a transfer request on a ready link; on any other it is lost, which is a
        refusal (the requester asks again)."""
        if self.state is not LinkState.READY:
            return []
        return [self._send(request, now_ms)]

    def refuse_duplicate(self) -> list[Action]:
        """The adapter found another live stream to this peer: refuse this one (Rule 4)."""
        return self._refuse(
            "duplicate_link", f"{self.local} and {self.peer}: a link between them is already up"
        )

    # -- sender ------------------------------------------------------------------------------

    def _start_sending(self, held: tuple[OriginPosition, ...]) -> None:
        """R10: resume after what the peer holds from us, if our log agrees it is ours."""
        self._in_flight.clear()
        self._in_flight_bytes = 0
        start = self.log.first_txid
        if held and all(self._is_ours(p) for p in held):
            start = max(start, max(p.upstream_txid for p in held) + 1)
        self._cursor = start
        self._catching_up = False
        self.acked_through_txid = start - 1
        if start <= self.log.durable_txid and self.sends:
            self._resyncs += 1

    def _is_ours(self, position: OriginPosition) -> bool:
        if position.upstream_txid < self.log.first_txid:
            return position.upstream_txid == 0
        if position.upstream_txid > self.log.durable_txid:
            return False
        found = self.log.read(position.upstream_txid, 1)
        return bool(found) and (
            found[0].txid == position.upstream_txid
            and found[0].origin_instance == position.origin
            and found[0].origin_txid == position.origin_txid
        )

    def _fill(self, now_ms: int) -> list[Action]:
        self._more = False
        route = self._route
        if route is None or self.state is not LinkState.READY:
            return []
        actions: list[Action] = []
        limits = self.limits
        reads = batches = 0
        acked_before = self.acked_through_txid
        while self._cursor <= self.log.durable_txid and should_send_now(
            len(self._in_flight), self._in_flight_bytes, limits, catching_up=self._catching_up
        ):
            if reads == limits.max_reads_per_step or (
                self._catching_up and batches == limits.catch_up_batches_per_step
            ):
                self._more = True
                break
            reads += 1
            records = self.log.read(self._cursor, limits.max_batch_records)
            if not records:
                break
            chosen: Sequence[Record]
            if type(records) is ReceivedFrames:  # from the journal: catching the peer up
                self._catching_up = True
                chosen, through, size_bytes = self._choose_frames(records, route)
            else:
                self._catching_up = False
                chosen, through, size_bytes = self._choose(records, route)
            self._cursor = through + 1
            if chosen:
                batches += 1
                batch = Batch(self._next_batch_id, through, chosen)
                self._next_batch_id += 1
                self._in_flight.append((batch.batch_id, through, size_bytes))
                self._in_flight_bytes += size_bytes
                self._batches_sent += 1
                self._records_sent += len(chosen)
                actions.append(self._send(batch, now_ms))
            elif not self._in_flight:
                self.acked_through_txid = through  # nothing for the peer up to here
        self._track_unacked(now_ms)
        if self.acked_through_txid > acked_before:
            actions.append(PeerAcked(self.acked_through_txid))
        return actions

    def _choose(
        self, records: Sequence[Record], route: Route
    ) -> tuple[tuple[Record, ...], int, int]:
        """The records of one read that go to the destination (Rule 2 of routing: an ack by
        bookmark), the last txid looked at, and their size in bytes."""
        chosen: list[Record] = []
        size_bytes = 0
        through = self._cursor - 1
        wants, max_batch_bytes = route.wants, self.limits.max_batch_bytes
        for record in records:
            if size_bytes >= max_batch_bytes:
                break
            through = record.txid
            if not wants(record):
                continue
            if type(record) is PublishRecord:
                size_bytes += len(record.data)
            else:
                if isinstance(record, QueueRecord):
                    record = self._by_bookmark(record)
                size_bytes += _OTHER_RECORD_BYTES
            chosen.append(record)
        return tuple(chosen), through, size_bytes

    def _choose_frames(self, frames: ReceivedFrames, route: Route) -> tuple[ChosenFrames, int, int]:
        """`_choose` over a read of the journal as frames: routed on their heads, one verdict
        per distinct (topic, origin) of the read; a record is built only for a Filter or a
        queue record. The usual read goes whole, and ships as the frames it read."""
        heads, names, others = frames.heads, frames.names, frames.others
        verdicts = {key: route.publish_verdict(key) for key in set(names)}
        max_batch_bytes = self.limits.max_batch_bytes
        if not others and all(verdict is True for verdict in verdicts.values()):
            sizes = list(accumulate(map(_FRAME_LENGTH, heads)))
            count = min(len(heads), bisect_left(sizes, max_batch_bytes) + 1)
            return ChosenFrames(frames, range(count), {}), heads[count - 1][4], sizes[count - 1]
        chosen: list[int] = []
        replaced: dict[int, Record] = {}
        size_bytes = 0
        through = self._cursor - 1
        for index, head in enumerate(heads):
            if size_bytes >= max_batch_bytes:
                break
            through = head[4]
            other = others.get(index)
            if other is not None:
                if not route.wants(other):
                    continue
                if isinstance(other, QueueRecord):
                    replaced[index] = self._by_bookmark(other)
                size_bytes += _OTHER_RECORD_BYTES
            else:
                verdict = verdicts[names[index]]
                if verdict is False:
                    continue
                if verdict is not True:
                    record = frames[index]
                    assert type(record) is PublishRecord
                    if not route.matches(verdict, record):
                        continue
                size_bytes += head[2]
            chosen.append(index)
        return ChosenFrames(frames, chosen, replaced), through, size_bytes

    def _skip_unwanted(self, now_ms: int) -> list[Action]:
        """A destination that is down holds only what it takes (L2): records it would not get
        count as acknowledged up to the first one it would, and that one starts its age."""
        route = self._route
        acked_before = self.acked_through_txid
        cursor = acked_before + 1
        for _ in range(self.limits.max_reads_per_step if route is not None else 0):
            if cursor > self.log.durable_txid:
                break
            records = self.log.read(cursor, self.limits.max_batch_records)
            if not records:
                break
            assert route is not None
            wanted = next((r for r in records if route.wants(r)), None)
            if wanted is not None:
                self.acked_through_txid = max(self.acked_through_txid, wanted.txid - 1)
                break
            self.acked_through_txid = records[-1].txid
            cursor = records[-1].txid + 1
        self._track_unacked(now_ms)  # a down destination falls behind (downgrade)
        if self.acked_through_txid > acked_before:
            return [PeerAcked(self.acked_through_txid)]
        return []

    def _by_bookmark(self, record: QueueRecord) -> QueueRecord:
        """An ack names messages by local txid; the peer knows them by bookmark (L1). Each run
        of consecutive txids is read at once (a step's acks are mostly one or a few runs): one
        read per txid costs a journal read each once the record cache has dropped them."""
        found: dict[int, Bookmark] = {}
        ordered = sorted(record.txids)
        read = self.log.read
        start = 0
        while start < len(ordered):
            end = start + 1
            while end < len(ordered) and ordered[end] <= ordered[end - 1] + 1:
                end += 1
            txid, last = ordered[start], ordered[end - 1]
            while txid <= last:
                records = read(txid, last - txid + 1)
                if not records:
                    break
                if type(records) is ReceivedFrames:  # read as frames: bookmarks from the heads
                    others = records.others
                    for index, head in enumerate(records.heads):
                        if index not in others:
                            found[head[4]] = Bookmark(head[6], head[7])
                else:
                    for item in records:
                        if type(item) is PublishRecord:
                            found[item.txid] = item.bookmark
                if records[-1].txid < txid:
                    break  # a log view never answers before the txid asked; be safe anyway
                txid = records[-1].txid + 1
            start = end
        bookmarks = (*record.bookmarks, *(found[t] for t in record.txids if t in found))
        return replace(record, bookmarks=bookmarks, txids=(), delivered_us=(), deliveries=())

    def _on_ack(self, through_txid: int, now_ms: int) -> list[Action]:
        in_flight = self._in_flight
        if all(through != through_txid for _, through, _ in in_flight):
            # Acks name the end of a batch in flight; anything else would let us count as
            # delivered what the peer never received.
            return self._refuse(
                "protocol",
                f"{self.local} and {self.peer}: an ack of txid {through_txid}, which ends no "
                "batch in flight",
            )
        while in_flight and in_flight[0][1] <= through_txid:
            self._in_flight_bytes -= in_flight.popleft()[2]
        acked = through_txid if in_flight else self._cursor - 1
        actions: list[Action] = []
        if acked > self.acked_through_txid:
            self.acked_through_txid = acked
            actions.append(PeerAcked(acked))
        actions.extend(self._fill(now_ms))
        self._track_unacked(now_ms)
        return actions

    def _track_unacked(self, now_ms: int) -> None:
        marks = self._durable_marks
        acked, durable = self.acked_through_txid, self.log.durable_txid
        if acked >= durable or not self.sends:
            marks.clear()
            return
        while marks and marks[0][0] <= acked:
            marks.popleft()
        if marks and marks[-1][0] >= durable:
            return
        if len(marks) < _MAX_DURABLE_MARKS:
            marks.append((durable, now_ms))
        else:  # bounded while a peer is down: the newest records count as older, never younger
            marks[-1] = (durable, marks[-1][1])

    @property
    def unsent_from_txid(self) -> int:
        """The first local txid this link may still read to send: its read position while
        READY, else just past what the peer acknowledged (a stream resumes no earlier)."""
        if self.state is LinkState.READY:
            return self._cursor
        return self.acked_through_txid + 1

    def oldest_unacked_ms(self, now_ms: int) -> int:
        """How long the oldest record durable here and not acknowledged by the destination has
        been durable (0: caught up)."""
        marks = self._durable_marks
        return now_ms - marks[0][1] if marks else 0

    # -- receiver ----------------------------------------------------------------------------

    def _on_batch(self, batch: Batch) -> list[Action]:
        # A peer's frames are input, not our state: a batch out of order is refused, not asserted.
        previous = self.received_through_txid
        in_order, last_txid, ends = _order_and_ends(batch.records, previous)
        if not in_order or batch.through_txid <= previous or last_txid > batch.through_txid:
            return self._refuse(
                "protocol",
                f"{self.local} and {self.peer}: a batch through txid {batch.through_txid} out of "
                f"order after {previous}",
            )
        last = {
            origin: OriginPosition(origin, origin_txid, txid)
            for origin, (origin_txid, txid) in ends.items()
        }
        records = batch.records
        size_bytes = (
            len(records.data) if type(records) is ReceivedFrames else _records_bytes(records)
        )
        self._pending_positions.append((batch.through_txid, last, size_bytes))
        self._pending_bytes += size_bytes
        self.received_through_txid = batch.through_txid
        self._batches_received += 1
        self._records_received += len(batch.records)
        return [Apply(batch.records, batch.through_txid)]

    def _on_records_durable(
        self, batches: tuple[tuple[int, int], ...], now_ms: int
    ) -> list[Action]:
        pending = self._pending_positions
        if not pending or self.state is not LinkState.READY:
            return []  # the stream that carried them is gone; the Hello reports what is held
        acked = 0
        heads = self.heads
        for through_txid, local_txid in batches:
            while pending and pending[0][0] <= through_txid:
                batch_through, positions, size_bytes = pending.popleft()
                for position in positions.values():
                    self.book.hold(self.peer, position)
                    if heads is not None and local_txid:
                        # Built, not `replace`d: this runs per batch and origin.
                        heads.advance(
                            OriginPosition(position.origin, position.origin_txid, local_txid)
                        )
                acked = batch_through
                self._pending_bytes -= size_bytes
                self._owed_batches += 1
                self._owed_bytes += size_bytes
        if not acked:
            return []
        self._owed_through = acked
        policy = self._peer_policy
        # Rule 5: what the sender counts in its window is every batch not acknowledged,
        # durable here or not.
        if (
            not policy.interval_ms
            or (self._owed_batches + len(pending)) * 2 >= policy.window_batches
            or (self._owed_bytes + self._pending_bytes) * 2 >= policy.window_bytes
        ):
            return [self._send_ack(now_ms)]
        if self._ack_due_ms is None:
            self._ack_due_ms = self._ack_due(now_ms)
        return []

    def _ack_due(self, now_ms: int) -> int:
        return now_ms + min(self._peer_policy.interval_ms, MAX_ACK_INTERVAL_MS)

    def _send_ack(self, now_ms: int) -> Send:
        """The cumulative ack of every durable batch of the peer's (one is owed)."""
        through = self._owed_through
        assert through, "no ack owed"
        self._owed_through = self._owed_batches = self._owed_bytes = 0
        self._ack_due_ms = None
        self._acks_sent += 1
        return self._send(Ack(through), now_ms)

    def _peer_policy_changed(self, policy: AckPolicy, now_ms: int) -> list[Action]:
        """The peer restated how it wants its batches acknowledged: an ack owed goes at once
        when it now wants acks at once (an upgrade to sync), else by the new interval."""
        if policy == self._peer_policy:
            return []
        self._peer_policy = policy
        if not self._owed_through:
            return []
        if not policy.interval_ms:
            return [self._send_ack(now_ms)]
        assert self._ack_due_ms is not None  # owed under an interval
        self._ack_due_ms = min(self._ack_due_ms, self._ack_due(now_ms))
        return []

    # -- common ------------------------------------------------------------------------------

    def _send(self, frame: Frame, now_ms: int) -> Send:
        self._last_sent_ms = now_ms
        return Send(frame)

    def _reset(self, reason: str) -> None:
        self.state = LinkState.IDLE
        self.close_reason = reason
        self._in_flight.clear()
        self._in_flight_bytes = 0
        self._pending_positions.clear()
        self._pending_bytes = 0
        self.received_through_txid = 0
        self._more = False
        # An ack not sent is a position the peer resumes before (Rule 5): nothing is lost.
        self._peer_policy = ACK_AT_ONCE
        self._owed_through = self._owed_batches = self._owed_bytes = 0
        self._ack_due_ms = None

    def statistics(self, now_ms: int) -> LinkStatistics:
        """Counters and gauges of this link, at `now_ms`."""
        behind = max(0, self.log.durable_txid - self.acked_through_txid) if self.sends else 0
        return LinkStatistics(
            peer=self.peer,
            state=self.state.value,
            sends=self.sends,
            sync=self.sync,
            downgraded=self.downgraded,
            acked_through_txid=self.acked_through_txid,
            behind_records=behind,
            oldest_unacked_ms=self.oldest_unacked_ms(now_ms),
            batches_sent=self._batches_sent,
            records_sent=self._records_sent,
            batches_received=self._batches_received,
            records_received=self._records_received,
            received_through_txid=self.received_through_txid,
            resyncs=self._resyncs,
            sync_changes=self._sync_changes,
            last_heard_ms=self._last_heard_ms,
            acks_sent=self._acks_sent,
        )

    def check_invariants(self) -> None:
        """Cross-checks run after every step in tests."""
        assert len(self._in_flight) <= self.limits.window_batches
        throughs = [through for _, through, _ in self._in_flight]
        assert self._in_flight_bytes == sum(size for _, _, size in self._in_flight)
        assert throughs == sorted(throughs)
        if self.state is LinkState.READY and self.sends:
            assert self.acked_through_txid <= self._cursor - 1 <= self.log.durable_txid
            if throughs:
                assert self.acked_through_txid < throughs[0]
                assert throughs[-1] <= self._cursor - 1
        if self.state is not LinkState.READY:
            assert not self._in_flight
            assert not self._pending_positions
            assert not self._owed_through
        pending = [through for through, _, _ in self._pending_positions]
        assert pending == sorted(pending)
        assert self._pending_bytes == sum(size for _, _, size in self._pending_positions)
        if pending:
            assert pending[-1] == self.received_through_txid
            assert self._owed_through < pending[0]
        assert (self._ack_due_ms is not None) == bool(self._owed_through)
        if self._owed_through:
            assert self._peer_policy.interval_ms
