"""Sync destinations and persisted acks (L2): held while a sync destination is down, released
by a downgrade (an action or an administrator), and sync again after an upgrade; the admin
view, `amps admin replication` and /metrics show it (issue 8, D4, D5)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import orjson

from amps.client import Client
from tests.cluster.checker import assert_clean, check
from tests.cluster.test_replication import TIMEOUT_S, publish, read_all
from tests.harness.cluster import (
    Cluster,
    Link,
    cluster,
    not_sync,
    until_all_sync,
    wait_until,
)
from tests.harness.instance import amps_cli
from tests.integration.test_admin import samples

ACTIONS = (
    "<Actions><Action>"
    "<On><Module>amps-action-on-schedule</Module><Options><Every>100ms</Every></Options></On>"
    "<Do><Module>amps-action-do-downgrade-replication</Module>"
    "<Options><Age>500ms</Age></Options></Do>"
    "<Do><Module>amps-action-do-upgrade-replication</Module>"
    "<Options><Age>200ms</Age></Options></Do>"
    "</Action></Actions>"
)


def replication_status(admin_port: int) -> dict[str, object]:
    url = f"http://127.0.0.1:{admin_port}/amps/instance/replication.json"
    with urllib.request.urlopen(url, timeout=10) as response:
        body: dict[str, object] = json.loads(response.read())
    return body


def destination(admin_port: int, name: str) -> dict[str, object]:
    destinations = replication_status(admin_port)["destinations"]
    assert isinstance(destinations, list)
    return next(d for d in destinations if d["name"] == name)


def acks_sent(admin_port: int, peer: str) -> int:
    """The admin view's count of acks sent over the link with `peer`."""
    links = replication_status(admin_port)["links"]
    assert isinstance(links, list)
    count = next(link["acks_sent"] for link in links if link["peer"] == peer)
    assert isinstance(count, int)
    return count


async def test_a_dead_sync_destination_is_downgraded_by_the_action_and_upgraded_on_return(
    tmp_path: Path,
    clusters: list[Cluster],
) -> None:
    """L2: with the actions configured, acks are released once the dead destination's oldest
    unacknowledged record is older than the downgrade Age; back and caught up, it is upgraded."""
    pair = cluster(tmp_path, ["a", "b"])
    clusters.append(pair)
    pair.start({"a": [Link("b")], "b": [Link("a")]}, {"a": ACTIONS})
    await publish(pair["a"], "pub-a", 20)
    admin = pair["a"].admin_port
    # Under load a live b can fall more than Age behind and be downgraded and upgraded before
    # the kill: count from a sync b.
    await until_all_sync(pair.instances)
    changes = destination(admin, "b")["sync_changes"]
    assert isinstance(changes, int)
    pair["b"].kill()
    await publish(pair["a"], "pub-a", 20, start=21)  # completes only through the downgrade
    assert destination(admin, "b")["downgraded"] is True
    [shown] = await asyncio.to_thread(not_sync, {"a": pair["a"]})  # what a wait would name
    assert shown.startswith("a -> b (connected False, sync_type sync, downgraded True, ")
    await asyncio.to_thread(pair["b"].restart, kill=True)
    await wait_until(lambda: destination(admin, "b")["downgraded"] is False)
    assert destination(admin, "b")["sync_changes"] == changes + 2
    got = await read_all(pair["b"], 40)
    assert_clean(check(((p, n) for p, n, _ in got), {"pub-a": 40}), "b")
    assert "downgraded to async" in "".join(pair["a"].output)
    url = f"http://127.0.0.1:{admin}/metrics"
    metrics = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
    total = f'amps_replication_sync_changes_total{{destination="b",node="a"}} {changes + 2}.0'
    assert total.encode() in metrics


