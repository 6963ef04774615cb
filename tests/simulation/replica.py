"""One replicated queue on one simulated instance: the real `QueueReplica` (queue engine,
ownership machine, transfer latency estimators) and the simulated consumers that lease, ack,
cancel, stall and disconnect.

Facts in (records appended to the log, requests, time, consumer actions), actions out for the
cluster to perform in order: a `Record` to append to the local log, a `Lease` a consumer now
holds, a `DeadLetter`, a `TransferRequest` to send, and `SendRecordNow` in the broken variant.
Text lines are transcript notes. The cluster keeps the ordering contract (a lease given after a
grant or claim in the same list waits until that record is durable).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from amps.log.bookmarks import Bookmark
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from amps.queue import (
    Acked,
    AckOption,
    ClientDisconnected,
    Deliver,
    DeliverBarrier,
    ExpireReason,
    MessagePublished,
    MessageRemoved,
    PublishDeadLetter,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
    Subscribed,
)
from replication.latency import LatencyOptions
from replication.ownership import (
    Action,
    AppendOwnership,
    MessageKey,
    Ownership,
    OwnershipRecord,
    OwnershipState,
    SendOwnership,
    SendTransferRequest,
    TransferKind,
    TransferRequested,
)
from replication.queue_replica import QueueReplica, ReplicaAction, ReplicaOptions
from replication.transfers import from_log, to_log

QUEUE = "work"
REPLAY_MS = 0  # recovery replays the log at this time, before anything is due
LEASE_MS = 80
POLICY = QueuePolicy(
    lease_period_ms=LEASE_MS,
    max_per_subscription_backlog=3,
    max_cancels=3,
    max_deliveries=4,
    expiration_ms=250,
)
OPTIONS = ReplicaOptions(
    request_timeout_ms=40,
    latency=LatencyOptions(default_ms=20, window=16, min_samples=4, max_tracked=1_024, max_ms=200),
)


@dataclass(frozen=True)
class Breakage:
    """Rules broken on purpose, to prove the simulation notices."""

    first_request: bool = False  # every request granted, not only the first (R5)
    log_before_send: bool = False  # grants sent and claims delivered before they are durable
    replay_at_now: bool = False  # recovery replays at the current time, writing nothing


@dataclass(frozen=True)
class Lease:
    key: MessageKey
    client_id: str
    deadline_ms: int


@dataclass(frozen=True)
class DeadLetter:
    key: MessageKey
    reason: str


@dataclass(frozen=True)
class SendRecordNow:
    """The broken adapter's fast path: send the record just appended, durable or not."""


@dataclass(frozen=True)
class TransferRequest:
    key: MessageKey
    requester: str
    owner: str


class FirstRequestBroken(Ownership):
    """Deliberately wrong: grants again after granting (R5 broken), to prove the sim sees it."""

    def _on_requested(self, event: TransferRequested, actions: list[Action]) -> None:
        entry = self._entries.get(event.key)
        if entry is not None and entry.state is OwnershipState.GRANTED:
            if event.requester != entry.owner:
                record = OwnershipRecord(
                    event.key, TransferKind.GRANT, self.here, event.requester, entry.epoch + 1
                )
                self._apply(event.key, entry, record)
                actions += [AppendOwnership(record), SendOwnership(record)]
            return
        super()._on_requested(event, actions)


@dataclass
class Consumer:
    """One client with one queue subscription; `leases` as the client sees them."""

    client_id: str
    backlog: int
    steady: bool  # acks everything it gets, never cancels, stalls or disconnects
    leases: dict[MessageKey, int] = field(default_factory=dict)  # key -> lease deadline ms
    connected: bool = True
    stalled_until_ms: int = 0


