"""Queue engine memory and throughput: bytes per queued message at 1,000,000 messages, the
time to publish them (one `handle` each, and `handle_many` per 100), and deliver+ack through 4
subscriptions with backlog 100: one bookmark per `Acked`, and acks batched per client as a client
library sends them (one `Acked` per client per round), and snapshot/encode/decode/restore of the
queue (Q16) fed by 1, 2 and 8 publishers. Printed, never asserted.
Run: ``.venv/bin/python -m bench.bench_queue_memory [--messages N] [--snapshot-only]``."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from amps.queue import Acked, Deliver, MessagePublished, QueueEngine, QueuePolicy, Subscribed
from amps.queue.snapshot_codec import decode_snapshot, encode_snapshot


def publish(engine: QueueEngine, count: int) -> float:
    """Publish `count` messages (one publisher); return seconds taken."""
    start = time.perf_counter()
    for txid in range(1, count + 1):
        engine.handle(MessagePublished(txid, 7, txid, 0), 0)
    return time.perf_counter() - start


def publish_batched(engine: QueueEngine, count: int, batch: int = 100) -> float:
    """Publish `count` messages through `handle_many`, `batch` per call; return seconds."""
    start = time.perf_counter()
    for first in range(1, count + 1, batch):
        last = min(first + batch, count + 1)
        engine.handle_many([MessagePublished(t, 7, t, 0) for t in range(first, last)], 0)
    return time.perf_counter() - start


def measure_memory(count: int) -> None:
    """Resident bytes per queued message with no subscribers (tracemalloc)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    engine = QueueEngine(QueuePolicy(lease_period_ms=30_000, expiration_ms=3_600_000))
    seconds = publish(engine, count)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"memory: {(after - before) / count:.1f} bytes/message at {count:,} queued messages")
    print(f"publish (traced): {count / seconds:,.0f} msgs/s")


def measure_throughput(count: int) -> None:
    """Publish, then deliver+ack everything through 4 subscriptions with backlog 100."""
    engine = QueueEngine(QueuePolicy(lease_period_ms=30_000, max_per_subscription_backlog=100))
    seconds = publish(engine, count)
    print(f"publish: {count / seconds:,.0f} msgs/s ({seconds:.2f} s)")
    start = time.perf_counter()
    pending: list[Deliver] = []
    for i in range(4):
        actions = engine.handle(Subscribed(f"s{i}", f"c{i}", 100, None), 0)
        pending.extend(a for a in actions if isinstance(a, Deliver))
    acked = 0
    while pending:
        batch, pending = pending[:100], pending[100:]
        for delivery in batch:
            event = Acked(delivery.client_id, [(7, delivery.txid)])
            actions = engine.handle(event, 1)
            pending.extend(a for a in actions if isinstance(a, Deliver))
            acked += 1
    seconds = time.perf_counter() - start
    stats = engine.statistics(1)
    assert acked == count == stats.acked_total
    print(f"deliver+ack: {count / seconds:,.0f} msgs/s ({seconds:.2f} s, 4 subs, backlog 100)")


def measure_batched(count: int) -> None:
    """The same with batches: publishes per 100, and each client acks all it holds at once."""
    engine = QueueEngine(QueuePolicy(lease_period_ms=30_000, max_per_subscription_backlog=100))
    seconds = publish_batched(engine, count)
    print(f"publish (handle_many x100): {count / seconds:,.0f} msgs/s ({seconds:.2f} s)")
    start = time.perf_counter()
    held: dict[str, list[tuple[int, int]]] = {}
    for i in range(4):
        for action in engine.handle(Subscribed(f"s{i}", f"c{i}", 100, None), 0):
            if isinstance(action, Deliver):
                held.setdefault(action.client_id, []).append((7, action.txid))
    acked = 0
    while held:
        rounds, held = held, {}
        for client_id, marks in rounds.items():
            for action in engine.handle(Acked(client_id, marks), 1):
                if isinstance(action, Deliver):
                    held.setdefault(action.client_id, []).append((7, action.txid))
            acked += len(marks)
    seconds = time.perf_counter() - start
    assert acked == count == engine.statistics(1).acked_total
    print(f"deliver+ack (acks batched per client): {count / seconds:,.0f} msgs/s ({seconds:.2f} s)")