async def test_the_administrator_downgrades_and_upgrades_with_amps_admin_replication(
    tmp_path: Path,
    clusters: list[Cluster],
) -> None:
    """D4/L2: without actions a dead sync destination holds acks until an administrator
    downgrades it; `amps admin replication` shows it."""
    pair = cluster(tmp_path, ["a", "b"])
    clusters.append(pair)
    pair.start({"a": [Link("b")], "b": [Link("a", sync=False)]})
    await publish(pair["a"], "pub-a", 10)
    server = f"127.0.0.1:{pair['a'].admin_port}"
    shown = await asyncio.to_thread(amps_cli, "admin", "replication", "--server", server)
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    assert header.split()[:4] == ["DESTINATION", "CONNECTED", "SYNC", "DOWNGRADED"]
    assert row.split()[:4] == ["b", "yes", "sync", "no"]
    # Per origin on b: a's 10 records held, nothing behind (also in /metrics).
    on_b = f"127.0.0.1:{pair['b'].admin_port}"
    shown = await asyncio.to_thread(amps_cli, "admin", "replication", "--server", on_b)
    lines = shown.stdout.splitlines()
    origin_rows = lines[lines.index(next(x for x in lines if x.startswith("ORIGIN"))) + 1 :]
    assert origin_rows[0].split() == ["a", "0", "0.0", "10"]
    url = f"http://127.0.0.1:{pair['b'].admin_port}/metrics"
    metrics = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
    assert b'amps_replication_origin_behind_messages{node="b",origin="a"} 0.0' in metrics
    assert b'amps_replication_origin_behind_seconds{node="b",origin="a"} 0.0' in metrics
    # b acknowledged a's batches (a's publishes were persisted through it): counted per peer,
    # between what the admin view showed before and after the scrape.
    before = acks_sent(pair["b"].admin_port, "a")
    sent = samples(pair["b"])[("amps_replication_sent_acks_total", (("node", "b"), ("peer", "a")))]
    assert 1 <= before <= sent <= acks_sent(pair["b"].admin_port, "a")
    pair["b"].kill()
    held = asyncio.ensure_future(publish(pair["a"], "pub-a", 10, start=11))
    await wait_until(lambda: destination(pair["a"].admin_port, "b")["connected"] is False)
    assert not held.done()
    done = await asyncio.to_thread(
        amps_cli, "admin", "replication", "--server", server, "downgrade", "b"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"destination": "b", "downgraded": True}
    await asyncio.wait_for(held, TIMEOUT_S)
    up = await asyncio.to_thread(
        amps_cli, "admin", "replication", "--server", server, "upgrade", "b"
    )
    assert json.loads(up.stdout)["downgraded"] is False
    missing = await asyncio.to_thread(
        amps_cli, "admin", "replication", "--server", server, "downgrade", "nobody"
    )
    assert missing.returncode == 1
    assert "no sync destination named 'nobody'" in missing.stderr
    as_json = await asyncio.to_thread(
        amps_cli, "admin", "replication", "--server", server, "--output", "json"
    )
    body = json.loads(as_json.stdout)
    assert {o["origin"] for o in body["origins"]} <= {"b"}
    assert body["destinations"][0]["name"] == "b"


def incoming(admin_port: int, peer: str) -> dict[str, object]:
    """The admin view of the link from `peer`; empty before the peer first dialled."""
    links = replication_status(admin_port)["links"]
    assert isinstance(links, list)
    return next((link for link in links if link["peer"] == peer), {})


async def test_an_async_destination_acknowledges_fewer_times_than_it_receives_batches(
    tmp_path: Path,
    clusters: list[Cluster],
) -> None:
    """AckConflationInterval: b acknowledges a's async link once per interval (1s), not once
    per batch; the last ack still comes, so a ends with nothing behind."""
    pair = cluster(tmp_path, ["a", "b"])
    clusters.append(pair)
    pair.start({"a": [Link("b", sync=False)]})
    b_admin, a_admin = pair["b"].admin_port, pair["a"].admin_port
    # Live batches, not one catch-up batch: the link is up before the first publish.
    await wait_until(lambda: destination(a_admin, "b")["connected"] is True)
    count = 30
    async with Client("pub-a") as client:
        await client.connect(pair["a"].address)
        for n in range(1, count + 1):  # one commit, so one batch, per message
            await client.publish("orders", orjson.dumps({"p": "pub-a", "n": n}))
            await client.flush(timeout_s=TIMEOUT_S)
    await wait_until(lambda: incoming(b_admin, "a").get("messages_received") == count)
    await wait_until(lambda: destination(a_admin, "b")["messages_behind"] == 0)
    link = incoming(b_admin, "a")
    assert isinstance(link["batches_received"], int)
    assert isinstance(link["acks_sent"], int)
    assert 1 <= link["acks_sent"] < link["batches_received"], link
    got = await read_all(pair["b"], count)
    assert_clean(check(((p, n) for p, n, _ in got), {"pub-a": count}), "b")
