"""The Spark source, sink and queue report against references measured in the same run.

`.venv/bin/python -m bench.bench_spark [--rows N] [--sink-rows N] [--report-messages N]
[--only reads|sink|report]`

- journal read into `df.count()` and `groupBy(topic).count()`, rows/s, against the Arrow
  ceiling: a trivial Python data source yielding the same batches from memory; beside it the
  read as it was before the columnar decode (per-record objects, `amps_records`);
- server read rows/s against the `epoch` replay rate of the same instance (the Python client);
- sink rows/s against `amps publish` of the same rows;
- `amps report queues` over a journal of N messages (seconds).

Figures are printed, never asserted; the machine may be shared (compare the ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from amps.client import Client
from bench.common import json_payloads, temp_instance
from tests.harness.instance import process_env

ROUNDS = 3  # interleaved rounds of the journal read figures; the best of each is printed
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


def bench_reads(spark: Any, rows: int) -> None:
    from amps.spark import journal_read
    from amps.spark.options import ReadOptions

    with temp_instance("spark-read", journal_size="64MB") as instance:
        print(f"publishing {rows:,} rows of {BYTES} B ...", flush=True)
        asyncio.run(_publish(instance.address, "bench", rows))
        journal = str(instance.workdir / "journal")
        partitions = spark.read.format("amps").load(journal).rdd.getNumPartitions()
        count = spark.read.format("amps").load(journal).count()
        # The ceiling: the same rows, as 8192-row batches of this journal's own, from memory.
        first = next(journal_read.read(journal_read.plan(journal, ReadOptions())[0], ReadOptions()))
        repeats = max(1, rows // (first.num_rows * partitions))
        spark.dataSource.register(_ceiling_source(first, repeats, partitions))
        ceiling_rows = repeats * first.num_rows * partitions
        # The ceiling also as one equal piece per core: with more pieces than cores, equal
        # pieces leave a core idle at the end, which would flatter our ratio.
        # Before the columnar decode: the journal's reader and codec, per-record objects.
        spark.dataSource.register(_records_source())
        sources = {"amps": (journal, count), "amps_records": (journal, count),
                   "amps_ceiling": (None, ceiling_rows)}  # fmt: skip
        cores = os.cpu_count() or 1
        if cores != partitions:  # the same shape would only be measured twice
            per_core = max(1, ceiling_rows // (first.num_rows * cores))
            spark.dataSource.register(_ceiling_source(first, per_core, cores, "amps_ceiling_cores"))
            sources["amps_ceiling_cores"] = (None, per_core * first.num_rows * cores)
        best: dict[tuple[str, str], float] = {}
        cpu: dict[tuple[str, str], float] = {}  # the least CPU microseconds per row seen
        python: dict[tuple[str, str], float] = {}  # ... of Spark's Python workers, that query
        for _ in range(ROUNDS):  # interleaved, best of each: the machine's load comes and goes
            for name, (path, expected) in sources.items():
                for query in ("count", "groupBy"):
                    frame = spark.read.format(name).load(path) if path else spark.read.format(
                        name).load()  # fmt: skip
                    if query == "count":
                        got, seconds, used = _timed_cpu(frame.count)
                    else:
                        grouped, seconds, used = _timed_cpu(frame.groupBy("topic").count().collect)
                        got = sum(r["count"] for r in grouped)
                    assert got == expected, (name, query, got, expected)
                    rate = _rate(expected, seconds)
                    best[name, query] = max(best.get((name, query), 0.0), rate)
                    per_row = used * 1e6 / expected
                    if per_row < cpu.get((name, query), float("inf")):
                        cpu[name, query] = per_row
                        python[name, query] = last_python_cpu * 1e6 / expected
        for query, label in (("count", "count()"), ("groupBy", "groupBy(topic).count()")):
            if "amps_ceiling_cores" in sources:
                print(f"{label} ceiling as {partitions} pieces {best['amps_ceiling', query]:,.0f}"
                      f" rows/s, as {cores} {best['amps_ceiling_cores', query]:,.0f} rows/s: "
                      "the faster is the ceiling", flush=True)  # fmt: skip
                if best["amps_ceiling_cores", query] > best["amps_ceiling", query]:
                    for table in (best, cpu, python):
                        table["amps_ceiling", query] = table["amps_ceiling_cores", query]
            read, ceiling = best["amps", query], best["amps_ceiling", query]
            before = best["amps_records", query]
            print(f"journal read, {partitions} partitions, {label}: {read:,.0f} rows/s, "
                  f"ceiling {ceiling:,.0f} rows/s ({read / ceiling:.2f}x); per-record "
                  f"decode (before) {before:,.0f} rows/s ({before / ceiling:.2f}x)",
                  flush=True)  # fmt: skip
            ours, least, old = (cpu[n, query] for n in ("amps", "amps_ceiling", "amps_records"))
            print(f"  CPU per row (JVM and Python workers, least of {ROUNDS}): {ours:.2f} us, "
                  f"ceiling {least:.2f} us ({least / ours:.2f}x); per-record decode "
                  f"{old:.2f} us ({least / old:.2f}x)", flush=True)  # fmt: skip
            ours, least = python["amps", query], python["amps_ceiling", query]
            print(f"  of which Spark's Python workers: {ours:.2f} us, ceiling {least:.2f} us",
                  flush=True)  # fmt: skip

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
    parser.add_argument("--only", choices=("reads", "sink", "report"), help="one part only")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from tests.spark.conftest import session_builder

    spark = session_builder("local[2]", "amps-bench").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if args.only in (None, "reads"):
            bench_reads(spark, args.rows)
        if args.only in (None, "sink"):
            bench_sink(spark, args.sink_rows)
    finally:
        spark.stop()
    if args.only in (None, "report"):
        bench_report(args.report_messages)


if __name__ == "__main__":
    main()
