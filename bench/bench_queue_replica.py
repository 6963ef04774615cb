"""Replicated queue CPU per message in-process (issue 9): `QueueReplica` over the engine, beside
the bare engine of `bench_queue_engine` in the same run. Printed, never asserted.

The shape of `bench_queue_engine` (publishes in batches of 500, four subscriptions with backlog
100, acks in batches of 33, `next_deadline_ms()` after every step), in four parts:

1. the bare engine (the reference);
2. the owner: every message published here, consumed and acked here;
3. a peer holding the copy: the owner's messages arrive (owned elsewhere) in the same batches,
   and the owner's acks arrive as replicated removals (`removed_by_peer`), no consumers here;
4. a transfer, both sides: the owner has no consumers, the peer's four subscriptions take every
   message by request and grant (R4, R5); the grant is applied on the peer as a replicated
   record, the peer's acks on the owner as replicated removals. Time moves past the transfer
   latency estimate between a publish batch and the requests.

Time is CPU time (`time.process_time`), the best of `--runs` runs: the machine may be shared.
Run: ``.venv/bin/python -m bench.bench_queue_replica [--messages N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from amps.queue import (
    Acked,
    Deliver,
    MessagePublished,
    QueueEngine,
    QueuePolicy,
    Subscribed,
)
from bench.bench_queue_engine import ACK_BATCH, BACKLOG, LEASE_PERIOD_MS, PUBLISH_BATCH
from bench.bench_queue_engine import run_once as run_engine
from replication.latency import LatencyOptions
from replication.ownership import AppendOwnership, SendTransferRequest
from replication.queue_replica import QueueReplica, ReplicaAction, ReplicaOptions

PUBLISHER_ID = 7
SUBSCRIPTIONS = 4
LATENCY_MS = 250


def replica(here: str) -> QueueReplica:
    engine = QueueEngine(
        QueuePolicy(lease_period_ms=LEASE_PERIOD_MS, max_per_subscription_backlog=BACKLOG)
    )
    options = ReplicaOptions(
        request_timeout_ms=1_000, latency=LatencyOptions(default_ms=LATENCY_MS)
    )
    return QueueReplica(here, engine, options)


def batches(count: int) -> list[list[MessagePublished]]:
    """The publishes of one run, one group commit (PUBLISH_BATCH) each; txid = seq."""
    size, end = PUBLISH_BATCH, count + 1
    return [
        [MessagePublished(t, PUBLISHER_ID, t, 0) for t in range(first, min(first + size, end))]
        for first in range(1, end, size)
    ]


Columns = tuple[list[int], list[int], list[int], list[int]]


def columns(batch: list[MessagePublished]) -> Columns:
    """A publish batch as the server hands it to `published_plain`."""
    return (
        [e.txid for e in batch], [e.publisher_id for e in batch], [e.seq for e in batch],
        [e.timestamp_ms for e in batch],
    )  # fmt: skip


def publish(
    node: QueueReplica,
    batch: list[MessagePublished],
    rows: Columns,
    origins: list[str],
    now_ms: int,
) -> Sequence[ReplicaAction]:
    """One step's durable publishes as the server passes them: as columns where the replica
    takes them (`published_plain`), else as events (older code)."""
    if hasattr(node, "published_plain"):
        return node.published_plain(*rows, origins, now_ms)
    return node.published(batch, origins, now_ms)


def consume(
    node: QueueReplica,
    held: dict[str, list[tuple[int, int]]],
    now_ms: int,
    on_removed: Callable[[list[tuple[int, int]]], None],
    *,
    drain: bool,
    perform: Callable[[Sequence[ReplicaAction]], None] | None = None,
) -> tuple[int, int]:
    """Every client acks while it holds a full ack batch (or all it holds when `drain`);
    the actions of each ack go to `perform` (else only its deliveries are collected);
    returns (messages acked, now_ms)."""
    acked = 0
    progress = True
    while progress:
        progress = False
        for client_id, marks in held.items():
            if len(marks) >= ACK_BATCH or (drain and marks):
                batch = marks[:ACK_BATCH]
                del marks[:ACK_BATCH]
                now_ms += 1
                actions = node.acked(Acked(client_id, batch), now_ms)
                if perform is None:
                    collect(actions, held)
                else:
                    perform(actions)
                node.next_deadline_ms()
                on_removed(batch)
                acked += len(batch)
                progress = True
    return acked, now_ms


def collect(actions: Sequence[ReplicaAction], held: dict[str, list[tuple[int, int]]]) -> None:
    for action in actions:
        if type(action) is Deliver:
            held[action.client_id].append((PUBLISHER_ID, action.txid))


def subscribe(node: QueueReplica, held: dict[str, list[tuple[int, int]]], now_ms: int) -> None:
    for i in range(SUBSCRIPTIONS):
        collect(node.handle(Subscribed(f"s{i}", f"c{i}", BACKLOG, None), now_ms), held)
        node.next_deadline_ms()


def run_owner(count: int) -> float:
    """Part 2: publish, deliver and ack `count` messages on their owner."""
    node = replica("a")
    held: dict[str, list[tuple[int, int]]] = {f"c{i}": [] for i in range(SUBSCRIPTIONS)}
    work = [(batch, columns(batch), ["a"] * len(batch)) for batch in batches(count)]
    started = time.process_time()
    now_ms = 0
    subscribe(node, held, now_ms)
    acked = 0
    for batch, rows, origins in work:
        collect(publish(node, batch, rows, origins, now_ms), held)
        node.next_deadline_ms()
        done, now_ms = consume(node, held, now_ms, lambda _: None, drain=False)
        acked += done
    while acked < count:
        done, now_ms = consume(node, held, now_ms, lambda _: None, drain=True)
        acked += done
    seconds = time.process_time() - started
    assert node.engine.statistics(now_ms).depth == 0
    return seconds


def run_peer(count: int) -> float:
    """Part 3: the copy of `count` messages owned by a, then a's acks, on peer b."""
    node = replica("b")
    work = [(batch, columns(batch), ["a"] * len(batch)) for batch in batches(count)]
    # The owner's acks as they replicate: one removal record per ack batch.
    acks = [
        [(PUBLISHER_ID, s) for s in range(first, min(first + ACK_BATCH, count + 1))]
        for first in range(1, count + 1, ACK_BATCH)
    ]
    started = time.process_time()
    now_ms = 0
    next_ack = 0
    for batch, rows, origins in work:
        publish(node, batch, rows, origins, now_ms)
        node.next_deadline_ms()
        # The acks of what has arrived (the owner acks only what it published, and its
        # removals replicate after its publishes).
        while next_ack < len(acks) and acks[next_ack][-1][1] <= batch[-1].seq:
            now_ms += 1
            node.removed_by_peer(acks[next_ack], now_ms)
            node.next_deadline_ms()
            next_ack += 1
    for removal in acks[next_ack:]:
        now_ms += 1
        node.removed_by_peer(removal, now_ms)
        node.next_deadline_ms()
    seconds = time.process_time() - started
    assert node.engine.statistics(now_ms).depth == 0
    return seconds


