"""Publishing on top of the publish store: back-pressure, persisted acks, flush waiters."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from amps.client.connection import Connection
from amps.client.message import PublishFailure
from amps.client.policy import PublishStore
from amps.errors import AmpsError, error_for_code
from amps.v1 import client_pb2

# A publishing loop yields to the event loop after this many queued commands.
PAUSE_EVERY = 256


class Publisher:
    """Owns the waiters around a `PublishStore`; one future per flush, none per publish."""

    def __init__(
        self, store: PublishStore, failed_callback: Callable[[PublishFailure], None] | None
    ) -> None:
        self.store = store
        self._failed_callback = failed_callback
        self._room = asyncio.Event()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_ids = itertools.count()
        self._failures: list[PublishFailure] = []
        # Highest seq handed to a stream: entries at or below it count as republished.
        self._sent_seq = 0
        self.published_count = 0
        self.persisted_count = 0
        self.republished_count = 0
        self.rejected_count = 0

    async def wait_room(self, check: Callable[[], None]) -> None:
        """Wait while the store is full (back-pressure); `check` raises when the client failed."""
        while not self.store.has_room():
            check()
            self._room.clear()
            await self._room.wait()

    async def publish(
        self, conn: Connection | None, topic: str, data: bytes | str, seq: int | None
    ) -> int:
        """Store one publish and queue it on `conn` (None while disconnected)."""
        stored, pause = self.publish_nowait(conn, topic, data, seq)
        if pause:
            await asyncio.sleep(0)
        return stored

    def publish_nowait(
        self, conn: Connection | None, topic: str, data: bytes | str, seq: int | None
    ) -> tuple[int, bool]:
        """`publish` without the await: (seq, whether the caller should yield to the loop now)."""
        payload = data.encode() if isinstance(data, str) else data
        entry = self.store.add(topic, payload, seq)
        self.published_count += 1
        # While disconnected the store alone holds it; the next logon republishes it.
        if conn is None:
            return entry.seq, False
        self._sent_seq = entry.seq
        # Let the writer run each time a frame fills, even when the caller never awaits
        # anything else.
        return entry.seq, conn.send_publish(topic, payload, entry.seq) % PAUSE_EVERY == 0

    def on_logon(self, conn: Connection, logon_seq: int) -> None:
        """Discard what the instance holds and republish the rest, in order, on `conn` (D3)."""
        # What the instance already holds was persisted, though its ack was lost with the link.
        self.persisted_count += self.store.on_persisted(logon_seq)
        for entry in self.store.on_logon(logon_seq):
            conn.send_publish(entry.topic, entry.data, entry.seq)
            if entry.seq <= self._sent_seq:
                self.republished_count += 1
            self._sent_seq = max(self._sent_seq, entry.seq)
        self._on_released()

    def on_persisted(self, ack: client_pb2.Ack) -> None:
        """A conflated persisted ack, or the failure of one publish."""
        if ack.status == "success":
            self.persisted_count += self.store.on_persisted(ack.seq)
            self._on_released()
            return
        entry = self.store.on_rejected(ack.seq)
        if entry is None:
            return
        error = error_for_code(ack.error_code, ack.reason or "publish failed")
        failure = PublishFailure(entry.seq, entry.topic, error)
        self.rejected_count += 1
        self._failures.append(failure)
        if self._failed_callback is not None:
            self._failed_callback(failure)
        self._on_released()

    async def wait_persisted(self, timeout_s: float | None) -> None:
        """Wait until everything published so far is persisted; raise the first new rejection."""
        target = self.store.last_seq
        if not self.store.is_persisted_through(target):
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiters, (target, next(self._waiter_ids), future))
            async with asyncio.timeout(timeout_s):
                await future
        if self._failures:
            first = self._failures[0]
            self._failures.clear()
            raise first.error

    def fail(self, error: AmpsError) -> None:
        """The client failed or closed: wake every waiter with `error`."""
        self._room.set()
        for _, _, future in self._waiters:
            if not future.done():
                future.set_exception(error)
        self._waiters.clear()

    def _on_released(self) -> None:
        waiters = self._waiters
        while waiters and self.store.is_persisted_through(waiters[0][0]):
            future = heapq.heappop(waiters)[2]
            if not future.done():
                future.set_result(None)
        if self.store.has_room():
            self._room.set()
