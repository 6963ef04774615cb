"""One gRPC stream to one instance: batched writes, a reader loop, and the logon handshake.

Commands are queued with `send()` (or `send_publish()`) and written as one `ClientFrame` when the
batch holds `max_frame_commands` commands or `flush_interval_s` after the first one was queued, so
a lone message is not held back and a burst travels in few frames (throughput comes from
batching). Commands are serialized when queued and frames are joined from those bytes
(`commands.frame_entry`, `commands.publish_head`): the stream's request serializer is the
identity, and a publish never becomes a protobuf object on this side.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

import grpc
import grpc.aio

from amps.client import commands
from amps.client.policy import is_link_dead
from amps.errors import AmpsError, ConnectionBroken, NameInUse, error_for_code
from amps.v1 import client_pb2

CONNECT_METHOD = "/amps.v1.Amps/Connect"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A frame stays well under the gRPC message limit even with large payloads.
MAX_FRAME_BYTES = 4 * 1024 * 1024

# Sees the messages of each received frame at once (a frame carries up to hundreds).
MessagesHandler = Callable[[Iterable[client_pb2.ServerMessage]], None]
LostHandler = Callable[["Connection", AmpsError], None]


def broken_error(error: BaseException) -> AmpsError:
    """Name what happened to a stream: NameInUse when replaced (L6), else ConnectionBroken."""
    if isinstance(error, grpc.aio.AioRpcError):
        details = error.details() or ""
        if error.code() == grpc.StatusCode.ABORTED and "name in use" in details:
            return NameInUse(f"the client name was taken by another connection: {details}")
        return ConnectionBroken(f"{error.code().name}: {details}")
    if isinstance(error, AmpsError):
        return error
    return ConnectionBroken(f"{type(error).__name__}: {error}")


class Connection:
    """A logged-on stream; `on_messages` sees each frame's messages, `on_lost` fires once."""

    def __init__(
        self,
        target: str,
        *,
        flush_interval_s: float,
        max_frame_commands: int,
        on_messages: MessagesHandler,
        on_lost: LostHandler,
    ) -> None:
        self.target = target
        self._flush_interval_s = flush_interval_s
        self.max_frame_commands = max_frame_commands
        self._on_messages = on_messages
        self._on_lost = on_lost
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        # Frame entries of the frame being filled (a publish adds its head and its data), the
        # frames already full, and how many commands all of them hold.
        self._parts: list[bytes] = []
        self._frame_commands = 0
        self._frame_bytes = 0
        self._full_frames: list[list[bytes]] = []
        self._queued = 0
        self._wake = asyncio.Event()
        # While the writer lingers (the flush interval) for more commands: resolved when the
        # interval ends or a frame fills. A future and a timer, not a timeout around an Event:
        # the interval ends on most frames, and a timeout ends by cancelling (an exception).
        self._linger: asyncio.Future[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.lost: AmpsError | None = None
        self._closing = False
        self.frames_sent = 0
        self.frames_received = 0

    async def open(self, logon: client_pb2.Command, timeout_s: float) -> client_pb2.Ack:
        """Open the stream, log on, and return the logon ack (raising its error on failure)."""
        self._channel = grpc.aio.insecure_channel(
            self.target,
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                # Each attempt starts afresh: with gRPC's process-wide subchannel pool a new
                # channel inherits the reconnect backoff of earlier refused attempts (it grows
                # past a minute), on top of the client's own failover policy.
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        # The generated stub's Connect, with frames that arrive here already serialized.
        connect = self._channel.stream_stream(
            CONNECT_METHOD,
            request_serializer=None,
            response_deserializer=client_pb2.ServerFrame.FromString,
        )
        self._call = connect()
        try:
            async with asyncio.timeout(timeout_s):
                await self._call.write(commands.frame_entry(logon))
                ack = await self._read_logon_ack(logon.cmd_id)
        except BaseException as error:
            await self._close_channel()
            if isinstance(error, TimeoutError):
                raise ConnectionBroken(f"{self.target}: no logon ack in {timeout_s} s") from None
            if isinstance(error, grpc.aio.AioRpcError):
                raise broken_error(error) from None
            raise
        if ack.status != "success":
            await self._close_channel()
            raise error_for_code(ack.error_code, ack.reason or "logon failed")
        return ack

    async def _read_logon_ack(self, cmd_id: str) -> client_pb2.Ack:
        # Messages ahead of the logon ack (there should be none) are handed on, not dropped.
        assert self._call is not None
        while True:
            frame = await self._call.read()
            if frame is grpc.aio.EOF:
                raise ConnectionBroken(f"{self.target}: stream ended before the logon ack")
            self.frames_received += 1
            messages: list[client_pb2.ServerMessage] = list(frame.messages)
            for index, message in enumerate(messages):
                if message.WhichOneof("body") == "ack" and message.ack.cmd_id == cmd_id:
                    self._on_messages(messages[:index])
                    return message.ack
            self._on_messages(messages)

    def start(self) -> None:
        """Start the writer and reader once logged on."""
        self._tasks = [
            asyncio.create_task(self._write_loop(), name=f"amps-write-{self.target}"),
            asyncio.create_task(self._read_loop(), name=f"amps-read-{self.target}"),
        ]

    def send(self, command: client_pb2.Command) -> int:
        """Queue one command for the next frame; return how many commands are queued."""
        entry = commands.frame_entry(command)
        self._parts.append(entry)
        return self._queued_one(len(entry))

    def send_entry(self, entry: bytes) -> int:
        """Queue one command already serialized as a frame entry (`commands.*_entry`)."""
        self._parts.append(entry)
        return self._queued_one(len(entry))

    def send_publish(self, topic: str, data: bytes, seq: int) -> int:
        """Queue `publish_command(StoredPublish(seq, topic, data))` without building it."""
        parts = self._parts
        parts += commands.publish_head_parts(topic, len(data), seq)
        parts.append(data)
        # _queued_one, inlined (the publish hot path).
        self._queued += 1
        self._frame_commands += 1
        self._frame_bytes += len(data) + 64
        if self._queued == 1:
            self._wake.set()
        if self._frame_commands >= self.max_frame_commands or self._frame_bytes >= MAX_FRAME_BYTES:
            self._close_frame()
        return self._queued

    def _queued_one(self, size_bytes: int) -> int:
        self._queued += 1
        self._frame_commands += 1
        self._frame_bytes += size_bytes
        if self._queued == 1:
            self._wake.set()
        if self._frame_commands >= self.max_frame_commands or self._frame_bytes >= MAX_FRAME_BYTES:
            self._close_frame()
        return self._queued

    def _close_frame(self) -> None:
        """The frame being filled is full: it goes out at once, without the flush interval."""
        self._full_frames.append(self._parts)
        self._parts = []
        self._frame_commands = 0
        self._frame_bytes = 0
        self._stop_lingering()

    def _stop_lingering(self) -> None:
        linger = self._linger
        if linger is not None and not linger.done():
            linger.set_result(None)

    def _take_frames(self) -> list[bytes]:
        """Every queued command, as serialized ClientFrames."""
        batches = self._full_frames
        if self._parts:
            batches.append(self._parts)
        self._full_frames, self._parts = [], []
        self._frame_commands = self._frame_bytes = self._queued = 0
        return [b"".join(parts) for parts in batches]

    async def _write_loop(self) -> None:
        assert self._call is not None
        try:
            while not (self._closing and not self._queued):
                if not self._queued:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if not self._full_frames and self._flush_interval_s > 0 and not self._closing:
                    await self._wait_flush_interval()
                for frame in self._take_frames():
                    await self._call.write(frame)
                    self.frames_sent += 1
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            self._lose(broken_error(error))

    async def _wait_flush_interval(self) -> None:
        """Until `flush_interval_s` has passed or a frame is full (or the connection closes)."""
        loop = asyncio.get_running_loop()
        linger = self._linger = loop.create_future()
        timer = loop.call_later(self._flush_interval_s, _resolve, linger)
        try:
            await linger
        finally:
            timer.cancel()
            self._linger = None

    async def _read_loop(self) -> None:
        assert self._call is not None
        try:
            while True:
                frame = await self._call.read()
                if frame is grpc.aio.EOF:
                    # A clean end can still carry ABORTED "name in use" (L6).
                    code = await self._call.code()
                    details = await self._call.details()
                    if code == grpc.StatusCode.ABORTED and "name in use" in (details or ""):
                        raise NameInUse(
                            f"the client name was taken by another connection: {details}"
                        )
                    raise ConnectionBroken(f"{self.target}: stream ended ({code.name})")
                self.frames_received += 1
                self._on_messages(frame.messages)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            self._lose(broken_error(error))

    async def run_heartbeat(self, interval_s: float) -> None:
        """Ask for heartbeats, send ours, and break the link after 2 silent intervals (§7.3)."""
        loop = asyncio.get_running_loop()
        self.send(commands.heartbeat_command(f"start,{max(1, round(interval_s))}"))
        interval_ms = int(interval_s * 1000)
        seen = self.frames_received
        seen_ms = int(loop.time() * 1000)
        while self.lost is None:
            await asyncio.sleep(interval_s)
            now_ms = int(loop.time() * 1000)
            if self.frames_received != seen:
                seen, seen_ms = self.frames_received, now_ms
            elif is_link_dead(seen_ms, now_ms, interval_ms):
                self._lose(ConnectionBroken(f"{self.target}: silent for 2 heartbeat intervals"))
                return
            self.send(commands.heartbeat_command("beat"))

    def break_link(self, error: AmpsError) -> None:
        """Declare the stream dead from outside (heartbeat silence)."""
        self._lose(error)

    def _lose(self, error: AmpsError) -> None:
        if self.lost is not None:
            return
        self.lost = error
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        asyncio.get_running_loop().create_task(self._close_channel())
        self._on_lost(self, error)

    async def close(self, grace_s: float = 1.0) -> None:
        """Write what is queued, half-close the stream, give the instance `grace_s` to end it."""
        if self.lost is None and self._tasks:
            writer, reader = self._tasks
            self._closing = True
            self._wake.set()
            self._stop_lingering()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(writer), grace_s)
            if self.lost is None and self._call is not None:
                with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError):
                    await self._call.done_writing()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(reader), grace_s)
        self.lost = self.lost or ConnectionBroken("closed")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_channel()

    async def _close_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close(grace=None)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
