"""One client connection: logon state, the commands it sends, and what it is owed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from amps import errors
from amps.server.convert import failure_ack, grpc_status_for, requested, success_ack
from amps.server.outbox import Outbox
from amps.server.send_budget import SendBudget
from amps.server.wire import message_entry
from amps.v1 import client_pb2 as pb

if TYPE_CHECKING:
    from amps.expr import Filter
    from amps.security.users import Entitlements
    from amps.server.topics import TopicMatcher

log = logging.getLogger("amps.session")


@dataclass(eq=False, slots=True)
class Subscription:
    """One pub/sub (or bookmark replay) subscription of a session."""

    session: Session
    sub_id: str
    topic: TopicMatcher
    filter: Filter | None
    # A replaying subscription receives nothing live until its cursor has caught up (L7).
    live: bool = True
    delivered: int = 0
    cancel_replay: Callable[[], object] | None = field(default=None, repr=False)
    # Subscribe options `origin` (deliveries, replayed and live, name their origin; the
    # completed ack names each origin's position) and `positions_only` (nothing delivered).
    origin: bool = False
    positions_only: bool = False
    only_origin: bytes | None = None  # `only_origin=NAME`: replay that origin's publishes only


class Session:
    """Per-connection state; commands are decoded here and carried out by the Instance.
    `on_end` runs once the connection was cut (the instance's `disconnected`)."""

    def __init__(
        self, send_budget: SendBudget, peer: str, on_end: Callable[[Session], None]
    ) -> None:
        self.peer = peer
        self._on_end = on_end
        self.outbox = Outbox(send_budget, peer)
        self.client_name = ""
        self.user_id = ""
        # What the authenticated user may do; None when the instance has no authentication.
        self.entitlements: Entitlements | None = None
        self.publisher_id = 0
        self.logged_on = False
        self.gone = False  # Instance.disconnected ran
        self.subscriptions: dict[str, Subscription] = {}
        # sub_id -> queue name, for queue subscriptions (they live in the queue engines)
        self.queue_subscriptions: dict[str, str] = {}
        # Unique per connection: leases belong to a connection, not to a client name (Q6).
        self.client_id = ""
        self.heartbeat_task: asyncio.Task[None] | None = None
        self.last_receive_monotonic = 0.0
        # The last moment this instance was known to be answering the client (a flush waiting
        # for the disk, an answer queued): the client waiting for it is not idle (IdleTimeout).
        self.last_answer_monotonic = 0.0
        self._next_sub_id = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run a task on behalf of this session; kept referenced until it ends."""
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.last_answer_monotonic = task.get_loop().time()

    @property
    def answering(self) -> bool:
        """Whether this instance still owes the client an answer: a task run for it (a flush
        waiting for the disk) or messages it has not handed to gRPC yet."""
        return bool(self._tasks) or len(self.outbox) > 0

    async def wait_tasks(self) -> None:
        """Wait for the tasks run on behalf of this session (flush acks) to finish."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self.heartbeat_task is not None:
            self.heartbeat_task.cancel()

    def send(self, message: pb.ServerMessage) -> None:
        """Queue any ServerMessage (acks, group markers, heartbeats)."""
        self.outbox.put(message_entry(message))

    def send_entry(self, entry: bytes) -> None:
        """Queue an already encoded frame entry (deliveries, see amps.server.wire)."""
        self.outbox.put(entry)

    def send_entries(self, entries: list[bytes]) -> None:
        """Queue encoded frame entries, in order."""
        self.outbox.put_many(entries)

    def send_chunk(self, chunk: bytes, count: int) -> None:
        """Queue `count` encoded frame entries joined into one bytes (see Outbox.put_chunk)."""
        self.outbox.put_chunk(chunk, count)

    def fail(self, error: errors.AmpsError, command: pb.Command, *, seq: int = 0) -> None:
        """Answer a command with a failed ack; the connection stays up."""
        ack_type = command.ack_type.split(",")[0].strip() or "processed"
        sub_id = command.subscribe.sub_id if command.WhichOneof("body") == "subscribe" else ""
        self.send(
            failure_ack(error, cmd_id=command.cmd_id, ack_type=ack_type, seq=seq, sub_id=sub_id)
        )

    def processed(self, command: pb.Command, **fields: object) -> None:
        """Send a `processed` success ack if the command asked for one."""
        if requested(command.ack_type, "processed"):
            self.send(success_ack(cmd_id=command.cmd_id, ack_type="processed", **fields))

    def new_sub_id(self) -> str:
        self._next_sub_id += 1
        return f"{self._next_sub_id}"

    def end_soon(self) -> None:
        """End the session's leases and subscriptions on the next loop turn (it was cut)."""
        asyncio.get_running_loop().call_soon(self._on_end, self)

    def kick(self, error: errors.AmpsError) -> None:
        """Disconnect this session with a status a client can read, its reason also sent as the
        stream's last message (`Disconnect`: grpc.aio may report INTERNAL instead of the status
        when the client's next write meets the stream's end, grpc/grpc#36066)."""
        if self.outbox.closed:
            return
        reason = f"{error.reason}: {error.message}"
        log.info("client %s disconnected: %s", self.outbox.name or self.peer, reason)
        self.send(pb.ServerMessage(disconnect=pb.Disconnect(reason=reason, error_code=error.code)))
        self.outbox.close((grpc_status_for(error).value[0], reason))

    def abort_code(self) -> tuple[grpc.StatusCode, str] | None:
        if self.outbox.close_reason is None:
            return None
        value, details = self.outbox.close_reason
        code = next(c for c in grpc.StatusCode if c.value[0] == value)
        return code, details
