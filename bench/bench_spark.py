"""The Spark source, sink and queue report against references measured in the same run.

`.venv/bin/python -m bench.bench_spark [--rows N] [--rounds N] [--sink-rows N]
[--report-messages N] [--only reads|sink|report]`

- journal read into `df.count()` and `groupBy(topic).count()`, rows/s, against the Arrow
  ceiling: a trivial Python data source yielding the same batches (size, schema, partitions)
  from memory. `--rounds` rounds, read and ceiling alternating within each (which goes first
  alternating too); each round is printed, then the median ratio and its spread (the ceiling
  alone moves up to 30 % between runs on this machine). Beside them: the read's decode in one
  process against an Arrow IPC write of the same batches, and the read as it was before the
  columnar decode (per-record objects, `amps_records`);
- server read rows/s against the `epoch` replay rate of the same instance (the Python client);
- sink rows/s against `amps publish` of the same rows;
- `amps report queues` over a journal of N messages (seconds).

Figures are printed, never asserted; the machine may be shared (compare the ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from amps.client import Client
from bench.common import json_payloads, temp_instance
from tests.harness.instance import process_env

ROUNDS = 5  # rounds of the journal read figures: the median ratio and its spread are printed
BYTES = 256  # payload size: the per-row costs, not the copy, are what is measured


def _rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("nan")


def _timed(action: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def _tree_ticks(root: int) -> dict[int, int]:
    """Per process, `root` and every process under it (Spark's JVM, its Python workers), the
    CPU clock ticks it used (user and system, with its reaped children's)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    mine: dict[int, int] = {}
    for pid, used in ticks.items():
        ancestor = pid
        while ancestor > 1 and ancestor != root:
            ancestor = parents.get(ancestor, 0)
        if ancestor == root:
            mine[pid] = used
    return mine


def _is_python_worker(pid: int) -> bool:
    """Whether `pid` is one of Spark's Python processes (its daemons and their workers)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"\0-m\0pyspark." in command  # not the JVM, whose class path names pyspark too


# CPU seconds of Spark's Python workers in the last _timed_cpu (the rest: the JVM, mostly).
last_python_cpu = 0.0


def _timed_cpu(action: Any) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds of this process tree): what a query cost, whatever
    the machine's load. A process that ended meanwhile counts only if its parent reaped it."""
    global last_python_cpu
    before = _tree_ticks(os.getpid())
    result, seconds = _timed(action)
    after = _tree_ticks(os.getpid())
    spent = {pid: max(0, t - before.get(pid, 0)) for pid, t in after.items()}
    tick = os.sysconf("SC_CLK_TCK")
    last_python_cpu = sum(t for pid, t in spent.items() if _is_python_worker(pid)) / tick
    return result, seconds, sum(spent.values()) / tick


async def _publish(address: str, topic: str, rows: int) -> None:
    payloads = json_payloads(size=BYTES)
    client = Client(f"bench-{uuid.uuid4().hex[:8]}")
    await client.connect(address)
    for i in range(rows):
        await client.publish(topic, payloads[i % len(payloads)])
    await client.flush(600)
    await client.close()


async def _replay_rate(address: str, topic: str, rows: int) -> float:
    client = Client(f"bench-replay-{uuid.uuid4().hex[:8]}")
    await client.connect(address)
    started = time.perf_counter()
    sub = await client.subscribe(topic, bookmark="0")
    seen = 0
    while seen < rows:
        if await sub.get(60) is None:
            break
        seen += 1
    elapsed = time.perf_counter() - started
    await client.close()
    return _rate(seen, elapsed)


def _ceiling_source(
    batch: pa.RecordBatch, repeats: int, partitions: int, name: str = "amps_ceiling"
) -> type:
    """A Python data source that yields `batch` `repeats` times per partition, from memory."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from amps.spark.rows import SCHEMA_DDL

    payload = batch.serialize().to_pybytes()

    class _Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            from amps.spark.rows import ARROW_SCHEMA

            one = pa.ipc.read_record_batch(pa.py_buffer(payload), ARROW_SCHEMA)
            for _ in range(repeats):
                yield one

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema: Any) -> DataSourceReader:
            return _Reader()

    return Ceiling


def _records_source() -> type:
    """The journal read as it was before the columnar decode: every piece through the journal's
    reader and codec into per-record objects, then Python lists per column (`read_records`)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from amps.spark import journal_read
    from amps.spark.options import ReadOptions
    from amps.spark.rows import SCHEMA_DDL

    class _Reader(DataSourceReader):
        def __init__(self, path: str) -> None:
            self.path = path

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in journal_read.plan(self.path, ReadOptions())]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            piece = partition.value
            return journal_read.read_records(piece, ReadOptions(), piece.first_txid)

    class Records(DataSource):
        @classmethod
        def name(cls) -> str:
            return "amps_records"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema: Any) -> DataSourceReader:
            return _Reader(self.options["path"])

    return Records


