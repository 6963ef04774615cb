"""Per-connection outgoing buffer: messages are batched into frames (many per gRPC message).

The buffer holds *frame entries*: encoded ServerMessages already wrapped as one element of
`ServerFrame.messages` (see `amps.server.wire`), or *chunks* of many entries joined by the
producer (replay). A frame is the concatenation of entries and chunks, sent by the gRPC method
as bytes: no protobuf object per message on the way out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from time import perf_counter_ns

from amps.batching import FrameLimits, frame_split
from amps.server.hops import HopStatistics
from amps.server.send_budget import (
    ENTRY_OVERHEAD_BYTES,
    SLOW_CONSUMER_STATUS,
    Limit,
    SendBudget,
    slow_consumer_reason,
)

log = logging.getLogger("amps.outbox")

MAX_FRAME_MESSAGES = 500
# Frames stay well under the gRPC message limit even when every message is near its maximum.
MAX_FRAME_BYTES = 4 * 1024 * 1024
FRAME_LIMITS = FrameLimits(MAX_FRAME_MESSAGES, MAX_FRAME_BYTES)
# A replay pauses while this many messages, or bytes, wait to be sent; live traffic is never
# paused. A client that falls too far behind live traffic is disconnected by bytes (SendBudget):
# its queue leases return at once and it can resume from a bookmark.
DRAIN_LOW_WATER_MESSAGES = 2_000
DRAIN_LOW_WATER_BYTES = 8 << 20


class Outbox:
    """Collects frame entries, hands them out as encoded ServerFrames; closing ends the stream.

    Every queued byte is charged to `budget` (see amps.server.send_budget) until it is handed to
    gRPC; past the budget the connection is closed with a reason (a slow consumer).
    """

    def __init__(self, budget: SendBudget | None = None, name: str = "") -> None:
        self._entries: list[bytes] = []
        # Messages in each item of _entries, kept only while a chunk is queued (else all 1).
        self._counts: list[int] = []
        self._queued = 0
        self.queued_bytes = 0
        self._budget = budget if budget is not None else SendBudget()
        self._budget.register(self)
        # A replay waits well inside the client's share, so its own pace never gets it cut.
        self._low_water_bytes = min(DRAIN_LOW_WATER_BYTES, self._budget.max_client_bytes // 4)
        self._ready = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self.closed = False
        self.close_reason: tuple[int, str] | None = None
        self.sent_messages = 0
        # The instance's per-hop statistics (a private set until the session shares its own),
        # and when the oldest entry still queued was put in an empty outbox.
        self.hops = HopStatistics()
        self._waiting_since_ns = 0
        self.name = name  # who the log names when this connection is cut
        # Called once when the budget cuts this connection (the server ends the session).
        self.on_cut: Callable[[], None] | None = None

    def __len__(self) -> int:
        """Messages queued."""
        return self._queued

    def put(self, entry: bytes) -> None:
        """Queue one frame entry (`wire.entry(...)`); it leaves with the next frame."""
        if self.closed:
            return
        if not self._queued:
            self._waiting_since_ns = perf_counter_ns()
        self._entries.append(entry)
        if self._counts:
            self._counts.append(1)
        self._queued += 1
        self._ready.set()
        self._charge(len(entry) + ENTRY_OVERHEAD_BYTES)

    def put_many(self, entries: list[bytes]) -> None:
        """Queue several frame entries, in order."""
        if self.closed or not entries:
            return
        if not self._queued:
            self._waiting_since_ns = perf_counter_ns()
        self._entries.extend(entries)
        if self._counts:
            self._counts.extend([1] * len(entries))
        self._queued += len(entries)
        self._ready.set()
        self._charge(sum(map(len, entries)) + ENTRY_OVERHEAD_BYTES * len(entries))

    def put_chunk(self, chunk: bytes, count: int) -> None:
        """Queue `count` frame entries already joined into one bytes (at most a frame's worth:
        MAX_FRAME_MESSAGES, and well under MAX_FRAME_BYTES); a chunk is never split."""
        if self.closed or not count:
            return
        if not self._queued:
            self._waiting_since_ns = perf_counter_ns()
        if not self._counts:
            self._counts = [1] * len(self._entries)
        self._entries.append(chunk)
        self._counts.append(count)
        self._queued += count
        self._ready.set()
        self._charge(len(chunk) + ENTRY_OVERHEAD_BYTES)

    def _charge(self, size_bytes: int) -> None:
        self.queued_bytes += size_bytes
        budget = self._budget
        budget.queued_bytes += size_bytes
        if self._queued > DRAIN_LOW_WATER_MESSAGES or self.queued_bytes > self._low_water_bytes:
            self._drained.clear()
        if self.queued_bytes > budget.max_client_bytes:
            self.disconnect_slow_consumer("client")
        elif budget.queued_bytes > budget.max_bytes:
            largest = budget.largest()
            assert largest is not None  # this outbox holds bytes
            largest.disconnect_slow_consumer("instance")

    def disconnect_slow_consumer(self, limit: Limit) -> None:
        """Drop what is queued and end the stream with the reason (the budget named by limit)."""
        reason = slow_consumer_reason(limit, self.queued_bytes, self._budget)
        self._budget.disconnects[limit] += 1
        log.warning("client %s disconnected: %s", self.name or "?", reason)
        self._entries.clear()
        self._counts.clear()
        self._queued = 0
        self._refund_all()
        self.close((SLOW_CONSUMER_STATUS, reason))
        if self.on_cut is not None:
            self.on_cut()

    def _refund_all(self) -> None:
        self._budget.queued_bytes -= self.queued_bytes
        self.queued_bytes = 0

    def release(self) -> None:
        """The connection is gone: what is still queued will never be sent; stop counting it."""
        self.close(self.close_reason)
        self._entries.clear()
        self._counts.clear()
        self._queued = 0
        self._refund_all()
        self._budget.unregister(self)

    def close(self, reason: tuple[int, str] | None = None) -> None:
        """End the stream after what is queued; `reason` = (grpc status value, details) aborts."""
        self.closed = True
        self.close_reason = reason
        self._ready.set()
        self._drained.set()

    async def wait_drained(self) -> None:
        """Wait until few enough messages and bytes are queued (replay pacing)."""
        await self._drained.wait()

    @property
    def drained(self) -> bool:
        return self._drained.is_set()

    def _take_frame(self) -> bytes:
        entries = self._entries
        counts = self._counts
        items, messages = frame_split(entries, counts or None, FRAME_LIMITS)
        if counts:
            del counts[:items]
            if all(count == 1 for count in counts):
                counts.clear()
        batch = entries[:items]
        del entries[:items]
        self._queued -= messages
        frame = b"".join(batch)  # one chunk: the same bytes, not a copy
        size_bytes = len(frame) + ENTRY_OVERHEAD_BYTES * items
        self.queued_bytes -= size_bytes
        self._budget.queued_bytes -= size_bytes
        if self._queued <= DRAIN_LOW_WATER_MESSAGES and self.queued_bytes <= self._low_water_bytes:
            self._drained.set()
        if not entries:
            self._ready.clear()
        self.sent_messages += messages
        return frame

    async def frames(self) -> AsyncIterator[bytes]:
        """Yield encoded ServerFrames until closed and empty, by the rule of `amps.batching`: a
        frame as soon as something is queued, and after each write (gRPC takes the frame while
        this generator is suspended) one with what was queued during it."""
        hops = self.hops
        coalesced = False
        while True:
            if not self._entries:
                if self.closed:
                    return
                await self._ready.wait()
                coalesced = False
                continue
            taken_ns = perf_counter_ns()
            hops.outbox_wait.add(taken_ns - self._waiting_since_ns)
            frame = self._take_frame()
            if self._queued:
                self._waiting_since_ns = taken_ns  # the rest waits from now, for the next frame
            if coalesced:
                hops.frames_coalesced += 1
            else:
                hops.frames_idle += 1
            yielded_ns = perf_counter_ns()
            yield frame
            hops.frame_write.add(perf_counter_ns() - yielded_ns)
            coalesced = True
