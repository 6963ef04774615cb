"""A stream over a replicated cluster fails over to another instance and resumes by origin
(issue 10, R3, R10): offsets are per origin instance, not one instance's txids.

Two instances replicate to each other and each takes its own publishes. A query copies the
topic (reading "a,b": it reads a), its last commit is deleted, a is SIGKILLed and b takes more
publishes; restarted from its checkpoint the query reads b: it re-runs the uncommitted batch
with the offsets planned on a, then goes on. The copy holds every message exactly once, and a
batch read of the cluster is planned one partition per origin.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from amps.client import BlockingClient, Client
from tests.harness.cluster import Cluster, cluster, full_mesh, wait_until
from tests.spark.test_stream import copy_until_caught_up

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

NAMES = ["a", "b"]
FIRST = 20  # per instance, before the first run
LATER = 15  # on b, after a is killed


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Cluster]:
    running = cluster(tmp_path, NAMES).start(full_mesh(NAMES, sync=False))
    try:
        yield running
    finally:
        running.kill()


def _publish(address: str, publisher: str, numbers: range) -> None:
    with BlockingClient(publisher) as client:
        client.connect(address)
        for n in numbers:
            client.publish("events", json.dumps({"p": publisher, "n": n}))
        client.flush(30)


def _replayed(address: str, topic: str) -> int:
    """How many messages of `topic` `address` replays from the epoch now."""

    async def count() -> int:
        async with Client("cs-counter") as client:
            await client.connect(address)
            sub = await client.subscribe(topic, bookmark="0")
            await sub.wait_completed(30)
            seen = 0
            while await sub.get(0) is not None:
                seen += 1
            return seen

    return asyncio.run(count())


def _until_replayed(address: str, topic: str, expected: int) -> None:
    asyncio.run(wait_until(lambda: _replayed(address, topic) == expected))


def _copy(spark: SparkSession, servers: str, checkpoint: Path) -> None:
    copy_until_caught_up(spark, servers, "events", "cluster-copier", checkpoint)


def test_a_stream_resumes_on_another_instance_by_origin(
    spark: SparkSession, pair: Cluster, tmp_path: Path
) -> None:
    a, b = pair["a"], pair["b"]
    _publish(a.address, "pa", range(FIRST))
    _publish(b.address, "pb", range(FIRST))
    for instance in (a, b):
        _until_replayed(instance.address, "events", 2 * FIRST)

    checkpoint = tmp_path / "checkpoint"
    both = f"{a.address},{b.address}"
    _copy(spark, both, checkpoint)
    commits = checkpoint / "commits"
    last = max((p for p in commits.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    offsets = json.loads((checkpoint / "offsets" / last.name).read_text().splitlines()[-1])
    # Positions per origin (origin txids count every record of the origin's own log).
    assert set(offsets["origins"]) == {"a", "b"}
    assert offsets["server"] == a.address
    # The copy replicated to b before a goes; the last batch is to be run again.
    _until_replayed(b.address, "events-copy", 2 * FIRST)
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)
    a.kill()

    _publish(b.address, "pb", range(FIRST, FIRST + LATER))
    _copy(spark, both, checkpoint)  # on b: the batch planned on a again, then what is new

    copy = spark.read.format("amps").option("server", both).option("topic", "events-copy").load()
    got = sorted((body["p"], body["n"]) for body in (json.loads(r.data) for r in copy.collect()))
    assert got == sorted(
        [("pa", n) for n in range(FIRST)] + [("pb", n) for n in range(FIRST + LATER)]
    )
    # A batch read of the cluster: one partition per origin instance of the topic.
    events = spark.read.format("amps").option("server", both).option("topic", "events").load()
    assert events.rdd.getNumPartitions() == 2
    per_origin = {
        r.origin_instance: r["count"] for r in events.groupBy("origin_instance").count().collect()
    }
    assert per_origin == {"a": FIRST, "b": FIRST + LATER}