class SimQueue:
    """The queue side of one instance."""

    def __init__(self, here: str, breakage: Breakage) -> None:
        self.here = here
        self.breakage = breakage
        machine = None
        if breakage.first_request:
            machine = FirstRequestBroken(here, request_timeout_ms=OPTIONS.request_timeout_ms)
        self.replica = QueueReplica(here, QueueEngine(POLICY), OPTIONS, ownership=machine)
        self.key_of: dict[int, MessageKey] = {}  # local txid -> bookmark of a publish
        self.consumers: dict[str, Consumer] = {}
        self._clients = 0
        self._owned_before = False
        self.dirty = True  # it handled something since its invariants were last checked
        self._deadline_stale = True
        self._deadline_ms: int | None = None

    @property
    def ownership(self) -> Ownership:
        return self.replica.ownership

    # -- switches ----------------------------------------------------------------------------

    def set_proxied(self, on: bool, now_ms: int) -> list[object]:
        return self._out(self.replica.proxied_transfer_switched(on, now_ms))

    def set_unreachable(self, names: frozenset[str], now_ms: int) -> list[object]:
        if names == self.ownership.unreachable:
            return []
        return self._out(self.replica.reachability_changed(names, now_ms))

    # -- records -----------------------------------------------------------------------------

    def recover(self, records: Sequence[Record], now_ms: int) -> list[object]:
        """Rebuild the queue from the durable log, then return what is due now.

        The log is replayed before any time-driven work (at time 0, when nothing is due):
        replayed at the current time, a message past its expiration would be expired before
        a later record in the log (its ack, its owner's expiry) is read, writing a second
        removal and dead letter, or, if recovery writes nothing it decides (`replay_at_now`,
        as the server's recovery did), a removal no other instance hears of. What is due then
        leaves with its own record."""
        replay_ms = now_ms if self.breakage.replay_at_now else REPLAY_MS
        out: list[object] = []
        for record in records:
            if isinstance(record, QueueRecord) and record.origin_instance == self.here:
                for key in self._keys(record):
                    reason, reasons = _removal_of(record)
                    event = MessageRemoved(reason, bookmark=key, expire_reasons=reasons)
                    out += self._out(self.replica.handle(event, replay_ms))
            else:
                out += self.applied(record, replay_ms, local=False)
        if self.breakage.replay_at_now:
            out = []
        return out + self._out(self.replica.on_deadline(now_ms))

    def applied(self, record: Record, now_ms: int, *, local: bool) -> list[object]:
        """A record was appended here: a publish enters; a peer's removal or ownership record
        is applied. (This instance's own removals and grants were applied when made.)"""
        replica = self.replica
        if isinstance(record, PublishRecord):
            key = (record.publisher_id, record.seq)
            self.key_of[record.txid] = key
            message = MessagePublished(
                record.txid, record.publisher_id, record.seq, record.timestamp_us // 1000
            )
            return self._out(replica.published([message], [record.origin_instance], now_ms))
        if local:
            return []
        if isinstance(record, TransferRecord):
            return self._out(replica.ownership_recorded(from_log(record), now_ms))
        reason, reasons = _removal_of(record)
        for key in self._keys(record):
            self._drop_leases(key)
        return self._out(replica.removed_by_peer(self._keys(record), now_ms, reason, reasons))

    @staticmethod
    def _keys(record: QueueRecord) -> list[MessageKey]:
        return [(b.publisher_id, b.seq) for b in record.bookmarks]

    def requested(self, request: TransferRequest, now_ms: int) -> list[object]:
        self._owned_before = self.replica.owned_here(request.key)
        return self._out(self.replica.transfer_requested(request.key, request.requester, now_ms))

    def on_deadline(self, now_ms: int) -> list[object]:
        out: list[object] = []
        if self._deadline_stale:  # only a call into the replica moves its deadline
            self._deadline_ms = self.replica.next_deadline_ms()
            self._deadline_stale = False
        if self._deadline_ms is not None and self._deadline_ms <= now_ms:
            out = self._out(self.replica.on_deadline(now_ms))
        for consumer in self.consumers.values():
            for key, lease_deadline in list(consumer.leases.items()):
                if lease_deadline <= now_ms:
                    del consumer.leases[key]  # the engine took it back (Q6)
        return out

    def _out(self, actions: list[ReplicaAction]) -> list[object]:
        """The replica's actions as the cluster performs them, in order."""
        self.dirty = self._deadline_stale = True
        out: list[object] = []
        for action in actions:
            if isinstance(action, Deliver):
                out.append(Lease(self.key_of[action.txid], action.client_id,
                                 action.lease_deadline_ms or 0))  # fmt: skip
            elif isinstance(action, RecordRemoval):
                key = self.key_of[action.txid]
                out.append(_removal_record(key, action))
            elif isinstance(action, PublishDeadLetter):
                out.append(DeadLetter(self.key_of[action.txid], action.reasons.reason_text()))
            elif isinstance(action, AppendOwnership):
                record = action.record
                proxied = record.kind is TransferKind.CLAIM or (
                    self.ownership.proxied_transfer and not self._owned_before
                )
                out.append(to_log(QUEUE, record, proxied=proxied))
            elif isinstance(action, SendOwnership):
                if self.breakage.log_before_send:
                    out.append(SendRecordNow())
                # else: the link sends the record once it is durable (only durable records leave)
            elif isinstance(action, SendTransferRequest):
                out.append(TransferRequest(action.key, self.here, action.owner))
            else:
                assert not isinstance(action, DeliverBarrier), "no barriers in this queue"
        self._owned_before = False
        return out

    # -- consumers ---------------------------------------------------------------------------

    def add_consumers(
        self, count: int, rng: random.Random, now_ms: int, *, steady: bool = False
    ) -> list[object]:
        out: list[object] = []
        for _ in range(count):
            client_id = f"{self.here}c{self._clients}"
            self._clients += 1
            consumer = Consumer(client_id, rng.choice([1, 1, 2, 3]), steady)
            self.consumers[client_id] = consumer
            out += self._subscribe(consumer, now_ms)
        return out

    def _subscribe(self, consumer: Consumer, now_ms: int) -> list[object]:
        event = Subscribed("s", consumer.client_id, consumer.backlog)
        return self._out(self.replica.handle(event, now_ms))

    def leased(self, consumer: Consumer | None, lease: Lease) -> bool:
        """A delivery reached its consumer (it may have gone meanwhile)."""
        if consumer is None or not consumer.connected or self.removed(lease.key):
            return False  # gone while the delivery waited for its grant to be durable
        consumer.leases[lease.key] = lease.deadline_ms
        return True

    def consumer_step(self, rng: random.Random, now_ms: int) -> list[object]:
        """One consumer does one thing: ack, cancel, stall, disconnect or reconnect."""
        if not self.consumers:
            return []
        consumer = rng.choice(list(self.consumers.values()))
        name = consumer.client_id
        if not consumer.connected:
            consumer.connected = True
            return [f"{name} reconnects", *self._subscribe(consumer, now_ms)]
        if consumer.stalled_until_ms > now_ms:
            return []
        choice = 0.0 if consumer.steady else rng.random()
        if choice < 0.8:
            if not consumer.leases:
                return []
            key = rng.choice(sorted(consumer.leases))
            del consumer.leases[key]
            option = AckOption.NONE if choice < 0.7 else AckOption.CANCEL
            acked = self.replica.acked(Acked(name, [key], option), now_ms)
            return [f"{name} {'acks' if choice < 0.7 else 'cancels'} {key}", *self._out(acked)]
        if choice < 0.9:
            consumer.stalled_until_ms = now_ms + rng.randint(20, 200)
            return [f"{name} stalls"]
        consumer.connected = False
        consumer.leases.clear()
        gone = self.replica.handle(ClientDisconnected(name), now_ms)
        return [f"{name} disconnects", *self._out(gone)]

    def _drop_leases(self, key: MessageKey) -> None:
        for consumer in self.consumers.values():
            consumer.leases.pop(key, None)  # removed elsewhere: the engine forgot the lease

    # -- checks ------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        self.dirty = False
        self.replica.check_invariants()
        for consumer in self.consumers.values():
            assert len(consumer.leases) <= consumer.backlog

    def leases(self, now_ms: int) -> set[MessageKey]:
        return {
            key
            for c in self.consumers.values()
            for key, deadline in c.leases.items()
            if deadline > now_ms
        }

    def removed(self, key: MessageKey) -> bool:
        return self.ownership.state_of(key) is OwnershipState.REMOVED

    def view_of(self, key: MessageKey) -> tuple[bool, bool, tuple[str, int] | None]:
        """What must agree across instances after heal: removed, held by the engine, and
        (owner, epoch)."""
        held = self.replica.engine.txid_of(key) is not None
        return self.removed(key), held, self.ownership.owner_of(key)


def _removal_record(key: MessageKey, removal: RecordRemoval) -> QueueRecord:
    """The record an engine removal writes (by bookmark: the link would convert txids)."""
    bookmarks = (Bookmark(*key),)
    if removal.reason is RemovalReason.ACKED:
        return QueueRecord(0, 0, QUEUE, QueueAction.ACK, bookmarks=bookmarks)
    assert removal.reason is RemovalReason.EXPIRED, removal
    reason = removal.expire_reasons.reason_text()
    return QueueRecord(0, 0, QUEUE, QueueAction.EXPIRED, bookmarks=bookmarks, reason=reason)


def _removal_of(record: QueueRecord) -> tuple[RemovalReason, ExpireReason]:
    if record.action is QueueAction.ACK:
        return RemovalReason.ACKED, ExpireReason.TIME_LIMIT
    reasons = ExpireReason(0)
    for word in record.reason.split(","):
        reasons |= ExpireReason[word.upper()]
    return RemovalReason.EXPIRED, reasons or ExpireReason.FORCED_EXPIRE
