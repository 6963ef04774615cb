"""The gRPC adapter of replication: streams, timers and the instance's log around the link
cores (replication/link_core.py). [io]

One `Replicator` per instance. It listens on the amps-replication transport, dials every
destination that has an InetAddr (in priority order, again after `ReconnectTimeout`), and runs
one `LinkCore` per peer over whichever stream is up: one stream per pair. When both sides dial,
the stream dialled by the instance with the smaller Name is kept and the other is refused
(`duplicate_link`); the refused dialler waits while the link is up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import threading
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Sequence
from pathlib import Path
from time import perf_counter_ns, time_ns
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from amps.config.actions import DO_DOWNGRADE, DO_UPGRADE, ON_SCHEDULE, interval_ms
from amps.errors import CorruptRecord
from amps.log.received import ReceivedFrames
from amps.log.records import Record
from amps.security.peers import PeerAllowList
from amps.security.reload import ReloadableChannelTls, ReloadableServerTls
from amps.server.hops import SENDER_STAGES
from amps.v1 import replication_pb2 as pb
from amps.v1 import replication_pb2_grpc as pb_grpc
from replication.admission import Admission
from replication.convert import (
    BadFrame,
    WireBatch,
    decode_link_frame,
    encode_batch,
    from_pb,
    to_pb,
)
from replication.downgrade import sync_decisions
from replication.frames import Ack, Batch, Hello, OriginPosition, Refusal, TransferRequest
from replication.link_core import (
    Action,
    Apply,
    Close,
    Connected,
    Disconnected,
    FrameReceived,
    LinkCore,
    LinkState,
    LinkStatistics,
    LogAdvanced,
    PeerAcked,
    RecordsDurable,
    RequestArrived,
    Send,
    SyncChanged,
)
from replication.origins import OriginHeads, OriginLags
from replication.positions import PositionBook
from replication.reachability import Reachability
from replication.routing import MAX_REQUEST_HOPS, RequestsSeen, Route, route_request
from replication.topology import Topology

if TYPE_CHECKING:
    from amps.config import Config
    from amps.config.model import TlsConfig
    from amps.log.journal import Journal
    from amps.metrics import ReplicationSnapshot
    from amps.server.hops import HopStatistics
    from amps.server.instance import Instance
    from amps.server.record_cache import RecordCache

log = logging.getLogger("amps.replication")

POSITIONS_FILE = "replication-positions.json"
SAVE_INTERVAL_S = 1.0
DEFAULT_RECONNECT_S = 1.0
# A refused link (other than the normal duplicate_link) is dialled again later and later, up
# to this: a refused topology needs an operator, and must not log and dial in a hot loop.
MAX_REFUSED_RECONNECT_S = 60.0
# The journal keeps the frames its links have still to send, up to this much (no re-encoding).
# Under a full-rate publisher a commit holds thousands of records and the links send them only
# once durable, a commit or two behind the appends: 16 MiB kept by append order lost nearly
# every frame before it was sent, and re-encoding them cost the sender ~5 us per record.
KEPT_FRAMES_BYTES = 64 * 1024 * 1024
# Log advances and batches in flight timed per link (hops statistics); older ones are dropped.
MAX_TIMED = 1024
GRPC_MAX_FRAME_BYTES = 64 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", GRPC_MAX_FRAME_BYTES),
    ("grpc.max_send_message_length", GRPC_MAX_FRAME_BYTES),
]


# What a stream writes: a LinkFrame, or a batch's LinkFrame already serialised (encode_batch).
Outgoing = pb.LinkFrame | bytes
_SERVICE = pb.DESCRIPTOR.services_by_name["Replication"].full_name
_LINK_METHOD = "Link"


def _serialize(message: Outgoing) -> bytes:
    """The streams' serializer: bytes pass through (a batch is written once, by encode_batch,
    not built as a protobuf and serialised again); `decode_link_frame` reads them."""
    return message if isinstance(message, bytes) else message.SerializeToString()


class _Stream(Protocol):
    async def read(self) -> object: ...

    def peer_names(self) -> set[str]: ...

    async def write(self, message: Outgoing) -> None: ...


class _Session:
    """One stream attached to a core: its writer queue and generation (stale callbacks)."""

    def __init__(self, core: LinkCore, stream: _Stream, generation: int) -> None:
        self.core = core
        self.stream = stream
        self.generation = generation
        # (frame, the txid a batch ends at or 0, when it was queued) or None: close
        self.outgoing: asyncio.Queue[tuple[Outgoing, int, int] | None] = asyncio.Queue()
        self.closed = asyncio.Event()  # asked to close (or the writer ended)
        self.finished = asyncio.Event()  # detached from its core: the core is IDLE again
        self.timer: asyncio.TimerHandle | None = None
        self.timer_deadline_ms: int | None = None
        self.dialled = False
        # Hop timings (perf_counter_ns): (durable txid, when) of each log advance not yet sent,
        # and (batch through txid, when written) of each batch not yet acknowledged.
        self.advanced: deque[tuple[int, int]] = deque(maxlen=MAX_TIMED)
        self.written: deque[tuple[int, int]] = deque(maxlen=MAX_TIMED)
        # (batch through txid, when its first record was durable here) of each batch sent.
        self.durable: deque[tuple[int, int]] = deque(maxlen=MAX_TIMED)
        # When the latest frame was read (perf_counter_ns, and the wall clock in us for the
        # `arrival` of its records from their origin's timestamps).
        self.read_ns = 0
        self.read_us = 0


class _Dispatched(Protocol):
    """The instance as the links' log view reads it."""

    journal: Journal
    records: RecordCache
    dispatched_txid: int


