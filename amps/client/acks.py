"""Queue acknowledgements on the wire: batches from `policy.AckBatcher`, sent on one timer.

Every ack batch asks for a `processed` ack and is kept until that ack arrives. When the stream
breaks, unconfirmed batches and acks made since are kept and sent again after the next logon, on
the same or the next instance (D3): an ack that arrives there before its message is deferred by
the instance, and one that finds the message already gone does nothing. Cancels are not sent
again: the lost stream returned the message to the queue, which is what a cancel asks for (Q6).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from amps.client import commands
from amps.client.connection import Connection
from amps.client.policy import AckBatch, AckBatcher, ack_batch_size

CANCEL = "cancel"


class QueueAcker:
    """Sends plain acks in per-topic batches (size or timeout) and cancel/expire acks at once."""

    def __init__(
        self, *, batch_size: int | None, timeout_ms: int, next_cmd_id: Callable[[], str]
    ) -> None:
        self._configured_batch_size = batch_size
        self._batcher = AckBatcher(timeout_ms=timeout_ms)
        self._next_cmd_id = next_cmd_id
        self._timer: asyncio.TimerHandle | None = None
        # cmd_id -> (batch, option): sent, awaiting the instance's processed ack.
        self._unconfirmed: dict[str, tuple[AckBatch, str]] = {}
        # Full batches made while disconnected, sent after the next logon.
        self._held: list[tuple[AckBatch, str]] = []
        self.sent_count = 0
        # granted max_backlog -> batch size (the same few values every time)
        self._sizes: dict[int | None, int] = {}

    @property
    def unconfirmed_count(self) -> int:
        """Acks sent or held that the instance has not confirmed yet (batched ones excluded)."""
        batches = [*self._unconfirmed.values(), *self._held]
        return sum(len(batch.bookmarks) for batch, _ in batches)

    def ack(
        self, conn: Connection | None, topic: str, bookmark: str, granted_max_backlog: int | None
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
        if conn is None:
            if batch is not None:
                self._held.append((batch, ""))
            return
        if batch is not None:
            self._send(conn, [batch])
        if self._timer is None:
            self._arm(conn)

    def send_now(self, conn: Connection | None, topic: str, bookmark: str, option: str) -> None:
        """A cancel or expire ack: never batched, sent at once (§7.2)."""
        batch = AckBatch(topic, (bookmark,))
        if conn is not None:
            self._send(conn, [batch], option)
        elif option != CANCEL:
            self._held.append((batch, option))

    def flush(self, conn: Connection | None) -> int:
        """Send every pending batch now; return how many acks went out."""
        if conn is None:
            self._held.extend((batch, "") for batch in self._batcher.take_all())
            return 0
        return self._send(conn, self._batcher.take_all())

    def on_ack(self, cmd_id: str) -> bool:
        """The instance processed (or refused) an ack batch; False when `cmd_id` is not one."""
        return self._unconfirmed.pop(cmd_id, None) is not None

    def on_connection_lost(self) -> None:
        """Keep every ack the instance has not confirmed, for the next logon."""
        self.cancel_timer()
        self._held[:0] = [item for item in self._unconfirmed.values() if item[1] != CANCEL]
        self._unconfirmed.clear()

    def on_logon(self, conn: Connection) -> int:
        """Send the kept acks, then the pending batches, on a new stream; return how many."""
        held, self._held = self._held, []
        count = 0
        for batch, option in held:
            count += self._send(conn, [batch], option)
        return count + self._send(conn, self._batcher.take_all())

    def cancel_timer(self) -> None:
        """Stop the timeout timer (closing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _send(self, conn: Connection, batches: list[AckBatch], option: str = "") -> int:
        count = 0
        for batch in batches:
            cmd_id = self._next_cmd_id()
            self._unconfirmed[cmd_id] = (batch, option)
            conn.send_entry(
                commands.queue_ack_entry(batch.topic, batch.bookmark_list, option, cmd_id)
            )
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
            return  # the pending acks go out after the next logon
        self._send(conn, self._batcher.take_due(_now_ms()))
        self._arm(conn)


def _now_ms() -> int:
    return int(asyncio.get_running_loop().time() * 1000)
