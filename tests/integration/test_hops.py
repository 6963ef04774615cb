"""Issue 14: a backlog-1 consumer's next message leaves in its ack's own step, read from the
instance's per-hop statistics (`/amps/instance`, key `hops`), not from wall time."""

from __future__ import annotations

from typing import Any

from amps.client import Client
from tests.harness.streams import take
from tests.integration.test_admin import get_json
from tests.integration.test_queues import TIMEOUT_S, publish_ids, queue_instance

__all__ = ["queue_instance"]  # the fixture, used by name


async def test_backlog_one_consumer_gets_the_next_message_without_a_timer(
    queue_instance: Any,
) -> None:
    async with Client("hops-pub") as pub, Client("hops-con") as con:
        await pub.connect(queue_instance.address)
        await con.connect(queue_instance.address)
        await publish_ids(pub, "orders", range(3))
        sub = await con.subscribe("work", max_backlog=1)
        before = get_json(queue_instance, "/amps/instance")["hops"]
        got = []
        for _ in range(3):
            (message,) = await take(sub, 1, timeout_s=TIMEOUT_S)
            got.append(message.json()["id"])
            await message.ack()
        await con.flush_acks()
        await con.ping()  # the last ack has been handled once its round trip returns
        hops = get_json(queue_instance, "/amps/instance")["hops"]
    assert got == [0, 1, 2]
    # Each ack was its own queue step (backlog 1), and the two messages after the first left in
    # the step of the ack that made room for them: no timer and no commit in between.
    assert hops["queue_ack_step"]["count"] - before["queue_ack_step"]["count"] == 3
    assert hops["deliveries_after_ack"] - before["deliveries_after_ack"] == 2
    assert hops["deliveries_held_for_commit"] == 0
    assert hops["frame_handling"]["count"] > before["frame_handling"]["count"]
    assert hops["outbox_wait"]["count"] > before["outbox_wait"]["count"]