def measure_snapshot(count: int, publishers: int = 1) -> None:
    """Snapshot, encode, decode and restore a queue of `count` live messages (Q16 restart) fed
    by `publishers` publishers taking turns in runs of 50 messages (a replicated queue has one
    per origin instance)."""
    policy = QueuePolicy(lease_period_ms=30_000, expiration_ms=3_600_000)
    engine = QueueEngine(policy)
    for first in range(1, 2 * count + 1, 1000):
        last = min(first + 1000, 2 * count + 1)
        engine.handle_many(
            [
                MessagePublished(t, 7 + t // 50 % publishers, t, t // 1000)
                for t in range(first, last)
            ],
            0,
        )
    # The oldest half acked, as consumers take a queue in order (bench_queues' restart shape).
    engine.handle(Acked("c", [(7 + t // 50 % publishers, t) for t in range(1, count + 1)]), 0)
    start = time.process_time()
    snapshot = engine.snapshot()
    taken = time.process_time()
    data = encode_snapshot(snapshot, 0, 0)
    encoded = time.process_time()
    decoded, _, _ = decode_snapshot(data)
    read = time.process_time()
    restored = QueueEngine.restore(policy, decoded, 12_345)
    done = time.process_time()
    assert restored.deliverable(1) == engine.deliverable(1)
    print(
        f"snapshot, {publishers} publisher{'s' if publishers > 1 else ''} (CPU time): "
        f"{taken - start:.3f} s, encode {encoded - taken:.3f} s, "
        f"decode {read - encoded:.3f} s, restore {done - read:.3f} s "
        f"({len(snapshot.txids):,} live messages, the oldest {count:,} acked, {len(data):,} B)"
    )


def rss_bytes() -> int:
    """This process's resident set (VmRSS: anonymous memory plus file pages mapped in)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def rss_child(count: int, file_backed: bool) -> None:
    """In a fresh process: RSS growth per queued message (FileBackedMetadata or in memory)."""
    from amps.server.file_columns import FileColumnFactory

    with tempfile.TemporaryDirectory() as directory:
        factory = FileColumnFactory(Path(directory) / "q.meta") if file_backed else None
        policy = QueuePolicy(lease_period_ms=30_000, expiration_ms=3_600_000)
        before = rss_bytes()
        engine = QueueEngine(policy, columns=factory)
        for first in range(1, count + 1, 1000):
            last = min(first + 1000, count + 1)
            engine.handle_many([MessagePublished(t, 7, t, 0) for t in range(first, last)], 0)
        if factory is not None:
            factory.page_out()  # what an idle queue's pages do; the data stays in the file
        after = rss_bytes()
        label = "FileBackedMetadata" if file_backed else "in memory"
        print(f"resident ({label}): {(after - before) / count:.1f} bytes/message (RSS delta)")
        assert engine.deliverable(1) == [1]


def measure_rss(count: int) -> None:
    for flag in ("--rss-memory", "--rss-file"):
        command = [sys.executable, "-m", "bench.bench_queue_memory", flag, "--messages", str(count)]
        subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--snapshot-only", action="store_true", help="snapshot figures only")
    parser.add_argument("--rss-memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rss-file", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_memory or args.rss_file:
        rss_child(args.messages, args.rss_file)
        return
    for publishers in (1, 2, 8):
        measure_snapshot(args.messages, publishers)
    if args.snapshot_only:
        return
    measure_rss(args.messages)
    measure_memory(args.messages)
    measure_throughput(args.messages)
    measure_batched(args.messages)


if __name__ == "__main__":
    main()
