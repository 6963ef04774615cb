"""One gRPC stream to one instance: batched writes, a reader loop, and the logon handshake.

Commands are queued with `send()` (or `send_publish()`) and written by one writer task under the
rule of `amps.batching`: a frame leaves at once when no write is in flight, and what is queued
during a write rides the next frame (at most `max_frame_commands` commands, MAX_FRAME_BYTES), so
an idle connection never waits on a timer and a burst travels in few frames. A positive
`flush_interval_s` additionally holds a partly filled frame that long (opt-in; default 0).
Commands are serialized when queued and frames are joined from those bytes
(`commands.frame_entry`, `commands.publish_head`): the stream's request serializer is the
identity, and a publish never becomes a protobuf object on this side.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterable

import grpc
import grpc.aio

from amps.batching import Coalescer, FrameLimits
from amps.client import commands
from amps.client.policy import is_link_dead
from amps.errors import AmpsError, ConnectionBroken, NameInUse, error_for_code
from amps.v1 import client_pb2

CONNECT_METHOD = "/amps.v1.Amps/Connect"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A frame stays well under the gRPC message limit even with large payloads.
MAX_FRAME_BYTES = 4 * 1024 * 1024
# How long a failed write waits for the reader to name the loss: the reader ends at once when
# the stream has ended (it is then done), so this bounds only a stream that is still up.
READ_GRACE_S = 1.0

# Sees the messages of each received frame at once (a frame carries up to hundreds).
MessagesHandler = Callable[[Iterable[client_pb2.ServerMessage]], None]
LostHandler = Callable[["Connection", AmpsError], None]


def closed_by_instance(disconnect: client_pb2.Disconnect) -> AmpsError:
    """The instance's own reason for ending the stream, as the error class it names."""
    return error_for_code(disconnect.error_code, f"closed by the instance: {disconnect.reason}")


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
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.target = target
        self._credentials = credentials
        self._flush_interval_s = flush_interval_s
        self.max_frame_commands = max_frame_commands
        self._on_messages = on_messages
        self._on_lost = on_lost
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        # Where frames end and when the next is written; the bytes of each queued frame are
        # kept here (the last list is the frame being filled; a publish adds head and data).
        self._coalescer = Coalescer(
            FrameLimits(max_frame_commands, MAX_FRAME_BYTES), linger_ms=flush_interval_s * 1000
        )
        self._parts: list[bytes] = []
        self._frames: deque[list[bytes]] = deque([self._parts])
        self._wake = asyncio.Event()
        # While the writer lingers (a positive flush interval): resolved when the interval ends,
        # a frame fills or the connection closes. A future and a timer, not a timeout around an
        # Event: a timeout ends by cancelling (an exception).
        self._linger: asyncio.Future[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.lost: AmpsError | None = None
        # Why the instance ended the stream, from its last message (`Disconnect`): preferred to
        # what gRPC reports, which can be INTERNAL when a write met the end (grpc/grpc#36066).
        self.closed_by: AmpsError | None = None
        self._closing = False
        self.frames_sent = 0
        self.frames_received = 0

    async def open(self, logon: client_pb2.Command, timeout_s: float) -> client_pb2.Ack:
        """Open the stream, log on, and return the logon ack (raising its error on failure)."""
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # Each attempt starts afresh: with gRPC's process-wide subchannel pool a new
            # channel inherits the reconnect backoff of earlier refused attempts (it grows
            # past a minute), on top of the client's own failover policy.
            ("grpc.use_local_subchannel_pool", 1),
        ]
        self._channel = (
            grpc.aio.insecure_channel(self.target, options=options)
            if self._credentials is None
            else grpc.aio.secure_channel(self.target, self._credentials, options=options)
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
                body = message.WhichOneof("body")
                if body == "ack" and message.ack.cmd_id == cmd_id:
                    self._on_messages(messages[:index])
                    return message.ack
                if body == "disconnect":  # e.g. LogonTimeout passed on a slow logon
                    self._on_messages(messages[:index])
                    raise closed_by_instance(message.disconnect)
            self._on_messages(messages)

    def start(self) -> None:
        """Start the writer and reader once logged on."""
        self._tasks = [
            asyncio.create_task(self._write_loop(), name=f"amps-write-{self.target}"),
            asyncio.create_task(self._read_loop(), name=f"amps-read-{self.target}"),
        ]

    def send(self, command: client_pb2.Command) -> int:
        """Queue one command for the next frame; return how many commands are queued."""
        return self.send_entry(commands.frame_entry(command))

    def send_entry(self, entry: bytes) -> int:
        """Queue one command already serialized as a frame entry (`commands.*_entry`)."""
        core = self._coalescer
        if core.add(1, len(entry)):
            self._next_frame()
        self._parts.append(entry)
        if core.queued_messages == 1:
            self._wake.set()
        return core.queued_messages

    def send_publish(self, topic: str, data: bytes, seq: int) -> int:
        """Queue `publish_command(StoredPublish(seq, topic, data))` without building it."""
        core = self._coalescer
        if core.add(1, len(data) + 64):
            self._next_frame()
        parts = self._parts
        parts += commands.publish_head_parts(topic, len(data), seq)
        parts.append(data)
        queued = core.queued_messages
        if queued == 1:
            self._wake.set()
        return queued

    def _next_frame(self) -> None:
        """The frame being filled is full: later commands go to a new one; it leaves at once."""
        self._parts = []
        self._frames.append(self._parts)
        linger = self._linger
        if linger is not None and not linger.done():
            linger.set_result(None)

    @property
    def queued_commands(self) -> int:
        """Commands queued and not yet handed to gRPC."""
        return self._coalescer.queued_messages

    def _take_frame(self) -> bytes:
        """The oldest queued frame, serialized (the core counts it in flight)."""
        self._coalescer.take_frame()
        frames = self._frames
        parts = frames.popleft()
        if not frames:
            self._parts = []
            frames.append(self._parts)
        return b"".join(parts)

    def _take_frames(self) -> list[bytes]:
        """Every queued frame, as the writer would send them with each write completing at once
        (for looking at the frames without a stream)."""
        frames = []
        while self._coalescer.queued_messages:
            frames.append(self._take_frame())
            self._coalescer.sent()
        return frames

    async def _write_loop(self) -> None:
        assert self._call is not None
        call = self._call
        core = self._coalescer
        loop = asyncio.get_running_loop()
        lingering = core.linger_ms > 0
        try:
            while True:
                now_ms = loop.time() * 1000 if lingering else 0.0
                send_ms = core.next_send_ms(now_ms)
                if send_ms is None:
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if send_ms > now_ms and not self._closing:
                    await self._wait_linger((send_ms - now_ms) / 1000)
                    continue
                frame = self._take_frame()
                try:
                    await call.write(frame)
                finally:
                    core.sent()
                self.frames_sent += 1
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            await self._write_failed(broken_error(error))

    async def _write_failed(self, error: AmpsError) -> None:
        """A failed write says little (INTERNAL or "RPC already finished" when the instance
        ended the stream meanwhile): the reader, which reads the instance's last messages and
        the stream's status, names the loss; `error` only if it has not within READ_GRACE_S."""
        reader = self._tasks[1] if len(self._tasks) == 2 else None
        if reader is not None and not reader.done():
            await asyncio.wait({reader}, timeout=READ_GRACE_S)
        self._lose(self.closed_by or error)

    async def _wait_linger(self, delay_s: float) -> None:
        """Until `delay_s` has passed or a frame is full (or the connection closes)."""
        loop = asyncio.get_running_loop()
        linger = self._linger = loop.create_future()
        timer = loop.call_later(delay_s, _resolve, linger)
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
                messages = frame.messages
                # A `Disconnect` is the last message of the last frame: one look per frame.
                if messages and messages[-1].HasField("disconnect"):
                    self.closed_by = closed_by_instance(messages[-1].disconnect)
                self._on_messages(messages)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            self._lose(self.closed_by or broken_error(error))

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
            if self._linger is not None and not self._linger.done():
                self._linger.set_result(None)
            # asyncio.wait, not wait_for: the reader may lose the link meanwhile and cancel
            # the writer, which must not surface as a CancelledError from close().
            await asyncio.wait({writer}, timeout=grace_s)
            if self.lost is None and self._call is not None:
                with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError):
                    await self._call.done_writing()
                await asyncio.wait({reader}, timeout=grace_s)
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
