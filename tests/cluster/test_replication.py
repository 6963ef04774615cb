"""Three real instances replicating to each other on 127.0.0.1 (issue 8: D1, R9, R10, L2, L4).

Every scenario ends with the checker: lost, duplicated and out-of-order messages per publisher
on every instance, all zero.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from amps.client import Client
from tests.cluster.checker import assert_clean, check
from tests.harness.cluster import Cluster, cluster, full_mesh, wait_until
from tests.harness.instance import InstanceProcess
from tests.harness.streams import take

NAMES = ["a", "b", "c"]
COUNT = 200
TIMEOUT_S = 60


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Cluster]:
    running = cluster(tmp_path, NAMES).start(full_mesh(NAMES))
    try:
        yield running
    finally:
        running.kill()


def instance_status(instance: InstanceProcess) -> dict[str, Any]:
    """The instance's `/amps/instance` admin view."""
    url = f"http://127.0.0.1:{instance.admin_port}/amps/instance"
    with urllib.request.urlopen(url, timeout=10) as response:
        status: dict[str, Any] = orjson.loads(response.read())
    return status


async def publish(instance: InstanceProcess, publisher: str, count: int, start: int = 1) -> None:
    async with Client(publisher) as client:
        await client.connect(instance.address)
        for n in range(start, start + count):
            await client.publish("orders", orjson.dumps({"p": publisher, "n": n}))
        await client.flush(timeout_s=TIMEOUT_S)


async def read_all(instance: InstanceProcess, count: int) -> list[tuple[str, int, str]]:
    """Replay `orders` from epoch on `instance`: (publisher, n, bookmark) in arrival order."""
    async with Client(f"reader-{instance.port}") as client:
        await client.connect(instance.address)
        messages = await take(await client.subscribe("orders", bookmark="epoch"), count, TIMEOUT_S)
    out = []
    for message in messages:
        body = message.json()
        out.append((body["p"], body["n"], message.bookmark))
    return out


async def test_publish_on_each_read_on_every_other_in_order_with_the_same_bookmarks(
    mesh: Cluster,
) -> None:
    """D1/L1: a message published on any instance reaches every other, in its publisher's
    order, with the bookmark it has on its own instance. A live subscriber with the `origin`
    option (the Spark stream's, issue 10) learns each message's origin instance and origin
    txid, in each origin's order."""
    async with Client("origin-watcher") as watcher:
        await watcher.connect(mesh["c"].address)
        live = await watcher.subscribe("orders", options="origin")
        await asyncio.gather(*(publish(mesh[n], f"pub-{n}", COUNT) for n in NAMES))
        watched = await take(live, COUNT * len(NAMES), TIMEOUT_S)
    positions: dict[str, list[int]] = {}
    for message in watched:
        assert message.origin_instance == message.json()["p"].removeprefix("pub-")
        positions.setdefault(message.origin_instance, []).append(message.origin_txid)
    assert sorted(positions) == NAMES
    assert all(txids == sorted(set(txids)) and txids[0] > 0 for txids in positions.values())
    expected = {f"pub-{n}": COUNT for n in NAMES}
    bookmarks: dict[tuple[str, int], str] = {}
    for name in NAMES:
        got = await read_all(mesh[name], COUNT * len(NAMES))
        assert_clean(check(((p, n) for p, n, _ in got), expected), name)
        for publisher, number, bookmark in got:
            assert bookmarks.setdefault((publisher, number), bookmark) == bookmark
    # Where a replicated message's time went (amps.server.hops): every instance sent batches
    # that were acknowledged, and made its peers' batches durable.
    for name in NAMES:
        hops = (await asyncio.to_thread(instance_status, mesh[name]))["hops"]
        for hop in (
            "link_send_wait",
            "link_write",
            "link_ack_wait",
            "link_acked",
            "replicated_durable",
        ):
            assert hops[hop]["count"] > 0, (name, hop, hops)
        # Each batch is timed from durable to acknowledged once at most: against the batches
        # sent (link_send_wait), not those whose write gRPC reported done (link_ack_wait): a
        # peer's ack can come before that report, and the last batches' then stay untimed.
        assert hops["link_acked"]["count"] <= hops["link_send_wait"]["count"], (name, hops)
        # The replication lag of every publish that came from a peer, origin -> durable here:
        # in a full mesh each instance makes the two others' publishes durable, once each.
        lag = hops["replicated_lag"]
        assert lag["count"] == COUNT * (len(NAMES) - 1), (name, lag)
        assert 0 < lag["p50_us"] <= lag["p99_us"], (name, lag)
        assert sum(lag["buckets"].values()) == lag["count"], (name, lag)
        # The receiver's stages, one per batch made durable here; after `arrival` they add up
        # to receive -> durable (each ends where the next starts, rounded down to the us).
        stages, durable = hops["replicated_stages"], hops["replicated_durable"]
        assert {s["count"] for s in stages.values()} == {durable["count"]}, (name, stages)
        received_to_durable = sum(s["total_us"] for n, s in stages.items() if n != "arrival")
        assert 0 < received_to_durable <= durable["total_us"], (name, stages, durable)
        # The sender's, one per batch: from its first record accepted to the batch made, and
        # then to gRPC taking it.
        sent = hops["replicated_send_stages"]
        assert {s["count"] for n, s in sent.items() if n != "link"} == {
            hops["link_send_wait"]["count"]
        }, (name, sent)
        assert sent["link"]["count"] == hops["link_write"]["count"], (name, sent)
        assert sent["fsync"]["total_us"] > 0, (name, sent)


