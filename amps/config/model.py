"""The configuration as frozen, slotted dataclasses; field units are in the names (`_ms`, `_us`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from amps.config.topics import is_regex, topic_matches

# The <SOW> elements a queue is declared with; the replication core speaks the same words.
QueueKind = Literal["Queue", "LocalQueue", "GroupLocalQueue"]
MessageType = Literal["json", "binary"]
TransportType = Literal["grpc", "amps-replication", "amps-replication-secure"]
ReplicationType = Literal["amps-replication", "amps-replication-secure"]
REPLICATION_TYPES = ("amps-replication", "amps-replication-secure")
Semantics = Literal["at-least-once", "at-most-once"]
FairnessModel = Literal["fast", "round-robin", "proportional"]
Leasing = Literal["strict", "sublet"]
ExpirationModel = Literal["default", "queue", "latest", "earliest"]
SyncType = Literal["sync", "async"]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
DAY_MS = 86_400_000
# R4: how long a replicated message waits before a non-owner asks for it, until replicated acks
# give the estimator samples; how long an unanswered transfer request stands (refusal is silence).
DEFAULT_TRANSFER_LATENCY_MS = 250
DEFAULT_TRANSFER_REQUEST_TIMEOUT_MS = 1_000


@dataclass(frozen=True, slots=True)
class InetAddr:
    """A listening or connecting address; a bare port means host 127.0.0.1."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS on a listener: `Certificate` and `PrivateKey` (PEM), `CAFile`, `VerifyClient`."""

    certificate: str
    private_key: str
    ca_file: str | None = None
    verify_client: bool = False


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """`Admin`: the HTTP admin and statistics endpoint (no InetAddr = statistics only)."""

    inet_addr: InetAddr | None
    file_name: str = ":memory:"
    interval_ms: int = 10_000
    tls: TlsConfig | None = None


@dataclass(frozen=True, slots=True)
class AuthenticationConfig:
    """`Authentication`: where the users are (`UsersFile`), or `Mode none` to run without (S1)."""

    users_file: str | None = None
    mode: Literal["users", "none"] = "users"


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """What one client transport allows its clients (S5); every bound has a safe default.

    A connection past MaxConnections is refused (retriable: clients fail over); a subscription
    past MaxSubscriptionsPerClient or an ack naming more than MaxBookmarksPerAck bookmarks gets
    a failed ack; a connection not logged on within LogonTimeout, or logged on without any
    subscription and silent for IdleTimeout (0 = never), is closed."""

    max_connections: int = 1_000
    max_subscriptions_per_client: int = 1_000
    max_bookmarks_per_ack: int = 10_000
    logon_timeout_ms: int = 10_000
    idle_timeout_ms: int = 3_600_000


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """`Transports/Transport`: a listener for clients (grpc) or for incoming replication."""

    name: str
    type: TransportType
    inet_addr: InetAddr
    max_message_size_bytes: int = MIB
    tls: TlsConfig | None = None
    # `InitialState`: a client transport that starts disabled refuses logons until an
    # administrator enables it (seed 004's runbook: recover an instance without client access).
    initially_enabled: bool = True
    # grpc only: overrides the instance's `Authentication` for this transport's clients.
    authentication: AuthenticationConfig | None = None
    # Incoming replication only: instances and groups allowed to link here besides the
    # destinations (amps.security.peers).
    allowed_instances: tuple[str, ...] = ()
    allowed_groups: tuple[str, ...] = ()
    limits: ClientLimits = ClientLimits()


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """`TransactionLog/Topic`: a literal name or regex whose messages are recorded."""

    name: str
    message_type: MessageType

    @property
    def is_regex(self) -> bool:
        return is_regex(self.name)

    def matches(self, topic: str) -> bool:
        """Whether this entry records the concrete `topic`."""
        return topic_matches(self.name, topic)


@dataclass(frozen=True, slots=True)
class TransactionLogConfig:
    """`TransactionLog`: where and how messages are journaled, and which topics are recorded."""

    journal_directory: str
    topics: tuple[TopicConfig, ...] = ()
    journal_size_bytes: int = GIB
    flush_interval_us: int = 100_000
    preallocated_journal_files: int = 2
    journal_archive_directory: str | None = None

    def topic_for(self, topic: str) -> TopicConfig | None:
        """The entry recording `topic`: a literal entry beats a regex; regexes in file order."""
        for entry in self.topics:
            if not entry.is_regex and entry.name == topic:
                return entry
        return next((e for e in self.topics if e.is_regex and e.matches(topic)), None)

    def records_topic(self, topic: str) -> bool:
        """Whether messages published to the concrete `topic` are recorded."""
        return self.topic_for(topic) is not None

    def message_type_for(self, topic: str) -> str | None:
        """The message type `topic` is recorded with, or None when it is not recorded."""
        entry = self.topic_for(topic)
        return None if entry is None else entry.message_type


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """`SOW/Queue`, `SOW/LocalQueue`, `SOW/GroupLocalQueue`: one queue and its policy."""

    name: str
    kind: QueueKind
    message_type: MessageType
    underlying_topic: str
    default_publish_target: str
    semantics: Semantics = "at-least-once"
    lease_period_ms: int | None = None
    expiration_ms: int | None = None
    expiration_model: ExpirationModel = "default"
    max_backlog: int | None = None
    max_per_subscription_backlog: int = 1
    max_cancels: int = 0
    max_deliveries: int = 0
    fairness_model: FairnessModel = "proportional"
    leasing: Leasing = "sublet"
    priority: str | None = None
    barrier_expression: str | None = None
    target_queue_depth: int | None = None
    filter: str | None = None
    recovery_point: str = "epoch"
    file_backed_metadata: bool = False
    deferred_ack_expiration_ms: int = DAY_MS
    initial_owner: str | None = None
    group_local_queue_domain: str | None = None
    # R4: a replicated queue's transfer timing (not AMPS elements; AMPS does not publish its own).
    default_transfer_latency_ms: int = DEFAULT_TRANSFER_LATENCY_MS
    transfer_request_timeout_ms: int = DEFAULT_TRANSFER_REQUEST_TIMEOUT_MS

    @property
    def underlying_is_regex(self) -> bool:
        return is_regex(self.underlying_topic)

    def matches_underlying(self, topic: str) -> bool:
        """Whether a message published to the concrete `topic` enters this queue (before Filter)."""
        return topic_matches(self.underlying_topic, topic)