class _CachedLog:
    """The links' view of the log: recent durable records straight from the instance's record
    cache (publishes, and the queue and transfer records appended here: no read, no decode, the
    usual case for a link that keeps up), the journal else, as the frames it reads
    (`Journal.read_frames`): routed on their heads and shipped as read.

    `frames` holds the journal's latest frames by txid (`Journal.keep_frames`), so a batch of
    records from the cache ships those bytes instead of encoding its records again.
    """

    def __init__(self, instance: _Dispatched) -> None:
        self._instance = instance
        self._journal = instance.journal
        self._records = instance.records.records
        self._others = instance.records.others
        self.frames = (self._journal.frames,)

    @property
    def first_txid(self) -> int:
        return self._journal.first_txid

    @property
    def durable_txid(self) -> int:
        # What the instance has dispatched, not what the journal has made durable: between a
        # commit's fsync and its dispatch the records are durable but not yet in the record
        # cache, and a link stepped then (by a peer's ack) would read them from disk, decoding
        # what the cache holds a moment later. The dispatch steps the links (log_advanced).
        return min(self._instance.dispatched_txid, self._journal.durable_txid)

    def read(self, from_txid: int, max_records: int) -> Sequence[Record]:
        records = self._records
        durable = self.durable_txid
        if from_txid > durable:
            return []
        max_records = min(max_records, durable - from_txid + 1)
        upper = from_txid + max_records - 1
        out: list[Record] = []
        others = self._others
        for txid in range(from_txid, upper + 1):
            record: Record | None = records.get(txid)
            if record is None:
                record = others.get(txid)  # a queue or transfer record appended here
                if record is None:
                    break
            out.append(record)
        if out:
            return out  # a prefix is enough: the caller reads on from its end
        return self._journal.read_frames(from_txid, max_records)


