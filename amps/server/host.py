"""What the parts around the instance need from it, as protocols: the queue drivers (`QueueHost`)
and the instance from replication (`ReplicationHooks`). With these the server's modules import
in one direction (instance -> queue manager -> queues -> session -> outbox), never back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from amps.config import Config
from amps.expr import Message
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueRecord, TransferRecord
from amps.server.hops import HopStatistics
from amps.server.record_cache import RecordCache


@dataclass(slots=True)
class InstanceStatistics:
    """Counters read by metrics and the admin interface."""

    published_by_topic: dict[str, int] = field(default_factory=dict)
    published_bytes_by_topic: dict[str, int] = field(default_factory=dict)
    delivered: int = 0
    rejected: int = 0
    hops: HopStatistics = field(default_factory=HopStatistics)


class QueueHost(Protocol):
    """The instance, as the queue manager and its drivers use it."""

    name: str
    config: Config
    journal: Journal
    records: RecordCache
    statistics: InstanceStatistics
    dispatched_txid: int
    replicator: ReplicationHooks | None

    def now_ms(self) -> int: ...

    def wall_us(self) -> int: ...

    def expr_message(self, record: PublishRecord) -> Message: ...

    def append_record(
        self, record: QueueRecord | TransferRecord, *, soon: bool = False
    ) -> QueueRecord | TransferRecord: ...

    def when_durable(self, callback: Callable[[], None]) -> None: ...

    def publish_internal(self, topic: str, data: bytes) -> None: ...

    async def wait_durable(self) -> None: ...


class ReplicationHooks(Protocol):
    """The replication links, as the instance's commit path calls them."""

    @property
    def forwards(self) -> bool:
        """Whether this instance has destinations (its links read the durable records)."""
        ...

    def log_advanced(self) -> None: ...

    def sync_acked_txids(self) -> Iterator[int]: ...

    def send_transfer_request(
        self, queue: str, keys: Sequence[tuple[int, int]], owner: str
    ) -> None:
        """R4: ask `owner` for queued messages (lost when no link leads there)."""

    def unreachable(
        self, instances: Iterable[str], now_ms: int, interval_ms: int
    ) -> frozenset[str]:
        """R7: of `instances` and the linked peers, those not heard from by any path lately."""