@dataclass
class _Figure:
    """One query of one source: its wall rate, and the CPU per row of the whole process tree
    and of Spark's Python workers alone."""

    rate: float
    cpu_us: float
    python_us: float


def _measure(spark: Any, name: str, query: str, path: str | None, expected: int) -> _Figure:
    """`count()` or `groupBy(topic).count()` of source `name`, checked against `expected`."""
    frame = spark.read.format(name).load(path) if path else spark.read.format(name).load()
    if query == "count":
        got, seconds, used = _timed_cpu(frame.count)
    else:
        grouped, seconds, used = _timed_cpu(frame.groupBy("topic").count().collect)
        got = sum(r["count"] for r in grouped)
    assert got == expected, (name, query, got, expected)
    return _Figure(
        _rate(expected, seconds), used * 1e6 / expected, last_python_cpu * 1e6 / expected
    )


def _spread(values: list[float]) -> str:
    """`median (min-max)` of ratios."""
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}x)"


def bench_reads(spark: Any, rows: int, rounds: int) -> None:
    from amps.spark import journal_read
    from amps.spark.options import ReadOptions

    with temp_instance("spark-read", journal_size="64MB") as instance:
        print(f"publishing {rows:,} rows of {BYTES} B ...", flush=True)
        asyncio.run(_publish(instance.address, "bench", rows))
        journal = str(instance.workdir / "journal")
        bench_decode(journal, DECODE_REPEATS)
        partitions = spark.read.format("amps").load(journal).rdd.getNumPartitions()
        count = spark.read.format("amps").load(journal).count()
        # The ceiling: the same rows, as batches of this journal's own read (the same size and
        # schema), from memory, in as many partitions as the read's.
        first = next(
            journal_read.read(journal_read.parts(journal, ReadOptions())[0], ReadOptions())
        )
        repeats = max(1, rows // (first.num_rows * partitions))
        spark.dataSource.register(_ceiling_source(first, repeats, partitions))
        ceilings = {"amps_ceiling": (None, repeats * first.num_rows * partitions)}
        cores = os.cpu_count() or 1
        if cores != partitions:
            # The ceiling also as one equal piece per core (the faster of the two counts): with
            # more pieces than cores, equal pieces leave a core idle at the end.
            per_core = max(1, rows // (first.num_rows * cores))
            spark.dataSource.register(_ceiling_source(first, per_core, cores, "amps_ceiling_cores"))
            ceilings["amps_ceiling_cores"] = (None, per_core * first.num_rows * cores)
        sources = {"amps": (journal, count), **ceilings}
        print(f"journal read: {count:,} rows in {partitions} partitions on {cores} cores; "
              f"ceiling: batches of {first.num_rows:,} rows from memory, "
              f"{' and '.join(f'{n:,}' for _p, n in ceilings.values())} rows",
              flush=True)  # fmt: skip
        for name, (path, expected) in sources.items():  # warm-up: JIT, Python workers
            for query in QUERIES:
                _measure(spark, name, query, path, expected)
        ratios: dict[str, list[float]] = {query: [] for query in QUERIES}
        figures: dict[tuple[str, str], list[_Figure]] = {}
        for round_ in range(1, rounds + 1):
            for query, label in QUERIES.items():
                # Read and ceiling alternate, and which goes first alternates from round to
                # round: the machine's load comes and goes.
                order = list(sources) if round_ % 2 else list(reversed(sources))
                got = {name: _measure(spark, name, query, *sources[name]) for name in order}
                ceiling = max((got[name] for name in ceilings), key=lambda f: f.rate)
                ours = got["amps"]
                for name, figure in (("amps", ours), ("ceiling", ceiling)):
                    figures.setdefault((name, query), []).append(figure)
                ratios[query].append(ours.rate / ceiling.rate)
                print(f"round {round_} {label}: read {ours.rate:,.0f} rows/s, ceiling "
                      f"{ceiling.rate:,.0f} rows/s ({ours.rate / ceiling.rate:.2f}x); CPU per row "
                      f"{ours.cpu_us:.2f} us against {ceiling.cpu_us:.2f} us, of which Spark's "
                      f"Python workers {ours.python_us:.2f} against {ceiling.python_us:.2f}",
                      flush=True)  # fmt: skip
        for query, label in QUERIES.items():
            ours_f, ceiling_f = figures["amps", query], figures["ceiling", query]
            median = {n: statistics.median(getattr(f, n) for f in ceiling_f) for n in _FIELDS}
            mine = {n: statistics.median(getattr(f, n) for f in ours_f) for n in _FIELDS}
            print(f"journal read {label}, median of {rounds} rounds: {_spread(ratios[query])} "
                  f"of the ceiling; read {mine['rate']:,.0f} rows/s, ceiling "
                  f"{median['rate']:,.0f} rows/s ({min(f.rate for f in ceiling_f):,.0f}-"
                  f"{max(f.rate for f in ceiling_f):,.0f}); CPU per row {mine['cpu_us']:.2f} us "
                  f"against {median['cpu_us']:.2f} us "
                  f"({median['cpu_us'] / mine['cpu_us']:.2f}x), Python workers "
                  f"{mine['python_us']:.2f} against {median['python_us']:.2f} us",
                  flush=True)  # fmt: skip

        # Before the columnar decode: the journal's reader and codec, per-record objects (once).
        spark.dataSource.register(_records_source())
        old = _measure(spark, "amps_records", "count", journal, count)
        print(f"per-record decode (before the columnar one), count(): {old.rate:,.0f} rows/s, "
              f"{old.cpu_us:.2f} us CPU per row", flush=True)  # fmt: skip

        replay, _, replay_cpu = _timed_cpu(
            lambda: asyncio.run(_replay_rate(instance.address, "bench", rows))
        )
        server = spark.read.format("amps").option("server", instance.address)
        s_count, s_seconds, s_cpu = _timed_cpu(
            lambda: server.option("topic", "bench").load().count()
        )
        served = _rate(s_count, s_seconds)
        print(f"server read: {served:,.0f} rows/s against the client's epoch replay "
              f"{replay:,.0f} msg/s ({served / replay:.2f}x); CPU per row (instance, Spark, "
              f"client) {s_cpu * 1e6 / s_count:.2f} us against {replay_cpu * 1e6 / rows:.2f} us "
              f"({replay_cpu / rows / (s_cpu / s_count):.2f}x)", flush=True)  # fmt: skip


QUERIES = {"count": "count()", "groupBy": "groupBy(topic).count()"}
_FIELDS = ("rate", "cpu_us", "python_us")
DECODE_REPEATS = 7


def bench_decode(journal: str, repeats: int) -> None:
    """In this process, best of `repeats`: the journal read's CPU per row (what a Spark Python
    worker spends to make the batches) beside an Arrow IPC write of the same batches (what
    every Python worker spends to hand batches to the JVM, the ceiling's included)."""
    from amps.spark import journal_read
    from amps.spark.options import ReadOptions

    options = ReadOptions()
    parts = journal_read.parts(journal, options)

    def decode() -> list[pa.RecordBatch]:
        return [batch for part in parts for batch in journal_read.read(part, options)]

    def write(batches: list[pa.RecordBatch]) -> None:
        with pa.ipc.new_stream(pa.BufferOutputStream(), batches[0].schema) as writer:
            for batch in batches:
                writer.write_batch(batch)

    batches = decode()
    n = sum(batch.num_rows for batch in batches)
    best = {"decode": float("inf"), "write": float("inf")}
    for _ in range(repeats):  # alternating, least CPU of each
        for name, action in (("decode", decode), ("write", lambda: write(batches))):
            started = time.process_time()
            action()
            best[name] = min(best[name], time.process_time() - started)
    print(f"journal read in one process (best of {repeats}): {best['decode'] * 1e9 / n:.0f} ns "
          f"CPU per row; an Arrow IPC write of the same {len(batches)} batches "
          f"{best['write'] * 1e9 / n:.0f} ns per row", flush=True)  # fmt: skip


def bench_sink(spark: Any, rows: int) -> None:
    payloads = [p.decode() for p in json_payloads(size=BYTES)]
    lines = "\n".join(payloads[i % len(payloads)] for i in range(rows)) + "\n"
    with temp_instance("spark-sink", journal_size="64MB") as instance:
        published = subprocess.run(
            [sys.executable, "-m", "amps", "publish", "--server", instance.address, "--topic",
             "cli", "--client-name", "bench-cli"],
            input=lines, text=True, capture_output=True, env=process_env(), check=True,
        )  # fmt: skip
        del published
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "amps", "publish", "--server", instance.address, "--topic",
             "cli2", "--client-name", "bench-cli2"],
            input=lines, text=True, capture_output=True, env=process_env(), check=True,
        )  # fmt: skip
        cli = _rate(rows, time.perf_counter() - started)
        df = spark.createDataFrame(
            [(payloads[i % len(payloads)],) for i in range(rows)], "data string"
        )
        df = df.repartition(2).cache()
        df.count()

        def write(publisher: str) -> None:
            df.write.format("amps").mode("append").option("server", instance.address).option(
                "topic", "sunk").option("publisher", publisher).save()  # fmt: skip

        write("warm-up")
        _, seconds = _timed(lambda: write("bench-sink"))
        sink = _rate(rows, seconds)
        _, again = _timed(lambda: write("bench-sink"))  # every row already held: skipped
        print(
            f"sink: {sink:,.0f} rows/s against amps publish {cli:,.0f} msg/s "
            f"({sink / cli:.2f}x); the same job again (all skipped) {again:.2f} s",
            flush=True,
        )


