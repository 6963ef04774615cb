"""What the application sees: messages, subscriptions as async iterators, statistics snapshots."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from amps.client.bookmarks import BookmarkStore, is_now
from amps.errors import AmpsError


class MessageOwner(Protocol):
    """What messages and subscriptions call back into: the client (without importing it)."""

    def _ack_nowait(self, message: Message, cancel: bool = False, expire: bool = False) -> None:
        """Acknowledge one queue message without waiting."""

    async def unsubscribe(self, sub_id: str) -> None:
        """Stop one subscription."""


class Message:
    """One delivered message; `ack()` acknowledges a queue message (no-op for other messages)."""

    __slots__ = (
        "_client",
        "acked",
        "bookmark",
        "data",
        "delivery_count",
        "is_queue",
        "lease_deadline_us",
        "origin_instance",
        "origin_txid",
        "sub_id",
        "timestamp_us",
        "topic",
        "txid",
    )

    def __init__(
        self,
        client: MessageOwner | None,
        *,
        topic: str,
        data: bytes,
        bookmark: str = "",
        sub_id: str = "",
        txid: int = 0,
        timestamp_us: int = 0,
        lease_deadline_us: int = 0,
        delivery_count: int = 0,
        is_queue: bool = False,
        origin_instance: str = "",
        origin_txid: int = 0,
    ) -> None:
        self._client = client
        self.topic = topic
        self.data = data
        self.bookmark = bookmark
        self.sub_id = sub_id
        self.txid = txid
        self.timestamp_us = timestamp_us
        self.lease_deadline_us = lease_deadline_us
        self.delivery_count = delivery_count
        self.is_queue = is_queue
        # Replays of a subscription with the `origin` option: where the message was first
        # published, and its txid there ("" and 0 otherwise).
        self.origin_instance = origin_instance
        self.origin_txid = origin_txid
        self.acked = False

    def json(self) -> Any:
        """The payload parsed as JSON."""
        return orjson.loads(self.data)

    def text(self) -> str:
        """The payload decoded as UTF-8 (undecodable bytes replaced)."""
        return self.data.decode("utf-8", errors="replace")

    async def ack(self, *, cancel: bool = False, expire: bool = False) -> None:
        """Acknowledge a queue message (Q10); `cancel` returns it (Q11), `expire` ends it (Q12)."""
        if self.acked or not self.is_queue or self._client is None:
            return
        self.acked = True
        self._client._ack_nowait(self, cancel, expire)

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, bookmark={self.bookmark!r}, {len(self.data)} bytes)"


# The end marker in a subscription's buffer (a Message, so the buffer holds one type).
_END = Message(None, topic="", data=b"")


class Subscription:
    """Async iterator of the messages of one subscription; ends after `unsubscribe()`/`close()`."""

    def __init__(
        self,
        client: MessageOwner,
        *,
        sub_id: str,
        topic: str,
        filter: str,
        bookmark: str | None,
        options: str,
        max_backlog: int | None,
        auto_ack: bool,
        bookmark_store: BookmarkStore | None = None,
    ) -> None:
        self._client = client
        self._store = bookmark_store or BookmarkStore()
        self.sub_id = sub_id
        self.topic = topic
        self.filter = filter
        self.bookmark = bookmark
        self.options = options
        self.max_backlog = max_backlog
        self.auto_ack = auto_ack
        # Filled from the subscribe ack: the backlog the instance granted for a queue (Q8).
        self.granted_max_backlog: int | None = None
        self.is_queue = False
        # Bookmark of the last message handed to the application: where a reconnect resumes.
        self.last_bookmark: str | None = None
        # Handed out and not yet in the bookmark store: recorded when the application asks for
        # the next message (it is done with this one), unsubscribes or closes.
        self._unrecorded: str | None = None
        self._buffer: deque[Message] = deque()
        # Tasks waiting in get() or the iterator for the next delivery.
        self._waiters: list[asyncio.Future[bool]] = []
        self._completed = asyncio.Event()
        # From the `completed` ack: the instance's txid the replay went through (0 before), and
        # with the `origin` option each origin's txid of the last publish it read.
        self.replayed_txid = 0
        self.origins: dict[str, int] = {}
        self._error: AmpsError | None = None
        self._ended = False
        self._previous: Message | None = None

    @property
    def is_bookmark(self) -> bool:
        """A replay subscription (L7), as asked for (a reconnect resumes every topic
        subscription after its `last_bookmark`, see `resume_bookmark`)."""
        return bool(self.bookmark)

    @property
    def resume_bookmark(self) -> str | None:
        """Where a resubscription starts: after the last bookmark handed to the application, or
        where the subscription started; a queue subscription takes no bookmark (a bookmark
        subscription to a queue's name would replay its underlying topic, L7)."""
        if self.is_queue:
            return None
        return self.last_bookmark or self.bookmark

    @property
    def resumes_from_bookmark(self) -> bool:
        """True when what was buffered but not handed out will come again after a reconnect:
        a queue (the instance returns the leases) or a replay from a bookmark (not from now)."""
        resume = self.resume_bookmark
        return self.is_queue or (resume is not None and not is_now(resume))

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        message = await self.get()  # None only when the stream ended without an error
        if message is None:
            raise StopAsyncIteration
        return message

    async def get(self, timeout_s: float | None = None) -> Message | None:
        """The next message, or None when none arrives within `timeout_s` or the stream ended."""
        if self._unrecorded is not None:
            self.record_bookmark()
        if self._buffer and self._previous is None:  # the usual case: no await at all
            item = self._take()
            if item is not None:
                return item
        if self._previous is not None:
            previous, self._previous = self._previous, None
            await previous.ack()
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            if self._buffer:
                item = self._take()
                if item is not None:
                    return item
            if self._ended:
                if self._error is not None:
                    raise self._error
                return None
            if deadline is None:
                await self._wait(None)
            elif not await self._wait(deadline - loop.time()):
                return None

    async def _wait(self, timeout_s: float | None) -> bool:
        """Until the next delivery or end (True), or `timeout_s` (False). A future and a timer
        rather than an Event in a timeout: no task cancellation when the time is up."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters.append(waiter)
        if timeout_s is None:
            try:
                return await waiter
            finally:
                self._forget(waiter)
        timer = loop.call_later(max(0.0, timeout_s), _resolve, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._forget(waiter)

    def _forget(self, waiter: asyncio.Future[bool]) -> None:
        waiters = self._waiters  # empty after a wake-up
        if waiters and waiter in waiters:
            waiters.remove(waiter)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    def _take(self) -> Message | None:
        """The next buffered message (None when only end markers were left)."""
        buffer = self._buffer
        while buffer:
            item = buffer.popleft()
            if item is _END:
                self._ended = True
                continue
            if item.is_queue:
                if self.auto_ack:
                    self._previous = item
            elif item.bookmark:
                self.last_bookmark = self._unrecorded = item.bookmark
            return item
        return None

    async def wait_completed(self, timeout_s: float | None = None) -> None:
        """Wait for the `completed` ack: a bookmark replay has caught up with live messages."""
        async with asyncio.timeout(timeout_s):
            await self._completed.wait()

    @property
    def completed(self) -> bool:
        """True once the replay has caught up with live messages."""
        return self._completed.is_set()

    async def unsubscribe(self) -> None:
        """Stop this subscription; the iterator ends after the buffered messages."""
        await self._client.unsubscribe(self.sub_id)

    # --- Called by the client ------------------------------------------------------------------

    def deliver(self, messages: list[Message]) -> None:
        """Buffer deliveries for the application (one wake-up for all of them)."""
        self._buffer.extend(messages)
        if self._waiters:
            self._wake()

    def mark_completed(self, replayed_txid: int = 0, origins: dict[str, int] | None = None) -> None:
        """The instance sent the `completed` ack (with the txid its replay went through)."""
        self.replayed_txid = replayed_txid
        self.origins = origins or {}
        self._completed.set()

    def discard_buffered(self) -> int:
        """Drop undelivered messages the instance will send again (replay or returned leases)."""
        kept = [item for item in self._buffer if item is _END]
        dropped = len(self._buffer) - len(kept)
        self._buffer = deque(kept)
        return dropped

    def end(self, error: AmpsError | None = None) -> None:
        """No more messages will come; raise `error` in the iterator after the buffer drains."""
        if self._error is None:
            self._error = error
        self._buffer.append(_END)
        self._wake()

    def record_bookmark(self) -> None:
        """Put the last message handed out in the bookmark store: the application is done."""
        bookmark, self._unrecorded = self._unrecorded, None
        if bookmark is not None:
            self._store.record(self.sub_id, bookmark)

    def take_auto_ack(self) -> Message | None:
        """The message still awaiting its auto-ack (the iterator was not advanced again)."""
        previous, self._previous = self._previous, None
        return previous


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


@dataclass(frozen=True, slots=True)
class PublishFailure:
    """A publish the instance refused: its sequence number, topic and the rebuilt error."""

    seq: int
    topic: str
    error: AmpsError


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    """Counters since the client was created, and gauges at the time of the call."""

    published: int
    persisted: int
    republished: int
    rejected: int
    reconnects: int
    delivered: int
    acks_sent: int
    frames_sent: int
    frames_received: int
    unpersisted_count: int
    unpersisted_bytes: int
    last_seq: int
    persisted_seq: int
    connected_server: str | None
