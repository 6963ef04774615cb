"""One replicated queue on one simulated instance: the real ownership core and transfer latency
estimator, and the simulated consumers that lease, ack, cancel, stall and disconnect.

Facts in (records applied to the log, requests, time), actions out for the cluster to perform
in order: a `Record` to append to the local log, `AfterDurable` (what may happen only once
everything appended so far is durable: the ordering contract), a `TransferRequest` to send, and
`Lease` notes for the transcript. The broken variants the simulation must catch live here too.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from amps.log.bookmarks import Bookmark
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from replication.latency import LatencyOptions, TransferLatencies
from replication.ownership import (
    Action,
    AppendOwnership,
    Event,
    MessageEntered,
    MessageKey,
    Offer,
    Ownership,
    OwnershipRecord,
    OwnershipRecorded,
    OwnershipState,
    Removed,
    SendOwnership,
    SendTransferRequest,
    TakerWaiting,
    TransferKind,
    TransferRequested,
)
from replication.transfers import from_log, to_log

QUEUE = "work"
REQUEST_TIMEOUT_MS = 40
LEASE_MS = 80
LATENCY = LatencyOptions(default_ms=20, window=16, min_samples=4, max_tracked=1_024, max_ms=200)


@dataclass(frozen=True)
class ReplicaOptions:
    break_first_request: bool = False
    break_log_before_send: bool = False


@dataclass(frozen=True)
class AfterDurable:
    """Offer these messages only once everything appended so far is durable (Rule 5)."""

    keys: tuple[MessageKey, ...]


@dataclass(frozen=True)
class SendRecordNow:
    """The broken adapter's fast path: send the record just appended, durable or not."""


@dataclass(frozen=True)
class TransferRequest:
    key: MessageKey
    requester: str
    owner: str


@dataclass(frozen=True)
class Lease:
    key: MessageKey
    consumer: str


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
    name: str
    backlog: int
    steady: bool  # acks everything it gets, never cancels, stalls or disconnects
    leases: dict[MessageKey, int] = field(default_factory=dict)  # key -> lease deadline ms
    connected: bool = True
    stalled_until_ms: int = 0


