"""The exactly-once sink: each task publishes under a stable name with deterministic sequences.

Task `p` of a write publishes as client `<publisher>.p<p>`; its row `i` (0-based, in the
partition's order) gets sequence number `i + 1`, and in a stream's batch `b` the sequence
`(b + 1) * 2**32 + i + 1`. A retried task, a re-run batch or a re-run job therefore repeats the
same (publisher, sequence) pairs, and the instance drops them as duplicates (L4); the task also
skips, without sending, every row at or below the sequence the instance already holds for its
name (the logon ack's, L3). Exactly once holds while the publisher name, the partitioning and
the rows of each partition (their order too) are the same from run to run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from amps.client import Client
from amps.errors import InvalidOptions
from amps.spark.options import servers

CONNECT_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 300.0
BATCH_SEQ_SHIFT = 32  # rows of one partition in one stream batch stay below 2**32
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark on every task of a micro-batch


@dataclass(frozen=True)
class SinkOptions:
    """Where rows go: the servers, a default topic (or a `topic` column), the publisher name."""

    servers: tuple[str, ...]
    topic: str
    publisher: str

    @classmethod
    def parse(cls, options: dict[str, str], default_publisher: str) -> SinkOptions:
        found = servers(options)
        if not found:
            raise InvalidOptions("option server: the sink needs host:port[,host:port...]")
        publisher = options.get("publisher", "") or default_publisher
        if not publisher or any(c.isspace() or c == "|" for c in publisher):
            raise InvalidOptions(f"option publisher={publisher!r}: a name without spaces or '|'")
        return cls(found, options.get("topic", ""), publisher)


@dataclass(frozen=True)
class Written:
    """What one task did: rows published, and rows the instance already held (skipped)."""

    partition: int
    published: int
    skipped: int


def check_schema(names: Iterable[str], has_default_topic: bool) -> None:
    """A `data` column is required; a `topic` column unless the topic option is set."""
    names = set(names)
    if "data" not in names:
        raise InvalidOptions("the sink needs a `data` column (string or binary)")
    if "topic" not in names and not has_default_topic:
        raise InvalidOptions("the sink needs a `topic` column or the topic option")


def sequence_base(batch_id: int | None) -> int:
    """The sequence number before a task's first row: 0 for a batch write."""
    return 0 if batch_id is None else (batch_id + 1) << BATCH_SEQ_SHIFT


def _columns(batch: pa.RecordBatch, default_topic: str) -> tuple[Sequence[str], list[bytes]]:
    """(topics, payloads) of one batch's rows."""
    datas = [
        b"" if v is None else v.encode() if isinstance(v, str) else v
        for v in batch.column("data").to_pylist()
    ]
    if "topic" not in batch.schema.names:
        topics: Sequence[str] = [default_topic] * len(datas)
    else:
        topics = [t or default_topic for t in batch.column("topic").to_pylist()]
    if not all(topics):
        raise InvalidOptions("a row has no topic and the topic option is not set")
    return topics, datas


async def _publish(
    options: SinkOptions, partition: int, base: int, batches: Iterator[pa.RecordBatch]
) -> Written:
    client = Client(f"{options.publisher}.p{partition}", reconnect=True)
    published = skipped = 0
    try:
        await client.connect(list(options.servers), timeout_s=CONNECT_TIMEOUT_S)
        held = client.statistics().last_seq  # what the instance has for this name (L3)
        seq = base  # the sequence number of the last row before this batch
        publish = client.publish
        for batch in batches:
            topics, datas = _columns(batch, options.topic)
            first, seq = seq + 1, seq + len(datas)
            # Rows at or below what the instance holds are skipped without being sent.
            skip = min(len(datas), max(0, held - first + 1))
            skipped += skip
            for topic, payload, row_seq in zip(
                topics[skip:], datas[skip:], range(first + skip, seq + 1), strict=True
            ):
                await publish(topic, payload, seq=row_seq)
            published += len(datas) - skip
        await client.flush(FLUSH_TIMEOUT_S)
    finally:
        await client.close()
    return Written(partition, published, skipped)


def write(
    options: SinkOptions, partition: int, batch_id: int | None, batches: Iterator[pa.RecordBatch]
) -> Written:
    """Publish one task's rows, and return once the instance persisted them all."""
    return asyncio.run(_publish(options, partition, sequence_base(batch_id), batches))