class Replicator:
    """Every replication link of one instance."""

    def __init__(self, config: Config, instance: Instance, directory: Path) -> None:
        self.config = config
        self.instance = instance
        self.local = config.name
        self._tls: list[ReloadableServerTls | ReloadableChannelTls] = []
        # Who may link here: checked on each incoming stream before its link core sees it.
        secure = config.replication_transport is not None and (
            config.replication_transport.type == "amps-replication-secure"
        )
        self.admission = Admission(
            config.name, secure=secure, allowed=PeerAllowList.from_config(config)
        )
        self._positions_path = directory / POSITIONS_FILE
        self._positions_lock = threading.Lock()
        self.book = PositionBook(_load_positions(self._positions_path))
        self._log = _CachedLog(instance)
        self.reachability = Reachability(config.name)
        # R4, routing Rule 5: each request is forwarded and answered here once. Ids start at a
        # random point at every start, so a restart's ids are not taken for copies of old ones.
        self.requests_seen = RequestsSeen()
        self._next_request_id = secrets.randbits(62) + 1
        self.heads = OriginHeads(config.name)
        self.lags = OriginLags(config.name, self.book)
        replication = config.replication
        destinations = replication.destinations if replication is not None else ()
        local_queues = frozenset(q.name for q in config.queues if q.kind == "LocalQueue")
        self.routes = {d.name: Route(config.name, d, local_queues) for d in destinations}
        self.topology = Topology(config.name, config.group, config.queues, destinations)
        if self.routes:
            instance.journal.keep_frames(KEPT_FRAMES_BYTES)
        self.cores: dict[str, LinkCore] = {}
        self._sessions: dict[str, _Session] = {}
        self._generation = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._idle: dict[str, asyncio.Event] = {}
        # Applied batches waiting to be durable here: (local txid they need durable, session,
        # the peer's batch through txid, when read, when appended), oldest first.
        self._awaiting: deque[tuple[int, _Session, int, int, int]] = deque()
        for name in self.routes:
            self._core(name)

    # -- lifecycle ---------------------------------------------------------------------------

    def _credentials(self, tls: TlsConfig | None) -> ReloadableChannelTls | None:
        """This side's certificate and the CA for an amps-replication-secure destination."""
        if tls is None:
            return None
        channel_tls = ReloadableChannelTls(tls)
        self._tls.append(channel_tls)
        return channel_tls

    def reload_tls(self) -> None:
        """Read every replication certificate again (SIGHUP); ConfigError names a bad file and
        leaves the ones in use."""
        for holder in self._tls:
            holder.reload()

    async def start(self) -> None:
        transport = self.config.replication_transport
        if transport is not None:
            server = grpc.aio.server(options=_CHANNEL_OPTIONS)
            servicer = _Servicer(self)
            handlers = {
                _LINK_METHOD: grpc.stream_stream_rpc_method_handler(
                    servicer.Link,
                    request_deserializer=decode_link_frame,
                    response_serializer=_serialize,
                )
            }
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(_SERVICE, handlers),)
            )
            server.add_registered_method_handlers(_SERVICE, handlers)
            address = f"{transport.inet_addr.host}:{transport.inet_addr.port}"
            if transport.tls is None:
                self.port = server.add_insecure_port(address)
            else:
                # Mutual TLS: a peer without a certificate from CAFile cannot even connect.
                path = f"AMPSConfig/Transports/Transport[{transport.name}]"
                server_tls = ReloadableServerTls(transport.tls, path)
                self._tls.append(server_tls)
                self.port = server.add_secure_port(address, server_tls.credentials())
            await server.start()
            self._server = server
        replication = self.config.replication
        for destination in replication.destinations if replication is not None else ():
            # Credentials are built once, here: a bad file stops the start (exit 78).
            addrs = [
                (str(a), self._credentials(t.tls))
                for t in destination.transports
                for a in t.inet_addrs
            ]
            timeouts = [t.reconnect_timeout_ms for t in destination.transports]
            delay_s = next((t / 1000 for t in timeouts if t), DEFAULT_RECONNECT_S)
            if addrs:
                self._spawn(self._dial_loop(destination.name, addrs, delay_s))
        self._spawn(self._save_loop())
        for every_ms, downgrade_ms, upgrade_ms in _sync_schedules(self.config):
            self._spawn(self._schedule_loop(every_ms, downgrade_ms, upgrade_ms))

    async def stop(self) -> None:
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.stop(grace=0.2)
        self.save_positions()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _core(self, peer: str) -> LinkCore:
        core = self.cores.get(peer)
        if core is None:
            core = self.cores[peer] = LinkCore(
                self.local,
                self.config.group,
                self._log,
                self.routes,
                self.book,
                peer,
                reachability=self.reachability,
                topology=self.topology,
                heads=self.heads,
                lags=self.lags,
            )
            self._idle[peer] = asyncio.Event()
            self._idle[peer].set()
        return core

    # -- hooks from the instance ------------------------------------------------------------

    @property
    def forwards(self) -> bool:
        """Whether any destination is configured (links read the record cache)."""
        return bool(self.routes)

    def log_advanced(self) -> None:
        """The local log's durable txid moved: acknowledge the peers' batches it covers, and
        ready links send what is new. Called before the commit's local fan-out, so neither a
        sync origin's persisted acks nor a destination's copy waits for local subscribers."""
        awaiting, durable_txid = self._awaiting, self._log.durable_txid
        self.heads.durable(durable_txid)
        if awaiting and awaiting[0][0] <= durable_txid:
            self._time_stages(durable_txid)
            # One event per link for every batch this commit made durable, so one ack (Rule 5
            # of link_core). A commit covers several when they came while the fsync before it
            # was in flight, which is when the machine is busiest; one gRPC message each way
            # fewer per extra batch then.
            batches_by: dict[_Session, list[tuple[int, int]]] = {}
            durable_hop, now_ns = self._hops.replicated_durable, perf_counter_ns()
            while awaiting and awaiting[0][0] <= durable_txid:
                target, session, through, received_ns, _applied_ns = awaiting.popleft()
                durable_hop.add_us((now_ns - received_ns) // 1000)
                batches_by.setdefault(session, []).append((through, target))
            now_ms = self.instance.now_ms()
            for session, batches in batches_by.items():
                if self._sessions.get(session.core.peer) is not session:
                    continue  # that stream is gone: the next Hello reports what is held
                self._execute(session, session.core.handle(RecordsDurable(tuple(batches)), now_ms))
                self._arm(session)  # a conflated ack's deadline (Rule 5 of link_core)
        durable = (durable_txid, perf_counter_ns())
        for session in list(self._sessions.values()):
            if session.core.state is LinkState.READY and session.core.sends:
                session.advanced.append(durable)
                self._step(session, LogAdvanced())
        now_ms = self.instance.now_ms()
        for peer, core in self.cores.items():
            if core.sends and peer not in self._sessions:
                try:
                    core.handle(LogAdvanced(), now_ms)  # only counts how long it is behind
                except CorruptRecord as exc:  # never into the commit path
                    self._damaged(core, exc, None)

    def sync_acked_txids(self) -> Iterator[int]:
        """L2: how far each sync (not downgraded) destination holds the log (see
        amps.publishing.persisted_through)."""
        for peer, route in self.routes.items():
            core = self.cores[peer]
            if route.sync and not core.downgraded:
                yield core.acked_through_txid

    def set_downgraded(self, peer: str, downgraded: bool, reason: str) -> bool:
        """Downgrade (or upgrade) a sync destination; False when there is no such destination."""
        core = self.cores.get(peer)
        if core is None or not core.sync:
            return False
        actions = core.handle(SyncChanged(downgraded, reason), self.instance.now_ms())
        session = self._sessions.get(peer)
        if session is not None:
            self._execute(session, actions)  # the peer learns its new ack policy (Rule 5)
        log.warning(
            "replication destination %s %s (%s)",
            peer,
            "downgraded to async" if downgraded else "upgraded to sync",
            reason,
        )
        self.instance.release_persisted_acks()
        return True

    def unreachable(
        self, instances: Iterable[str], now_ms: int, interval_ms: int
    ) -> frozenset[str]:
        """R7: of `instances` and the linked peers, those not heard from by any path within
        `interval_ms` (the owners a proxied transfer may act for)."""
        candidates = set(instances) | set(self.cores)
        return self.reachability.unreachable(candidates, now_ms, interval_ms)

    def send_transfer_request(
        self, queue: str, keys: Sequence[tuple[int, int]], owner: str
    ) -> None:
        """R4: ask `owner` for queued messages, in one frame; lost when no link leads there
        (a refusal)."""
        request_id = self._next_request_id
        self._next_request_id += 1
        request = TransferRequest(
            queue, tuple(keys), self.local, owner, MAX_REQUEST_HOPS, request_id
        )
        self._route_request(request, "")

    def _route_request(self, request: TransferRequest, came_from: str) -> None:
        """R4, R9: `route_request` decides (to the owner when it is a ready neighbour, else
        onwards by passthrough); this sends it."""
        sessions = self._sessions
        ready = [p for p, s in sessions.items() if s.core.state is LinkState.READY]
        request, targets = route_request(request, ready, came_from)
        now_ms = self.instance.now_ms()
        for peer in targets:
            session = sessions[peer]
            self._execute(session, session.core.send_request(request, now_ms))

    def _request_arrived(self, request: TransferRequest, came_from: str) -> None:
        if not self.requests_seen.first(request):
            return  # a copy that came by another path: answered and forwarded already
        queues = self.instance.queues
        if request.owner == self.local:
            queues.transfer_requested(request, proxy=False)
            return
        # R7: a proxy may grant for an owner it cannot reach; the request goes on either way.
        queues.transfer_requested(request, proxy=True)
        self._route_request(request, came_from)

    def statistics(self) -> list[LinkStatistics]:
        now_ms = self.instance.now_ms()
        return [self.cores[p].statistics(now_ms) for p in sorted(self.cores)]

    def status(self) -> dict[str, object]:
        """The admin view: destinations, incoming links, per-origin positions, reachability."""
        now_ms = self.instance.now_ms()
        destinations = []
        incoming = []
        for stats in self.statistics():
            route = self.routes.get(stats.peer)
            if route is not None:
                destinations.append(
                    {
                        "name": stats.peer,
                        "group": route.group,
                        "connected": stats.state == LinkState.READY.value,
                        "sync_type": "sync" if route.sync else "async",
                        "downgraded": stats.downgraded,
                        "messages_behind": stats.behind_records,
                        "seconds_behind": stats.oldest_unacked_ms / 1000,
                        "acknowledged_txid": stats.acked_through_txid,
                        "resyncs": stats.resyncs,
                        "sync_changes": stats.sync_changes,
                        "batches_sent": stats.batches_sent,
                        "messages_sent": stats.records_sent,
                        "refused": self._refused(stats.peer),
                    }
                )
            incoming.append(
                {
                    "peer": stats.peer,
                    "connected": stats.state == LinkState.READY.value,
                    "batches_received": stats.batches_received,
                    "messages_received": stats.records_received,
                    "acks_sent": stats.acks_sent,
                    "refused": self._refused(stats.peer),
                }
            )
        # Streams refused before a link core existed for their peer (identity, unknown_peer).
        incoming.extend(
            {
                "peer": peer,
                "connected": False,
                "batches_received": 0,
                "messages_received": 0,
                "acks_sent": 0,
                "refused": self._refused(peer),
            }
            for peer in self.admission.refused
            if peer not in self.cores
        )
        return {
            "instance": self.local,
            "group": self.config.group,
            "destinations": destinations,
            "links": incoming,
            "origins": [
                {
                    "peer": peer,
                    "origin": p.origin,
                    "origin_txid": p.origin_txid,
                    "upstream_txid": p.upstream_txid,
                }
                for peer, p in self.book.entries()
            ],
            "origin_lag": [
                {
                    "origin": lag.origin,
                    "messages_behind": lag.messages_behind,
                    "seconds_behind": lag.seconds_behind,
                    "origin_txid": lag.held_origin_txid,
                }
                for lag in self.lags.read(now_ms)
            ],
            "reachability": [
                {"instance": name, "seconds_since_heard": age_ms / 1000}
                for name, age_ms in self.reachability.table(now_ms)
            ],
        }

    def _refused(self, peer: str) -> dict[str, str] | None:
        """Why the last attempt at this link was refused (either way, by its core or, for an
        incoming stream, by admission), until it is next up; None for the normal duplicate_link
        (both sides dialled)."""
        core = self.cores.get(peer)
        if core is not None and core.state is LinkState.READY:
            return None
        refusal = core.refusal if core is not None else None
        if refusal is None or refusal[0] == "duplicate_link":
            refusal = self.admission.refused.get(peer)
        if refusal is None or refusal[0] == "duplicate_link":
            return None
        return {"code": refusal[0], "message": refusal[1]}

    def snapshot(self) -> ReplicationSnapshot:
        """The metrics view (amps.metrics reads it at a scrape)."""
        from amps.metrics import DestinationSnapshot, ReplicationSnapshot

        now_ms = self.instance.now_ms()
        stats = self.statistics()
        return ReplicationSnapshot(
            destinations=tuple(
                DestinationSnapshot(
                    destination=s.peer,
                    connected=s.state == LinkState.READY.value,
                    sync=s.sync,
                    downgraded=s.downgraded,
                    messages_behind=s.behind_records,
                    seconds_behind=s.oldest_unacked_ms / 1000,
                    acknowledged_txid=s.acked_through_txid,
                    resyncs=s.resyncs,
                    sync_changes=s.sync_changes,
                    messages_sent=s.records_sent,
                    batches_sent=s.batches_sent,
                )
                for s in stats
                if s.sends
            ),
            origins=tuple((peer, p.origin, p.origin_txid) for peer, p in self.book.entries()),
            origin_lag=tuple(
                (lag.origin, lag.messages_behind, lag.seconds_behind)
                for lag in self.lags.read(now_ms)
            ),
            received=tuple((s.peer, s.records_received) for s in stats),
            acks_sent=tuple((s.peer, s.acks_sent) for s in stats),
            heard=tuple((i, age / 1000) for i, age in self.reachability.table(now_ms)),
        )

    def admin_action(self, rest: str) -> tuple[int, str, bytes]:
        """POST /amps/administrator/replication/<destination>/downgrade|upgrade."""
        name, _, verb = rest.rpartition("/")
        if verb not in ("downgrade", "upgrade") or not name:
            body = json.dumps({"error": "expected <destination>/downgrade or /upgrade"})
            return 404, "application/json", body.encode()
        if not self.set_downgraded(name, verb == "downgrade", "administrator"):
            body = json.dumps({"error": f"no sync destination named {name!r}"})
            return 404, "application/json", body.encode()
        core = self.cores[name]
        body = json.dumps({"destination": name, "downgraded": core.downgraded})
        return 200, "application/json", body.encode()

    # -- streams -----------------------------------------------------------------------------

    async def _dial_loop(
        self, peer: str, addrs: list[tuple[str, ReloadableChannelTls | None]], delay_s: float
    ) -> None:
        core = self._core(peer)
        refused = 0  # refusals in a row, each doubling the wait
        while not self._stopping:
            was_refused = False
            for addr, tls in addrs:
                credentials = tls.credentials if tls is not None else None
                if core.state is not LinkState.IDLE:
                    await self._idle[peer].wait()
                    continue
                before = core.refusals
                try:
                    async with _channel(addr, peer, credentials) as ch:
                        link = ch.stream_stream(
                            f"/{_SERVICE}/{_LINK_METHOD}",
                            request_serializer=_serialize,
                            response_deserializer=decode_link_frame,
                        )
                        await self._run(core, link(), dialled=True)
                except (grpc.aio.AioRpcError, OSError) as exc:
                    log.debug("replication to %s at %s: %s", peer, addr, exc)
                refusal = core.refusal
                if core.refusals != before and refusal and refusal[0] != "duplicate_link":
                    was_refused = True
                    break  # another address reaches the same refusing instance
            refused = refused + 1 if was_refused else 0
            await asyncio.sleep(refused_reconnect_s(delay_s, refused))

    async def accept(self, stream: _Stream) -> None:
        """An incoming stream: its first frame must be the dialler's Hello."""
        first = await stream.read()
        if not isinstance(first, (pb.LinkFrame, WireBatch)):
            return
        try:
            hello = from_pb(first)
        except BadFrame:
            return
        if not isinstance(hello, Hello):
            return
        refusal = self.admission.check(hello, stream.peer_names())
        if refusal:
            for action in refusal:
                if isinstance(action, Send):
                    await stream.write(to_pb(action.frame))
                elif isinstance(action, Close):
                    _log_close(hello.instance, action)
            return
        core = self._core(hello.instance)
        existing = self._sessions.get(hello.instance)
        if existing is not None:
            if existing.dialled and self.local < hello.instance:
                # Rule: the stream dialled by the smaller Name stays (both sides agree).
                message = f"{self.local} and {hello.instance}: a link between them is already up"
                await stream.write(to_pb(Refusal("duplicate_link", message)))
                return
            existing.outgoing.put_nowait(None)
            await existing.finished.wait()
        await self._run(core, stream, dialled=False, first=hello)

    async def _run(
        self, core: LinkCore, stream: _Stream, *, dialled: bool, first: Hello | None = None
    ) -> None:
        self._generation += 1
        session = _Session(core, stream, self._generation)
        session.dialled = dialled
        self._sessions[core.peer] = session
        self._idle[core.peer].clear()
        writer = asyncio.ensure_future(self._write_loop(session))
        try:
            self._step(session, Connected(dialled))
            if first is not None:
                self._step(session, FrameReceived(first))
            reader = asyncio.ensure_future(self._read_loop(session))
            _done, _ = await asyncio.wait(
                (reader, writer, asyncio.ensure_future(session.closed.wait())),
                return_when=asyncio.FIRST_COMPLETED,
            )
            reader.cancel()
        finally:
            writer.cancel()
            if session.timer is not None:
                session.timer.cancel()
            if core.state is not LinkState.IDLE:
                if core.state is LinkState.READY:
                    log.info("replication link to %s down", core.peer)
                core.handle(Disconnected("stream ended"), self.instance.now_ms())
            if self._sessions.get(core.peer) is session:
                del self._sessions[core.peer]
            session.closed.set()
            session.finished.set()
            self._idle[core.peer].set()

    async def _read_loop(self, session: _Session) -> None:
        stream = session.stream
        # The next read is posted before a frame is handled, so gRPC takes in the next batch
        # while this one is applied (milliseconds of the loop for 1 MiB), not once asked
        # (docs/benchmarks.md, "Catch-up: the window, the loop and the read posted ahead").
        pending = asyncio.ensure_future(stream.read())
        try:
            while True:
                message = await pending
                session.read_ns, session.read_us = perf_counter_ns(), time_ns() // 1000
                if not isinstance(message, (pb.LinkFrame, WireBatch)):
                    return  # end of stream
                pending = asyncio.ensure_future(stream.read())
                try:
                    frame = from_pb(message)
                except BadFrame as exc:
                    log.warning("replication link to %s: %s", session.core.peer, exc)
                    return
                if isinstance(frame, Ack):
                    self._timed_ack(session, frame.through_txid)
                self._step(session, FrameReceived(frame))
                if session.closed.is_set():
                    return
        finally:
            _discard(pending)

    async def _write_loop(self, session: _Session) -> None:
        queue = session.outgoing
        hops = self._hops
        while True:
            item = await queue.get()
            if item is None:
                session.closed.set()
                return
            message, through, queued_ns = item
            await session.stream.write(message)
            if through:
                written_ns = perf_counter_ns()
                hops.link_write.add(written_ns - queued_ns)
                session.written.append((through, written_ns))
                hops.replicated_send_stages["link"].add_us((written_ns - queued_ns) // 1000)

    def _timed_ack(self, session: _Session, through_txid: int) -> None:
        """Hops: the batches this ack covers, from written, and from durable here, to
        acknowledged."""
        written, durable, now_ns = session.written, session.durable, perf_counter_ns()
        hops = self._hops
        while written and written[0][0] <= through_txid:
            hops.link_ack_wait.add_us((now_ns - written.popleft()[1]) // 1000)
        while durable and durable[0][0] <= through_txid:
            hops.link_acked.add_us((now_ns - durable.popleft()[1]) // 1000)

    def _timed_send(self, session: _Session, batch: Batch) -> None:
        """Hops: from the log advance that made the batch's first record durable to now; and
        from that record's timestamp (accepted here, or at its origin) stage by stage."""
        record = batch.records[0]
        first, first_us = record.txid, record.timestamp_us
        advanced = session.advanced
        while advanced and advanced[0][0] < first:
            advanced.popleft()
        now_ns = perf_counter_ns()
        if advanced:
            durable_ns = advanced[0][1]
            self._hops.link_send_wait.add(now_ns - durable_ns)
            session.durable.append((batch.through_txid, durable_ns))
        stages, now_us = self._hops.replicated_send_stages, time_ns() // 1000
        flush = self.instance.journal.last_flush
        # The flush's instants on the wall clock the record's timestamp is on.
        submitted_us = now_us - (now_ns - flush.submitted_ns) // 1000 if flush else 0
        if flush is None or submitted_us < first_us:
            # Not made durable by the latest flush (a link catching up, or a window that was
            # full): it waited to be sent.
            for name in SENDER_STAGES:
                if name != "link":  # timed when gRPC takes the batch
                    stages[name].add_us(now_us - first_us if name == "dispatch" else 0)
            return
        stages["commit"].add_us(submitted_us - first_us)
        for name, duration_ns in flush.stages_ns(now_ns):
            stages[name].add_us(duration_ns // 1000)

    @property
    def _hops(self) -> HopStatistics:
        return self.instance.statistics.hops

    def _step(self, session: _Session, event: object) -> None:
        core = session.core
        was_ready = core.state is LinkState.READY
        try:
            actions = core.handle(event, self.instance.now_ms())  # type: ignore[arg-type]
        except CorruptRecord as exc:
            self._damaged(core, exc, session)
            return
        if not was_ready and core.state is LinkState.READY:
            # Here, not in the reader: the accepting side steps the dialler's Hello in _run.
            log.info("replication link to %s up", core.peer)
        self._execute(session, actions)
        if core.wants_to_send:
            self._loop.call_soon(self._continue, session)
        self._arm(session)

    def _damaged(self, core: LinkCore, error: CorruptRecord, session: _Session | None) -> None:
        """Catching the peer up met a damaged record: the link cannot send past it (a gap would
        break R10). Reported once (log, metric), and the stream ends; the error must not escape
        into the commit path (log_advanced) or end a reader or timer silently."""
        self.instance.damage.report(error, f"replication to {core.peer}")
        if session is not None:
            session.outgoing.put_nowait(None)

    def _continue(self, session: _Session) -> None:
        if self._sessions.get(session.core.peer) is session:
            self._step(session, LogAdvanced())

    def _execute(self, session: _Session, actions: list[Action]) -> None:
        sent = False
        for action in actions:
            if isinstance(action, Send):
                frame = action.frame
                through = 0
                if isinstance(frame, Batch):
                    self._timed_send(session, frame)
                    through = frame.through_txid
                    sent = True
                message = (
                    encode_batch(frame, *self._log.frames)
                    if isinstance(frame, Batch)
                    else to_pb(frame)
                )
                session.outgoing.put_nowait((message, through, perf_counter_ns()))
            elif isinstance(action, Apply):
                received_ns = session.read_ns or perf_counter_ns()
                self._time_arrival(action.records, session.read_us or time_ns() // 1000)
                first = self.instance.journal.last_txid + 1
                self.instance.append_replicated(action.records)  # wants a commit
                target = self.instance.journal.last_txid
                self.heads.replicated(first, target)
                applied = (target, session, action.through_txid, received_ns, perf_counter_ns())
                self._awaiting.append(applied)
            elif isinstance(action, PeerAcked):
                self.instance.release_persisted_acks()
            elif isinstance(action, RequestArrived):
                self._request_arrived(action.request, session.core.peer)
            elif isinstance(action, Close):
                _log_close(session.core.peer, action)
                session.outgoing.put_nowait(None)
        if sent:
            self._retire_frames()

    def _retire_frames(self) -> None:
        """The journal forgets the frames every destination's link has read past."""
        needed = [core.unsent_from_txid for core in self.cores.values() if core.sends]
        if needed:
            self.instance.journal.drop_frames_before(min(needed))

    def _time_arrival(self, records: Sequence[Record], read_us: int) -> None:
        """Hops: a received batch from its first record's timestamp (at its origin) to read
        here; the sender's stages start at the same instant."""
        if not records:
            return
        if type(records) is ReceivedFrames:
            first_us = records.heads[0][5]
        else:
            first_us = records[0].timestamp_us
        self._hops.replicated_stages["arrival"].add_us(read_us - first_us)

    def _time_stages(self, durable_txid: int) -> None:
        """Hops: each applied batch this commit made durable, stage by stage (read, appended,
        the commit's trip through the journal's writer, back on the loop, now)."""
        flush = self.instance.journal.last_flush
        if flush is None:
            return
        stages, now_ns = self._hops.replicated_stages, perf_counter_ns()
        after_appended = flush.stages_ns(now_ns)
        for target, _session, _through, received_ns, applied_ns in self._awaiting:
            if target > durable_txid:
                break
            stages["apply"].add_us((applied_ns - received_ns) // 1000)
            if applied_ns > flush.submitted_ns:
                # Not in that flush (a batch of copies appended nothing): it waited for this
                # dispatch only.
                stages["commit_wait"].add_us((now_ns - applied_ns) // 1000)
                for name, _duration_ns in after_appended:
                    stages[name].add_us(0)
                continue
            stages["commit_wait"].add_us((flush.submitted_ns - applied_ns) // 1000)
            for name, duration_ns in after_appended:
                stages[name].add_us(duration_ns // 1000)

    def _arm(self, session: _Session) -> None:
        deadline = session.core.next_deadline_ms()
        if session.timer is not None:
            if deadline == session.timer_deadline_ms:
                return  # most steps move no deadline: keep the timer rather than make another
            session.timer.cancel()
            session.timer = None
        session.timer_deadline_ms = deadline
        if deadline is None:
            return
        delay_s = max(0.0, deadline / 1000 - self._loop.time())
        session.timer = self._loop.call_later(delay_s, self._on_timer, session)

    def _on_timer(self, session: _Session) -> None:
        session.timer = None
        if self._sessions.get(session.core.peer) is not session:
            return
        try:
            actions = session.core.on_deadline(self.instance.now_ms())
        except CorruptRecord as exc:
            self._damaged(session.core, exc, session)
            return
        self._execute(session, actions)
        self._arm(session)

    # -- downgrade and upgrade actions -------------------------------------------------------

    async def _schedule_loop(
        self, every_ms: int, downgrade_age_ms: int | None, upgrade_age_ms: int | None
    ) -> None:
        minimum = _min_sync_destinations(self.config)
        while True:
            await asyncio.sleep(every_ms / 1000)
            changes = sync_decisions(
                self.statistics(),
                downgrade_age_ms=downgrade_age_ms,
                upgrade_age_ms=upgrade_age_ms,
                min_sync_destinations=minimum,
            )
            for peer, downgraded in changes:
                verb = "downgrade" if downgraded else "upgrade"
                age = downgrade_age_ms if downgraded else upgrade_age_ms
                self.set_downgraded(
                    peer, downgraded, f"amps-action-do-{verb}-replication Age {age} ms"
                )

    # -- positions ---------------------------------------------------------------------------

    async def _save_loop(self) -> None:
        saved: list[tuple[str, OriginPosition]] = []
        while True:
            await asyncio.sleep(SAVE_INTERVAL_S)
            entries = self.book.entries()
            if entries != saved:  # an idle link writes nothing
                # In a worker thread: the rename waits for the file system's journal, which
                # the commits' fsyncs keep busy, and held the loop (so every link's reads and
                # the clients' frames) 2-14 ms at a time, 121 ms once, at 5,000 msg/s.
                await asyncio.to_thread(self._write_positions, entries)
                saved = entries

    def save_positions(self) -> None:
        """Write the position book (it may lag what is durable: a lag only causes resends)."""
        self._write_positions(self.book.entries())

    def _write_positions(self, entries: list[tuple[str, OriginPosition]]) -> None:
        rows = [[peer, p.origin, p.origin_txid, p.upstream_txid] for peer, p in entries]
        temporary = self._positions_path.with_suffix(".tmp")
        # The last save at stop may come while a cancelled save loop's thread still writes.
        with self._positions_lock:
            try:
                temporary.write_text(json.dumps(rows))
                os.replace(temporary, self._positions_path)
            except OSError as exc:
                log.warning("cannot save replication positions: %s", exc)


def _discard(read: asyncio.Future[object]) -> None:
    """A read posted ahead that nobody will take: cancelled, or its outcome retrieved (a
    stream that broke meanwhile is the end of the link, not an error to log)."""
    if not read.done():
        read.cancel()
    elif not read.cancelled():
        read.exception()


def _log_close(peer: str, close: Close) -> None:
    """One line per closed link; a refusal is an ERROR (an operator must act) except
    duplicate_link, at DEBUG: both sides of a pair dial, so every start of a cluster and every
    reconnect refuses one of the two streams as designed, and the link that stays is logged
    as up; at INFO it read like a fault at normal operation."""
    if not close.refused:
        log.warning("replication link to %s closed: %s", peer, close.reason)
        return
    level = logging.DEBUG if close.code == "duplicate_link" else logging.ERROR
    log.log(level, "replication link to %s refused: %s", peer, close.reason)


def refused_reconnect_s(delay_s: float, refused: int) -> float:
    """The wait before dialling again after `refused` refusals in a row: the destination's
    ReconnectTimeout, doubled per refusal up to MAX_REFUSED_RECONNECT_S."""
    if refused <= 0:
        return delay_s
    doubled: float = delay_s * 2.0 ** min(refused, 16)
    return max(delay_s, min(doubled, MAX_REFUSED_RECONNECT_S))


def _sync_schedules(config: Config) -> list[tuple[int, int | None, int | None]]:
    """(Every, downgrade Age, upgrade Age) in ms of each scheduled replication action."""
    schedules: list[tuple[int, int | None, int | None]] = []
    for action in config.actions:
        every = [interval_ms(on, "Every") for on in action.on if on.module == ON_SCHEDULE]
        down = [interval_ms(do, "Age") for do in action.do if do.module == DO_DOWNGRADE]
        up = [interval_ms(do, "Age") for do in action.do if do.module == DO_UPGRADE]
        if down or up:
            schedules.extend((ms, down[0] if down else None, up[0] if up else None) for ms in every)
    return schedules


def _min_sync_destinations(config: Config) -> int:
    """`Tuning/Replication/MinSyncDestinations` (0 when unset or not a whole number)."""
    tuning = config.reserved_section("Tuning")
    for section in tuning.children if tuning is not None else ():
        if section.tag != "Replication":
            continue
        for item in section.children:
            if item.tag == "MinSyncDestinations" and item.text.strip().isdigit():
                return int(item.text.strip())
    return 0


def _load_positions(path: Path) -> list[tuple[str, OriginPosition]]:
    """The saved book, or nothing when it is missing or unreadable (then peers resend)."""
    try:
        entries = json.loads(path.read_text())
        return [(str(e[0]), OriginPosition(str(e[1]), int(e[2]), int(e[3]))) for e in entries]
    except (OSError, ValueError, TypeError, IndexError):
        return []


class _Servicer(pb_grpc.ReplicationServicer):
    def __init__(self, replicator: Replicator) -> None:
        self._replicator = replicator

    async def Link(
        self, request_iterator: AsyncIterator[pb.LinkFrame], context: grpc.aio.ServicerContext
    ) -> None:
        await self._replicator.accept(_ServerStream(context))


class _ServerStream:
    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    async def read(self) -> object:
        return await self._context.read()

    def peer_names(self) -> set[str]:
        """The names the peer's verified certificate carries (empty without TLS)."""
        auth = self._context.auth_context()
        found = [*auth.get("x509_common_name", []), *auth.get("x509_subject_alternative_name", [])]
        return {name.decode("utf-8", "replace") for name in found}

    async def write(self, message: Outgoing) -> None:
        await self._context.write(message)


def _channel(addr: str, peer: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    """A channel to a destination; over amps-replication-secure the peer's certificate must
    name the destination's Name (checked by gRPC as the TLS host name), and this side presents
    its own certificate."""
    if credentials is None:
        return grpc.aio.insecure_channel(addr, options=_CHANNEL_OPTIONS)
    options = [*_CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", peer)]
    return grpc.aio.secure_channel(addr, credentials, options=options)
