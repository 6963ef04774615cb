"""Per-connection outgoing buffer: messages are batched into frames (many per gRPC message)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from amps.v1 import client_pb2 as pb

MAX_FRAME_MESSAGES = 500
# Frames stay well under the gRPC message limit even when every message is near its maximum.
MAX_FRAME_BYTES = 4 * 1024 * 1024
# A replay pauses while this many messages wait to be sent; live traffic is never paused.
DRAIN_LOW_WATER_MESSAGES = 2_000


class Outbox:
    """Collects ServerMessages and hands them out as ServerFrames; closing ends the stream."""

    def __init__(self) -> None:
        self._messages: list[pb.ServerMessage] = []
        self._sizes: list[int] = []
        self._ready = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self.closed = False
        self.close_reason: tuple[int, str] | None = None
        self.sent_messages = 0

    def __len__(self) -> int:
        return len(self._messages)

    def put(self, message: pb.ServerMessage, size_bytes: int = 64) -> None:
        """Queue one message; it leaves with the next frame."""
        if self.closed:
            return
        self._messages.append(message)
        self._sizes.append(size_bytes)
        self._ready.set()
        if len(self._messages) > DRAIN_LOW_WATER_MESSAGES:
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

    def _take_frame(self) -> pb.ServerFrame:
        count = 0
        total = 0
        for size in self._sizes:
            if count and (count >= MAX_FRAME_MESSAGES or total + size > MAX_FRAME_BYTES):
                break
            count += 1
            total += size
        batch = self._messages[:count]
        del self._messages[:count]
        del self._sizes[:count]
        if len(self._messages) <= DRAIN_LOW_WATER_MESSAGES:
            self._drained.set()
        if not self._messages:
            self._ready.clear()
        self.sent_messages += count
        return pb.ServerFrame(messages=batch)

    async def frames(self) -> AsyncIterator[pb.ServerFrame]:
        """Yield frames until closed and empty."""
        while True:
            if not self._messages:
                if self.closed:
                    return
                await self._ready.wait()
                continue
            yield self._take_frame()
