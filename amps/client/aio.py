"""The asyncio client: logon, batched publishing with a publish store, subscriptions, queue acks.

Decisions (backoff, failover order, store bookkeeping, ack batches) live in `policy.py`; this
module only moves bytes, owns the futures and re-arms timers. A reconnect logs on again,
discards what the logon ack says is persisted, republishes the rest with the same sequence
numbers and re-enters the subscriptions (D3, §7.3).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Coroutine, Iterable, Sequence
from random import Random
from types import TracebackType
from typing import Any, Literal

from amps.client import commands
from amps.client.acks import QueueAcker
from amps.client.bookmarks import BookmarkStore, FileBookmarkStore
from amps.client.connection import Connection
from amps.client.message import ClientStatistics, Message, PublishFailure, Subscription
from amps.client.policy import ExponentialBackoff, PublishStore, ServerRotation, parse_servers
from amps.client.publisher import Publisher
from amps.client.subscriptions import SubscriptionRegistry, subscribe_command
from amps.errors import AmpsError, ConnectionBroken, ConnectionClosed, NameInUse, error_for_code
from amps.security.tls import grpc_channel_credentials
from amps.v1 import client_pb2

State = Literal["new", "connected", "reconnecting", "failed", "closed"]
# How often a resubscription refused for a missing bookmark is tried again.
RESUME_RETRY_S = 0.1


class Client:
    """One named client connection (with automatic reconnect and failover when `reconnect`)."""

    def __init__(
        self,
        name: str,
        *,
        user: str = "",
        password: str = "",
        tls_ca: str | os.PathLike[str] | None = None,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        publish_store_max_messages: int = 100_000,
        publish_store_max_bytes: int = 256 * 1024 * 1024,
        flush_interval_ms: float = 0.0,
        max_frame_commands: int = 500,
        reconnect: bool = True,
        max_reconnect_delay_s: float = 20.0,
        ack_batch_size: int | None = None,
        ack_timeout_ms: int = 1000,
        auto_ack: bool = False,
        heartbeat_interval_s: float | None = None,
        logon_timeout_s: float = 10.0,
        resume_timeout_s: float = 30.0,
        publish_failed_callback: Callable[[PublishFailure], None] | None = None,
        connection_lost_callback: Callable[[str, AmpsError], None] | None = None,
        bookmark_store: BookmarkStore | str | os.PathLike[str] | None = None,
        random: Random | None = None,
    ) -> None:
        assert name, "a client name is required (sequence numbers are kept per name, L4)"
        self.name = name
        self._cmd_ids = itertools.count(1)
        self._user = user
        self._password = password
        # TLS when given the CA to trust (and a client certificate when the transport asks).
        self._credentials = (
            None if tls_ca is None else grpc_channel_credentials(tls_ca, tls_cert, tls_key)
        )
        self._flush_interval_s = flush_interval_ms / 1000.0
        self._max_frame_commands = max_frame_commands
        self._reconnect = reconnect
        self._auto_ack = auto_ack
        self._heartbeat_interval_s = heartbeat_interval_s
        self._logon_timeout_s = logon_timeout_s
        store = PublishStore(
            max_messages=publish_store_max_messages, max_bytes=publish_store_max_bytes
        )
        self._publisher = Publisher(store, publish_failed_callback)
        # Told (server, why) of each lost connection the client reconnects from; a loss it does
        # not recover from is raised by the calls instead.
        self._connection_lost_callback = connection_lost_callback
        self._acks = QueueAcker(
            batch_size=ack_batch_size, timeout_ms=ack_timeout_ms, next_cmd_id=self._cmd_id
        )
        if bookmark_store is None:
            bookmark_store = BookmarkStore()
        elif not isinstance(bookmark_store, BookmarkStore):
            bookmark_store = FileBookmarkStore(bookmark_store)
        self.bookmark_store = bookmark_store
        self._backoff = ExponentialBackoff(
            random or Random(), max_delay_ms=int(max_reconnect_delay_s * 1000)
        )
        self._rotation: ServerRotation | None = None
        self._state: State = "new"
        self._fatal: AmpsError | None = None
        self._conn: Connection | None = None
        self._connected = asyncio.Event()
        self._sub_ids = itertools.count(1)
        self._pending: dict[str, asyncio.Future[client_pb2.Ack]] = {}
        self._subs = SubscriptionRegistry(
            self, retry_resume=self._retry_resume, resumed=self._resumed
        )
        self._resume_timeout_s = resume_timeout_s
        # sub_id -> loop time of the first refused resumption (its bookmark not there yet)
        self._resume_refused: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._reconnect_count = 0
        self._frames = [0, 0]

    # --- Connecting ----------------------------------------------------------------------------

    async def connect(self, uri: str | Sequence[str], *, timeout_s: float | None = 10.0) -> None:
        """Connect and log on to the first reachable server, retrying until `timeout_s`."""
        self._check_open()
        assert self._state == "new", "connect() once per client"
        self._rotation = ServerRotation(parse_servers(uri))
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        try:
            await self._connect_loop(deadline)
        except AmpsError as error:
            self._fail(error)
            raise

    async def _connect_loop(self, deadline: float | None) -> None:
        assert self._rotation is not None
        loop = asyncio.get_running_loop()
        attempts = 0
        while True:
            target = self._rotation.current
            remaining = self._logon_timeout_s if deadline is None else deadline - loop.time()
            try:
                await self._attempt(target, max(0.05, min(self._logon_timeout_s, remaining)))
            except AmpsError as error:
                if not error.retriable:
                    raise
                attempts += 1
                round_failed = self._rotation.report_failure()
                delay_s = self._backoff.next_delay_ms() / 1000.0 if round_failed else 0.0
                out_of_time = deadline is not None and loop.time() + delay_s > deadline
                if out_of_time or (not self._reconnect and attempts >= self._server_count()):
                    raise ConnectionBroken(f"could not connect to {target}: {error}") from None
                await asyncio.sleep(delay_s)
                self._check_open()
            else:
                self._rotation.report_success()
                self._backoff.reset()
                return

    def _server_count(self) -> int:
        return 1 if self._rotation is None else self._rotation.count

    async def _attempt(self, target: str, timeout_s: float) -> None:
        conn = Connection(
            target,
            flush_interval_s=self._flush_interval_s,
            max_frame_commands=self._max_frame_commands,
            on_messages=self._on_messages,
            on_lost=self._on_lost,
            credentials=self._credentials,
        )
        logon = commands.logon_command(self._cmd_id(), self.name, self._user, self._password)
        ack = await conn.open(logon, timeout_s)
        if self._state == "closed":
            await conn.close()
            raise ConnectionClosed("closed while connecting")
        # No await from here on: republishing, resubscribing and accepting new publishes must
        # happen in this order on the new stream.
        self._on_logged_on(conn, ack)

    def _on_logged_on(self, conn: Connection, ack: client_pb2.Ack) -> None:
        self._conn = conn
        self._publisher.on_logon(conn, ack.seq)
        # Kept queue acks before the queue subscriptions: no new lease for an acked message.
        self._acks.on_logon(conn)
        for command in self._subs.resubscribe_commands(self._cmd_id):
            conn.send(command)
        conn.start()
        if self._heartbeat_interval_s:
            self._spawn(conn.run_heartbeat(self._heartbeat_interval_s))
        self._state = "connected"
        self._connected.set()

    def _on_lost(self, conn: Connection, error: AmpsError) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        self._connected.clear()
        self._frames[0] += conn.frames_sent
        self._frames[1] += conn.frames_received
        self._fail_pending(error)
        # Acks not yet confirmed are kept and sent again after the logon (on this or the next
        # instance); the leases themselves died with the stream (§7.2, Q6).
        self._acks.on_connection_lost()
        self._subs.on_connection_lost()
        self._resume_refused.clear()  # each new stream gets the whole resume_timeout_s
        if self._state == "closed":
            return
        if isinstance(error, NameInUse) or not self._reconnect:
            self._fail(error)
            return
        if self._connection_lost_callback is not None:
            self._connection_lost_callback(conn.target, error)
        self._state = "reconnecting"
        self._reconnect_count += 1
        self._spawn(self._reconnect_loop())

    def _retry_resume(self, sub: Subscription, error: AmpsError) -> bool:
        """The instance lacks the bookmark a subscription resumes from: a replica that has not
        received that message yet. Ask again every RESUME_RETRY_S until `resume_timeout_s`."""
        loop = asyncio.get_running_loop()
        first = self._resume_refused.setdefault(sub.sub_id, loop.time())
        conn = self._conn
        if conn is None or loop.time() - first >= self._resume_timeout_s:
            self._resume_refused.pop(sub.sub_id, None)
            return False
        loop.call_later(RESUME_RETRY_S, self._resume_again, sub, conn)
        return True

    def _resume_again(self, sub: Subscription, conn: Connection) -> None:
        # After a new logon the resubscription went out with the others already.
        if conn is self._conn and self._subs.get(sub.sub_id) is sub:
            conn.send(self._subs.resubscribe_command(sub, self._cmd_id))

    def _resumed(self, sub: Subscription) -> None:
        self._resume_refused.pop(sub.sub_id, None)

    async def _reconnect_loop(self) -> None:
        try:
            await self._connect_loop(None)
        except AmpsError as error:
            if self._state != "closed":
                self._fail(error)

    async def wait_connected(self, timeout_s: float | None = None) -> None:
        """Wait until logged on (after connect or a reconnect); raise if the client failed."""
        async with asyncio.timeout(timeout_s):
            while self._conn is None:
                self._check_open()
                await self._connected.wait()

    # --- Publishing ----------------------------------------------------------------------------

    async def publish(self, topic: str, data: bytes | str, *, seq: int | None = None) -> int:
        """Buffer one publish (persisted later, see `flush`); return its sequence number."""
        publisher = self._publisher
        if not publisher.store.has_room():
            await publisher.wait_room(self._check_usable)
        if self._fatal is not None or self._state == "new" or self._state == "closed":
            self._check_usable()
        stored, pause = publisher.publish_nowait(self._conn, topic, data, seq)
        if pause:
            await asyncio.sleep(0)
        return stored

    async def flush(self, timeout_s: float | None = None) -> None:
        """Wait until everything published so far is persisted; raise the first rejection."""
        self._check_usable()
        if self._conn is not None:
            self._conn.send(commands.flush_command(self._cmd_id()))
        await self._publisher.wait_persisted(timeout_s)

    async def ping(self, timeout_s: float | None = 10.0) -> float:
        """One round trip to the instance (a flush command); return it in milliseconds."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with asyncio.timeout(timeout_s):
            await self._request(commands.flush_command(self._cmd_id()))
        return (loop.time() - start) * 1000.0

    # --- Subscribing ---------------------------------------------------------------------------

    async def subscribe(
        self,
        topic: str,
        *,
        bookmark: str | None = None,
        filter: str | None = None,
        max_backlog: int | None = None,
        sub_id: str | None = None,
        options: str = "",
    ) -> Subscription:
        """Subscribe (live, bookmark replay, or queue) and return the message iterator.

        `bookmark="recent"` starts after the last bookmark the bookmark store holds for `sub_id`
        (epoch when it holds none)."""
        self._check_usable()
        sub_id = sub_id or f"{self.name}-sub-{next(self._sub_ids)}"
        bookmark = self.bookmark_store.resolve(sub_id, bookmark)
        sub = Subscription(
            self,
            sub_id=sub_id,
            topic=topic,
            filter=filter or "",
            bookmark=bookmark,
            options=options,
            max_backlog=max_backlog,
            auto_ack=self._auto_ack,
            bookmark_store=self.bookmark_store,
        )
        self._subs.add(sub)
        try:
            ack = await self._request(subscribe_command(self._cmd_id(), sub, bookmark))
        except BaseException:
            self._subs.remove(sub_id)
            raise
        if ack.status != "success":
            self._subs.remove(sub_id)
            raise error_for_code(ack.error_code, ack.reason or "subscribe failed")
        self._subs.on_subscribed(sub, ack)
        return sub

    async def unsubscribe(self, sub_id: str) -> None:
        """Stop a subscription; its iterator ends after the messages already received."""
        sub = self._subs.remove(sub_id)
        if sub is None:
            return
        sub.record_bookmark()
        leftover = sub.take_auto_ack()
        if leftover is not None:
            await leftover.ack()
        sub.end()
        if self._conn is not None:
            await self._request(commands.unsubscribe_command(self._cmd_id(), sub_id))

    # --- Queue acks, sow -----------------------------------------------------------------------

    async def ack_message(
        self, message: Message, *, cancel: bool = False, expire: bool = False
    ) -> None:
        """Acknowledge one queue message: plain acks are batched per topic, cancel/expire not."""
        self._ack_nowait(message, cancel=cancel, expire=expire)

    def _ack_nowait(self, message: Message, cancel: bool = False, expire: bool = False) -> None:
        """`ack_message` without a coroutine (it never waits): what `Message.ack` calls."""
        if self._state == "closed" or self._fatal is not None:
            self._check_open()
        conn = self._conn
        if cancel or expire:
            self._acks.send_now(
                conn, message.topic, message.bookmark, "cancel" if cancel else "expire"
            )
            return
        sub = self._subs.get(message.sub_id)
        granted = sub.granted_max_backlog if sub is not None else None
        self._acks.ack(conn, message.topic, message.bookmark, granted)

    async def flush_acks(self) -> None:
        """Send every pending queue ack now."""
        self._acks.flush(self._conn)

    async def sow(self, topic: str, filter: str | None = None) -> list[Message]:
        """Query the current contents of a SOW topic or queue (Q19)."""
        self._check_usable()
        cmd_id = self._cmd_id()
        self._subs.start_query(cmd_id)
        try:
            ack = await self._request(commands.sow_command(cmd_id, topic, filter or ""))
        finally:
            results = self._subs.finish_query(cmd_id)
        if ack.status != "success":
            raise error_for_code(ack.error_code, ack.reason or "sow failed")
        return results

    async def sow_delete(
        self,
        topic: str,
        *,
        bookmark: str | None = None,
        filter: str | None = None,
        cancel: bool = False,
        expire: bool = False,
    ) -> int:
        """Delete (or acknowledge queue messages) by bookmarks or filter; return how many."""
        self._check_usable()
        assert not (cancel and expire), "cancel or expire, not both"
        options = "cancel" if cancel else "expire" if expire else ""
        command = commands.sow_delete_command(
            self._cmd_id(), topic, bookmark=bookmark or "", filter=filter or "", options=options
        )
        ack = await self._request(command)
        if ack.status != "success":
            raise error_for_code(ack.error_code, ack.reason or "sow_delete failed")
        return ack.records_deleted

    # --- Incoming messages ---------------------------------------------------------------------

    def _on_messages(self, messages: Iterable[client_pb2.ServerMessage]) -> None:
        for message in self._subs.on_messages(messages):
            if message.HasField("ack"):
                self._on_ack(message.ack)
        # GroupBegin/GroupEnd frame a sow result whose end the processed ack also marks, and any
        # frame at all (heartbeats included) counts as a sign of life for the heartbeat check.

    def _on_ack(self, ack: client_pb2.Ack) -> None:
        if ack.ack_type == "persisted":
            self._publisher.on_persisted(ack)
        elif self._acks.on_ack(ack.cmd_id):
            return
        elif not self._subs.on_ack(ack):
            future = self._pending.pop(ack.cmd_id, None)
            if future is not None and not future.done():
                future.set_result(ack)

    # --- Closing, failing, statistics ----------------------------------------------------------

    async def close(self) -> None:
        """Send pending queue acks and close; later operations raise ConnectionClosed."""
        if self._state == "closed":
            return
        for sub in self._subs:
            sub.record_bookmark()
            leftover = sub.take_auto_ack()
            if leftover is not None and self._conn is not None:
                await leftover.ack()
        self._acks.flush(self._conn)
        self._acks.cancel_timer()
        self.bookmark_store.close()
        self._state = "closed"
        conn, self._conn = self._conn, None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._end_everything(ConnectionClosed("the client was closed"), end_subscriptions=True)
        if conn is not None:
            self._frames[0] += conn.frames_sent
            self._frames[1] += conn.frames_received
            await conn.close()

    def _fail(self, error: AmpsError) -> None:
        """A non-retriable loss (NameInUse, logon refused, reconnect off): stop and surface it."""
        if self._state in ("failed", "closed"):
            return
        self._state = "failed"
        self._fatal = error
        self._end_everything(error, end_subscriptions=True)

    def _end_everything(self, error: AmpsError, *, end_subscriptions: bool) -> None:
        self._connected.set()
        self._fail_pending(error)
        self._publisher.fail(error)
        if end_subscriptions:
            self._subs.end_all(None if isinstance(error, ConnectionClosed) else error)

    def _fail_pending(self, error: AmpsError) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    def statistics(self) -> ClientStatistics:
        """A snapshot of the client's counters and its publish store."""
        conn = self._conn
        publisher = self._publisher
        live = (conn.frames_sent, conn.frames_received) if conn is not None else (0, 0)
        return ClientStatistics(
            frames_sent=self._frames[0] + live[0],
            frames_received=self._frames[1] + live[1],
            published=publisher.published_count,
            persisted=publisher.persisted_count,
            republished=publisher.republished_count,
            rejected=publisher.rejected_count,
            reconnects=self._reconnect_count,
            unpersisted_count=len(publisher.store),
            unpersisted_bytes=publisher.store.size_bytes,
            last_seq=publisher.store.last_seq,
            persisted_seq=publisher.store.persisted_seq,
            connected_server=conn.target if conn is not None else None,
            delivered=self._subs.delivered_count,
            acks_sent=self._acks.sent_count,
        )

    # --- Helpers -------------------------------------------------------------------------------

    async def _request(self, command: client_pb2.Command) -> client_pb2.Ack:
        """Send a command that requests a processed ack (waiting through a reconnect)."""
        await self.wait_connected()
        conn = self._conn
        assert conn is not None
        future: asyncio.Future[client_pb2.Ack] = asyncio.get_running_loop().create_future()
        self._pending[command.cmd_id] = future
        conn.send(command)
        try:
            return await future
        finally:
            self._pending.pop(command.cmd_id, None)

    def _check_open(self) -> None:
        if self._state == "closed":
            raise ConnectionClosed("the client was closed")
        if self._fatal is not None:
            raise self._fatal

    def _check_usable(self) -> None:
        self._check_open()
        if self._state == "new":
            raise ConnectionBroken("not connected: call connect() first")

    def _cmd_id(self) -> str:
        return str(next(self._cmd_ids))

    def _now_ms(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


__all__ = ["Client", "ClientStatistics", "Message", "PublishFailure", "Subscription"]
