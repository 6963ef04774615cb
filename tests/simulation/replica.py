"""One queue on one simulated instance: the real `QueueReplica` (queue engine, ownership
machine, transfer latency estimators) and the simulated consumers that lease, ack, cancel,
stall and disconnect. A queue is a `Queue` (its publisher's instance owns a message), a
`GroupLocalQueue` (its `InitialOwner` does) or a `LocalQueue` (not replicated: each instance
delivers its own copy of the replicated data); any of them gets barrier messages (R6, A3).

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

from amps.config.model import QueueKind
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
from replication import queue_snapshot
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

LEASE_MS = 80
BARRIER_DATA = b'{"barrier":1}'  # the queues' BarrierExpression matches this data only
POLICY = QueuePolicy(
    lease_period_ms=LEASE_MS,
    max_per_subscription_backlog=3,
    max_cancels=3,
    max_deliveries=4,
    expiration_ms=250,
    has_barrier=True,
)
REQUEST_TIMEOUT_MS = 40
LATENCY = LatencyOptions(default_ms=20, window=16, min_samples=4, max_ms=200)


@dataclass(frozen=True)
class QueueSpec:
    """One queue as every instance defines it; its underlying topic has its name."""

    name: str
    kind: QueueKind
    initial_owner: str | None = None  # GroupLocalQueue only

    @property
    def replicated(self) -> bool:
        """Whether its removals and ownership replicate (a LocalQueue's stay local)."""
        return self.kind != "LocalQueue"


@dataclass(frozen=True)
class Breakage:
    """Rules broken on purpose, to prove the simulation notices."""

    first_request: bool = False  # every request granted, not only the first (R5)
    log_before_send: bool = False  # grants sent and claims delivered before they are durable
    replay_at_now: bool = False  # recovery replays at the current time, writing nothing


@dataclass(frozen=True)
class Lease:
    queue: str
    key: MessageKey
    client_id: str
    deadline_ms: int


@dataclass(frozen=True)
class DeadLetter:
    queue: str
    key: MessageKey
    reason: str


@dataclass(frozen=True)
class BarrierReleased:
    """R6: this instance released a barrier message (every earlier message left here)."""

    queue: str
    key: MessageKey


@dataclass(frozen=True)
class SendRecordNow:
    """The broken adapter's fast path: send the record just appended, durable or not."""


@dataclass(frozen=True)
class TransferRequest:
    queue: str
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
    """One queue of one instance."""

    def __init__(self, here: str, spec: QueueSpec, breakage: Breakage) -> None:
        self.here = here
        self.name = spec.name
        self.spec = spec
        self.breakage = breakage
        machine = None
        if breakage.first_request:
            machine = FirstRequestBroken(here, request_timeout_ms=REQUEST_TIMEOUT_MS)
        self.options = ReplicaOptions(
            kind=spec.kind,
            initial_owner=spec.initial_owner,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            latency=LATENCY,
        )
        self.replica = QueueReplica(here, QueueEngine(POLICY), self.options, ownership=machine)
        self.key_of: dict[int, MessageKey] = {}  # local txid -> bookmark of a publish
        self.entered: set[MessageKey] = set()
        self.barriers: set[MessageKey] = set()
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

    def recover(
        self, records: Sequence[Record], now_ms: int, snapshot: bytes | None = None
    ) -> list[object]:
        """Rebuild the queue from the durable log (after its `snapshot`, if one is stored),
        then return what is due now.

        As the server recovers (`amps/server/queue_manager.py`): a replicated queue's stored
        snapshot (`replication/queue_snapshot.py`) is restored, engine and ownership, and only
        the log after it is replayed, with the engine's deadlines deferred
        (`QueueEngine.defer_deadlines`); then one live deadline step writes what is due with
        its own records. Replayed with its deadlines running (`replay_at_now`, as the server's
        recovery once did, writing nothing it decided), a message past its expiration would
        be expired before a later record in the log (its ack, its owner's expiry) is read: a
        removal no other instance hears of."""
        start = 0
        if snapshot is not None and self.spec.replicated and not self.breakage.first_request:
            snap = queue_snapshot.decode(snapshot)
            self.replica = queue_snapshot.restore(snap, self.here, POLICY, self.options, 0, now_ms)
            start = max(snap.reflects_txid, snap.queue.high_water_txid)
            for record in records[:start]:  # the simulation's own notes of what each txid is
                if isinstance(record, PublishRecord) and self.holds(record):
                    self._note_publish(record)
        engine = self.replica.engine
        broken = self.breakage.replay_at_now
        engine.defer_deadlines(not broken)
        out: list[object] = []
        for record in records[start:]:
            if not self.holds(record):
                continue
            if isinstance(record, QueueRecord) and record.origin_instance == self.here:
                # As the server replays its own removal: by txid (`removed_recovered`, which
                # a staged restore applies to the engine at once and to its index later),
                # and by bookmark an ack made here before its message came.
                reason, reasons = _removal_of(record)
                txid_of = {key: txid for txid, key in self.key_of.items()}
                keys = self._keys(record)
                txids = [txid_of[key] for key in keys if key in txid_of]
                if txids:
                    actions = self.replica.removed_recovered(txids, reason, reasons, now_ms)
                    out += self._out(actions)
                for key in (key for key in keys if key not in txid_of):
                    event = MessageRemoved(reason, bookmark=key, expire_reasons=reasons)
                    out += self._out(self.replica.handle(event, now_ms))
            else:
                out += self.applied(record, now_ms, local=False)
        engine.defer_deadlines(False)
        if broken:
            out = []
        return out + self._out(self.replica.on_deadline(now_ms))

    def holds(self, record: Record) -> bool:
        """Whether `record` is this queue's: a publish to its topic, or one of its records."""
        if isinstance(record, PublishRecord):
            return record.topic == self.name
        return isinstance(record, (QueueRecord, TransferRecord)) and record.queue == self.name

    def applied(self, record: Record, now_ms: int, *, local: bool) -> list[object]:
        """A record of this queue was appended here: a publish enters; a peer's removal or
        ownership record is applied. (This instance's own removals and grants were applied
        when made.)"""
        replica = self.replica
        if isinstance(record, PublishRecord):
            key = self._note_publish(record)
            message = MessagePublished(
                record.txid, record.publisher_id, record.seq, record.timestamp_us // 1000,
                is_barrier=key in self.barriers,
            )  # fmt: skip
            out = self._out(replica.published([message], [record.origin_instance], now_ms))
            self._check_initial_owner(key, record.origin_instance)
            return out
        if local:
            return []
        if isinstance(record, TransferRecord):
            return self._out(replica.ownership_recorded(from_log(record), now_ms))
        reason, reasons = _removal_of(record)
        for key in self._keys(record):
            self._drop_leases(key)
        return self._out(replica.removed_by_peer(self._keys(record), now_ms, reason, reasons))

    def _note_publish(self, record: PublishRecord) -> MessageKey:
        key = (record.publisher_id, record.seq)
        self.key_of[record.txid] = key
        self.entered.add(key)
        if record.data == BARRIER_DATA:
            self.barriers.add(key)
        return key

    def take_snapshot(self, reflects_txid: int, now_ms: int) -> bytes | None:
        """A replicated queue's snapshot as the server stores it (every record up to
        `reflects_txid` is applied here); None for a LocalQueue."""
        if not self.spec.replicated:
            return None
        snap = queue_snapshot.take(
            self.replica, reflects_txid=reflects_txid, taken_mono_ms=now_ms,
            taken_wall_us=now_ms * 1000, deferred_logged={}, marks={},
        )  # fmt: skip
        return queue_snapshot.encode(snap)

    @staticmethod
    def _keys(record: QueueRecord) -> list[MessageKey]:
        return [(b.publisher_id, b.seq) for b in record.bookmarks]

    def republished(self, key: MessageKey, origin: str, now_ms: int) -> list[object]:
        return self._out(self.replica.republished(key, origin, now_ms))

    def requested(self, request: TransferRequest, now_ms: int) -> list[object]:
        self._owned_before = self.replica.owned_here(request.key)
        return self._out(self.replica.transfer_requested(request.key, request.requester, now_ms))

    def on_deadline(self, now_ms: int) -> list[object]:
        out: list[object] = []
        if self.replica.restoring:  # as the server indexes a staged restore: a step a tick
            out += self._out(self.replica.restore_step(now_ms))
        if self._deadline_stale:  # only a call into the replica moves its deadline
            self._deadline_ms = self.replica.next_deadline_ms()
            self._deadline_stale = False
        if self._deadline_ms is not None and self._deadline_ms <= now_ms:
            out = self._out(self.replica.on_deadline(now_ms))
        for consumer in self.consumers.values():
            leases = consumer.leases
            if leases and min(leases.values()) <= now_ms:
                for key in [k for k, deadline in leases.items() if deadline <= now_ms]:
                    del leases[key]  # the engine took it back (Q6)
        return out

    def _out(self, actions: list[ReplicaAction]) -> list[object]:
        """The replica's actions as the cluster performs them, in order."""
        self.dirty = self._deadline_stale = True
        out: list[object] = []
        for action in actions:
            if isinstance(action, Deliver):
                out.append(Lease(self.name, self.key_of[action.txid], action.client_id,
                                 action.lease_deadline_ms or 0))  # fmt: skip
            elif isinstance(action, RecordRemoval):
                key = self.key_of[action.txid]
                out.append(_removal_record(self.name, key, action))
            elif isinstance(action, PublishDeadLetter):
                reason = action.reasons.reason_text()
                out.append(DeadLetter(self.name, self.key_of[action.txid], reason))
            elif isinstance(action, DeliverBarrier):
                out.append(self._barrier_released(action.txid))
            elif isinstance(action, AppendOwnership):
                record = action.record
                proxied = record.kind is TransferKind.CLAIM or (
                    record.kind is TransferKind.GRANT
                    and self.ownership.proxied_transfer
                    and not self._owned_before
                )
                assert record.key not in self.barriers, f"barrier {record.key} transferred (R6)"
                out.append(to_log(self.name, record, proxied=proxied))
            elif isinstance(action, SendOwnership):
                if self.breakage.log_before_send:
                    out.append(SendRecordNow())
                # else: the link sends the record once it is durable (only durable records leave)
            elif isinstance(action, SendTransferRequest):
                out.append(TransferRequest(self.name, action.key, self.here, action.owner))
        self._owned_before = False
        return out

    def _check_initial_owner(self, key: MessageKey, origin: str) -> None:
        """R2: before any grant or claim, a Queue's message is its publisher's instance's, a
        GroupLocalQueue's its InitialOwner's wherever published; a barrier is everyone's."""
        if not self.spec.replicated or key in self.barriers:
            return
        owner = self.ownership.owner_of(key)
        if owner is not None and owner[1] == 0:
            expected = self.spec.initial_owner or origin
            # a Queue's lower origin may own it already: another copy's ORIGIN record (issue 9)
            origin_won = self.spec.initial_owner is None and owner[0] < expected
            assert owner[0] == expected or origin_won, f"{key} of {self.name} owned by {owner[0]}"

    def _barrier_released(self, txid: int) -> BarrierReleased:
        """R6, A3: a barrier goes out here only once every message before it here has left
        (acks of messages owned elsewhere arrive by replication)."""
        key = self.key_of[txid]
        assert key in self.barriers, f"{key} released as a barrier, but is none"
        early = [k for t, k in self.key_of.items() if t < txid and not self.removed(k)]
        assert not early, f"{self.here} released barrier {key} before {early} left (R6)"
        return BarrierReleased(self.name, key)

    # -- consumers ---------------------------------------------------------------------------

    def add_consumers(
        self, count: int, rng: random.Random, now_ms: int, *, steady: bool = False
    ) -> list[object]:
        out: list[object] = []
        for _ in range(count):
            client_id = f"{self.here}{self.name[0]}{self._clients}"
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
        """Whether the message left this queue here: for a replicated one as its ownership
        machine says (an ack anywhere may come before the message); a barrier and a
        LocalQueue's copy once they entered here and left the engine."""
        if self.spec.replicated and key not in self.barriers:
            return self.ownership.state_of(key) is OwnershipState.REMOVED
        return key in self.entered and self.replica.engine.txid_of(key) is None

    def view_of(self, key: MessageKey) -> tuple[bool, bool, tuple[str, int] | None]:
        """What must agree across instances after heal: removed, held by the engine, and
        (owner, epoch)."""
        held = self.replica.engine.txid_of(key) is not None
        return self.removed(key), held, self.ownership.owner_of(key)


def _removal_record(queue: str, key: MessageKey, removal: RecordRemoval) -> QueueRecord:
    """The record an engine removal writes (by bookmark: the link would convert txids)."""
    bookmarks = (Bookmark(*key),)
    if removal.reason is RemovalReason.ACKED:
        return QueueRecord(0, 0, queue, QueueAction.ACK, bookmarks=bookmarks)
    if removal.reason is RemovalReason.BARRIER_DELIVERED:
        return QueueRecord(0, 0, queue, QueueAction.BARRIER_RELEASED, bookmarks=bookmarks)
    assert removal.reason is RemovalReason.EXPIRED, removal
    reason = removal.expire_reasons.reason_text()
    # R6: a barrier's expiry, like its release, is this instance's own and stays here.
    action = QueueAction.BARRIER_EXPIRED if removal.barrier else QueueAction.EXPIRED
    return QueueRecord(0, 0, queue, action, bookmarks=bookmarks, reason=reason)


def _removal_of(record: QueueRecord) -> tuple[RemovalReason, ExpireReason]:
    if record.action is QueueAction.ACK:
        return RemovalReason.ACKED, ExpireReason.TIME_LIMIT
    if record.action is QueueAction.BARRIER_RELEASED:
        return RemovalReason.BARRIER_DELIVERED, ExpireReason.TIME_LIMIT
    reasons = ExpireReason(0)
    for word in record.reason.split(","):
        reasons |= ExpireReason[word.upper()]
    return RemovalReason.EXPIRED, reasons or ExpireReason.FORCED_EXPIRE