async def test_every_instance_logs_each_link_up_whichever_side_dialled(mesh: Cluster) -> None:
    """An operator reading one instance's log sees each link come up, also on the side that
    accepted the stream (it logs the link going down either way)."""

    await publish(mesh["a"], "pub-a", 1)
    for name in NAMES:
        for peer in NAMES:
            if peer != name:
                await asyncio.to_thread(
                    mesh[name].wait_for_output, f"replication link to {peer} up"
                )


async def test_a_killed_instance_catches_up_after_restart(
    mesh: Cluster,
) -> None:
    """R10: SIGKILL an instance, publish elsewhere meanwhile, restart it: it catches up from
    the others and is again a full copy; nothing is applied twice."""
    await publish(mesh["a"], "pub-a", 50)
    mesh["c"].kill()
    # L2: c is a sync destination of a and b, so their persisted acks wait for it to return.
    held = [
        asyncio.ensure_future(publish(mesh["a"], "pub-a", 50, start=51)),
        asyncio.ensure_future(publish(mesh["b"], "pub-b", 50)),
    ]
    await asyncio.sleep(0)
    await asyncio.to_thread(mesh["c"].restart, kill=True)
    await asyncio.wait_for(asyncio.gather(*held), TIMEOUT_S)
    expected = {"pub-a": 100, "pub-b": 50}
    for name in NAMES:
        got = await read_all(mesh[name], 150)
        assert_clean(check(((p, n) for p, n, _ in got), expected), name)


async def test_the_resume_positions_are_saved_while_traffic_flows(mesh: Cluster) -> None:
    """R10: the positions a side names in its Hello reach its journal directory about once a
    second while the links run (written beside the loop, not on it), not only at a stop: a
    SIGKILLed instance resumes from them instead of from nothing."""
    await publish(mesh["a"], "pub-a", COUNT)
    path = mesh["b"].workdir / "journal" / "replication-positions.json"

    def holds_a() -> bool:
        if not path.exists():
            return False
        rows = orjson.loads(path.read_bytes())
        return max((r[2] for r in rows if r[0] == "a" and r[1] == "a"), default=0) >= COUNT

    await wait_until(holds_a, TIMEOUT_S)
    assert not path.with_suffix(".tmp").exists()


async def test_a_publisher_fails_over_when_its_instance_is_killed_mid_stream(
    mesh: Cluster,
) -> None:
    """D3/L4: a publisher with the instance list goes on through the next instance when its
    instance is SIGKILLed mid-stream and republishes what was not yet persisted; de-duplication
    (here and over replication) leaves every message once, in order, on every instance, the
    killed one included once restarted. A live subscriber on another instance sees the same."""
    total = 300
    addresses = [mesh["a"].address, mesh["b"].address]
    async with Client("failover-pub") as pub, Client("watcher") as watcher:
        await watcher.connect(mesh["c"].address)
        live = await watcher.subscribe("orders", bookmark="epoch")
        await pub.connect(addresses)
        for n in range(1, total + 1):
            await pub.publish("orders", orjson.dumps({"p": "failover-pub", "n": n}))
            if n == total // 3:
                await asyncio.to_thread(mesh["a"].kill)
        # L2: b holds its persisted acks for its sync destination a until a is back.
        await asyncio.to_thread(mesh["a"].restart, kill=True)
        await pub.flush(timeout_s=TIMEOUT_S)
        watched = await take(live, total, TIMEOUT_S)
    expected = {"failover-pub": total}
    numbers = [(m.json()["p"], m.json()["n"]) for m in watched]
    assert_clean(check(numbers, expected), "c (live)")
    for name in NAMES:
        got = await read_all(mesh[name], total)
        assert_clean(check(((p, n) for p, n, _ in got), expected), name)
