"""The client gRPC servicer: frames in, commands decoded, frames out. No queue logic here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from time import perf_counter_ns

import grpc

from amps import errors
from amps.config.model import ClientLimits
from amps.log.bookmarks import parse_bookmark_spec
from amps.server.convert import grpc_status_for, requested, success_ack
from amps.server.instance import Instance, now_us
from amps.server.replay import replay
from amps.server.session import Session, Subscription
from amps.server.topics import EntitledTopic, is_regex, topic_matcher
from amps.v1 import client_pb2 as pb
from amps.v1 import client_pb2_grpc

log = logging.getLogger("amps.client_service")

Handler = Callable[[Session, pb.Command], None]

SERVICE_NAME = "amps.v1.Amps"

# Words accepted for the special bookmarks, besides their AMPS forms `0` and `0|1|`.
BOOKMARK_ALIASES = {"epoch": "0", "now": "0|1|"}


class ClientService(client_pb2_grpc.AmpsServicer):
    """Implements amps.v1.Amps/Connect: one bidirectional stream per client connection."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        transport = instance.config.grpc_transport
        self.limits = transport.limits if transport is not None else ClientLimits()
        self._handlers: dict[str, Handler] = {
            "logon": self._on_logon,
            "subscribe": self._on_subscribe,
            "unsubscribe": self._on_unsubscribe,
            "flush": self._on_flush,
            "heartbeat": self._on_heartbeat,
            "sow_delete": self._on_sow_delete,
            "sow": self._on_sow,
        }

    async def Connect(
        self, request_iterator: AsyncIterator[pb.ClientFrame], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Yields encoded ServerFrames (bytes); see add_to_server."""
        if len(self.instance.sessions) >= self.limits.max_connections:
            # S5: refused before any state is kept; UNAVAILABLE, so clients fail over.
            self.instance.statistics.rejected += 1
            refusal = errors.TooManyConnections(
                f"this transport holds its MaxConnections ({self.limits.max_connections}) "
                "connections; try again later or another instance"
            )
            await context.abort(grpc_status_for(refusal), f"{refusal.reason}: {refusal.message}")
        session = Session(self.instance.send_budget, context.peer(), self.instance.disconnected)
        session.outbox.hops = self.instance.statistics.hops
        self.instance.sessions.add(session)
        session.last_receive_monotonic = asyncio.get_running_loop().time()
        reader = asyncio.create_task(self._read(session, request_iterator))
        watchdog = asyncio.create_task(
            _watch_timeouts(session, self.limits, self.instance.publishing.owes)
        )
        # A slow consumer's leases and subscriptions end as soon as it is cut, not when gRPC gets
        # to write the status behind frames the client may never read (grpc.aio cannot reset
        # one stream; a cancelled handler would leave the client waiting without any status).
        session.outbox.on_cut = session.end_soon
        try:
            async for frame in session.outbox.frames():
                yield frame
            abort = session.abort_code()
            if abort is not None:
                await context.abort(abort[0], abort[1])
        finally:
            reader.cancel()
            watchdog.cancel()
            self.instance.disconnected(session)

    async def _read(self, session: Session, frames: AsyncIterator[pb.ClientFrame]) -> None:
        try:
            handling = self.instance.statistics.hops.frame_handling
            async for frame in frames:
                started_ns = perf_counter_ns()
                session.last_receive_monotonic = asyncio.get_running_loop().time()
                self._on_frame(session, frame)
                handling.add(perf_counter_ns() - started_ns)
            # The client half-closed: it may still be owed persisted acks for its last frames.
            await self.instance.wait_durable()
            await session.wait_tasks()
        except asyncio.CancelledError:
            raise
        except (grpc.aio.AioRpcError, grpc.aio.AbortError):
            pass
        except Exception:
            log.exception("connection %s: reading failed", session.peer)
        finally:
            session.outbox.close()

    def _on_frame(self, session: Session, frame: pb.ClientFrame) -> None:
        stamp = now_us()
        high_seq = -1
        publish = self.instance.publish
        handlers = self._handlers
        for command in frame.commands:
            kind = command.WhichOneof("body")
            if kind == "publish" and session.logged_on:
                # The fast path (runs of publishes): no handler look-up.
                try:
                    seq = publish(session, command, stamp)
                except errors.AmpsError as error:
                    self.instance.statistics.rejected += 1
                    session.fail(error, command, seq=command.publish.seq)
                    continue
                if seq > high_seq:
                    high_seq = seq
                continue
            try:
                if kind is None:
                    raise errors.UnknownCommand("the command has no body this instance knows")
                if kind != "logon" and not session.logged_on:
                    raise errors.LogonRequired("logon must be the first command")
                if kind == "publish":
                    high_seq = max(high_seq, publish(session, command, stamp))
                else:
                    handlers[kind](session, command)
            except errors.AmpsError as error:
                if isinstance(error, errors.CorruptRecord):  # e.g. a bookmark lookup
                    self.instance.damage.report(error, f"a {kind} command")
                self.instance.statistics.rejected += 1
                seq = command.publish.seq if kind == "publish" else 0
                session.fail(error, command, seq=seq)
        if high_seq >= 0:
            self.instance.expect_persisted_ack(session, high_seq)

    def _on_logon(self, session: Session, command: pb.Command) -> None:
        logon = command.logon
        try:
            self.instance.transports.check_logon(self.instance.client_transport)
        except errors.TransportDisabled as error:
            # Refused before any password check; the connection ends with UNAVAILABLE so a
            # client with other addresses fails over (seed 004: recover without client access).
            self.instance.statistics.rejected += 1
            session.fail(error, command)
            session.kick(error)
            return
        authenticator = self.instance.authenticator
        if authenticator is None:
            self.instance.logon(session, logon.client_name, logon.user_id)
            self._logged_on(session, command)
            return
        # The password check runs in a thread: the commands that follow in this frame are
        # refused (logon must be acknowledged first), which is what clients wait for anyway.
        self.instance.check_client_name(logon.client_name)
        session.spawn(self._authenticate(session, command))

    async def _authenticate(self, session: Session, command: pb.Command) -> None:
        authenticator = self.instance.authenticator
        assert authenticator is not None
        logon = command.logon
        try:
            entitlements = await authenticator.authenticate(
                session.peer, logon.user_id, logon.password
            )
            if session.outbox.closed:
                return
            session.entitlements = entitlements
            self.instance.logon(session, logon.client_name, logon.user_id)
        except errors.AmpsError as error:
            self.instance.statistics.rejected += 1
            session.fail(error, command)
            if isinstance(error, errors.AuthenticationFailed):
                session.outbox.close()  # S7: no second try on the same connection
            return
        self._logged_on(session, command)

    def _logged_on(self, session: Session, command: pb.Command) -> None:
        seq = self.instance.publishing.acked_seq(session)
        session.send(
            success_ack(
                cmd_id=command.cmd_id,
                ack_type="processed",
                seq=seq,
                bookmark=f"{session.publisher_id}|{seq}|",
                client_name=session.client_name,
                version=self.instance.version,
            )
        )

    def _on_subscribe(self, session: Session, command: pb.Command) -> None:
        request = command.subscribe
        sub_id = request.sub_id or command.cmd_id or session.new_sub_id()
        queues = self.instance.queues
        entitlements = session.entitlements
        if entitlements is not None and not is_regex(request.topic):
            _require_read(session, request.topic)
        held = len(session.subscriptions) + len(session.queue_subscriptions)
        limit = self.limits.max_subscriptions_per_client
        if held >= limit and sub_id not in session.subscriptions:
            raise errors.LimitExceeded(
                f"MaxSubscriptionsPerClient {limit}",
                f"this connection already holds {held} subscriptions; unsubscribe first",
            )
        if not request.bookmark and request.topic in queues:
            # Q2, Q4: a subscription to a queue's name without a bookmark is a queue subscription.
            queues.subscribe(session, command, sub_id)
            return
        options = [option.strip() for option in request.options.split(",")]
        replace = "replace" in options
        if sub_id in session.subscriptions and not replace:
            raise errors.InvalidOptions(f"subscription {sub_id!r} already exists")
        topic = request.topic
        if request.topic in queues:
            # L7: a bookmark subscription to a queue replays its underlying topic as pub/sub.
            topic = queues.drivers[request.topic].config.underlying_topic
        matcher = topic_matcher(topic)
        if entitlements is not None and is_regex(topic):
            # S2: a regex subscription receives only the topics its user may read.
            matcher = EntitledTopic(matcher, entitlements.can_read)
        compiled = self.instance.compile_filter(request.filter) if request.filter else None
        start_txid = None
        if request.bookmark:
            if not is_regex(topic) and not self.instance.records_topic(topic):
                raise errors.InvalidTopic(
                    f"topic {topic!r} is not recorded in the transaction log: nothing to replay"
                )
            text = BOOKMARK_ALIASES.get(request.bookmark.strip().lower(), request.bookmark)
            start_txid = self.instance.journal.find_start(parse_bookmark_spec(text))
            after = _after_txid(options)
            if after is not None:
                start_txid = max(start_txid, after + 1)
        only_origin = _only_origin(options)
        if (POSITIONS_ONLY in options or only_origin) and start_txid is None:
            raise errors.InvalidOptions(
                "subscribe options positions_only and only_origin replay: give a bookmark"
            )
        if sub_id in session.subscriptions:
            self.instance.remove_subscription(session.subscriptions[sub_id])
        subscription = Subscription(session, sub_id, matcher, compiled)
        subscription.live = start_txid is None
        subscription.positions_only = POSITIONS_ONLY in options
        subscription.only_origin = only_origin
        subscription.origin = ORIGIN in options or subscription.positions_only or bool(only_origin)
        session.subscriptions[sub_id] = subscription
        self.instance.subscriptions.add(subscription)
        session.send(success_ack(cmd_id=command.cmd_id, ack_type="processed", sub_id=sub_id))
        if start_txid is not None:
            task = asyncio.create_task(replay(self.instance, subscription, start_txid))
            subscription.cancel_replay = task.cancel

    def _on_unsubscribe(self, session: Session, command: pb.Command) -> None:
        wanted = command.unsubscribe.sub_id
        ids = list(session.subscriptions) if wanted == "all" else wanted.split(",")
        if wanted == "all":
            ids.extend(session.queue_subscriptions)
        for sub_id in ids:
            if self.instance.queues.unsubscribe(session, sub_id.strip()):
                continue
            subscription = session.subscriptions.get(sub_id.strip())
            if subscription is None:
                raise errors.InvalidOptions(f"no subscription {sub_id!r}")
            self.instance.remove_subscription(subscription)
        session.processed(command)

    def _on_flush(self, session: Session, command: pb.Command) -> None:
        async def flush_callback() -> None:
            await self.instance.wait_durable()
            ack_type = "persisted" if requested(command.ack_type, "persisted") else "processed"
            session.send(success_ack(cmd_id=command.cmd_id, ack_type=ack_type))

        session.spawn(flush_callback())

    def _on_heartbeat(self, session: Session, command: pb.Command) -> None:
        options = command.heartbeat.options
        if options == "beat":
            return
        if not options.startswith("start,"):
            raise errors.InvalidOptions(f"heartbeat options {options!r}: expected start,<seconds>")
        try:
            interval_s = float(options.split(",", 1)[1])
        except ValueError:
            raise errors.InvalidOptions(f"bad heartbeat interval in {options!r}") from None
        if not 0 < interval_s <= 3600:
            raise errors.InvalidOptions("heartbeat interval must be in (0, 3600] seconds")
        if session.heartbeat_task is not None:
            session.heartbeat_task.cancel()
        session.heartbeat_task = asyncio.create_task(_heartbeat(session, interval_s))
        session.processed(command)

    def _on_sow_delete(self, session: Session, command: pb.Command) -> None:
        # Q18: read on a queue entitles to acknowledging its messages.
        _require_read(session, command.sow_delete.topic)
        bookmarks = command.sow_delete.bookmark
        limit = self.limits.max_bookmarks_per_ack
        if bookmarks and bookmarks.count(",") >= limit:
            raise errors.LimitExceeded(
                f"MaxBookmarksPerAck {limit}",
                f"a sow_delete names {bookmarks.count(',') + 1} bookmarks; send them in batches",
            )
        self.instance.sow_delete(session, command)

    def _on_sow(self, session: Session, command: pb.Command) -> None:
        _require_read(session, command.sow.topic)
        self.instance.sow(session, command)


def _require_read(session: Session, topic: str) -> None:
    entitlements = session.entitlements
    if entitlements is not None and not entitlements.can_read(topic):
        raise errors.NotEntitled(f"user {session.user_id!r} may not read {topic!r}")


def add_to_server(service: ClientService, server: grpc.aio.Server) -> None:
    """Register `/amps.v1.Amps/Connect`: ClientFrame requests, already encoded ServerFrames out.

    Replaces the generated add_AmpsServicer_to_server: same service and method names, so
    clients, reflection and health checks see no difference; only the response serializer is
    the identity, because Connect yields bytes (see amps.server.wire).
    """
    handlers = {
        "Connect": grpc.stream_stream_rpc_method_handler(
            service.Connect,
            request_deserializer=pb.ClientFrame.FromString,
            response_serializer=_frame_bytes,
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def _frame_bytes(frame: bytes) -> bytes:
    return frame


async def _watch_timeouts(
    session: Session, limits: ClientLimits, owes_persisted_ack: Callable[[Session], bool]
) -> None:
    """S5: close a connection not logged on within LogonTimeout, and one with no subscription
    that sent nothing for IdleTimeout (0 = never) while owed nothing: the time this instance
    takes to answer (a flush or a persisted ack behind a slow disk) is not the client's
    silence."""
    loop = asyncio.get_running_loop()
    logon_s = limits.logon_timeout_ms / 1000
    deadline = loop.time() + logon_s
    # Looked at ten times within LogonTimeout, so that the idle watch starts soon after the
    # logon (an IdleTimeout shorter than LogonTimeout holds).
    while not session.logged_on:
        now = loop.time()
        if now >= deadline:
            session.kick(
                errors.LogonRequired(f"no logon within {limits.logon_timeout_ms} ms (LogonTimeout)")
            )
            return
        await asyncio.sleep(min(logon_s / 10, deadline - now))
    idle_s = limits.idle_timeout_ms / 1000
    while idle_s > 0 and not session.outbox.closed:
        now = loop.time()
        if session.answering or owes_persisted_ack(session):  # the client waits for us
            session.last_answer_monotonic = now
            await asyncio.sleep(idle_s / 10)
            continue
        silent_s = now - max(session.last_receive_monotonic, session.last_answer_monotonic)
        if silent_s >= idle_s and not (session.subscriptions or session.queue_subscriptions):
            session.kick(
                errors.ConnectionBroken(
                    f"no command and no subscription for {limits.idle_timeout_ms} ms (IdleTimeout)"
                )
            )
            return
        await asyncio.sleep(max(idle_s - silent_s, idle_s / 10))


async def _heartbeat(session: Session, interval_s: float) -> None:
    """Send a beat every interval; two silent intervals from the client end the connection."""
    loop = asyncio.get_running_loop()
    while not session.outbox.closed:
        await asyncio.sleep(interval_s)
        if loop.time() - session.last_receive_monotonic > 2 * interval_s:
            session.kick(errors.ConnectionBroken("no heartbeat from the client for 2 intervals"))
            return
        session.send(pb.ServerMessage(heartbeat=pb.Heartbeat(options="beat")))


AFTER_TXID = "after_txid="
# origin: deliveries (replayed and live) carry origin_instance/origin_txid, the completed ack
# each origin's position; positions_only: a replay that delivers nothing, then ends;
# only_origin=NAME: one origin's publishes, replayed and live (docs/guide/spark.md).
ORIGIN = "origin"
POSITIONS_ONLY = "positions_only"
ONLY_ORIGIN = "only_origin="


def _only_origin(options: list[str]) -> bytes | None:
    """The `only_origin=NAME` subscribe option: a replay of that origin instance's publishes."""
    for option in options:
        if option.startswith(ONLY_ORIGIN):
            name = option[len(ONLY_ORIGIN) :]
            if not name:
                raise errors.InvalidOptions("subscribe option only_origin=NAME: no name given")
            return name.encode()
    return None


def _after_txid(options: list[str]) -> int | None:
    """The `after_txid=N` subscribe option: a replay starts after local txid N at the earliest
    (how the Spark source resumes exactly at a log position; docs/guide/spark.md)."""
    for option in options:
        if option.startswith(AFTER_TXID):
            text = option[len(AFTER_TXID) :]
            if not (text.isascii() and text.isdigit() and len(text) <= 19):
                raise errors.InvalidOptions(f"subscribe option {option!r}: expected after_txid=N")
            return int(text)
    return None