async def _report_journal(directory: Path, messages: int) -> None:
    from amps.log.journal import Journal
    from amps.log.records import QueueAction, QueueRecord

    journal = Journal.open(directory)
    start = 1_800_000_000_000_000
    payload = json_payloads(count=1, size=BYTES)[0]
    step = 1000
    for first in range(0, messages, step):
        txids = []
        for i in range(first, min(messages, first + step)):
            record = journal.append_publish(
                topic="jobs-topic", data=payload, publisher_id=9, seq=i + 1,
                timestamp_us=start + i * 1000,
            )  # fmt: skip
            txids.append(record.txid)
        now = start + (first + step) * 1000 + 50_000
        journal.append(QueueRecord(
            0, now, "jobs", QueueAction.ACK, txids=tuple(txids),
            delivered_us=tuple(now - 30_000 for _ in txids),
            deliveries=tuple(1 + (t % 10 == 0) for t in txids),
        ))  # fmt: skip
        if first % 100_000 == 0:
            await journal.commit()
    await journal.commit()
    await journal.close()


def bench_report(messages: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="bench-report-")) / "journal"
    asyncio.run(_report_journal(directory, messages))
    out = directory.parent / "report.html"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "amps", "report", "queues", "--journal", str(directory),
         "--out", str(out), "--master", "local[2]"],
        env=process_env(), check=True, capture_output=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    print(f"amps report queues over {messages:,} messages: {seconds:.1f} s "
          f"(Spark start included; {out.stat().st_size:,} B of HTML)", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--sink-rows", type=int, default=100_000)
    parser.add_argument("--report-messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of the journal reads")
    parser.add_argument("--only", choices=("reads", "sink", "report"), help="one part only")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from tests.spark.conftest import session_builder

    spark = session_builder("local[2]", "amps-bench").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if args.only in (None, "reads"):
            bench_reads(spark, args.rows, args.rounds)
        if args.only in (None, "sink"):
            bench_sink(spark, args.sink_rows)
    finally:
        spark.stop()
    if args.only in (None, "report"):
        bench_report(args.report_messages)


if __name__ == "__main__":
    main()
