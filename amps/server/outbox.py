"""Per-connection outgoing buffer: messages are batched into frames (many per gRPC message).

The buffer holds *frame entries*: encoded ServerMessages already wrapped as one element of
`ServerFrame.messages` (see `amps.server.wire`). A frame is the concatenation of entries, sent
by the gRPC method as bytes: no protobuf object per message on the way out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

MAX_FRAME_MESSAGES = 500
# Frames stay well under the gRPC message limit even when every message is near its maximum.
MAX_FRAME_BYTES = 4 * 1024 * 1024
# A replay pauses while this many messages wait to be sent; live traffic is never paused.
DRAIN_LOW_WATER_MESSAGES = 2_000


class Outbox:
    """Collects frame entries, hands them out as encoded ServerFrames; closing ends the stream."""

    def __init__(self) -> None:
        self._entries: list[bytes] = []
        self._ready = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self.closed = False
        self.close_reason: tuple[int, str] | None = None
        self.sent_messages = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, entry: bytes) -> None:
        """Queue one frame entry (`wire.entry(...)`); it leaves with the next frame."""
        if self.closed:
            return
        self._entries.append(entry)
        self._ready.set()
        if len(self._entries) > DRAIN_LOW_WATER_MESSAGES:
            self._drained.clear()

    def put_many(self, entries: list[bytes]) -> None:
        """Queue several frame entries, in order."""
        if self.closed or not entries:
            return
        self._entries.extend(entries)
        self._ready.set()
        if len(self._entries) > DRAIN_LOW_WATER_MESSAGES:
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
        batch = entries[:MAX_FRAME_MESSAGES]
        count = len(batch)
        if sum(map(len, batch)) > MAX_FRAME_BYTES:
            count = 0
            total = 0
            for entry in batch:
                size = len(entry)
                if count and total + size > MAX_FRAME_BYTES:
                    break
                count += 1
                total += size
            batch = batch[:count]
        del entries[:count]
        if len(entries) <= DRAIN_LOW_WATER_MESSAGES:
            self._drained.set()
        if not entries:
            self._ready.clear()
        self.sent_messages += count
        return b"".join(batch)

    async def frames(self) -> AsyncIterator[bytes]:
        """Yield encoded ServerFrames until closed and empty."""
        while True:
            if not self._entries:
                if self.closed:
                    return
                await self._ready.wait()
                continue
            yield self._take_frame()
