"""The one place that names Prometheus metrics. Reads statistics snapshots at scrape time.

Names use base units and `_total` for counters; no `instance` label (Prometheus adds its own).
Every metric is declared once in the tables below (`INSTANCE_METRICS`, `QUEUE_METRICS`, ...);
the collectors and `docs/reference/metrics.md` (`python -m amps.tools.metricsdoc`) both read them.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, cast

if TYPE_CHECKING:
    # prometheus_client (and the http.server and email modules it imports) is loaded at the
    # first scrape, not at start: nothing before a first delivery needs it.
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from amps.queue import QueueStatistics

# fsync latency is observed directly (a few hundred times a second at most).
FSYNC_BUCKETS_SECONDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)

MetricKind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exposed metric: `name` is the family name (a counter is exposed as `name_total`)."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...]
    amps: str = ""
    """The AMPS statistic it corresponds to (AMPS-REFERENCE §5.3), if any."""

    @property
    def exposed(self) -> str:
        """The sample name a scrape shows."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


class OwnershipView(Protocol):
    """Ownership counters of one replicated queue here (a `ReplicaStatistics` is one)."""

    @property
    def owned(self) -> int: ...
    @property
    def owned_elsewhere(self) -> int: ...
    @property
    def transferred_in(self) -> int: ...
    @property
    def transferred_out(self) -> int: ...
    @property
    def requests_sent(self) -> int: ...
    @property
    def requests_granted(self) -> int: ...
    @property
    def requests_unanswered(self) -> int: ...
    @property
    def proxied_claims(self) -> int: ...
    @property
    def proxied_transfer(self) -> bool: ...
    @property
    def latency_estimate_ms(self) -> int: ...
    @property
    def latency_estimates_ms(self) -> dict[str, int]: ...


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One queue at one scrape; `ownership` only for a replicated queue."""

    queue: str
    statistics: QueueStatistics
    ownership: OwnershipView | None = None


@dataclass(frozen=True, slots=True)
class InstanceSnapshot:
    """What the instance reports at one scrape."""

    node: str
    published_by_topic: dict[str, int]
    published_bytes_by_topic: dict[str, int]
    persisted_acks: int
    duplicates: int
    delivered: int
    rejected: int
    journal_bytes: int
    journal_segments: int
    last_txid: int
    fsync_count: int
    connected_clients: int
    subscriptions: int
    record_cache_misses: int = 0
    damaged_records: int = 0
    dedup_gaps: int = 0
    dedup_gaps_forgotten: int = 0
    queues: tuple[QueueSnapshot, ...] = field(default=())
    client_queued_bytes: int = 0
    client_queued_bytes_largest: int = 0
    client_queued_bytes_limit: int = 0
    client_queued_bytes_client_limit: int = 0
    slow_consumer_disconnects: dict[str, int] = field(default_factory=dict)
    replication: ReplicationSnapshot | None = None
    journal_first_txid: int = 0
    journal_lifecycle_segments: dict[str, int] = field(default_factory=dict)
    journal_lifecycle_bytes: dict[str, int] = field(default_factory=dict)
    journal_holds: dict[str, int] = field(default_factory=dict)
    journal_held_segments: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DestinationSnapshot:
    """One replication destination (outgoing link) at one scrape."""

    destination: str
    connected: bool
    sync: bool
    downgraded: bool
    messages_behind: int
    seconds_behind: float
    acknowledged_txid: int
    resyncs: int
    sync_changes: int
    messages_sent: int
    batches_sent: int


@dataclass(frozen=True, slots=True)
class ReplicationSnapshot:
    """Replication at one scrape: destinations, per-origin positions, reachability."""

    destinations: tuple[DestinationSnapshot, ...] = ()
    # (peer, origin, origin txid held from that origin over that peer's link)
    origins: tuple[tuple[str, str, int], ...] = ()
    # (origin, messages behind it, seconds behind it): replication/origins.py
    origin_lag: tuple[tuple[str, int, float], ...] = ()
    # (instance, messages received over its link)
    received: tuple[tuple[str, int], ...] = ()
    # (instance, acks sent over its link for its batches)
    acks_sent: tuple[tuple[str, int], ...] = ()
    # (instance, seconds since heard by any path)
    heard: tuple[tuple[str, float], ...] = ()


NODE = ("node",)
NODE_TOPIC = ("node", "topic")
NODE_QUEUE = ("node", "queue")

PUBLISHED_MESSAGES = MetricSpec(
    "amps_published_messages", "counter", "Messages published, by topic", NODE_TOPIC
)
PUBLISHED_BYTES = MetricSpec(
    "amps_published_bytes", "counter", "Payload bytes published, by topic", NODE_TOPIC
)
FSYNC_SECONDS = MetricSpec("amps_journal_fsync_seconds", "histogram", "Journal fsync latency", NODE)

InstanceReader = Callable[[InstanceSnapshot], float]
# One sample per key of the mapping read, labelled by the spec's last label; `keys` are always
# exposed (0 when absent), other keys as they appear.
LabelledReader = Callable[[InstanceSnapshot], dict[str, int]]

LABELLED_METRICS: tuple[tuple[MetricSpec, LabelledReader, tuple[str, ...]], ...] = (
    (
        MetricSpec(
            "amps_slow_consumer_disconnects",
            "counter",
            "Clients disconnected for holding too many unsent bytes, by the limit reached "
            "(client: ClientMaxCapacity; instance: MessageMemoryLimit)",
            (*NODE, "limit"),
        ),
        lambda s: s.slow_consumer_disconnects,
        ("client", "instance"),
    ),
    (
        MetricSpec(
            "amps_journal_lifecycle_segments",
            "counter",
            "Journal segments removed, archived or compressed by the journal lifecycle",
            (*NODE, "action"),
        ),
        lambda s: s.journal_lifecycle_segments,
        ("remove", "archive", "compress"),
    ),
    (
        MetricSpec(
            "amps_journal_lifecycle_bytes",
            "counter",
            "Bytes of journal segments removed, archived or compressed by the journal lifecycle",
            (*NODE, "action"),
        ),
        lambda s: s.journal_lifecycle_bytes,
        ("remove", "archive", "compress"),
    ),
    (
        MetricSpec(
            "amps_journal_hold_txid",
            "gauge",
            "The oldest txid each holder still needs (no journal from it on is removed)",
            (*NODE, "holder"),
        ),
        lambda s: s.journal_holds,
        (),
    ),
    (
        MetricSpec(
            "amps_journal_held_segments",
            "gauge",
            "Segments old enough to remove that the last removal kept, by the holder needing them",
            (*NODE, "holder"),
        ),
        lambda s: s.journal_held_segments,
        (),
    ),
)
QueueReader = Callable[[QueueStatistics], float]


def _seconds(ms: int | None) -> float:
    """An age in milliseconds as seconds; an absent age (nothing there) is 0."""
    return 0.0 if ms is None else ms / 1000.0


INSTANCE_METRICS: tuple[tuple[MetricSpec, InstanceReader], ...] = (
    (
        MetricSpec(
            "amps_persisted_acks",
            "counter",
            "Persisted acknowledgements sent (conflated)",
            NODE,
        ),
        lambda s: s.persisted_acks,
    ),
    (
        MetricSpec(
            "amps_duplicates_discarded", "counter", "Publishes discarded as duplicates (L4)", NODE
        ),
        lambda s: s.duplicates,
    ),
    (
        MetricSpec(
            "amps_dedup_gaps",
            "gauge",
            "Sequence numbers below a publisher's high-water mark that this log does not hold "
            "and would still take (L4 gaps)",
            NODE,
        ),
        lambda s: s.dedup_gaps,
    ),
    (
        MetricSpec(
            "amps_dedup_gaps_forgotten",
            "counter",
            "L4 gaps dropped past a publisher's 1,024-gap limit, since start: one arriving "
            "later is discarded as a duplicate",
            NODE,
        ),
        lambda s: s.dedup_gaps_forgotten,
    ),
    (
        MetricSpec(
            "amps_delivered_messages", "counter", "Messages delivered to subscriptions", NODE
        ),
        lambda s: s.delivered,
    ),
    (
        MetricSpec(
            "amps_rejected_commands", "counter", "Commands answered with a failure ack", NODE
        ),
        lambda s: s.rejected,
    ),
    (
        MetricSpec("amps_journal_fsyncs", "counter", "fsync calls on the journal", NODE),
        lambda s: s.fsync_count,
    ),
    (
        MetricSpec(
            "amps_record_cache_misses",
            "counter",
            "Message records read back from the journal because the record cache missed",
            NODE,
        ),
        lambda s: s.record_cache_misses,
    ),
    (
        MetricSpec(
            "amps_journal_damaged_records",
            "counter",
            "Damaged journal records met by reads (replay, record cache, recovery), each spot "
            "counted once; any is a reason to run `amps journal verify`",
            NODE,
        ),
        lambda s: s.damaged_records,
    ),
    (
        MetricSpec("amps_journal_bytes", "gauge", "Bytes in journal segments", NODE),
        lambda s: s.journal_bytes,
    ),
    (
        MetricSpec("amps_journal_segments", "gauge", "Journal segment files", NODE),
        lambda s: s.journal_segments,
    ),
    (
        MetricSpec("amps_journal_last_txid", "gauge", "Last transaction id appended", NODE),
        lambda s: s.last_txid,
    ),
    (
        MetricSpec(
            "amps_journal_first_txid", "gauge", "Oldest transaction id still in the journal", NODE
        ),
        lambda s: s.journal_first_txid,
    ),
    (
        MetricSpec("amps_connected_clients", "gauge", "Client connections", NODE),
        lambda s: s.connected_clients,
    ),
    (
        MetricSpec(
            "amps_client_queued_bytes",
            "gauge",
            "Bytes queued to all clients and not yet written",
            NODE,
        ),
        lambda s: s.client_queued_bytes,
    ),
    (
        MetricSpec(
            "amps_client_queued_bytes_largest",
            "gauge",
            "Bytes queued to the one client holding the most",
            NODE,
        ),
        lambda s: s.client_queued_bytes_largest,
    ),
    (
        MetricSpec(
            "amps_client_queued_bytes_limit",
            "gauge",
            "MessageMemoryLimit: bytes all clients may hold before the largest is disconnected",
            NODE,
        ),
        lambda s: s.client_queued_bytes_limit,
    ),
    (
        MetricSpec(
            "amps_client_queued_bytes_client_limit",
            "gauge",
            "Bytes one client may hold before it is disconnected (ClientMaxCapacity)",
            NODE,
        ),
        lambda s: s.client_queued_bytes_client_limit,
    ),
    (
        MetricSpec("amps_subscriptions", "gauge", "Pub/sub subscriptions", NODE),
        lambda s: s.subscriptions,
    ),
)

QUEUE_METRICS: tuple[tuple[MetricSpec, QueueReader], ...] = (
    (
        MetricSpec(
            "amps_queue_depth",
            "gauge",
            "Active messages not yet removed, leased or not",
            NODE_QUEUE,
            "queue_depth",
        ),
        lambda q: q.depth,
    ),
    (
        MetricSpec(
            "amps_queue_leased_messages",
            "gauge",
            "Leased messages awaiting an ack (at-most-once: sent, not yet acked)",
            NODE_QUEUE,
            "backlog",
        ),
        lambda q: q.leased_count,
    ),
    (
        MetricSpec(
            "amps_queue_deliverable_messages",
            "gauge",
            "Active messages not leased",
            NODE_QUEUE,
        ),
        lambda q: q.deliverable_count,
    ),
    (
        MetricSpec(
            "amps_queue_inactive_messages",
            "gauge",
            "Messages held beyond TargetQueueDepth",
            NODE_QUEUE,
            "inactive_message_count",
        ),
        lambda q: q.inactive_count,
    ),
    (
        MetricSpec(
            "amps_queue_deferred_acks",
            "gauge",
            "Acks held for messages not yet in the queue",
            NODE_QUEUE,
            "deferred_ack_count",
        ),
        lambda q: q.deferred_ack_count,
    ),
    (
        MetricSpec(
            "amps_queue_oldest_message_age_seconds",
            "gauge",
            "Age of the oldest message not removed (0 when empty)",
            NODE_QUEUE,
            "seconds_behind",
        ),
        lambda q: _seconds(q.oldest_message_age_ms),
    ),
    (
        MetricSpec(
            "amps_queue_oldest_lease_age_seconds",
            "gauge",
            "Age of the oldest current lease (0 when none)",
            NODE_QUEUE,
            "age_of_oldest_lease",
        ),
        lambda q: _seconds(q.oldest_lease_age_ms),
    ),
    (
        MetricSpec("amps_queue_subscriptions", "gauge", "Queue subscriptions", NODE_QUEUE),
        lambda q: q.subscription_count,
    ),
    (
        MetricSpec(
            "amps_queue_entered_messages", "counter", "Messages that entered the queue", NODE_QUEUE
        ),
        lambda q: q.entered_total,
    ),
    (
        MetricSpec(
            "amps_queue_delivered_messages",
            "counter",
            "Deliveries to subscriptions, first or again",
            NODE_QUEUE,
        ),
        lambda q: q.delivered_total,
    ),
    (
        MetricSpec(
            "amps_queue_redelivered_messages",
            "counter",
            "Deliveries of a message delivered before",
            NODE_QUEUE,
        ),
        lambda q: q.redelivered_total,
    ),
    (
        MetricSpec(
            "amps_queue_acked_messages", "counter", "Messages removed by an ack", NODE_QUEUE
        ),
        lambda q: q.acked_total,
    ),
    (
        MetricSpec(
            "amps_queue_cancelled_messages",
            "counter",
            "Leases given back by a cancel",
            NODE_QUEUE,
        ),
        lambda q: q.cancelled_total,
    ),
    (
        MetricSpec(
            "amps_queue_sent_at_most_once_messages",
            "counter",
            "Messages removed on delivery (at-most-once)",
            NODE_QUEUE,
        ),
        lambda q: q.sent_at_most_once_total,
    ),
    (
        MetricSpec(
            "amps_queue_barrier_delivered_messages",
            "counter",
            "Barrier messages released to subscriptions",
            NODE_QUEUE,
        ),
        lambda q: q.barrier_delivered_total,
    ),
    (
        MetricSpec(
            "amps_queue_expired_leases",
            "counter",
            "Leases that ran out",
            NODE_QUEUE,
            "expired_leases",
        ),
        lambda q: q.expired_leases_total,
    ),
)

OwnershipReader = Callable[[OwnershipView], float]
OWNERSHIP_METRICS: tuple[tuple[MetricSpec, OwnershipReader], ...] = (
    (
        MetricSpec(
            "amps_queue_owned_messages",
            "gauge",
            "Messages this instance owns (replicated queues: only the owner delivers, R2)",
            NODE_QUEUE,
            "owned",
        ),
        lambda o: o.owned,
    ),
    (
        MetricSpec(
            "amps_queue_owned_elsewhere_messages",
            "gauge",
            "Messages held here that another instance owns",
            NODE_QUEUE,
        ),
        lambda o: o.owned_elsewhere,
    ),
    (
        MetricSpec(
            "amps_queue_transferred_in_messages",
            "counter",
            "Messages whose ownership moved to this instance (grants and proxied claims)",
            NODE_QUEUE,
            "transferred_in",
        ),
        lambda o: o.transferred_in,
    ),
    (
        MetricSpec(
            "amps_queue_transferred_out_messages",
            "counter",
            "Messages whose ownership moved away from this instance",
            NODE_QUEUE,
            "transferred_out",
        ),
        lambda o: o.transferred_out,
    ),
    (
        MetricSpec(
            "amps_queue_transfer_requests_sent",
            "counter",
            "Transfer requests this instance sent to owners (R4)",
            NODE_QUEUE,
        ),
        lambda o: o.requests_sent,
    ),
    (
        MetricSpec(
            "amps_queue_transfer_requests_granted",
            "counter",
            "Transfer requests this instance granted, as owner or proxy (R5, R7)",
            NODE_QUEUE,
        ),
        lambda o: o.requests_granted,
    ),
    (
        MetricSpec(
            "amps_queue_transfer_requests_unanswered",
            "counter",
            "Requests this instance sent that were not granted to it within "
            "TransferRequestTimeout (a refusal is silence; granted to another, acked "
            "elsewhere or claimed here first count too)",
            NODE_QUEUE,
        ),
        lambda o: o.requests_unanswered,
    ),
    (
        MetricSpec(
            "amps_queue_proxied_claims",
            "counter",
            "Messages this instance claimed for an unreachable owner (R7)",
            NODE_QUEUE,
        ),
        lambda o: o.proxied_claims,
    ),
    (
        MetricSpec(
            "amps_queue_transfer_latency_seconds",
            "gauge",
            "Current estimate of replicated arrival to replicated ack; a message owned "
            "elsewhere waits this long here before it is asked for (R4)",
            NODE_QUEUE,
        ),
        lambda o: o.latency_estimate_ms / 1000.0,
    ),
    (
        MetricSpec(
            "amps_queue_proxied_transfer",
            "gauge",
            "1 while an administrator has proxied transfer on for the queue here (R7)",
            NODE_QUEUE,
            "proxied_transfer",
        ),
        lambda o: float(o.proxied_transfer),
    ),
)

QUEUE_EXPIRED = MetricSpec(
    "amps_queue_expired_messages",
    "counter",
    "Messages expired, by primary reason",
    (*NODE_QUEUE, "reason"),
)
EXPIRED_BY_REASON: tuple[tuple[str, QueueReader], ...] = (
    ("time_limit", lambda q: q.expired_time_limit_total),
    ("forced_expire", lambda q: q.expired_forced_total),
    ("max_cancels", lambda q: q.expired_max_cancels_total),
    ("max_deliveries", lambda q: q.expired_max_deliveries_total),
)


NODE_DESTINATION = ("node", "destination")
DestinationReader = Callable[[DestinationSnapshot], float]
DESTINATION_METRICS: tuple[tuple[MetricSpec, DestinationReader], ...] = (
    (
        MetricSpec(
            "amps_replication_connected",
            "gauge",
            "1 while the link to the destination is up",
            NODE_DESTINATION,
        ),
        lambda d: float(d.connected),
    ),
    (
        MetricSpec(
            "amps_replication_sync",
            "gauge",
            "1 while the destination holds persisted acks (sync and not downgraded)",
            NODE_DESTINATION,
        ),
        lambda d: float(d.sync and not d.downgraded),
    ),
    (
        MetricSpec(
            "amps_replication_downgraded",
            "gauge",
            "1 while a sync destination is downgraded to async",
            NODE_DESTINATION,
        ),
        lambda d: float(d.downgraded),
    ),
    (
        MetricSpec(
            "amps_replication_behind_messages",
            "gauge",
            "Log records the destination has not acknowledged",
            NODE_DESTINATION,
        ),
        lambda d: d.messages_behind,
    ),
    (
        MetricSpec(
            "amps_replication_behind_seconds",
            "gauge",
            "Age of the oldest record durable here the destination has not acknowledged (0: none)",
            NODE_DESTINATION,
            "seconds_behind",
        ),
        lambda d: d.seconds_behind,
    ),
    (
        MetricSpec(
            "amps_replication_acknowledged_txid",
            "gauge",
            "Local txid up to which the destination holds everything it takes",
            NODE_DESTINATION,
        ),
        lambda d: d.acknowledged_txid,
    ),
    (
        MetricSpec(
            "amps_replication_resyncs",
            "counter",
            "Links that resumed with records to catch up",
            NODE_DESTINATION,
        ),
        lambda d: d.resyncs,
    ),
    (
        MetricSpec(
            "amps_replication_sync_changes",
            "counter",
            "Downgrades and upgrades of the destination (actions and administrator)",
            NODE_DESTINATION,
        ),
        lambda d: d.sync_changes,
    ),
    (
        MetricSpec(
            "amps_replication_sent_messages",
            "counter",
            "Records sent to the destination",
            NODE_DESTINATION,
        ),
        lambda d: d.messages_sent,
    ),
    (
        MetricSpec(
            "amps_replication_sent_batches",
            "counter",
            "Batches (gRPC messages) sent to the destination",
            NODE_DESTINATION,
        ),
        lambda d: d.batches_sent,
    ),
)
REPLICATION_ORIGIN_TXID = MetricSpec(
    "amps_replication_origin_txid",
    "gauge",
    "The origin's txid of the last record held from that origin over the peer's link",
    ("node", "peer", "origin"),
)
REPLICATION_ORIGIN_BEHIND = MetricSpec(
    "amps_replication_origin_behind_messages",
    "gauge",
    "Records of the origin this instance does not hold yet, in the origin's txids (from its "
    "peers' heartbeats; 0 when caught up)",
    ("node", "origin"),
)
REPLICATION_ORIGIN_BEHIND_SECONDS = MetricSpec(
    "amps_replication_origin_behind_seconds",
    "gauge",
    "Age of the oldest head of the origin a peer announced that this instance does not yet hold "
    "(0 when caught up)",
    ("node", "origin"),
)
REPLICATION_RECEIVED = MetricSpec(
    "amps_replication_received_messages",
    "counter",
    "Records received over the link from the peer",
    ("node", "peer"),
)
REPLICATION_ACKS_SENT = MetricSpec(
    "amps_replication_sent_acks",
    "counter",
    "Acks sent over the link to the peer for the records received from it (one ack can cover "
    "several batches under load)",
    ("node", "peer"),
)
REPLICATION_HEARD = MetricSpec(
    "amps_replication_last_heard_seconds",
    "gauge",
    "Seconds since this instance heard from the instance, directly or through passthrough",
    ("node", "peer"),
)


def all_metrics() -> list[MetricSpec]:
    """Every metric an instance exposes, in documentation order."""
    return [
        PUBLISHED_MESSAGES,
        PUBLISHED_BYTES,
        *(spec for spec, _ in INSTANCE_METRICS),
        *(spec for spec, _, _ in LABELLED_METRICS),
        FSYNC_SECONDS,
        *(spec for spec, _ in QUEUE_METRICS),
        QUEUE_EXPIRED,
        *(spec for spec, _ in OWNERSHIP_METRICS),
        *(spec for spec, _ in DESTINATION_METRICS),
        REPLICATION_ORIGIN_TXID,
        REPLICATION_ORIGIN_BEHIND,
        REPLICATION_ORIGIN_BEHIND_SECONDS,
        REPLICATION_RECEIVED,
        REPLICATION_ACKS_SENT,
        REPLICATION_HEARD,
    ]


def _family(spec: MetricSpec) -> CounterMetricFamily | GaugeMetricFamily:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
    assert spec.kind == "gauge"
    return GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))


class _InstanceCollector:
    """A prometheus_client collector (duck-typed: registering only needs `collect`)."""

    def __init__(self, snapshot: Callable[[], InstanceSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        published = _family(PUBLISHED_MESSAGES)
        published_bytes = _family(PUBLISHED_BYTES)
        for topic, count in sorted(s.published_by_topic.items()):
            published.add_metric([s.node, topic], count)
            published_bytes.add_metric([s.node, topic], s.published_bytes_by_topic.get(topic, 0))
        yield published
        yield published_bytes
        for spec, read in INSTANCE_METRICS:
            family = _family(spec)
            family.add_metric([s.node], read(s))
            yield family
        for spec, read_many, keys in LABELLED_METRICS:
            family = _family(spec)
            values = read_many(s)
            for key in sorted({*keys, *values}):
                family.add_metric([s.node, key], values.get(key, 0))
            yield family
        yield from self._queues(s)
        if s.replication is not None:
            yield from self._replication(s.node, s.replication)

    @staticmethod
    def _replication(node: str, r: ReplicationSnapshot) -> Iterator[Metric]:
        for spec, read in DESTINATION_METRICS:
            family = _family(spec)
            for d in r.destinations:
                family.add_metric([node, d.destination], read(d))
            yield family
        origins = _family(REPLICATION_ORIGIN_TXID)
        for peer, origin, txid in r.origins:
            origins.add_metric([node, peer, origin], txid)
        yield origins
        behind = _family(REPLICATION_ORIGIN_BEHIND)
        behind_seconds = _family(REPLICATION_ORIGIN_BEHIND_SECONDS)
        for origin, messages, seconds in r.origin_lag:
            behind.add_metric([node, origin], messages)
            behind_seconds.add_metric([node, origin], seconds)
        yield behind
        yield behind_seconds
        received = _family(REPLICATION_RECEIVED)
        for peer, count in r.received:
            received.add_metric([node, peer], count)
        yield received
        acks = _family(REPLICATION_ACKS_SENT)
        for peer, count in r.acks_sent:
            acks.add_metric([node, peer], count)
        yield acks
        heard = _family(REPLICATION_HEARD)
        for peer, seconds in r.heard:
            heard.add_metric([node, peer], seconds)
        yield heard

    @staticmethod
    def _queues(s: InstanceSnapshot) -> Iterator[Metric]:
        for spec, read in QUEUE_METRICS:
            family = _family(spec)
            for q in s.queues:
                family.add_metric([s.node, q.queue], read(q.statistics))
            yield family
        expired = _family(QUEUE_EXPIRED)
        for q in s.queues:
            for reason, read in EXPIRED_BY_REASON:
                expired.add_metric([s.node, q.queue, reason], read(q.statistics))
        yield expired
        replicated = [(q.queue, q.ownership) for q in s.queues if q.ownership is not None]
        for spec, read_ownership in OWNERSHIP_METRICS:
            family = _family(spec)
            for name, ownership in replicated:
                family.add_metric([s.node, name], read_ownership(ownership))
            yield family


class _FsyncHistogram:
    """The fsync latency histogram, counted here and exposed as prometheus_client's `Histogram`
    would expose it (`_bucket`, `_count`, `_sum`, `_created`), without importing it at start."""

    def __init__(self, node: str) -> None:
        self._node = node
        self._bounds = (*(float(b) for b in FSYNC_BUCKETS_SECONDS), float("inf"))
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._created = time.time()

    def observe(self, seconds: float) -> None:
        self._sum += seconds
        self._counts[bisect.bisect_left(self._bounds, seconds)] += 1

    def collect(self) -> Iterator[Metric]:
        from prometheus_client import metrics as prometheus_metrics
        from prometheus_client.core import HistogramMetricFamily
        from prometheus_client.samples import Sample
        from prometheus_client.utils import floatToGoString

        le_text = cast(Callable[[float], str], floatToGoString)

        family = HistogramMetricFamily(
            FSYNC_SECONDS.name, FSYNC_SECONDS.help, labels=list(FSYNC_SECONDS.labels)
        )
        cumulative = 0.0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip(self._bounds, self._counts, strict=True):
            cumulative += count
            buckets.append((le_text(bound), cumulative))
        family.add_metric([self._node], buckets, self._sum)
        # getattr: the switch behind PROMETHEUS_DISABLE_CREATED_SERIES, as Histogram reads it.
        if getattr(prometheus_metrics, "_use_created", True):
            name = f"{FSYNC_SECONDS.name}_created"
            family.samples.append(Sample(name, {"node": self._node}, self._created))
        yield family


class Metrics:
    """A registry per instance (no global state, nothing at import time)."""

    def __init__(self, node: str, snapshot: Callable[[], InstanceSnapshot]) -> None:
        self._snapshot = snapshot
        self._fsync = _FsyncHistogram(node)
        self._collectors = (_InstanceCollector(snapshot), self._fsync)

    def observe_fsync(self, seconds: float) -> None:
        self._fsync.observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry()
        for collector in self._collectors:
            registry.register(collector)
        return generate_latest(registry)
