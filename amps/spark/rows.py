"""The rows of the `amps` Spark source: one schema, and log records or deliveries as Arrow batches.

One row per record. A publish fills topic, bookmark, publisher, sequence and data; a queue
record fills queue, action, reason and, per message, txids (or bookmarks: a peer's removal as
this instance logged it), delivered and deliveries; a
transfer fills queue, bookmark, from_instance and to_instance. Columns a kind does not use are
null. `publisher` is text: publisher ids are unsigned 64-bit, past Spark's signed longs.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from amps.errors import InvalidOptions
from amps.log.records import PublishRecord, QueueRecord, Record, TransferRecord

if TYPE_CHECKING:
    from amps.client import Message

TIMESTAMP = pa.timestamp("us", tz="UTC")
_TS = TIMESTAMP

ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("bookmark", pa.string()),
        ("txid", pa.int64()),
        ("timestamp", _TS),
        ("data", pa.binary()),
        ("publisher", pa.string()),
        ("sequence", pa.int64()),
        ("origin_instance", pa.string()),
        ("origin_txid", pa.int64()),
        ("correlation_id", pa.string()),
        ("kind", pa.string()),
        ("queue", pa.string()),
        ("action", pa.string()),
        ("reason", pa.string()),
        ("txids", pa.list_(pa.int64())),
        ("delivered", pa.list_(_TS)),
        ("deliveries", pa.list_(pa.int32())),
        ("from_instance", pa.string()),
        ("to_instance", pa.string()),
        ("bookmarks", pa.list_(pa.string())),
    ]
)

SCHEMA_DDL = (
    "topic string, bookmark string, txid long, timestamp timestamp, data binary, "
    "publisher string, sequence long, origin_instance string, origin_txid long, "
    "correlation_id string, kind string, queue string, action string, reason string, "
    "txids array<long>, delivered array<timestamp>, deliveries array<int>, "
    "from_instance string, to_instance string, bookmarks array<string>"
)
"""The same schema as Spark DDL (what `DataSource.schema()` returns)."""

_COLUMNS = ARROW_SCHEMA.names

# Spark's names of the schema's types (StructField.dataType.simpleString()).
_SPARK_TYPES = {
    part.split(" ")[0]: part.split(" ", 1)[1].replace("long", "bigint")
    for part in SCHEMA_DDL.split(", ")
}


def projection(fields: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The columns a schema given to the reader (`.schema(...)`: (name, Spark type) pairs)
    selects, in its order; () when it is the whole schema. Each must be one of the source's
    columns with its type, or InvalidOptions says which is not."""
    names = tuple(name for name, _kind in fields)
    if names == tuple(_COLUMNS):
        return ()
    for name, kind in fields:
        if name not in _SPARK_TYPES:
            raise InvalidOptions(
                f"schema column {name!r} is not one of the source's: {', '.join(_COLUMNS)}"
            )
        if kind != _SPARK_TYPES[name]:
            raise InvalidOptions(
                f"schema column {name!r} is {kind}, the source's is {_SPARK_TYPES[name]}"
            )
    if len(set(names)) != len(names):
        raise InvalidOptions("a schema column is given twice")
    return names


_LONG_MAX = 2**63 - 1


def sequences(useqs: pa.Array) -> pa.Array:
    """Sequence numbers (unsigned 64-bit, L3) as Spark longs: null from 2**63 on, where a long
    cannot hold them (the bookmark column still spells them)."""
    highest = pc.max(useqs).as_py()
    if highest is None or highest <= _LONG_MAX:
        return useqs.cast(pa.int64())
    fits = pc.less_equal(useqs, pa.scalar(_LONG_MAX, pa.uint64()))
    return pc.if_else(fits, useqs, pa.nulls(len(useqs), pa.uint64())).cast(pa.int64())


def _sequence(seq: int) -> int | None:
    return seq if seq <= _LONG_MAX else None


def _nulls(name: str, count: int) -> pa.Array:
    return pa.nulls(count, ARROW_SCHEMA.field(name).type)


