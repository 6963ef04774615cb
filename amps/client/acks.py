"""Queue acknowledgements on the wire: batches from `policy.AckBatcher`, sent on one timer.

Sent acks are kept until the instance confirms them. The instance handles a stream's commands
in order, so one `processed` ack confirms every ack sent before the one that asked for it: at
most one request is outstanding, made at most every CONFIRM_EVERY_MS (a processed ack per ack
would cost a frame per message at backlog 1). When the stream breaks, unconfirmed acks and those
made since are sent again after the next logon, on the same or the next instance (D3): one
whose message is already gone there does nothing; one naming a message that instance has not
received waits there for it when the queue is replicated (the deferred acks, up to
DeferredAckExpiration), and is refused (UnknownBookmark) and dropped when it is not. Cancels
are not sent again: the lost stream returned the message to the queue, which is what a cancel
asks for (Q6).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from amps.client import commands
from amps.client.connection import Connection
from amps.client.policy import AckBatch, AckBatcher, ack_batch_size

CANCEL = "cancel"
# An ack batch asks the instance to confirm it (and all sent before it) at most this often,
# or once this many batches wait, whichever comes first, with one request outstanding.
CONFIRM_EVERY_MS = 100
CONFIRM_AT_MOST = 1000


class QueueAcker:
    """Sends plain acks in per-topic batches (size or timeout) and cancel/expire acks at once."""

    def __init__(
        self, *, batch_size: int | None, timeout_ms: int, next_cmd_id: Callable[[], str]
    ) -> None:
        self._configured_batch_size = batch_size
        self._batcher = AckBatcher(timeout_ms=timeout_ms)
        self._next_cmd_id = next_cmd_id
        self._timer: asyncio.TimerHandle | None = None
        # (number, batch, option) of each batch sent and not confirmed yet, in sending order.
        self._unconfirmed: deque[tuple[int, AckBatch, str]] = deque()
        self._sent_batches = 0
        # (cmd_id, number of the batch that asked): the confirmation awaited, if any.
        self._confirming: tuple[str, int] | None = None
        self._asked_ms = -CONFIRM_EVERY_MS
        # Full batches made while disconnected, sent after the next logon.
        self._held: list[tuple[AckBatch, str]] = []
        self.sent_count = 0
        # granted max_backlog -> batch size (the same few values every time)
        self._sizes: dict[int | None, int] = {}

    @property
    def unconfirmed_count(self) -> int:
        """Acks sent or held that the instance has not confirmed yet (batched ones excluded)."""
        sent = sum(len(batch.bookmarks) for _, batch, _ in self._unconfirmed)
        return sent + sum(len(batch.bookmarks) for batch, _ in self._held)

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
        """The instance processed (or refused) the batch that asked, so every batch sent before
        it is processed too; False when `cmd_id` is not that request."""
        confirming = self._confirming
        if confirming is None or cmd_id != confirming[0]:
            return False
        self._confirming = None
        unconfirmed = self._unconfirmed
        while unconfirmed and unconfirmed[0][0] <= confirming[1]:
            unconfirmed.popleft()
        return True

    def on_connection_lost(self) -> None:
        """Keep every ack the instance has not confirmed, for the next logon."""
        self.cancel_timer()
        self._confirming = None
        kept = [(batch, option) for _, batch, option in self._unconfirmed if option != CANCEL]
        self._held[:0] = kept
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
        unconfirmed = self._unconfirmed
        for batch in batches:
            self._sent_batches += 1
            unconfirmed.append((self._sent_batches, batch, option))
            cmd_id = self._confirmation_request() if self._confirming is None else ""
            conn.send_entry(
                commands.queue_ack_entry(batch.topic, batch.bookmark_list, option, cmd_id)
            )
            count += len(batch.bookmarks)
        self.sent_count += count
        return count

    def _confirmation_request(self) -> str:
        """A cmd_id when the batch being sent should ask for its processed ack, else ""."""
        now_ms = _now_ms()
        due = now_ms - self._asked_ms >= CONFIRM_EVERY_MS
        if not due and len(self._unconfirmed) < CONFIRM_AT_MOST:
            return ""
        self._asked_ms = now_ms
        cmd_id = self._next_cmd_id()
        self._confirming = (cmd_id, self._sent_batches)
        return cmd_id

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
