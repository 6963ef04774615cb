"""FileBackedMetadata (Q17) on a real instance: publish, consume, restart, nothing lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from amps.client import Client
from tests.harness.instance import InstanceProcess, config_xml
from tests.harness.streams import take
from tests.integration.test_queues import TIMEOUT_S, publish_ids

FILE_BACKED_QUEUE = """
<SOW>
  <Queue>
    <Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic><MessageType>json</MessageType>
    <LeasePeriod>30s</LeasePeriod><MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>
    <FileBackedMetadata>enabled</FileBackedMetadata>
  </Queue>
</SOW>
"""


@pytest.mark.parametrize("kill", [True, False])
async def test_file_backed_queue_survives_a_restart(tmp_path: Path, kill: bool) -> None:
    """Q15–Q17: the metadata file is scratch; a restart rebuilds from snapshot and log."""
    root = tmp_path / "amps"
    instance = InstanceProcess(root, config_xml(extra=FILE_BACKED_QUEUE)).start()
    try:
        async with Client("fb-pub") as pub, Client("fb-con") as con:
            await pub.connect(instance.address)
            await con.connect(instance.address)
            await publish_ids(pub, "orders", range(1, 301))
            messages = await take(await con.subscribe("work", max_backlog=100), 100)
            acked = sorted(m.json()["id"] for m in messages[:60])
            for message in messages[:60]:
                await message.ack()
            await con.flush_acks()
            await con.flush(timeout_s=TIMEOUT_S)
        assert list(root.rglob("queues/work.meta")), "the metadata file is in the journal dir"
        await asyncio.to_thread(instance.restart, kill=kill)
        async with Client("fb-after") as after:
            await after.connect(instance.address)
            subscription = await after.subscribe("work", max_backlog=100)
            ids: list[int] = []
            while len(ids) < 240:  # the backlog is 100: ack as we go
                batch = await take(subscription, min(100, 240 - len(ids)))
                ids.extend(m.json()["id"] for m in batch)
                for message in batch:
                    await message.ack()
                await after.flush_acks()
            ids.sort()
            with pytest.raises(TimeoutError):
                await take(await after.subscribe("work", sub_id="x"), 1, timeout_s=0.5)
    finally:
        instance.kill()
    assert ids == sorted(set(range(1, 301)) - set(acked))