def publishes_batch(records: Sequence[PublishRecord]) -> pa.RecordBatch:
    """Publishes as one batch (the common case: one list per column, strings built by Arrow)."""
    n = len(records)
    publishers = pa.array([r.publisher_id for r in records], pa.uint64()).cast(pa.string())
    useqs = pa.array([r.seq for r in records], pa.uint64())
    bookmarks = pc.binary_join_element_wise(publishers, useqs.cast(pa.string()), "", "|")
    seqs = sequences(useqs)
    columns: list[Any] = [
        pa.array([r.topic for r in records], pa.string()),
        bookmarks,
        pa.array([r.txid for r in records], pa.int64()),
        pa.array([r.timestamp_us for r in records], pa.int64()).cast(_TS),
        pa.array([r.data for r in records], pa.binary()),
        publishers,
        seqs,
        pa.array([r.origin_instance for r in records], pa.string()),
        pa.array([r.origin_txid for r in records], pa.int64()),
        pa.array([r.correlation_id or None for r in records], pa.string()),
        pa.repeat("publish", n).cast(pa.string()),
    ]
    columns += [_nulls(name, n) for name in _COLUMNS[len(columns) :]]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def records_batch(records: Sequence[Record]) -> pa.RecordBatch:
    """Records of every kind as one batch."""
    if all(type(r) is PublishRecord for r in records):
        return publishes_batch(records)  # type: ignore[arg-type]
    rows: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
    for record in records:
        row = _row(record)
        for name in _COLUMNS:
            rows[name].append(row.get(name))
    return pa.RecordBatch.from_pydict(rows, schema=ARROW_SCHEMA)


def _row(record: Record) -> dict[str, Any]:
    row: dict[str, Any] = {
        "txid": record.txid,
        "timestamp": record.timestamp_us,
        "origin_instance": record.origin_instance,
        "origin_txid": record.origin_txid,
    }
    if isinstance(record, PublishRecord):
        row |= {
            "topic": record.topic, "bookmark": record.bookmark.format(), "data": record.data,
            "publisher": str(record.publisher_id), "sequence": _sequence(record.seq),
            "correlation_id": record.correlation_id or None, "kind": "publish",
        }  # fmt: skip
    elif isinstance(record, QueueRecord):
        row |= {
            "kind": "queue", "queue": record.queue, "action": record.action.name.lower(),
            "reason": record.reason or None, "txids": list(record.txids),
            "delivered": list(record.delivered_us) if record.deliveries else None,
            "deliveries": list(record.deliveries) if record.deliveries else None,
            "bookmarks": [b.format() for b in record.bookmarks] or None,
        }  # fmt: skip
    else:
        assert isinstance(record, TransferRecord)
        row |= {
            "kind": "transfer", "queue": record.queue, "bookmark": record.bookmark.format(),
            "publisher": str(record.bookmark.publisher_id),
            "sequence": _sequence(record.bookmark.seq),
            "action": "proxied_transfer" if record.proxied else "transfer",
            "from_instance": record.from_instance, "to_instance": record.to_instance,
        }  # fmt: skip
    return row


def messages_batch(messages: Sequence[Message]) -> pa.RecordBatch:
    """Deliveries of a bookmark replay with the `origin` option as one batch."""
    n = len(messages)
    bookmarks = pa.array(list(map(_BOOKMARK, messages)), pa.string())
    # `publisher|seq|`: split by Arrow, not per message in Python.
    parts = pc.split_pattern(bookmarks, "|", max_splits=2)
    columns: list[Any] = [
        pa.array(list(map(_TOPIC, messages)), pa.string()),
        bookmarks,
        pa.array(list(map(_TXID, messages)), pa.int64()),
        pa.array(list(map(_TIMESTAMP, messages)), pa.int64()).cast(_TS),
        pa.array(list(map(_DATA, messages)), pa.binary()),
        pc.list_element(parts, 0),
        sequences(pc.list_element(parts, 1).cast(pa.uint64())),
        pa.array(list(map(_ORIGIN, messages)), pa.string()),
        pa.array(list(map(_ORIGIN_TXID, messages)), pa.int64()),
        _nulls("correlation_id", n),
        pa.array(["publish"] * n, pa.string()),
    ]
    columns += [_nulls(name, n) for name in _COLUMNS[len(columns) :]]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


_BOOKMARK, _TOPIC, _TXID, _TIMESTAMP, _DATA, _ORIGIN, _ORIGIN_TXID = (
    attrgetter(name)
    for name in (
        "bookmark", "topic", "txid", "timestamp_us", "data", "origin_instance", "origin_txid",
    )
)  # fmt: skip
