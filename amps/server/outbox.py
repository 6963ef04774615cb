"""Per-connection outgoing buffer: messages are batched into frames (many per gRPC message).

The buffer holds *frame entries*: encoded ServerMessages already wrapped as one element of
`ServerFrame.messages` (see `amps.server.wire`), or *chunks* of many entries joined by the
producer (replay). A frame is the concatenation of entries and chunks, sent by the gRPC method
as bytes: no protobuf object per message on the way out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from time import perf_counter_ns

from amps.batching import FrameLimits, frame_split
from amps.server.hops import HopStatistics

MAX_FRAME_MESSAGES = 500
# Frames stay well under the gRPC message limit even when every message is near its maximum.
MAX_FRAME_BYTES = 4 * 1024 * 1024
FRAME_LIMITS = FrameLimits(MAX_FRAME_MESSAGES, MAX_FRAME_BYTES)
# A replay pauses while this many messages wait to be sent; live traffic is never paused.
DRAIN_LOW_WATER_MESSAGES = 2_000
# A client that falls this far behind live traffic is disconnected (AMPS slow-client limits):
# its queue leases return at once and it can resume from a bookmark, instead of the instance
# buffering without bound.
MAX_QUEUED_MESSAGES = 250_000
SLOW_CONSUMER_STATUS = 8  # grpc.StatusCode.RESOURCE_EXHAUSTED


class Outbox:
    """Collects frame entries, hands them out as encoded ServerFrames; closing ends the stream."""

    def __init__(self) -> None:
        self._entries: list[bytes] = []
        # Messages in each item of _entries, kept only while a chunk is queued (else all 1).
        self._counts: list[int] = []
        self._queued = 0
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
        if self._queued > DRAIN_LOW_WATER_MESSAGES:
            self._drained.clear()
        if self._queued > MAX_QUEUED_MESSAGES:
            self._disconnect_slow_consumer()

    def _disconnect_slow_consumer(self) -> None:
        queued = self._queued
        self._entries.clear()
        self._counts.clear()
        self._queued = 0
        self.close((SLOW_CONSUMER_STATUS, f"slow consumer: {queued} messages waiting to be sent"))

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
        if self._queued > DRAIN_LOW_WATER_MESSAGES:
            self._drained.clear()
        if self._queued > MAX_QUEUED_MESSAGES:
            self._disconnect_slow_consumer()

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
        if self._queued > DRAIN_LOW_WATER_MESSAGES:
            self._drained.clear()

    def close(self, reason: tuple[int, str] | None = None) -> None:
        """End the stream after what is queued; `reason` = (grpc status value, details) aborts."""
        self.closed = True
        self.close_reason = reason
        self._ready.set()
        self._drained.set()

    async def wait_drained(self) -> None:
        """Wait until few enough messages are queued (replay pacing)."""
        await self._drained.wait()

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
        if self._queued <= DRAIN_LOW_WATER_MESSAGES:
            self._drained.set()
        if not entries:
            self._ready.clear()
        self.sent_messages += messages
        return b"".join(batch)  # one chunk: the same bytes, not a copy

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
