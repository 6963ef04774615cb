"""`amps report queues` on the journals of a real replicated queue (issue 10 with issue 9: R1,
R5): messages published on a, consumed only on c, move by transfer and are acknowledged on c.
The journals of a and c then show each message acknowledged once (a's by the removals c
replicated, logged with their origin and named by bookmark), every grant a -> c, and no message
acknowledged on two instances. (A double acknowledgement needs a proxied transfer behind
a partition; tests/spark/test_report.py checks the detector on such records.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from amps.spark.report import queue_report
from tests.cluster.conftest import clusters
from tests.cluster.test_replicated_queues import CLEAN, Consumers, drained, queue_xml, start
from tests.cluster.test_replication import publish
from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
__all__ = ["clusters"]  # the fixture, shared

COUNT = 20


async def test_each_instances_report_of_a_replicated_queue(
    spark: SparkSession, tmp_path: Path, clusters: list[Cluster]
) -> None:
    mesh = start(tmp_path, clusters, queue_xml())
    consumers = Consumers(mesh)
    await consumers.start("c")
    await publish(mesh["a"], "pub-a", COUNT)
    assert await drained(mesh, consumers, {"pub-a": COUNT}) == CLEAN
    # a holds c's removals as replicated (by bookmark, origin c); c its own (by txid).
    for name in ("a", "c"):
        [health], _end = queue_report(spark, str(mesh[name].workdir / "journal"))
        assert health.queue == "work", name
        assert health.acknowledged == COUNT, name
        assert health.transfers == {"a -> c": COUNT}, name
        assert health.double_acknowledged == [], name
        assert health.oldest_unacknowledged is None, name
