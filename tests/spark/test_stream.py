"""A stream from a running instance into the sink (issue 10): published in rounds, the query
stopped and restarted from its checkpoint, its last commit deleted so Spark re-runs that batch
with the same offsets: the copy holds every message exactly once, in order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from amps.client import BlockingClient
from tests.harness.instance import InstanceProcess

# A Spark session starts in ~10 s on a quiet machine and in minutes on a busy one.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

PER_ROUND = 30


def _publish_round(instance: InstanceProcess, round_number: int) -> None:
    with BlockingClient("rounds-publisher") as client:
        client.connect(instance.address)
        for i in range(PER_ROUND):
            client.publish("rounds", json.dumps({"r": round_number, "i": i}))
        client.flush(30)


def copy_until_caught_up(
    spark: SparkSession, servers: str, topic: str, publisher: str, checkpoint: Path
) -> None:
    """Run the query that copies `topic` into `<topic>-copy` until it has read everything."""
    query = (
        spark.readStream.format("amps")
        .option("server", servers)
        .option("topic", topic)
        .option("from", "0")
        .load()
        .select("data")
        .writeStream.format("amps")
        .option("server", servers)
        .option("topic", f"{topic}-copy")
        .option("publisher", publisher)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def _run_until_caught_up(spark: SparkSession, instance: InstanceProcess, checkpoint: Path) -> None:
    copy_until_caught_up(spark, instance.address, "rounds", "copier", checkpoint)


def test_a_restarted_stream_and_a_rerun_batch_copy_every_message_once(
    spark: SparkSession, instance: InstanceProcess, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    _publish_round(instance, 0)
    _run_until_caught_up(spark, instance, checkpoint)
    _publish_round(instance, 1)
    _run_until_caught_up(spark, instance, checkpoint)  # restarted from its checkpoint
    commits = checkpoint / "commits"
    last = max((p for p in commits.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last.unlink()  # Spark re-runs that batch with the offsets it logged for it
    (commits / f".{last.name}.crc").unlink(missing_ok=True)  # the local file system's checksum
    _publish_round(instance, 2)
    _run_until_caught_up(spark, instance, checkpoint)
    offsets = json.loads((checkpoint / "offsets" / last.name).read_text().splitlines()[-1])
    # Per origin instance (here the one instance itself), and where it was read.
    assert set(offsets["origins"]) == {"amps-test"}
    assert offsets["server"] == instance.address

    copy = (
        spark.read.format("amps")
        .option("topic", "rounds-copy")
        .load(str(instance.workdir / "journal"))
        .orderBy("txid")
        .select("data")
        .collect()
    )
    got = [tuple(json.loads(r.data).values()) for r in copy]
    assert got == [(r, i) for r in range(3) for i in range(PER_ROUND)]
