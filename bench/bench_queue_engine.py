"""Queue engine CPU per message in the end-to-end benchmark's shape (issue 4), pure engine only.

One publisher whose publishes arrive in `handle_many` batches of 500 (one group commit), four
subscriptions with backlog 100, each acking in `Acked` batches of 33 bookmarks (a client
library's batching), at-least-once, sublet leasing, a 300 s LeasePeriod, default fairness, no
filter, priority or barrier. After every step the adapter reads `next_deadline_ms()`, as the
driver re-arms its timer. Time is CPU time (`time.process_time`), the best of `--runs` runs: the
machine may be shared. Printed, never asserted.
Run: ``.venv/bin/python -m bench.bench_queue_engine [--messages N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import time

from amps.queue import (
    Acked,
    Action,
    Deliver,
    MessagePublished,
    QueueEngine,
    QueuePolicy,
    Subscribed,
)

PUBLISHER_ID = 7
PUBLISH_BATCH = 500
SUBSCRIPTIONS = 4
BACKLOG = 100
ACK_BATCH = 33
LEASE_PERIOD_MS = 300_000


def run_once(count: int, publish_batch: int = PUBLISH_BATCH) -> float:
    """Publish, deliver and ack `count` messages; return the CPU seconds taken."""
    engine = QueueEngine(
        QueuePolicy(lease_period_ms=LEASE_PERIOD_MS, max_per_subscription_backlog=BACKLOG)
    )
    # client_id -> bookmarks delivered to it and not yet acked
    held: dict[str, list[tuple[int, int]]] = {f"c{i}": [] for i in range(SUBSCRIPTIONS)}

    def collect(actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Deliver):
                held[action.client_id].append((PUBLISHER_ID, action.txid))

    now_ms = 0
    started = time.process_time()
    for i in range(SUBSCRIPTIONS):
        collect(engine.handle(Subscribed(f"s{i}", f"c{i}", BACKLOG, None), now_ms))
        engine.next_deadline_ms()
    acked = 0
    published = 0
    while acked < count:
        if published < count:
            last = min(published + publish_batch, count)
            events = [
                MessagePublished(t, PUBLISHER_ID, t, now_ms) for t in range(published + 1, last + 1)
            ]
            published = last
            collect(engine.handle_many(events, now_ms))
            engine.next_deadline_ms()
        # Every client acks while it holds a full ack batch (or everything once all is sent).
        progress = True
        while progress:
            progress = False
            for client_id, marks in held.items():
                if len(marks) >= ACK_BATCH or (published == count and marks):
                    batch = marks[:ACK_BATCH]
                    del marks[:ACK_BATCH]
                    now_ms += 1
                    collect(engine.handle(Acked(client_id, batch), now_ms))
                    engine.next_deadline_ms()
                    acked += len(batch)
                    progress = True
    seconds = time.process_time() - started
    stats = engine.statistics(now_ms)
    assert stats.acked_total == count == stats.delivered_total, stats
    assert stats.depth == 0
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--publish-batch", type=int, default=PUBLISH_BATCH)
    args = parser.parse_args()
    best = min(run_once(args.messages, args.publish_batch) for _ in range(args.runs))
    per_message_us = best / args.messages * 1e6
    print(
        f"queue engine (publish x{args.publish_batch}, {SUBSCRIPTIONS} subs backlog {BACKLOG}, "
        f"acks x{ACK_BATCH}): {per_message_us:.2f} us CPU/message, "
        f"{args.messages / best:,.0f} msgs/s (best of {args.runs}, {args.messages:,} messages)"
    )


if __name__ == "__main__":
    main()