class OwnershipReplica:
    """The queue side of one instance."""

    def __init__(self, here: str, options: ReplicaOptions) -> None:
        self.here = here
        self.options = options
        kind = FirstRequestBroken if options.break_first_request else Ownership
        self.machine = kind(here, request_timeout_ms=REQUEST_TIMEOUT_MS)
        self.latency = TransferLatencies(LATENCY)
        self.arrived_ms: dict[MessageKey, int] = {}  # live messages, in arrival order
        self.consumers: list[Consumer] = []
        self.withheld: set[MessageKey] = set()  # offered once durable
        self.waiting: list[tuple[int, tuple[MessageKey, ...]]] = []  # (txid, keys)

    # -- switches ----------------------------------------------------------------------------

    def set_proxied(self, on: bool) -> None:
        self.machine.proxied_transfer = on

    def set_unreachable(self, names: frozenset[str]) -> None:
        self.machine.unreachable = names

    def may_proxy_for(self, owner: str) -> bool:
        return self.machine.proxied_transfer and owner in self.machine.unreachable

    # -- records -----------------------------------------------------------------------------

    def recover(self, records: Sequence[Record], now_ms: int) -> None:
        """Rebuild ownership from the durable log (the actions were performed before)."""
        for record in records:
            for event in self._events_of(record, now_ms):
                self.machine.handle(event, now_ms)

    def applied(self, record: Record, now_ms: int, *, local: bool) -> list[object]:
        """A record was appended here: a publish enters; a peer's ack or grant is applied.
        (This replica's own acks and grants were applied when it wrote them.)"""
        if local and not isinstance(record, PublishRecord):
            return []
        out: list[object] = []
        for event in self._events_of(record, now_ms):
            out += self._handle(event, now_ms)
        return out

    def _events_of(self, record: Record, now_ms: int) -> list[Event]:
        if isinstance(record, PublishRecord):
            key = (record.publisher_id, record.seq)
            if self.machine.state_of(key) is None:
                self.arrived_ms[key] = now_ms
                if record.origin_instance != self.here:
                    self.latency.of(record.origin_instance).arrived(key, now_ms)
            return [MessageEntered(key, record.origin_instance)]
        if isinstance(record, TransferRecord):
            return [OwnershipRecorded(from_log(record))]
        if record.action is QueueAction.ACK:
            keys = [(b.publisher_id, b.seq) for b in record.bookmarks]
            for key in keys:
                owner = self.machine.owner_of(key)
                if owner is not None:
                    self.latency.of(owner[0]).acked(key, now_ms)
                self._forget(key)
            return [Removed(key) for key in keys]
        return []

    def _forget(self, key: MessageKey) -> None:
        self.arrived_ms.pop(key, None)
        self.withheld.discard(key)
        for consumer in self.consumers:
            consumer.leases.pop(key, None)  # acked elsewhere: the lease here is moot

    def _perform(self, actions: list[Action]) -> list[object]:
        """The ownership machine's actions as the cluster's, keeping the ordering contract."""
        out: list[object] = []
        appended = False
        for action in actions:
            if isinstance(action, AppendOwnership):
                record = action.record
                proxied = record.kind is TransferKind.CLAIM or self.may_proxy_for(
                    self._owner_before
                )
                out.append(to_log(QUEUE, record, proxied=proxied))
                appended = True
            elif isinstance(action, SendOwnership):
                if self.options.break_log_before_send:
                    out.append(SendRecordNow())
                # else: the link sends the record once it is durable (only durable records leave)
            elif isinstance(action, Offer):
                if appended and not self.options.break_log_before_send:
                    self.withheld.add(action.key)
                    out.append(AfterDurable((action.key,)))
            elif isinstance(action, SendTransferRequest):
                out.append(TransferRequest(action.key, self.here, action.owner))
            # Withdraw: nothing more is leased from it (`owned_here` is asked); a lease that a
            # later record took away stays with its consumer, who has the message already.
        return out

    _owner_before = ""

    def _handle(self, event: Event, now_ms: int) -> list[object]:
        key = event.record.key if isinstance(event, OwnershipRecorded) else event.key
        owner = self.machine.owner_of(key)
        self._owner_before = owner[0] if owner is not None else ""
        return self._perform(self.machine.handle(event, now_ms))

    # -- durability --------------------------------------------------------------------------

    def hold_until(self, txid: int, held: AfterDurable) -> None:
        self.waiting.append((txid, held.keys))

    def release(self, keys: Iterable[MessageKey]) -> None:
        self.withheld.difference_update(keys)

    def durable(self, durable_txid: int) -> list[object]:
        due = [keys for txid, keys in self.waiting if txid <= durable_txid]
        self.waiting = [(t, k) for t, k in self.waiting if t > durable_txid]
        for keys in due:
            self.release(keys)
        return []

    # -- requests ----------------------------------------------------------------------------

    def requested(self, request: TransferRequest, now_ms: int) -> list[object]:
        key = request.key
        held = self._leased_here(key) or (
            self.machine.owned_here(key) and any(self._room(c) for c in self.consumers)
        )
        return self._handle(TransferRequested(key, request.requester, held), now_ms)

    # -- consumers ---------------------------------------------------------------------------

    def add_consumers(self, count: int, rng: random.Random, *, steady: bool = False) -> None:
        for _ in range(count):
            name = f"{self.here}c{len(self.consumers)}"
            self.consumers.append(Consumer(name, rng.choice([1, 1, 2, 3]), steady))

    def _room(self, consumer: Consumer) -> bool:
        return consumer.connected and len(consumer.leases) < consumer.backlog

    def _leased_here(self, key: MessageKey) -> bool:
        return any(key in c.leases for c in self.consumers)

    def leased(self) -> set[MessageKey]:
        return {key for c in self.consumers for key in c.leases}

    def pump(self, now_ms: int) -> list[object]:
        """Consumers with room take the oldest messages owned here (R3); for a message owned
        elsewhere that waited longer than the owner's transfer latency, a taker waits (R4)."""
        out: list[object] = []
        machine = self.machine
        for consumer in self.consumers:
            for key in self.arrived_ms:
                if not self._room(consumer):
                    break
                takeable = machine.owned_here(key) and key not in self.withheld
                if takeable and not self._leased_here(key):
                    consumer.leases[key] = now_ms + LEASE_MS
                    out.append(Lease(key, consumer.name))
        room = sum(c.backlog - len(c.leases) for c in self.consumers if c.connected)
        asked = sum(1 for k in self.arrived_ms if machine.state_of(k) is OwnershipState.REQUESTED)
        for key, arrived_ms in list(self.arrived_ms.items()):
            if asked >= room:
                break
            state = machine.state_of(key)
            if state not in (OwnershipState.OWNED_ELSEWHERE, OwnershipState.GRANTED):
                continue
            owner = machine.owner_of(key)
            assert owner is not None
            if self.latency.of(owner[0]).waited_long_enough(arrived_ms, now_ms):
                out += self._handle(TakerWaiting(key), now_ms)
                asked += 1
        return out

    def consumer_step(self, rng: random.Random, now_ms: int) -> list[object]:
        """One consumer does one thing: ack, cancel, stall, disconnect or reconnect."""
        if not self.consumers:
            return []
        consumer = rng.choice(self.consumers)
        if not consumer.connected:
            consumer.connected = True
            return [f"{consumer.name} reconnects"]
        if consumer.stalled_until_ms > now_ms:
            return []
        choice = 0.0 if consumer.steady else rng.random()
        if choice < 0.7:
            if not consumer.leases:
                return []
            key = rng.choice(sorted(consumer.leases))
            return self.ack(key, consumer, now_ms)
        if choice < 0.8:
            if consumer.leases:
                key = rng.choice(sorted(consumer.leases))
                del consumer.leases[key]
                return [f"{consumer.name} cancels {key}"]
            return []
        if choice < 0.9:
            consumer.stalled_until_ms = now_ms + rng.randint(20, 200)
            return [f"{consumer.name} stalls"]
        consumer.connected = False
        consumer.leases.clear()
        return [f"{consumer.name} disconnects"]

    def ack(self, key: MessageKey, consumer: Consumer, now_ms: int) -> list[object]:
        record = QueueRecord(0, 0, QUEUE, QueueAction.ACK, bookmarks=(Bookmark(*key),))
        self._forget(key)
        self.machine.handle(Removed(key), now_ms)
        return [f"{consumer.name} acks {key}", record]

    def on_deadline(self, now_ms: int) -> list[object]:
        out = self._perform(self.machine.on_deadline(now_ms))
        for consumer in self.consumers:
            for key, deadline in list(consumer.leases.items()):
                if deadline <= now_ms:
                    del consumer.leases[key]
                    out.append(f"lease of {key} to {consumer.name} ran out")
        return out

    # -- checks ------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        self.machine.check_invariants()
        for consumer in self.consumers:
            assert len(consumer.leases) <= consumer.backlog

    def removed(self, key: MessageKey) -> bool:
        return self.machine.state_of(key) is OwnershipState.REMOVED

    def view_of(self, key: MessageKey) -> tuple[bool, tuple[str, int] | None]:
        """What must agree across instances after heal: removed, or (owner, epoch)."""
        return self.removed(key), self.machine.owner_of(key)
