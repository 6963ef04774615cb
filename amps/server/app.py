"""Build an instance from its configuration, start it, stop it; the single `fatal()` exit.

Start order: config -> journal (recovery) -> instance -> gRPC server -> admin HTTP -> ready line.
Stop order is the reverse, with a final journal commit so nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import gc
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import orjson
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from amps import errors
from amps.config import Config
from amps.config.exposure import exposures, open_listeners
from amps.config.model import AuthenticationConfig, TlsConfig
from amps.log.journal import Journal
from amps.security.reload import ReloadableAdminTls, ReloadableServerTls
from amps.server.admin_auth import AdminGuard
from amps.server.admin_http import AdminHttpServer, PrefixRoute
from amps.server.admin_routes import QUEUE_ACTIONS_PATH, QUEUES_PATH, QueueRoutes
from amps.server.client_service import ClientService, add_to_server
from amps.server.fatal import FatalReason, fatal
from amps.server.gc_pauses import GcPauses
from amps.server.instance import Instance
from amps.server.journal_routes import ACTIONS_PREFIX, JOURNALS_PATH, JournalRoutes
from amps.server.transports import TRANSPORT_ACTIONS_PATH, TRANSPORTS_PATH, TransportRoutes
from amps.v1 import client_pb2

if TYPE_CHECKING:
    # Loaded at the first scrape or fsync: nothing before a first delivery needs them.
    from amps.metrics import InstanceSnapshot, Metrics
    from amps.server.auth import Authenticator
    from replication.link import Replicator
    from replication.link_core import LinkCore

log = logging.getLogger("amps.server")
T = TypeVar("T")

# mallopt parameter numbers (glibc malloc.h) and the values we fix them at. Blocks up to a
# replication batch's size (1 MiB and one record: the journal read, the batch's bytes, gRPC's
# copy of them, the peer's received message) come from the heap and are reused; larger ones
# (a queue snapshot's whole-queue columns) are mapped and unmapped. The trim threshold keeps
# a few such blocks at the top of the heap instead of giving each back and faulting it in
# again (256 page faults per MiB).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1280 * 1024
TRIM_THRESHOLD_BYTES = 4 << 20

REPLICATION_PATH = "/amps/instance/replication"
REPLICATION_ACTIONS_PATH = "/amps/administrator/replication/"

# A frame holds many messages; each message is capped separately by MaxMessageSize.
GRPC_MAX_FRAME_BYTES = 64 * 1024 * 1024

# grpc_reflection's SERVICE_NAME, spelled out so that the module loads with the first request.
REFLECTION_SERVICE = "grpc.reflection.v1alpha.ServerReflection"


def _acked_through(core: LinkCore) -> Callable[[], int]:
    """A destination's hold: everything after what it acknowledged (all of it before then)."""
    return lambda: core.acked_through_txid + 1


class LazyReflection:
    """gRPC server reflection (for grpcurl and the like), imported by its first request.

    The same servicer `reflection.enable_server_reflection` installs on an asyncio server;
    importing it (and the descriptor protos it reads) at start would delay the first delivery.
    A generic RPC handler: gRPC calls `service` for a method no other handler registered.
    """

    def __init__(self, service_names: tuple[str, ...]) -> None:
        self._service_names = service_names
        self._handler: grpc.GenericRpcHandler | None = None

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        method: str = getattr(handler_call_details, "method", "")
        if not method.startswith(f"/{REFLECTION_SERVICE}/"):
            return None
        if self._handler is None:
            from grpc_reflection.v1alpha import reflection, reflection_pb2

            servicer = reflection.aio.ReflectionServicer(self._service_names)
            info = grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
            self._handler = grpc.method_handlers_generic_handler(
                REFLECTION_SERVICE, {"ServerReflectionInfo": info}
            )
        return self._handler.service(handler_call_details)


