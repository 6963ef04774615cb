"""A few `QueueReplica`s joined by an in-memory, ordered, lossless network, for unit tests.

Each instance has its own local txids; replication delivers publishes, removals and ownership
records to every other instance on `flush()`, transfer requests to their owner. Deliveries
are leases held by the test consumers (`leases`), which the tests ack or let go.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from amps.config.model import QueueKind
from amps.queue import (
    Acked,
    Deliver,
    DeliverBarrier,
    MessagePublished,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
    Subscribed,
)
from replication.latency import LatencyOptions
from replication.ownership import AppendOwnership, MessageKey, OwnershipRecord, SendTransferRequest
from replication.queue_replica import QueueReplica, ReplicaAction, ReplicaOptions

LATENCY = LatencyOptions(default_ms=10, window=8, min_samples=2, max_ms=1_000)


@dataclass
class Node:
    name: str
    replica: QueueReplica
    next_txid: int = 1
    leases: dict[MessageKey, str] = field(default_factory=dict)  # key -> sub_id
    barriers: list[MessageKey] = field(default_factory=list)
    logged: list[OwnershipRecord] = field(default_factory=list)
    removals: list[tuple[MessageKey, RemovalReason]] = field(default_factory=list)
    key_of: dict[int, MessageKey] = field(default_factory=dict)


class ReplicaCluster:
    """Instances named `names`, all holding one queue of `kind` with `policy`."""

    def __init__(
        self,
        names: tuple[str, ...] = ("a", "b", "c"),
        *,
        kind: QueueKind = "Queue",
        initial_owner: str | None = None,
        policy: QueuePolicy | None = None,
    ) -> None:
        """`policy` defaults to subscription backlogs of up to 10."""
        self.now_ms = 1
        options = ReplicaOptions(
            kind=kind, initial_owner=initial_owner, request_timeout_ms=50, latency=LATENCY
        )
        self.nodes = {
            n: Node(
                n,
                QueueReplica(
                    n, QueueEngine(policy or QueuePolicy(max_per_subscription_backlog=10)), options
                ),
            )
            for n in names
        }
        self.wire: deque[tuple[str, str, object]] = deque()  # (from, to, item)
        self.next_seq = 1
        self.delivered: list[tuple[str, MessageKey]] = []  # (instance, key), in order
        self.double_leases: list[MessageKey] = []

    # -- inputs ----------------------------------------------------------------------------

    def publish(self, at: str, *, barrier: bool = False) -> MessageKey:
        """A client publishes one message at `at`; it replicates on the next `flush`."""
        key = (7, self.next_seq)
        self.next_seq += 1
        self._enter(at, key, at, barrier=barrier)
        for other in self.nodes:
            if other != at:
                self.wire.append((at, other, ("publish", key, at, barrier)))
        return key

    def subscribe(self, at: str, sub_id: str = "s", backlog: int = 10) -> None:
        self._run(
            at, self.nodes[at].replica.handle(Subscribed(sub_id, sub_id, backlog), self.now_ms)
        )

    def ack(self, at: str, key: MessageKey) -> None:
        node = self.nodes[at]
        node.leases.pop(key, None)
        self._run(at, node.replica.acked(Acked("client", [key]), self.now_ms))

    def ack_all(self) -> int:
        count = 0
        for name, node in self.nodes.items():
            for key in list(node.leases):
                self.ack(name, key)
                count += 1
        return count

    def tick(self, ms: int) -> None:
        self.now_ms += ms
        for name, node in self.nodes.items():
            self._run(name, node.replica.on_deadline(self.now_ms))

    def flush(self, limit: int = 10_000) -> None:
        """Deliver everything on the wire (and what that sends) in order."""
        for _ in range(limit):
            if not self.wire:
                return
            sender, to, item = self.wire.popleft()
            self._receive(sender, to, item)
        raise AssertionError("the network did not settle")

    # -- checks ----------------------------------------------------------------------------

    def holders(self, key: MessageKey) -> list[str]:
        return [n for n, node in self.nodes.items() if key in node.leases]

    def owners(self, key: MessageKey) -> list[str]:
        return [n for n, node in self.nodes.items() if node.replica.owned_here(key)]

    def check(self) -> None:
        for node in self.nodes.values():
            node.replica.check_invariants()

    # -- network ---------------------------------------------------------------------------

    def _enter(self, at: str, key: MessageKey, origin: str, *, barrier: bool) -> None:
        node = self.nodes[at]
        txid = node.next_txid
        node.next_txid += 1
        node.key_of[txid] = key
        message = MessagePublished(txid, key[0], key[1], self.now_ms, 0, barrier)
        self._run(at, node.replica.published([message], [origin], self.now_ms))

    def _receive(self, sender: str, to: str, item: object) -> None:
        node = self.nodes[to]
        replica = node.replica
        assert isinstance(item, tuple)
        kind = item[0]
        if kind == "publish":
            _, key, origin, barrier = item
            self._enter(to, key, origin, barrier=barrier)
        elif kind == "removed":
            _, key, reason = item
            node.leases.pop(key, None)
            self._run(to, replica.removed_by_peer([key], self.now_ms, reason))
        elif kind == "record":
            self._run(to, replica.ownership_recorded(item[1], self.now_ms))
        elif kind == "request":
            _, key = item
            self._run(to, replica.transfer_requested(key, sender, self.now_ms))

    def _run(self, at: str, actions: list[ReplicaAction]) -> None:
        node = self.nodes[at]
        for action in actions:
            if isinstance(action, Deliver):
                key = node.key_of[action.txid]
                others = [n for n in self.holders(key) if n != at]
                if others:
                    self.double_leases.append(key)
                node.leases[key] = action.sub_id
                self.delivered.append((at, key))
            elif isinstance(action, DeliverBarrier):
                node.barriers.append(node.key_of[action.txid])
            elif isinstance(action, RecordRemoval):
                key = node.key_of[action.txid]
                node.removals.append((key, action.reason))
                node.leases.pop(key, None)
                if action.reason is not RemovalReason.BARRIER_DELIVERED:
                    for other in self.nodes:
                        if other != at:
                            self.wire.append((at, other, ("removed", key, action.reason)))
            elif isinstance(action, AppendOwnership):
                node.logged.append(action.record)
                for other in self.nodes:
                    if other != at:
                        self.wire.append((at, other, ("record", action.record)))
            elif isinstance(action, SendTransferRequest):
                self.wire.append((at, action.owner, ("request", action.key)))