@dataclass(frozen=True, slots=True)
class ActionStep:
    """One `On` or `Do` of an action: the module and its options in file order."""

    module: str
    options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def option(self, name: str) -> str | None:
        return self.options.get(name)


@dataclass(frozen=True, slots=True)
class ActionConfig:
    """`Actions/Action`: when any `On` fires, every `Do` runs in order."""

    on: tuple[ActionStep, ...]
    do: tuple[ActionStep, ...]


@dataclass(frozen=True, slots=True)
class ReplicationTopicConfig:
    """`Replication/Destination/Topic`: which recorded topics go to the destination."""

    name: str
    message_type: MessageType
    filter: str | None = None

    def matches(self, topic: str) -> bool:
        return topic_matches(self.name, topic)


@dataclass(frozen=True, slots=True)
class ReplicationTransportConfig:
    """`Replication/Destination/Transport`: addresses tried in priority order (none = wait)."""

    type: ReplicationType
    inet_addrs: tuple[InetAddr, ...] = ()
    reconnect_timeout_ms: int | None = None
    tls: TlsConfig | None = None  # amps-replication-secure: this side's certificate and CA


@dataclass(frozen=True, slots=True)
class DestinationConfig:
    """`Replication/Destination`: one outgoing replication link."""

    name: str
    group: str
    sync_type: SyncType
    transports: tuple[ReplicationTransportConfig, ...]
    topics: tuple[ReplicationTopicConfig, ...] = ()
    pass_through: str | None = None
    resync_pass_through: str | None = None
    compression: bool = False
    compression_type: Literal["zlib", "zstd"] = "zlib"
    ack_conflation_interval_ms: int = 1_000

    def takes(self, topic: str) -> bool:
        """Whether the destination takes `topic` by name (with no Topic element: every topic);
        for a queue's name, whether it replicates the queue (R8)."""
        return not self.topics or any(t.matches(topic) for t in self.topics)


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """`Replication`: the outgoing destinations of this instance."""

    destinations: tuple[DestinationConfig, ...] = ()
    # R7: an instance nothing arrived from, by any path, for this long is unreachable, and
    # proxied transfer may act for it (links heartbeat every second).
    reachability_interval_ms: int = 5_000
    # Element path of each destination (for errors found after parsing); not configuration.
    paths: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def destination(self, name: str) -> DestinationConfig | None:
        """The destination whose Name is `name`, or None."""
        return next((d for d in self.destinations if d.name == name), None)


@dataclass(frozen=True, slots=True)
class RawElement:
    """A section kept as written (env references expanded) for a later issue to interpret."""

    tag: str
    text: str
    children: tuple[RawElement, ...] = ()


@dataclass(frozen=True, slots=True)
class Config:
    """A whole, validated instance configuration."""

    name: str
    group: str
    admin: AdminConfig | None = None
    transports: tuple[TransportConfig, ...] = ()
    transaction_log: TransactionLogConfig | None = None
    queues: tuple[QueueConfig, ...] = ()
    actions: tuple[ActionConfig, ...] = ()
    replication: ReplicationConfig | None = None
    reserved: tuple[RawElement, ...] = ()
    authentication: AuthenticationConfig | None = None
    # Slow-client limits (AMPS-REFERENCE §1.1, §8): bytes queued to all clients and not yet
    # written (None = the instance's default), and the percentage of it one client may hold.
    message_memory_limit_bytes: int | None = None
    client_max_capacity_percent: int = 50

    @property
    def grpc_transport(self) -> TransportConfig | None:
        """The first gRPC client transport, or None."""
        return next((t for t in self.transports if t.type == "grpc"), None)

    @property
    def client_authentication(self) -> AuthenticationConfig | None:
        """The Authentication that governs client logons: the grpc transport's, or the
        instance's."""
        transport = self.grpc_transport
        if transport is not None and transport.authentication is not None:
            return transport.authentication
        return self.authentication

    @property
    def replication_transport(self) -> TransportConfig | None:
        """The incoming replication transport (at most one), or None."""
        return next((t for t in self.transports if t.type in REPLICATION_TYPES), None)

    def queue(self, name: str) -> QueueConfig | None:
        """The queue named `name`, or None."""
        return next((q for q in self.queues if q.name == name), None)

    def replicates_queue(self, queue: QueueConfig) -> bool:
        """Whether `queue` spans instances: a Queue or GroupLocalQueue whose name some
        `Replication/Destination/Topic` names, or a destination without `Topic` (it replicates
        everything). A LocalQueue never does (R2)."""
        if queue.kind == "LocalQueue" or self.replication is None:
            return False
        return any(d.takes(queue.name) for d in self.replication.destinations)

    def reserved_section(self, tag: str) -> RawElement | None:
        """A reserved section (Authentication, Logging, ...) as written, or None."""
        return next((r for r in self.reserved if r.tag == tag), None)