class Server:
    """A running instance: journal, instance state, gRPC and admin HTTP servers."""

    def __init__(self, config: Config, base_directory: Path) -> None:
        self.config = config
        self.base_directory = base_directory
        self.stopped = asyncio.Event()
        self.grpc_port = 0
        self.admin_port = 0
        self._grpc: grpc.aio.Server | None = None
        self._admin: AdminHttpServer | None = None
        self.instance: Instance | None = None
        self.metrics: Metrics | None = None
        self.replicator: Replicator | None = None
        self._gc_pauses: GcPauses | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._authenticators: dict[str, Authenticator] = {}
        # Listeners' certificates that SIGHUP reads again (amps.security.reload).
        self._tls: dict[str, ReloadableServerTls | ReloadableAdminTls] = {}
        self._admin_authenticator: Authenticator | None = None

    def _journal_directory(self) -> Path:
        txlog = self.config.transaction_log
        assert txlog is not None
        directory = Path(txlog.journal_directory)
        return directory if directory.is_absolute() else self.base_directory / directory

    def _open_journal(self) -> Journal:
        txlog = self.config.transaction_log
        assert txlog is not None
        directory = self._journal_directory()
        archive = txlog.journal_archive_directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
            journal = Journal.open(
                directory,
                archive_directory=self.base_directory / archive if archive else None,
                segment_size_bytes=txlog.journal_size_bytes,
                flush_interval_ms=max(1, txlog.flush_interval_us // 1000),
                instance_name=self.config.name,
                group=self.config.group,
            )
            if journal.recovery_note:
                log.warning("journal %s: %s", directory, journal.recovery_note)
            return journal
        except errors.CorruptRecord as exc:
            fatal(FatalReason.JOURNAL_CORRUPT, f"journal {directory}: {exc.message}")
        except (OSError, errors.JournalError) as exc:
            fatal(FatalReason.JOURNAL_IO, f"journal {directory}: {exc}")

    def _authenticator(self, authentication: AuthenticationConfig | None) -> Authenticator | None:
        """The Authenticator of a users file (one per file, shared by the listeners naming it),
        or None without one; a users file that cannot be read stops the start (78)."""
        if authentication is None or authentication.users_file is None:
            return None
        users_file = authentication.users_file
        if users_file not in self._authenticators:
            from amps.server.auth import Authenticator

            try:
                self._authenticators[users_file] = Authenticator(
                    Path(users_file), self._journal_directory()
                )
            except errors.ConfigError as exc:
                fatal(FatalReason.CONFIG_INVALID, exc.message)
        return self._authenticators[users_file]

    def _admin_tls(self, tls: TlsConfig) -> ssl.SSLContext:
        admin_tls = ReloadableAdminTls(tls, "AMPSConfig/Admin")
        self._tls["admin"] = admin_tls
        return admin_tls.context

    def reload_tls(self) -> None:
        """SIGHUP: read every certificate, key and CA file again. A holder whose files are not
        a usable pair keeps the ones in use and says why; the others are replaced."""
        holders: dict[str, Callable[[], None]] = {n: h.reload for n, h in self._tls.items()}
        if self.replicator is not None:
            holders["replication"] = self.replicator.reload_tls
        if not holders:
            log.info("SIGHUP: no TLS listener or destination to reload")
            return
        for name, reload in holders.items():
            try:
                reload()
            except (errors.ConfigError, RuntimeError) as exc:
                log.error("%s certificates not reloaded, the previous ones stay: %s", name, exc)
            else:
                log.info("%s certificates reloaded", name)

    def _check_ports_free(self) -> None:
        """Refuse a port another process listens on before anything is written to disk.

        A second instance started by mistake must not leave a journal directory behind. The
        listeners themselves bind later; this only catches the common mistake early.
        """
        grpc_transport = self.config.grpc_transport
        addresses = [(grpc_transport.inet_addr, "")] if grpc_transport is not None else []
        if self.config.admin is not None and self.config.admin.inet_addr is not None:
            addresses.append((self.config.admin.inet_addr, "admin http "))
        for inet_addr, what in addresses:
            if inet_addr.port == 0:
                continue
            family = socket.AF_INET6 if ":" in inet_addr.host else socket.AF_INET
            try:
                socket.create_server((inet_addr.host, inet_addr.port), family=family).close()
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    address = f"{inet_addr.host}:{inet_addr.port}"
                    fatal(
                        FatalReason.ADDRESS_IN_USE,
                        f"{what}cannot listen on {address}: address in use (another instance?)",
                    )
                # Anything else is reported by the listener itself when it binds.

    async def start(self) -> None:
        if self.config.transaction_log is None:
            fatal(FatalReason.CONFIG_INVALID, "AMPSConfig/TransactionLog is required")
        self._check_ports_free()
        journal = self._open_journal()
        journal.on_fsync = self._observe_fsync
        self.instance = Instance(self.config, journal, self._on_fatal)
        journal.on_commit_hops = self._observe_commit_hops
        self._gc_pauses = GcPauses(self.instance.statistics.hops.gc_pauses)
        self._gc_pauses.install()
        for exposure in exposures(self.config):  # load_config refuses these already
            fatal(FatalReason.CONFIG_INVALID, f"{exposure.path}: {exposure.expected}")
        self.instance.authenticator = self._authenticator(self.config.client_authentication)
        self._admin_authenticator = self._authenticator(self.config.authentication)
        if self.config.client_authentication is not None and self.instance.authenticator is None:
            log.warning(
                "authentication is off (Authentication/Mode none): anyone who can reach "
                "this instance can publish, read and acknowledge anything"
            )
        for listener in open_listeners(self.config):
            log.warning(
                "%s port %s listens beyond loopback with Authentication/Mode none: it is "
                "open to anyone who can reach it",
                listener.kind,
                listener.inet_addr,
            )
        try:
            await self.instance.start(self._journal_directory())
        except errors.CorruptRecord as exc:
            # Queue recovery read through damage: serving queues without those records would
            # redeliver or lose messages, so the instance does not start (the documented 65).
            self.instance.damage.report(exc, "queue recovery")
            fatal(FatalReason.JOURNAL_CORRUPT, f"journal {journal.directory}: {exc.message}")
        # Replication before the client port: a publish accepted with no replication hook yet
        # would be acknowledged as persisted without its sync destinations (L2).
        await self._start_replication()
        await self._start_grpc()
        for transport in self.config.transports:
            if not self.instance.transports.enabled(transport.name):
                log.warning(
                    "transport %s starts disabled (InitialState): client logons are refused "
                    "until `amps admin transport enable %s`",
                    transport.name,
                    transport.name,
                )
        await self._start_admin()
        journal.start_flusher()
        log.info("instance %s ready", self.config.name)
        grpc_addr = self.config.grpc_transport
        assert grpc_addr is not None
        admin = (
            f" admin {'https' if self.config.admin.tls else 'http'}://"
            f"{self.config.admin.inet_addr.host}:{self.admin_port}"
            if (self.config.admin is not None and self.config.admin.inet_addr is not None)
            else ""
        )
        incoming = self.config.replication_transport
        replication = (
            f" replication {incoming.inet_addr.host}:{self.replicator.port}"
            if incoming is not None and self.replicator is not None
            else ""
        )
        # Tests and scripts read this line to learn the ports (port 0 picks free ones).
        print(
            f"amps {self.config.name}: listening on {grpc_addr.inet_addr.host}:{self.grpc_port}"
            f"{admin}{replication} journal {self._journal_directory()} "
            f"last_txid {journal.last_txid}",
            flush=True,
        )
        # `amps server` starts with the cyclic garbage collector off (see amps.cli.server_cmd).
        # What exists once the replicated queues' restores are indexed lives long (modules,
        # the recovered queues: a replicated queue of 500,000 messages holds ~800,000 tracked
        # objects): frozen, the first full pass after the start does not walk it all (0.12 s
        # of CPU at that size), close to the first delivery. Frozen objects are still freed by
        # reference counting. The clients are served meanwhile (Rule 7 of
        # replication/queue_replica.py).
        self.instance.queues.finish_restores(_collect_garbage)

    async def _start_grpc(self) -> None:
        transport = self.config.grpc_transport
        if transport is None:
            fatal(FatalReason.CONFIG_INVALID, "AMPSConfig/Transports: no transport of Type grpc")
        assert self.instance is not None
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", GRPC_MAX_FRAME_BYTES),
                ("grpc.max_send_message_length", GRPC_MAX_FRAME_BYTES),
                ("grpc.so_reuseport", 0),
            ]
        )
        # Registered by hand: Connect yields encoded ServerFrames (bytes), see amps.server.wire.
        add_to_server(ClientService(self.instance), server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        names = (
            client_pb2.DESCRIPTOR.services_by_name["Amps"].full_name,
            health.SERVICE_NAME,
            REFLECTION_SERVICE,
        )
        server.add_generic_rpc_handlers((LazyReflection(names),))
        address = f"{transport.inet_addr.host}:{transport.inet_addr.port}"
        try:
            if transport.tls is None:
                self.grpc_port = server.add_insecure_port(address)
            else:
                server_tls = _tls_or_fatal(
                    lambda tls: ReloadableServerTls(
                        tls, f"AMPSConfig/Transports/Transport[{transport.name}]"
                    ),
                    transport.tls,
                )
                self._tls["client transport"] = server_tls
                self.grpc_port = server.add_secure_port(address, server_tls.credentials())
        except RuntimeError as exc:
            fatal(FatalReason.ADDRESS_IN_USE, f"cannot listen on {address}: {exc}")
        await server.start()
        serving = health_pb2.HealthCheckResponse.SERVING
        await health_servicer.set("", serving)
        # The client service is NOT_SERVING while its transport is disabled (load balancers
        # route elsewhere); the instance itself ("") stays SERVING: it is alive and replicating.
        await health_servicer.set(names[0], self._client_health(transport.name))

        def transport_changed(name: str, _enabled: bool) -> None:
            if name == transport.name:
                status = self._client_health(name)
                self._background(health_servicer.set(names[0], status))

        self.instance.transports.on_change.append(transport_changed)
        self._grpc = server

    def _client_health(self, transport: str) -> health_pb2.HealthCheckResponse.ServingStatus:
        assert self.instance is not None
        if self.instance.transports.enabled(transport):
            return health_pb2.HealthCheckResponse.SERVING
        return health_pb2.HealthCheckResponse.NOT_SERVING

    def _background(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_replication(self) -> None:
        if self.config.replication is None and self.config.replication_transport is None:
            return
        assert self.instance is not None
        from replication.link import Replicator

        replicator = Replicator(self.config, self.instance, self._journal_directory())
        # The journal lifecycle never removes what a destination has not acknowledged (AMPS:
        # "a journal is not removed until every destination has acked its messages").
        for name in replicator.routes:
            self.instance.holds.register(
                f"destination {name}", _acked_through(replicator.cores[name])
            )
        # Hooked in before its server accepts a stream: a peer's batch made durable here is
        # acknowledged from the commit's hook (Replicator.log_advanced).
        self.instance.replicator = replicator
        self.replicator = replicator
        try:
            await replicator.start()
        except errors.ConfigError as exc:  # a TLS file of amps-replication-secure
            fatal(FatalReason.CONFIG_INVALID, exc.message)
        except RuntimeError as exc:
            fatal(FatalReason.ADDRESS_IN_USE, f"replication cannot listen: {exc}")

    async def _start_admin(self) -> None:
        admin = self.config.admin
        if admin is None or admin.inet_addr is None:
            return
        assert self.instance is not None
        queue_manager = self.instance.queues
        queues = QueueRoutes(self.config.name, lambda: queue_manager.drivers)
        replicated = self.config.replication is not None or (
            self.config.replication_transport is not None
        )
        journals = JournalRoutes(self.instance)
        transports = TransportRoutes(self.instance.transports, self._bound_ports)
        authenticator = self._admin_authenticator
        post_prefixes: dict[str, PrefixRoute] = {
            QUEUE_ACTIONS_PATH: queues.act,
            TRANSPORT_ACTIONS_PATH: transports.act,
        }
        if replicated:
            post_prefixes[REPLICATION_ACTIONS_PATH] = self._replication_action
        self._admin = AdminHttpServer(
            {
                "/metrics": lambda: ("text/plain; version=0.0.4", self._metrics().render()),
                "/amps/instance": self._status_json,
                "/amps/instance.json": self._status_json,
                QUEUES_PATH: queues.list_json,
                f"{QUEUES_PATH}.json": queues.list_json,
                "/health": lambda: ("text/plain", b"ok\n"),
                JOURNALS_PATH: journals.list_json,
                f"{JOURNALS_PATH}.json": journals.list_json,
                TRANSPORTS_PATH: transports.list_json,
                f"{TRANSPORTS_PATH}.json": transports.list_json,
            },
            {f"{QUEUES_PATH}/": queues.one_json},
            post_prefixes,
            {ACTIONS_PREFIX: journals.act},
            guard=None if authenticator is None else AdminGuard(authenticator),
        )
        if replicated:
            self._admin.routes[REPLICATION_PATH] = self._replication_json
            self._admin.routes[f"{REPLICATION_PATH}.json"] = self._replication_json
        context = (
            None
            if admin.tls is None
            else _tls_or_fatal(lambda tls: self._admin_tls(tls), admin.tls)
        )
        try:
            self.admin_port = await self._admin.start(
                admin.inet_addr.host, admin.inet_addr.port, ssl=context
            )
        except OSError as exc:
            addr = f"{admin.inet_addr.host}:{admin.inet_addr.port}"
            fatal(FatalReason.ADDRESS_IN_USE, f"admin http cannot listen on {addr}: {exc}")

    def _bound_ports(self) -> dict[str, int]:
        """Transport name -> the port it listens on (port 0 in the config picks a free one)."""
        ports = {}
        if (client := self.config.grpc_transport) is not None:
            ports[client.name] = self.grpc_port
        incoming = self.config.replication_transport
        if incoming is not None and self.replicator is not None:
            ports[incoming.name] = self.replicator.port
        return ports

    def _replication_json(self) -> tuple[str, bytes]:
        body = self.replicator.status() if self.replicator is not None else {}
        return "application/json", orjson.dumps(body, option=orjson.OPT_INDENT_2)

    def _replication_action(self, rest: str) -> tuple[int, str, bytes]:
        if self.replicator is None:
            return 404, "application/json", b'{"error": "replication is not running"}'
        return self.replicator.admin_action(rest)

    def _metrics(self) -> Metrics:
        if self.metrics is None:
            from amps.metrics import Metrics

            self.metrics = Metrics(self.config.name, self.snapshot)
        return self.metrics

    def _observe_commit_hops(self, handoff_ns: int, return_ns: int) -> None:
        if self.instance is not None:
            hops = self.instance.statistics.hops
            hops.journal_handoff.add(handoff_ns)
            hops.journal_return.add(return_ns)

    def _observe_fsync(self, seconds: float) -> None:
        self._metrics().observe_fsync(seconds)

    def _status_json(self) -> tuple[str, bytes]:
        s = self.snapshot()
        body = {
            "name": self.config.name,
            "group": self.config.group,
            "last_txid": s.last_txid,
            "journal_bytes": s.journal_bytes,
            "journal_segments": s.journal_segments,
            "connected_clients": s.connected_clients,
            "subscriptions": s.subscriptions,
            "persisted_acks": s.persisted_acks,
            "duplicates_discarded": s.duplicates,
            "dedup_gaps": s.dedup_gaps,
            "dedup_gaps_forgotten": s.dedup_gaps_forgotten,
            "record_cache_misses": s.record_cache_misses,
            "journal_damaged_records": s.damaged_records,
            "published_by_topic": s.published_by_topic,
            "queue_depths": {q.queue: q.statistics.depth for q in s.queues},
            "hops": self.instance.statistics.hops.as_json() if self.instance else {},
        }
        return "application/json", orjson.dumps(body, option=orjson.OPT_INDENT_2)

    def snapshot(self) -> InstanceSnapshot:
        """Statistics for metrics and the admin JSON."""
        from amps.metrics import InstanceSnapshot, QueueSnapshot

        instance = self.instance
        assert instance is not None
        journal = instance.journal
        stats = instance.statistics
        publishing = instance.publishing.statistics()
        budget = instance.send_budget.statistics()
        lifecycle = instance.lifecycle.statistics
        return InstanceSnapshot(
            node=self.config.name,
            published_by_topic=dict(stats.published_by_topic),
            published_bytes_by_topic=dict(stats.published_bytes_by_topic),
            persisted_acks=publishing.persisted_acks,
            duplicates=publishing.duplicates,
            dedup_gaps=publishing.gaps,
            dedup_gaps_forgotten=publishing.gaps_forgotten,
            delivered=stats.delivered,
            rejected=stats.rejected,
            journal_bytes=journal.bytes_total,
            journal_segments=journal.segment_count,
            last_txid=journal.last_txid,
            fsync_count=journal.fsync_count,
            connected_clients=len(instance.sessions),
            subscriptions=len(instance.subscriptions),
            record_cache_misses=instance.records.misses,
            client_queued_bytes=budget.queued_bytes,
            client_queued_bytes_largest=budget.largest_client_bytes,
            client_queued_bytes_limit=budget.max_bytes,
            client_queued_bytes_client_limit=budget.max_client_bytes,
            slow_consumer_disconnects={
                "client": budget.client_disconnects,
                "instance": budget.instance_disconnects,
            },
            damaged_records=instance.damage.count,
            journal_first_txid=journal.first_txid,
            journal_lifecycle_segments=dict(lifecycle.segments_by_action),
            journal_lifecycle_bytes=dict(lifecycle.bytes_by_action),
            journal_holds={h.holder: h.oldest_needed_txid for h in instance.holds.holds()},
            journal_held_segments=dict(lifecycle.held_segments),
            queues=tuple(
                QueueSnapshot(name, driver.statistics(), driver.ownership_statistics())
                for name, driver in sorted(instance.queues.drivers.items())
            ),
            replication=self.replicator.snapshot() if self.replicator is not None else None,
        )

    def _on_fatal(self, exc: BaseException) -> None:
        if isinstance(exc, errors.CorruptRecord):  # a reader that did not handle the damage
            fatal(FatalReason.JOURNAL_CORRUPT, f"journal read failed: {exc.message}")
        if isinstance(exc, errors.JournalError | OSError):
            fatal(FatalReason.JOURNAL_IO, f"journal write failed: {exc}")
        fatal(FatalReason.INTERNAL, f"{type(exc).__name__}: {exc}")

    async def stop(self) -> None:
        """Graceful stop: refuse new work, commit the journal, close."""
        if self._gc_pauses is not None:
            self._gc_pauses.remove()
        if self._admin is not None:
            await self._admin.stop()
        if self.replicator is not None:
            await self.replicator.stop()
        if self.instance is not None:
            await self.instance.wait_durable()
            await self.instance.stop()
        if self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        if self.instance is not None:
            try:
                await self.instance.journal.close()
            except errors.JournalError as exc:  # records appended at the end, never acked
                fatal(FatalReason.JOURNAL_IO, f"journal commit at stop failed: {exc.message}")
        self.stopped.set()


def _collect_garbage() -> None:
    gc.freeze()
    gc.enable()


async def serve(config: Config, base_directory: Path) -> None:
    """Run an instance until SIGTERM or SIGINT."""
    server = Server(config, base_directory)
    await server.start()
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_requested.set)
    loop.add_signal_handler(signal.SIGHUP, server.reload_tls)
    await stop_requested.wait()
    log.info("stopping instance %s", config.name)
    await server.stop()


def fix_malloc_mmap_threshold() -> None:
    """Keep glibc returning large freed blocks to the system, and reusing batch-sized ones.

    glibc raises its mmap threshold each time a large block is freed, after which blocks of that
    size come from the heap and stay resident when freed. Queue snapshots build and drop column
    copies of the size of the queue, so without a fixed threshold each one would leave its size
    in the resident set. Below it, a replication link's 1 MiB buffers (several per batch, on
    both sides) are reused rather than mapped, faulted in page by page and unmapped each time
    (at 128 KiB, up to 0.8 faults and ~2 us of system time per record caught up). A no-op where
    glibc is not the allocator.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        log.debug("mallopt is not available; leaving the allocator as it is")


def run(config: Config, base_directory: Path) -> None:
    """Blocking entry point used by `amps server`."""
    fix_malloc_mmap_threshold()
    asyncio.run(serve(config, base_directory))


def _tls_or_fatal(build: Callable[[TlsConfig], T], tls: TlsConfig) -> T:
    """Build a listener's TLS context; a missing or bad file stops the start (exit 78)."""
    try:
        return build(tls)
    except errors.ConfigError as exc:
        fatal(FatalReason.CONFIG_INVALID, exc.message)
