"""Queue topologies refused at the link's handshake between real instances, the archive that
takes only a queue's underlying topic, and a LocalQueue kept per instance (issue 9: R2, R8)."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

from amps.client import Client
from tests.cluster.test_replication import publish, read_all
from tests.cluster.test_sync import replication_status
from tests.cluster.test_topologies import (  # the fixture too
    QUEUE,
    queue_depth,
)
from tests.harness.cluster import Cluster, Link, cluster, full_mesh, wait_until
from tests.harness.instance import amps_cli
from tests.harness.streams import more_within, take

# b's `work` stores its messages on another topic than a's.
OTHER_UNDERLYING = QUEUE.replace("<UnderlyingTopic>orders<", "<UnderlyingTopic>jobs<")


def refusals(running: Cluster, name: str) -> dict[str, dict[str, str]]:
    """The refusal the admin view shows per peer of `name` (links that are not refused left out)."""
    links = replication_status(running[name].admin_port)["links"]
    assert isinstance(links, list)
    return {link["peer"]: link["refused"] for link in links if link["refused"]}


def refused(running: Cluster, name: str, peer: str) -> bool:
    """Whether `name`'s admin view shows its link with `peer` refused."""
    return peer in refusals(running, name)


async def test_a_queue_defined_differently_is_refused_on_both_sides_and_nothing_flows(
    tmp_path: Path,
    clusters: list[Cluster],
) -> None:
    """R8: `work` is over `orders` on a and over `jobs` on b: the link is refused as
    queue_topology, both sides log a message naming both instances and the difference, the
    admin view shows it, and no record crosses (async links: the refusal holds no acks)."""
    pair = cluster(tmp_path, ["a", "b"])
    clusters.append(pair)
    pair.start(full_mesh(["a", "b"], sync=False), {"a": QUEUE, "b": OTHER_UNDERLYING})
    difference = "queue 'work' has UnderlyingTopic"
    for name in ("a", "b"):
        line = await asyncio.to_thread(pair[name].wait_for_output, difference)
        assert "refused" in line
        assert "(group a)" in line
        assert "(group b)" in line
        assert "'orders' on" in line
        assert "'jobs' on" in line
    for name, peer in (("a", "b"), ("b", "a")):
        await wait_until(partial(refused, pair, name, peer))
        shown = refusals(pair, name)[peer]
        assert shown["code"] == "queue_topology"
        assert difference in shown["message"]
    server = f"127.0.0.1:{pair['a'].admin_port}"
    listed = await asyncio.to_thread(amps_cli, "admin", "replication", "--server", server)
    assert listed.returncode == 0, listed.stderr
    (line,) = [x for x in listed.stdout.splitlines() if x.startswith("link with b refused")]
    assert "(queue_topology)" in line
    assert difference in line
    await publish(pair["a"], "pub-a", 5)
    assert len(await read_all(pair["a"], 5)) == 5
    async with Client("check-b") as client:
        await client.connect(pair["b"].address)
        orders = await client.subscribe("orders", bookmark="epoch")
        assert await more_within(orders, 1.0) == []
    assert await asyncio.to_thread(queue_depth, pair["b"]) == 0
    assert await asyncio.to_thread(queue_depth, pair["a"]) == 5


async def test_of_three_instances_only_the_links_to_the_one_without_the_queue_are_refused(
    tmp_path: Path,
    clusters: list[Cluster],
) -> None:
    """R8: a and b define `work`, c does not (its `orders` is a plain topic): a <-> b carries
    the queue, a <-> c and b <-> c are refused, each naming c as the instance without it."""
    mesh = cluster(tmp_path, ["a", "b", "c"])
    clusters.append(mesh)
    mesh.start(full_mesh(["a", "b", "c"], sync=False), {"a": QUEUE, "b": QUEUE})
    for name, peer in (("a", "c"), ("b", "c"), ("c", "a"), ("c", "b")):
        await wait_until(partial(refused, mesh, name, peer))
        shown = refusals(mesh, name)[peer]
        assert shown["code"] == "queue_topology"
        owner = name if name != "c" else peer
        assert f"queue 'work' is a Queue on {owner} and not a queue on c" in shown["message"]
    assert "b" not in refusals(mesh, "a")
    await publish(mesh["a"], "pub-a", 3)
    await wait_until(lambda: queue_depth(mesh["b"]) == 3)
    async with Client("check-c") as client:
        await client.connect(mesh["c"].address)
        orders = await client.subscribe("orders", bookmark="epoch")
        assert await more_within(orders, 1.0) == []


async def test_an_archive_that_takes_only_the_underlying_topic_is_allowed(
    tmp_path: Path,
    clusters: list[Cluster],
) -> None:
    """R8: a replicates `orders` (the queue `work`'s data), not `work`, to an archive without
    the queue: the link comes up and the archive records every message."""
    pair = cluster(tmp_path, ["a", "archive"])
    clusters.append(pair)
    pair.start({"a": [Link("archive", topics=("orders",))]}, {"a": QUEUE})
    await publish(pair["a"], "pub-a", 5)  # sync: the archive's acks release the publishes
    assert len(await read_all(pair["archive"], 5)) == 5
    assert refusals(pair, "a") == {}
    assert refusals(pair, "archive") == {}
    assert await asyncio.to_thread(queue_depth, pair["a"]) == 5


async def test_a_local_queue_keeps_its_copy_when_the_same_queue_is_acked_elsewhere(
    tmp_path: Path,
    clusters: list[Cluster],
) -> None:
    """R2: a LocalQueue is never replicated: with every topic replicated (`.*` takes its name
    too), an ack on a removes a's copy only; b still delivers its own."""
    local = QUEUE.replace("<Queue>", "<LocalQueue>").replace("</Queue>", "</LocalQueue>")
    pair = cluster(tmp_path, ["a", "b"])
    clusters.append(pair)
    pair.start(full_mesh(["a", "b"]), {"a": local, "b": local})
    await publish(pair["a"], "pub-a", 3)
    async with Client("consumer") as consumer:
        await consumer.connect(pair["a"].address)
        subscription = await consumer.subscribe("work")
        for _ in range(3):
            (message,) = await take(subscription, 1)
            await message.ack()
        await consumer.flush_acks()
    await wait_until(lambda: queue_depth(pair["a"]) == 0)
    # a's acks precede this publish in a's log, so b has them once it has the publish.
    await publish(pair["a"], "pub-a", 1, start=4)
    await wait_until(lambda: queue_depth(pair["a"]) == 1)
    assert len(await read_all(pair["b"], 4)) == 4
    assert await asyncio.to_thread(queue_depth, pair["b"]) == 4
