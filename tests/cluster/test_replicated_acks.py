"""A queue acknowledgement made on one instance before the message it names has arrived there
(issue 8 "Clients", issue 9: acks on any instance, the deferred-ack list)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from amps.client import Client
from amps.log.bookmarks import publisher_id_for
from tests.cluster.test_replication import publish, read_all
from tests.cluster.test_topologies import (  # the fixture too
    QUEUE,
    queue_depth,
)
from tests.harness.cluster import Cluster, cluster, cluster_configs, full_mesh, wait_until
from tests.harness.instance import InstanceProcess


async def test_an_ack_before_its_message_waits_for_it_and_removes_it_everywhere(
    tmp_path: Path,
    clusters: list[Cluster],
) -> None:
    """A consumer that failed over to b acks there a message b has not received yet (a
    replicated queue: it may be on its way). b keeps the ack in its deferred acks instead of
    refusing it; when the message arrives it leaves the queue at once, and b's ack reaches a."""
    pair = cluster(tmp_path, ["a", "b"])
    clusters.append(pair)
    configs = cluster_configs(
        pair.names,
        full_mesh(pair.names, sync=False),
        pair.replication_ports,
        {"a": QUEUE, "b": QUEUE},
    )
    pair.instances["b"] = InstanceProcess(tmp_path / "b", configs["b"]).start()
    bookmark = f"{publisher_id_for('pub-a')}|1|"
    async with Client("consumer") as consumer:
        await consumer.connect(pair["b"].address)
        assert await consumer.sow_delete("work", bookmark=bookmark) == 0
    pair.instances["a"] = InstanceProcess(tmp_path / "a", configs["a"]).start()
    await publish(pair["a"], "pub-a", 1)
    ((_, _, published),) = await read_all(pair["a"], 1)
    assert published == bookmark
    assert len(await read_all(pair["b"], 1)) == 1
    await wait_until(lambda: queue_depth(pair["b"]) == 0)
    await wait_until(lambda: queue_depth(pair["a"]) == 0)
    assert await asyncio.to_thread(queue_depth, pair["b"]) == 0
