"""SIGKILL mid-stream, restart, republish from the client's publish store (L2, L3, L4, L8)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson

from amps.client import Client
from tests.harness.instance import InstanceProcess, config_xml
from tests.harness.streams import replay_ids

TOTAL = 20_000
TIMEOUT_S = 90


async def publish_through_a_kill(instance: InstanceProcess, topic: str, torn_tail: bool) -> None:
    """Publish TOTAL messages; SIGKILL the instance part-way and restart it."""
    async with Client("crash-pub", max_reconnect_delay_s=0.5) as client:
        await client.connect(instance.address)

        async def publish_all() -> None:
            for i in range(1, TOTAL + 1):
                await client.publish(topic, orjson.dumps({"id": i}))
            await client.flush(timeout_s=TIMEOUT_S)

        publishing = asyncio.create_task(publish_all())
        # Kill once part of the stream is persisted (bounded wait).
        for _ in range(600):
            if client.statistics().persisted >= TOTAL // 3 or publishing.done():
                break
            await asyncio.sleep(0.01)
        await asyncio.to_thread(instance.kill)
        if torn_tail:
            append_torn_tail(instance.workdir / "journal")
        await asyncio.to_thread(instance.restart)
        await asyncio.wait_for(publishing, TIMEOUT_S)


def append_torn_tail(journal: Path) -> None:
    """Half a record at the end of the newest segment, as a crash mid-write leaves it."""
    segments = sorted(p for p in journal.iterdir() if p.is_file() and p.suffix == ".journal")
    assert segments, f"no segment files in {journal}: {os.listdir(journal)}"
    with segments[-1].open("ab") as f:
        f.write(b"\x00\x00\x01\x00" + os.urandom(100))


async def test_sigkill_mid_stream_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """L2/L3/L4/L8: every message persisted exactly once, in publish order, across a SIGKILL."""
    instance = InstanceProcess(tmp_path / "amps", config_xml(journal_size="4MB")).start()
    try:
        await publish_through_a_kill(instance, "crash", torn_tail=False)
        assert await replay_ids(instance.address, "crash", TOTAL, timeout_s=TIMEOUT_S) == list(
            range(1, TOTAL + 1)
        )
    finally:
        instance.kill()


async def test_torn_tail_is_cut_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    """L8: a torn record at the end of the newest segment is cut at restart, never served."""
    instance = InstanceProcess(tmp_path / "amps", config_xml(journal_size="4MB")).start()
    try:
        await publish_through_a_kill(instance, "torn", torn_tail=True)
        assert await replay_ids(instance.address, "torn", TOTAL, timeout_s=TIMEOUT_S) == list(
            range(1, TOTAL + 1)
        )
    finally:
        instance.kill()
