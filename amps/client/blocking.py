"""A blocking facade over `Client`: the same names, run on a private event loop in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from amps.client.aio import Client
from amps.client.message import ClientStatistics, Message, Subscription

T = TypeVar("T")


class _LoopThread:
    """An event loop running in a daemon thread; `run()` waits for one coroutine's result."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class BlockingSubscription:
    """Iterator of messages; `next_message(timeout_s)` returns None on timeout or end."""

    def __init__(self, runner: _LoopThread, subscription: Subscription) -> None:
        self._runner = runner
        self.subscription = subscription
        self.sub_id = subscription.sub_id

    def __iter__(self) -> Iterator[Message]:
        while True:
            message = self._runner.run(self.subscription.get())
            if message is None:
                return
            yield message

    def next_message(self, timeout_s: float | None = None) -> Message | None:
        """The next message, or None when none arrives within `timeout_s`."""
        return self._runner.run(self.subscription.get(timeout_s))

    def wait_completed(self, timeout_s: float | None = None) -> None:
        """Wait until a bookmark replay has caught up with live messages."""
        self._runner.run(self.subscription.wait_completed(timeout_s))

    def unsubscribe(self) -> None:
        """Stop this subscription."""
        self._runner.run(self.subscription.unsubscribe())


class BlockingClient:
    """`Client` for threads: each call blocks until the asyncio client's call returns."""

    def __init__(self, name: str, **options: Any) -> None:
        self._runner = _LoopThread(f"amps-client-{name}")
        # The asyncio client is created on its loop so its events bind there.
        self.client: Client = self._runner.run(_make_client(name, options))

    def connect(self, uri: str | Sequence[str], *, timeout_s: float | None = 10.0) -> None:
        """Connect and log on (see `Client.connect`)."""
        self._runner.run(self.client.connect(uri, timeout_s=timeout_s))

    def publish(self, topic: str, data: bytes | str, *, seq: int | None = None) -> int:
        """Buffer one publish and return its sequence number (see `Client.publish`)."""
        return self._runner.run(self.client.publish(topic, data, seq=seq))

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until everything published so far is persisted."""
        self._runner.run(self.client.flush(timeout_s))

    def ping(self, timeout_s: float | None = 10.0) -> float:
        """One round trip in milliseconds."""
        return self._runner.run(self.client.ping(timeout_s))

    def subscribe(self, topic: str, **options: Any) -> BlockingSubscription:
        """Subscribe; iterate the result for messages (see `Client.subscribe`)."""
        subscription = self._runner.run(self.client.subscribe(topic, **options))
        return BlockingSubscription(self._runner, subscription)

    def unsubscribe(self, sub_id: str) -> None:
        """Stop a subscription."""
        self._runner.run(self.client.unsubscribe(sub_id))

    def ack(self, message: Message, *, cancel: bool = False, expire: bool = False) -> None:
        """Acknowledge a queue message (see `Message.ack`)."""
        self._runner.run(message.ack(cancel=cancel, expire=expire))

    def flush_acks(self) -> None:
        """Send every pending queue ack now."""
        self._runner.run(self.client.flush_acks())

    def sow(self, topic: str, filter: str | None = None) -> list[Message]:
        """Query the current contents of a SOW topic or queue."""
        return self._runner.run(self.client.sow(topic, filter))

    def sow_delete(self, topic: str, **options: Any) -> int:
        """Delete or acknowledge by bookmarks or filter; return how many."""
        return self._runner.run(self.client.sow_delete(topic, **options))

    def statistics(self) -> ClientStatistics:
        """A snapshot of the client's counters."""
        return self.client.statistics()

    def close(self) -> None:
        """Close the client and stop its event loop thread."""
        try:
            self._runner.run(self.client.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


async def _make_client(name: str, options: dict[str, Any]) -> Client:
    return Client(name, **options)