def run_transfer(count: int) -> float:
    """Part 4: every message owned by a (no consumers) and taken by b's consumers."""
    owner, peer = replica("a"), replica("b")
    held: dict[str, list[tuple[int, int]]] = {f"c{i}": [] for i in range(SUBSCRIPTIONS)}
    work = [(batch, columns(batch), ["a"] * len(batch)) for batch in batches(count)]
    started = time.process_time()
    now_ms = 0
    subscribe(peer, held, now_ms)

    def exchange(actions: Sequence[ReplicaAction]) -> None:
        """b's requests to a, a's grants back to b (as replicated records), until quiet."""
        while True:
            keys = [a.key for a in actions if type(a) is SendTransferRequest]
            collect(actions, held)
            if not keys:
                return
            # One request frame, answered in one step; the grants applied in one step (as
            # the server does; older code without the batch methods one call each).
            granted: list[ReplicaAction] = []
            if hasattr(owner, "transfers_requested"):
                granted = owner.transfers_requested(keys, "b", now_ms)
            else:
                for key in keys:
                    granted += owner.transfer_requested(key, "b", now_ms)
            owner.next_deadline_ms()
            records = [a.record for a in granted if type(a) is AppendOwnership]
            if hasattr(peer, "ownership_recorded_many"):
                actions = peer.ownership_recorded_many(records, now_ms)
            else:
                actions = []
                for record in records:
                    actions += peer.ownership_recorded(record, now_ms)
            peer.next_deadline_ms()

    def owner_removes(batch: list[tuple[int, int]]) -> None:
        owner.removed_by_peer(batch, now_ms)
        owner.next_deadline_ms()

    acked = 0
    for batch, rows, origins in work:
        publish(owner, batch, rows, origins, now_ms)
        owner.next_deadline_ms()
        publish(peer, batch, rows, origins, now_ms)
        peer.next_deadline_ms()
        now_ms += LATENCY_MS + 1
        exchange(peer.on_deadline(now_ms))
        peer.next_deadline_ms()
        done, now_ms = consume(peer, held, now_ms, owner_removes, drain=False, perform=exchange)
        acked += done
    while acked < count:
        now_ms += LATENCY_MS + 1
        exchange(peer.on_deadline(now_ms))
        done, now_ms = consume(peer, held, now_ms, owner_removes, drain=True, perform=exchange)
        acked += done
    seconds = time.process_time() - started
    assert peer.engine.statistics(now_ms).depth == 0
    assert owner.engine.statistics(now_ms).depth == 0
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    count = args.messages
    parts: list[tuple[str, Callable[[int], float]]] = [
        ("bare engine (reference)", run_engine),
        ("owner: publish, deliver, ack here", run_owner),
        ("peer holding the copy: publish owned elsewhere, the owner's acks", run_peer),
        ("transfer, owner + peer: request, grant, deliver and ack on the peer", run_transfer),
    ]
    best = {name: float("inf") for name, _ in parts}
    for _ in range(args.runs):  # alternate the parts, so load moves them alike
        for name, run in parts:
            best[name] = min(best[name], run(count))
    reference = best[parts[0][0]]
    print(f"bench_queue_replica: {count:,} messages, best of {args.runs} (CPU time)")
    for name, _ in parts:
        print(f"  {name}: {best[name] / count * 1e6:.2f} us/message "
              f"({best[name] / reference:.2f}x the bare engine)")  # fmt: skip


if __name__ == "__main__":
    main()
