"""Batch reads into DataFrames (issue 10): a journal written by a real instance, read from its
directory and over gRPC from the instance: every row, exactly the published bodies and
bookmarks, in order per publisher; topic, filter and bookmark ranges; a journal appended to
while it is read."""

from __future__ import annotations

import json
import threading

import pytest
from pyspark.sql import SparkSession

from amps.client import BlockingClient
from amps.log.bookmarks import publisher_id_for
from tests.harness.instance import InstanceProcess

# A Spark session starts in ~10 s on a quiet machine and in minutes on a busy one.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

COUNT = 400  # per publisher


@pytest.fixture(scope="module")
def published(instance: InstanceProcess) -> dict[str, list[tuple[str, dict[str, object]]]]:
    """Two publishers, two topics: publisher -> [(topic, body)] in publish order."""
    sent: dict[str, list[tuple[str, dict[str, object]]]] = {}
    for name in ("reader-a", "reader-b"):
        with BlockingClient(name) as client:
            client.connect(instance.address)
            rows = sent.setdefault(name, [])
            for i in range(COUNT):
                topic = "prices" if i % 3 else "trades"
                body: dict[str, object] = {"who": name, "n": i, "text": "é" * (i % 5)}
                client.publish(topic, json.dumps(body))
                rows.append((topic, body))
            client.flush(30)
    return sent


def _journal(instance: InstanceProcess) -> str:
    return str(instance.workdir / "journal")


def _by_publisher(rows: list[dict[str, object]]) -> dict[str, list[tuple[int, str, object]]]:
    """publisher id -> [(sequence, topic, body)] in txid order."""
    out: dict[str, list[tuple[int, str, object]]] = {}
    for row in sorted(rows, key=lambda r: r["txid"]):  # type: ignore[arg-type,return-value]
        data = row["data"]
        assert isinstance(data, bytes | bytearray)
        out.setdefault(str(row["publisher"]), []).append(
            (row["sequence"], row["topic"], json.loads(data))  # type: ignore[arg-type]
        )
    return out


def _expected(published: dict[str, list[tuple[str, dict[str, object]]]], keep=lambda t, b: True):  # type: ignore[no-untyped-def]
    return {
        str(publisher_id_for(name)): [
            (seq, topic, body)
            for seq, (topic, body) in enumerate(rows, start=1)
            if keep(topic, body)
        ]
        for name, rows in published.items()
    }


def test_a_journal_directory_reads_as_every_published_row(
    spark: SparkSession,
    instance: InstanceProcess,
    published: dict[str, list[tuple[str, dict[str, object]]]],
) -> None:
    df = spark.read.format("amps").load(_journal(instance))
    rows = [r.asDict() for r in df.collect()]
    assert _by_publisher(rows) == _expected(published)
    for row in rows:
        assert row["bookmark"] == f"{row['publisher']}|{row['sequence']}|"
        assert row["kind"] == "publish"
        assert row["origin_instance"] == "amps-test"
    assert len({r["txid"] for r in rows}) == len(rows) == 2 * COUNT


def test_topic_filter_and_bookmark_range_select_rows(
    spark: SparkSession,
    instance: InstanceProcess,
    published: dict[str, list[tuple[str, dict[str, object]]]],
) -> None:
    path = _journal(instance)
    trades = (
        spark.read.format("amps").option("topic", "trades").option("filter", "/n >= 390").load(path)
    )
    assert _by_publisher([r.asDict() for r in trades.collect()]) == _expected(
        published, lambda t, b: t == "trades" and b["n"] >= 390
    )
    # A regex topic, and a range: after reader-a's 10th message through reader-b's 20th.
    a, b = publisher_id_for("reader-a"), publisher_id_for("reader-b")
    ranged = (
        spark.read.format("amps")
        .option("topic", "^(prices|trades)$")
        .option("from", f"{a}|10|")
        .option("to", f"{b}|20|")
        .load(path)
        .select("publisher", "sequence")
    )
    got = sorted((r.publisher, r.sequence) for r in ranged.collect())
    assert got == sorted(
        [(str(a), s) for s in range(11, COUNT + 1)] + [(str(b), s) for s in range(1, 21)]
    )


def test_a_schema_of_some_columns_reads_only_those(
    spark: SparkSession,
    instance: InstanceProcess,
    published: dict[str, list[tuple[str, dict[str, object]]]],
) -> None:
    """`.schema(...)` of some of the source's columns, in any order: those are the rows'
    columns (the others are not built); a column the source has not is refused by name."""
    path = _journal(instance)
    df = spark.read.format("amps").schema("txid long, topic string").option("topic", "trades")
    rows = df.load(path).collect()
    assert df.load(path).columns == ["txid", "topic"]
    everything = spark.read.format("amps").option("topic", "trades").load(path)
    assert sorted((r.txid, r.topic) for r in rows) == sorted(
        (r.txid, r.topic) for r in everything.collect()
    )
    trades = sum(1 for sent in published.values() for topic, _body in sent if topic == "trades")
    assert len(rows) == trades
    with pytest.raises(Exception, match="schema column 'price' is not one of the source's"):
        spark.read.format("amps").schema("price double").load(path).collect()


def test_the_same_rows_read_from_the_running_instance(
    spark: SparkSession,
    instance: InstanceProcess,
    published: dict[str, list[tuple[str, dict[str, object]]]],
) -> None:
    df = (
        spark.read.format("amps")
        .option("server", instance.address)
        .option("topic", "prices")
        .load()
    )
    rows = [r.asDict() for r in df.collect()]
    assert _by_publisher(rows) == _expected(published, lambda t, b: t == "prices")
    with_filter = (
        spark.read.format("amps")
        .option("server", instance.address)
        .option("topic", ".*")
        .option("filter", "/who = 'reader-b' AND /n < 5")
        .load()
    )
    assert sorted(json.loads(r.data)["n"] for r in with_filter.collect()) == [0, 1, 2, 3, 4]


def test_a_journal_appended_to_while_read_gives_a_consistent_prefix(
    spark: SparkSession, instance: InstanceProcess
) -> None:
    """Planning fixes the durable end: each publisher's rows are 1..k, none missing or twice."""
    stop = threading.Event()
    counts = {"sent": 0}

    def publish() -> None:
        with BlockingClient("appender") as client:
            client.connect(instance.address)
            while not stop.is_set() and counts["sent"] < 200_000:
                client.publish("appended", json.dumps({"i": counts["sent"]}))
                counts["sent"] += 1
                if counts["sent"] % 500 == 0:
                    client.flush(30)
            client.flush(30)

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        while counts["sent"] < 2000 and thread.is_alive():
            stop.wait(0.05)
        df = spark.read.format("amps").option("topic", "appended").load(_journal(instance))
        seqs = sorted(r.sequence for r in df.select("sequence").collect())
    finally:
        stop.set()
        thread.join(60)
    assert len(seqs) >= 1500  # what was flushed before planning is in
    assert seqs == list(range(1, len(seqs) + 1))
