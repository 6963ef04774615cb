"""The exactly-once sink (issue 10, L4, L5): a task that fails once and is retried, a re-run
job and a job without a publisher name each leave every row in the topic exactly once (checked
by replaying the journal); rows written into a queue's topic reach its consumers once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, struct, to_json, udf

from amps.client import BlockingClient
from amps.log.bookmarks import publisher_id_for
from tests.harness.instance import InstanceProcess

# A Spark session starts in ~10 s on a quiet machine and in minutes on a busy one.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

ROWS = 2000


def _topic_rows(
    spark: SparkSession, instance: InstanceProcess, topic: str
) -> list[dict[str, object]]:
    df = spark.read.format("amps").option("topic", topic).load(str(instance.workdir / "journal"))
    return [r.asDict() for r in df.select("data", "publisher", "sequence").collect()]


def _bodies(rows: list[dict[str, object]]) -> Counter[int]:
    return Counter(json.loads(r["data"])["i"] for r in rows)  # type: ignore[arg-type]


def _write(df: DataFrame, instance: InstanceProcess, topic: str, publisher: str | None) -> None:
    writer = df.write.format("amps").mode("append").option("server", instance.address)
    writer = writer.option("topic", topic)
    if publisher is not None:
        writer = writer.option("publisher", publisher)
    writer.save()


def test_a_retried_task_and_a_rerun_job_publish_each_row_once(
    spark: SparkSession, instance: InstanceProcess, tmp_path: Path
) -> None:
    failed = tmp_path / "failed-once"

    def make_topic(i: int) -> str | None:
        # The second partition's first attempt ends on a row without a topic: the sink fails
        # there, after it has sent the rows before it, and Spark retries the task.
        context = TaskContext.get()
        if i == ROWS - 1 and context is not None and context.attemptNumber() == 0:
            failed.touch()
            return None
        return "sunk"

    topic = udf(make_topic, "string", useArrow=False)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16")
    try:
        df = spark.range(0, ROWS, numPartitions=2).select(
            topic(col("id")).alias("topic"), to_json(struct(col("id").alias("i"))).alias("data")
        )
        for _ in range(2):  # the same job, run again
            df.write.format("amps").mode("append").option("server", instance.address).option(
                "publisher", "sink-test"
            ).save()
        assert failed.exists()  # the retry happened
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    rows = _topic_rows(spark, instance, "sunk")
    assert _bodies(rows) == Counter(range(ROWS))
    # Partition p publishes as sink-test.p<p>, its rows numbered from 1.
    by_publisher = Counter((str(r["publisher"]), r["sequence"]) for r in rows)
    assert by_publisher == Counter(
        (str(publisher_id_for(f"sink-test.p{p}")), seq)
        for p in (0, 1)
        for seq in range(1, ROWS // 2 + 1)
    )


def test_without_a_publisher_name_the_same_job_twice_writes_once(
    spark: SparkSession, instance: InstanceProcess
) -> None:
    df = spark.range(0, 50, numPartitions=1).selectExpr("to_json(named_struct('i', id)) AS data")
    _write(df, instance, "sunk-default", None)
    _write(df, instance, "sunk-default", None)
    rows = _topic_rows(spark, instance, "sunk-default")
    assert _bodies(rows) == Counter(range(50))
    # The derived name: spark-<topic>, partition 0.
    assert {str(r["publisher"]) for r in rows} == {str(publisher_id_for("spark-sunk-default.p0"))}
    # Another publisher name is another publisher: its rows are new (what de-duplication keys on).
    _write(df, instance, "sunk-default", "someone-else")
    assert _bodies(_topic_rows(spark, instance, "sunk-default")) == Counter(list(range(50)) * 2)


def test_rows_written_into_a_queue_reach_its_consumers_once(
    spark: SparkSession, instance: InstanceProcess
) -> None:
    """A `topic` column per row; the queue `jobs` takes `jobs-topic`."""
    df = spark.range(0, 40, numPartitions=2).selectExpr(
        "'jobs-topic' AS topic", "to_json(named_struct('i', id)) AS data"
    )
    for _ in range(2):
        df.write.format("amps").mode("append").option("server", instance.address).option(
            "publisher", "queue-writer"
        ).save()
    got: Counter[int] = Counter()
    with BlockingClient("queue-consumer") as client:
        client.connect(instance.address)
        sub = client.subscribe("jobs")
        while sum(got.values()) < 40:
            message = sub.next_message(timeout_s=30)
            assert message is not None, f"only {sorted(got)} arrived"
            got[json.loads(message.data)["i"]] += 1
            client.ack(message)
        client.flush_acks()
        assert client.sow("jobs") == []  # nothing else waits in the queue
    assert got == Counter(range(40))
