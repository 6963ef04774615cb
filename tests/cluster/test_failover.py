"""Clients fail over between three replicating instances (issue 8: D3, L2, L4, L7, R10).

A publisher and a subscriber share an instance that is SIGKILLed mid-stream: the publisher goes
on on another instance and republishes what was not persisted, the subscriber resumes on a third
from the last bookmark it handed to the application. Every scenario ends with the checker:
lost, duplicated and out-of-order messages, all zero, in what the subscriber saw and on every
instance.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from amps.client import Client, Message
from tests.cluster.checker import assert_clean, check
from tests.cluster.test_replication import TIMEOUT_S, read_all
from tests.cluster.test_sync import ACTIONS
from tests.harness.cluster import Cluster, cluster, full_mesh, kill_when_all_sync
from tests.harness.streams import more_within, take

NAMES = ["a", "b", "c"]
FIRST = 50  # published and read before the subscriber is mid-stream
BEFORE = 150  # published before the kill
TOTAL = 400


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Cluster]:
    """A full mesh of sync links with downgrade and upgrade actions, as `make cluster` has
    (shorter here: every 100 ms, age 500 ms): a survivor keeps acknowledging once the dead
    instance is downgraded."""
    running = cluster(tmp_path, NAMES).start(full_mesh(NAMES), dict.fromkeys(NAMES, ACTIONS))
    try:
        yield running
    finally:
        running.kill()


def numbered(messages: list[Message]) -> list[tuple[str, int]]:
    return [(body["p"], body["n"]) for body in (m.json() for m in messages)]


async def test_a_publisher_and_a_subscriber_fail_over_when_their_instance_is_killed(
    mesh: Cluster,
) -> None:
    """D3: SIGKILL of the instance both use, once every destination is sync (under load a
    live one can be downgraded: then a may hold acks the others lack); the publisher continues
    on b and republishes what a did not acknowledge (b discards what it already has, L4), the
    subscriber resumes on c after its last bookmark; b and c were sync destinations of a, so
    nothing a acknowledged is missing there."""
    a, b, c = (mesh[name] for name in NAMES)
    async with Client("fo-pub") as writer, Client("fo-sub") as reader:
        await writer.connect([a.address, b.address, c.address])
        await reader.connect([a.address, c.address, b.address])
        subscription = await reader.subscribe("orders")
        for n in range(1, FIRST + 1):
            await writer.publish("orders", orjson.dumps({"p": "fo-pub", "n": n}))
        # A live subscription resumes from the last bookmark handed out: it has one.
        seen = numbered(await take(subscription, FIRST))
        # The subscriber keeps reading throughout: at the kill it holds messages a delivered
        # that may not have reached c yet, and its resumption waits for them there.
        reading = asyncio.ensure_future(take(subscription, TOTAL - FIRST, TIMEOUT_S))
        for n in range(FIRST + 1, TOTAL + 1):
            await writer.publish("orders", orjson.dumps({"p": "fo-pub", "n": n}))
            if n == BEFORE:  # with publishes in flight and the subscriber mid-stream
                await kill_when_all_sync(mesh, "a")
        # L2: b holds the publisher's persisted acks until it downgrades the dead a.
        await writer.flush(TIMEOUT_S)
        assert writer.statistics().connected_server == b.address
        seen += numbered(await reading)
        seen += numbered(await more_within(subscription, 0.5))
        assert reader.statistics().connected_server == c.address
    # Restarted, a catches up from the others (R10) and is again a full copy.
    await asyncio.to_thread(a.restart, kill=True)
    assert_clean(check(seen, {"fo-pub": TOTAL}), "the subscriber")
    for name in NAMES:
        got = await read_all(mesh[name], TOTAL)
        assert_clean(check(((p, n) for p, n, _ in got), {"fo-pub": TOTAL}), name)
