"""The `amps` data source for PySpark's Python Data Source API (Spark >= 4.0).

`spark.read.format("amps").load(path)` reads a journal directory; with `.option("server", ...)`
it replays a running instance or cluster; `spark.readStream` follows it live, its offsets being
positions per origin instance; `df.write` / `df.writeStream` publish exactly once
(amps.spark.sink).
The classes here are thin: planning and reading live in journal_read, server_read and sink,
imported where they are used: a Spark Python worker that plans a journal read imports no gRPC
client, one that reads it no server code.
"""

from __future__ import annotations

from amps.spark import require_spark

require_spark()

import sys  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402
from dataclasses import asdict, replace  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

import pyarrow as pa  # noqa: E402
from pyspark import TaskContext  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType  # noqa: E402

from amps.errors import InvalidOptions  # noqa: E402
from amps.spark.options import ReadOptions, servers  # noqa: E402
from amps.spark.rows import SCHEMA_DDL, projection  # noqa: E402

if TYPE_CHECKING:
    from amps.spark import sink


class AmpsDataSource(DataSource):
    """`format("amps")`: journals and instances as rows; DataFrames published exactly once."""

    @classmethod
    def name(cls) -> str:
        return "amps"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        read = ReadOptions.parse(self.options)
        # A schema of some of the columns (`.schema("topic string, data binary")`): only those
        # are built (Spark itself hands a Python data source no pruned schema).
        fields = [(field.name, field.dataType.simpleString()) for field in schema.fields]
        read = replace(read, columns=projection(fields))
        found = servers(self.options)
        path = self.options.get("path", "")
        if not path and not found:
            raise InvalidOptions("give a journal directory (load(path)) or option server")
        return _BatchReader(path, found, read)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        found = servers(self.options)
        if not found:
            raise InvalidOptions("a stream reads instances: option server=host:port[,...]")
        return _StreamReader(found, ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return _Writer(self._sink_options(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _StreamWriter(self._sink_options(schema, overwrite))

    def _sink_options(self, schema: StructType, overwrite: bool) -> sink.SinkOptions:
        from amps.spark import sink

        if overwrite:
            raise InvalidOptions("a topic is append-only: use mode('append')")
        options = sink.SinkOptions.parse(dict(self.options), _default_publisher(self.options))
        sink.check_schema(schema.fieldNames(), bool(options.topic))
        return options


def _default_publisher(options: Any) -> str:
    """`spark-<appName option>-<topic>`, or `spark-<topic>`: the same job run twice publishes
    under the same name. (Spark hands a Python data source no application name of its own.)"""
    app = options.get("appName", "")
    topic = options.get("topic", "") or "rows"
    name = f"spark-{app}-{topic}" if app else f"spark-{topic}"
    return "".join(c if c.isalnum() or c in "-_.:" else "_" for c in name)


class _BatchReader(DataSourceReader):
    """A journal directory (`path`) or servers: planned on the driver, read on executors."""

    def __init__(self, path: str, found: tuple[str, ...], options: ReadOptions) -> None:
        self.path = path
        self.servers = found
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        if self.servers:
            from amps.spark import server_read

            return [InputPartition(p) for p in server_read.plan(self.servers, self.options)]
        from amps.spark import journal_read

        return [InputPartition(p) for p in journal_read.parts(self.path, self.options)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)


def _read(partition: InputPartition, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    piece = partition.value
    # The piece's own module (journal_read or server_read) reads it: unpickling the piece
    # imported that module, and only that one.
    read: Any = sys.modules[type(piece).__module__].read
    batches: Iterator[pa.RecordBatch] = read(piece, options)
    if options.columns:
        return (batch.select(options.columns) for batch in batches)
    return batches


class _StreamReader(DataSourceStreamReader):
    """Offsets: per origin instance, the origin txid read through (server_read.Positions), so
    a query resumes on any instance of the cluster; a batch reads each origin's range."""

    def __init__(self, found: tuple[str, ...], options: ReadOptions) -> None:
        self.servers = found
        self.options = options

    def initialOffset(self) -> dict[str, Any]:
        from amps.spark import server_read

        start = self.options.start.strip() or "now"
        if start in ("0", "epoch"):
            return server_read.Positions().offset()
        if start in ("now", "0|1|"):
            return server_read.probe(
                self.servers, self.options.topic, server_read.Positions()
            ).offset()
        raise InvalidOptions(f"option from={start!r}: a stream starts at 0 (epoch) or now")

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        from amps.spark import server_read

        since = server_read.Positions.from_offset(start)
        return server_read.probe(self.servers, self.options.topic, since).offset()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        from amps.spark import server_read

        return [
            InputPartition(piece)
            for piece in server_read.pieces(
                self.servers,
                server_read.Positions.from_offset(start),
                server_read.Positions.from_offset(end),
            )
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the positions live in Spark's checkpoint."""


class _Writer(DataSourceArrowWriter):
    def __init__(self, options: sink.SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from amps.spark import sink

        return _commit(sink.write(self.options, _partition(), None, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task returned after its rows were persisted: nothing is left to do."""


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: sink.SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from amps.spark import sink

        context = TaskContext.get()
        batch_id = None if context is None else context.getLocalProperty(sink.BATCH_ID_PROPERTY)
        if batch_id is None:
            raise RuntimeError(f"a stream task without the {sink.BATCH_ID_PROPERTY} property")
        return _commit(sink.write(self.options, _partition(), int(batch_id), iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task returned after its rows were persisted: nothing is left to do."""


class _Written(WriterCommitMessage):
    def __init__(self, written: dict[str, int]) -> None:
        self.written = written


def _commit(written: sink.Written) -> WriterCommitMessage:
    return _Written(asdict(written))


def _partition() -> int:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the amps sink runs inside Spark tasks")
    return context.partitionId()
