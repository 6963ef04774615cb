"""A replicated queue's snapshot in process (issue 9, Q16): CPU seconds to take, encode, decode
and restore it (before serving, and the index built in steps while serving: Rule 7 of
replication/queue_replica.py), beside replaying the publishes of the same live messages (the
least any replay from the log does). Prints; asserts nothing. Best of `--rounds`.

`.venv/bin/python -m bench.bench_replica_snapshot [--queued N] [--rounds R]`

N messages published from two origins (a and b, in runs of 100), the oldest half acked by a
peer; the instance is a, so half the live messages are owned elsewhere.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from operator import itemgetter
from typing import TypeVar

from amps.queue import ExpireReason, MessagePublished, QueueEngine, QueuePolicy, RemovalReason
from replication import queue_snapshot
from replication.queue_replica import QueueReplica, ReplicaOptions

T = TypeVar("T")
POLICY = QueuePolicy()
OPTIONS = ReplicaOptions()
NOW_MS = 1_000_000
BATCH = 5_000


def cpu(work: Callable[[], T], rounds: int) -> tuple[float, T]:
    """Best CPU seconds of `rounds` runs (the collector off, as during a server's recovery)."""
    best = float("inf")
    result: T | None = None
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        started = time.process_time()
        result = work()
        best = min(best, time.process_time() - started)
        gc.enable()
    assert result is not None
    return best, result


def messages(count: int) -> tuple[list[MessagePublished], list[str]]:
    events, origins = [], []
    seqs = {1: 0, 2: 0}
    for txid in range(1, count + 1):
        publisher = 1 + (txid // 100) % 2
        seqs[publisher] += 1
        events.append(MessagePublished(txid, publisher, seqs[publisher], NOW_MS - 10))
        origins.append("a" if publisher == 1 else "b")
    return events, origins


def feed(events: list[MessagePublished], origins: list[str]) -> QueueReplica:
    replica = QueueReplica("a", QueueEngine(POLICY), OPTIONS)
    for start in range(0, len(events), BATCH):
        replica.published(events[start : start + BATCH], origins[start : start + BATCH], NOW_MS)
    return replica


def index(decoded: queue_snapshot.ReplicaSnapshot) -> tuple[float, float]:
    """CPU seconds of a staged restore's steps after `restore`, and of the longest step."""
    replica = queue_snapshot.restore(decoded, "a", POLICY, OPTIONS, 0, NOW_MS)
    gc.collect()
    gc.disable()
    total = longest = 0.0
    while replica.restoring:
        started = time.process_time()
        replica.restore_step(NOW_MS)
        took = time.process_time() - started
        total += took
        longest = max(longest, took)
    gc.enable()
    return total, longest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queued", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    count, rounds = args.queued, args.rounds
    events, origins = messages(count)
    live = feed(events, origins)
    half = [(e.publisher_id, e.seq) for e in events[: count // 2]]
    for start in range(0, len(half), BATCH):
        live.removed_by_peer(half[start : start + BATCH], NOW_MS)
    kept = count - count // 2
    print(f"{count:,} published from two origins, {count // 2:,} acked: {kept:,} live, "
          f"{live.engine.owned_elsewhere_count():,} owned elsewhere", flush=True)  # fmt: skip

    def take() -> queue_snapshot.ReplicaSnapshot:
        return queue_snapshot.take(
            live, reflects_txid=count, taken_mono_ms=NOW_MS, taken_wall_us=0,
            deferred_logged={}, marks={"b": count},
        )  # fmt: skip

    take_s, snap = cpu(take, rounds)
    encode_s, data = cpu(lambda: queue_snapshot.encode(snap), rounds)
    decode_s, decoded = cpu(lambda: queue_snapshot.decode(data), rounds)
    restore_s, _ = cpu(
        lambda: queue_snapshot.restore(decoded, "a", POLICY, OPTIONS, 0, NOW_MS), rounds
    )
    # Rule 7 of replication/queue_replica.py: the rest is indexed after the instance serves.
    index_s, longest_s = min((index(decoded) for _ in range(rounds)), key=itemgetter(0))
    live_events, live_origins = events[count // 2 :], origins[count // 2 :]
    replay_s, _ = cpu(lambda: feed(live_events, live_origins), rounds)
    start_s = decode_s + restore_s + index_s
    print(f"  take {take_s:.3f} s, encode {encode_s:.3f} s ({len(data) / 1e6:.1f} MB)")
    print(f"  decode {decode_s:.3f} s, restore {restore_s:.3f} s: {decode_s + restore_s:.3f} s "
          f"before serving; "
          f"then indexed in steps while serving: {index_s:.3f} s, the longest step "
          f"{longest_s * 1000:.0f} ms")  # fmt: skip
    print(f"  replaying the {kept:,} live publishes instead: {replay_s:.3f} s "
          f"({replay_s / start_s:.1f}x the whole restore), CPU s, best of {rounds}")  # fmt: skip
    # The log after the snapshot: removal records of 540 messages (this instance's by txid,
    # a peer's by bookmark), replayed as recovery does: into the staged restore (Rule 7 of
    # replication/queue_replica.py: the engine at once, the index while serving), beside the
    # same after indexing first (before the change, issue 9).
    own = [e.txid for e in live_events if e.publisher_id == 1][: kept // 4]
    peer = [(e.publisher_id, e.seq) for e in live_events if e.publisher_id == 2][: kept // 4]
    reason, expire = RemovalReason.ACKED, ExpireReason.TIME_LIMIT

    def removals(staged: bool) -> tuple[float, float, float, float]:
        """CPU seconds of indexing before the removals, of the own and the peer's removals,
        then of what is left for the steps while serving; `staged`: replayed into the staged
        restore as a restart does (Rule 7), else after indexing every message first (the
        reference: how every restart replayed them before)."""
        replica = queue_snapshot.restore(decoded, "a", POLICY, OPTIONS, 0, NOW_MS)
        replica.engine.defer_compaction(True)
        replica.engine.defer_deadlines(True)
        started = time.process_time()
        while replica.restoring and not staged:
            replica.restore_step(NOW_MS)
        indexed = time.process_time()
        for at in range(0, len(own), 540):
            replica.removed_recovered(own[at : at + 540], reason, expire, NOW_MS)
        middle = time.process_time()
        for at in range(0, len(peer), 540):
            replica.removed_by_peer(peer[at : at + 540], NOW_MS)
        ended = time.process_time()
        while replica.restoring:
            replica.restore_step(NOW_MS)
        return indexed - started, middle - indexed, ended - middle, time.process_time() - ended

    for staged in (False, True, False, True):  # alternated: the machine is shared
        gc.collect()
        gc.disable()
        index_s, own_s, peer_s, after_s = min(
            (removals(staged) for _ in range(rounds)), key=lambda r: r[0] + r[1] + r[2]
        )
        gc.enable()
        how = "into the staged restore" if staged else "after indexing first (reference)"
        print(f"  then, {how}: {len(own):,} of this instance's removals "
              f"{1e6 * own_s / len(own):.2f} us each, {len(peer):,} of a peer's "
              f"{1e6 * peer_s / len(peer):.2f} us each; before serving "
              f"{index_s + own_s + peer_s:.3f} s (index {index_s:.3f} s), then "
              f"{after_s:.3f} s in the steps while serving")  # fmt: skip


if __name__ == "__main__":
    main()
