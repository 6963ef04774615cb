"""Q15: a queue acknowledgement becomes durable on its own, soon, without a commit round each."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from amps.client import Client
from tests.harness.instance import InstanceProcess, config_xml
from tests.harness.streams import take
from tests.integration.test_queues import WORK_QUEUE, acked_removals

TIMEOUT_S = 20.0
# The journal's own background flush runs only once a second here; the instance commits a
# removal record within a few milliseconds by itself.
SLOW_FLUSH = (
    "<FlushInterval>1000ms</FlushInterval>"
    "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>"
)


async def test_ack_is_written_without_a_publish_or_flush(tmp_path: Path) -> None:
    instance = InstanceProcess(
        tmp_path / "amps", config_xml(extra=WORK_QUEUE, topics=SLOW_FLUSH)
    ).start()
    try:
        async with Client("rc-pub") as pub, Client("rc-con") as con:
            await pub.connect(instance.address)
            await con.connect(instance.address)
            await pub.publish("orders", b'{"id":1}')
            await pub.flush(timeout_s=TIMEOUT_S)
            (message,) = await take(await con.subscribe("work", max_backlog=5), 1)
            await message.ack()
            await con.flush_acks()
            sent = time.monotonic()
            deadline = sent + 5.0
            removals = acked_removals(instance.workdir / "journal", "work")
            while not removals and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
                removals = acked_removals(instance.workdir / "journal", "work")
            waited_s = time.monotonic() - sent
    finally:
        instance.kill()
    assert removals == [(message.txid,)]
    assert waited_s < 0.8, f"the removal record took {waited_s:.2f} s to reach the journal"
