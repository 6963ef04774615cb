"""Queue acknowledgements on the wire: batches from `policy.AckBatcher`, sent on one timer."""

from __future__ import annotations

import asyncio

from amps.client import commands
from amps.client.connection import Connection
from amps.client.policy import AckBatch, AckBatcher, ack_batch_size


class QueueAcker:
    """Sends plain acks in per-topic batches (size or timeout) and cancel/expire acks at once."""

    def __init__(self, *, batch_size: int | None, timeout_ms: int) -> None:
        self._configured_batch_size = batch_size
        self._batcher = AckBatcher(timeout_ms=timeout_ms)
        self._timer: asyncio.TimerHandle | None = None
        self.sent_count = 0
        # granted max_backlog -> batch size (the same few values every time)
        self._sizes: dict[int | None, int] = {}

    def ack(
        self, conn: Connection, topic: str, bookmark: str, granted_max_backlog: int | None
    ) -> None:
        """Acknowledge one message in its topic's batch (sent when full or timed out, §7.2)."""
        size = self._sizes.get(granted_max_backlog)
        if size is None:
            size = ack_batch_size(self._configured_batch_size, granted_max_backlog)
            self._sizes[granted_max_backlog] = size
        batcher = self._batcher
        # The clock is read only when the ack starts a new batch (its timeout starts then).
        now_ms = 0 if batcher.has_pending(topic) else _now_ms()
        batch = batcher.add(topic, bookmark, size, now_ms)
        if batch is not None:
            self._send(conn, [batch])
        if self._timer is None:
            self._arm(conn)

    def send_now(self, conn: Connection, topic: str, bookmark: str, option: str) -> None:
        """A cancel or expire ack: never batched, sent at once (§7.2)."""
        self._send(conn, [AckBatch(topic, (bookmark,))], option)

    def flush(self, conn: Connection | None) -> int:
        """Send every pending batch now; return how many acks went out."""
        batches = self._batcher.take_all()
        if conn is None:
            return 0
        return self._send(conn, batches)

    def drop(self) -> None:
        """Forget pending acks: the stream that carried their leases is gone (Q6)."""
        self._batcher.take_all()
        self.cancel_timer()

    def cancel_timer(self) -> None:
        """Stop the timeout timer (closing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _send(self, conn: Connection, batches: list[AckBatch], option: str = "") -> int:
        count = 0
        for batch in batches:
            conn.send_entry(commands.queue_ack_entry(batch.topic, batch.bookmark_list, option))
            count += len(batch.bookmarks)
        self.sent_count += count
        return count

    def _arm(self, conn: Connection) -> None:
        deadline_ms = self._batcher.next_deadline_ms()
        if deadline_ms is None or self._timer is not None:
            return
        delay_s = max(0.0, (deadline_ms - _now_ms()) / 1000.0)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer, conn)

    def _on_timer(self, conn: Connection) -> None:
        self._timer = None
        if conn.lost is not None:
            self._batcher.take_all()
            return
        self._send(conn, self._batcher.take_due(_now_ms()))
        self._arm(conn)


def _now_ms() -> int:
    return int(asyncio.get_running_loop().time() * 1000)
