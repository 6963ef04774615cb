"""The one place that names Prometheus metrics. Reads statistics snapshots at scrape time.

Names use base units and `_total` for counters; no `instance` label (Prometheus adds its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# fsync latency is observed directly (a few hundred times a second at most).
FSYNC_BUCKETS_SECONDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


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


class _InstanceCollector(Collector):
    def __init__(self, snapshot: Callable[[], InstanceSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        published = CounterMetricFamily(
            "amps_published_messages", "Messages published, by topic", labels=["node", "topic"]
        )
        published_bytes = CounterMetricFamily(
            "amps_published_bytes", "Payload bytes published, by topic", labels=["node", "topic"]
        )
        for topic, count in sorted(s.published_by_topic.items()):
            published.add_metric([s.node, topic], count)
            published_bytes.add_metric([s.node, topic], s.published_bytes_by_topic.get(topic, 0))
        yield published
        yield published_bytes
        counters = {
            "amps_persisted_acks": (
                "Persisted acknowledgements sent (conflated)",
                s.persisted_acks,
            ),
            "amps_duplicates_discarded": ("Publishes discarded as duplicates (L4)", s.duplicates),
            "amps_delivered_messages": ("Messages delivered to subscriptions", s.delivered),
            "amps_rejected_commands": ("Commands answered with a failure ack", s.rejected),
            "amps_journal_fsyncs": ("fsync calls on the journal", s.fsync_count),
        }
        for name, (doc, value) in counters.items():
            family = CounterMetricFamily(name, doc, labels=["node"])
            family.add_metric([s.node], value)
            yield family
        gauges = {
            "amps_journal_bytes": ("Bytes in journal segments", s.journal_bytes),
            "amps_journal_segments": ("Journal segment files", s.journal_segments),
            "amps_journal_last_txid": ("Last transaction id appended", s.last_txid),
            "amps_connected_clients": ("Client connections", s.connected_clients),
            "amps_subscriptions": ("Pub/sub subscriptions", s.subscriptions),
        }
        for name, (doc, value) in gauges.items():
            gauge = GaugeMetricFamily(name, doc, labels=["node"])
            gauge.add_metric([s.node], value)
            yield gauge


class Metrics:
    """A registry per instance (no global state, nothing at import time)."""

    def __init__(self, node: str, snapshot: Callable[[], InstanceSnapshot]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_InstanceCollector(snapshot))
        self.fsync_seconds = Histogram(
            "amps_journal_fsync_seconds",
            "Journal fsync latency",
            labelnames=["node"],
            buckets=FSYNC_BUCKETS_SECONDS,
            registry=self.registry,
        ).labels(node=node)

    def observe_fsync(self, seconds: float) -> None:
        self.fsync_seconds.observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
