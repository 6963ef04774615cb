"""Damaged journals on a real instance: named, counted, never served, never hidden (issue 11,
items 1 and 4, L7, L8)."""

from __future__ import annotations

import asyncio
import sys
import urllib.request
from pathlib import Path

import orjson
import pytest

from amps import errors
from amps.client import Client, Message, Subscription
from amps.log.storage import iter_keys
from tests.harness.instance import InstanceProcess, config_xml, process_env
from tests.harness.streams import queue_ids, take

TIMEOUT_S = 30
TOTAL = 3_000
QUEUE = (
    "<SOW><Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>"
    "<MessageType>json</MessageType><MaxPerSubscriptionBacklog>20</MaxPerSubscriptionBacklog>"
    "</Queue></SOW>"
)


async def _publish(instance: InstanceProcess, topic: str, count: int) -> None:
    async with Client("damage-pub") as client:
        await client.connect(instance.address)
        for i in range(1, count + 1):
            await client.publish(topic, orjson.dumps({"id": i, "pad": "x" * 150}))
        await client.flush(timeout_s=TIMEOUT_S)


def _segments(instance: InstanceProcess) -> list[Path]:
    return sorted((instance.workdir / "journal").glob("*.journal"))


def _damage_middle_of_oldest_segment(instance: InstanceProcess) -> tuple[str, int]:
    """16 bytes overwritten in the middle of a sealed segment (its summary intact)."""
    oldest = _segments(instance)[0]
    data = bytearray(oldest.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = b"\xee" * 16
    oldest.write_bytes(bytes(data))
    return oldest.name, middle


def _metric(instance: InstanceProcess, name: str) -> float:
    url = f"http://127.0.0.1:{instance.admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith((name + "{", name + " ")):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def _drain(subscription: Subscription, into: list[Message]) -> None:
    while (message := await subscription.get()) is not None:
        into.append(message)


async def test_a_replay_through_damage_ends_with_an_error_naming_it(tmp_path: Path) -> None:
    """Issue 11 item 1, L7: an epoch replay delivers the records before the damage, then the
    subscription ends with a failed ack naming the segment and offset; the CLI exits non-zero;
    the damage is logged once and counted; the instance keeps serving everyone else."""
    instance = InstanceProcess(tmp_path / "amps", config_xml(journal_size="128KB")).start()
    try:
        await _publish(instance, "events", TOTAL)
        instance.restart()
        segment, _offset = _damage_middle_of_oldest_segment(instance)
        async with Client("damage-reader") as client:
            await client.connect(instance.address)
            subscription = await client.subscribe("events", bookmark="epoch")
            received: list[Message] = []
            with pytest.raises(errors.CorruptRecord, match=segment) as caught:
                await asyncio.wait_for(_drain(subscription, received), TIMEOUT_S)
            assert 0 < len(received) < TOTAL
            assert "offset" in str(caught.value)
            # A bookmark lookup that scans through the damage: a failed subscribe naming it.
            publisher, seq, _ = received[-1].bookmark.split("|")
            after = f"{publisher}|{int(seq) + 5}|"
            with pytest.raises(errors.CorruptRecord, match=segment):
                await client.subscribe("events", bookmark=after)
            # Everyone else carries on: a publish and a live subscription still work.
            live = await client.subscribe("events")
            await client.publish("events", b'{"id": "after"}')
            (message,) = await take(live, 1)
            assert message.json()["id"] == "after"
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "amps", "subscribe", "--server", instance.address,
            "--topic", "events", "--bookmark", "epoch", "--count", str(TOTAL), "--timeout", "15",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=process_env(),
        )  # fmt: skip
        _out, err = await asyncio.wait_for(cli.communicate(), TIMEOUT_S)
        assert cli.returncode != 0
        assert segment in err.decode()
        assert _metric(instance, "amps_journal_damaged_records_total") == 1
        logged = [line for line in instance.output if "damaged journal record" in line]
        assert len(logged) == 1, logged
        assert segment in logged[0]
    finally:
        instance.kill()


async def test_queue_recovery_through_damage_exits_65(tmp_path: Path) -> None:
    """Issue 11 item 1: with queues.db gone, queue recovery reads through the damage: the
    instance exits with the documented code 65 naming the segment, no traceback, no hang."""
    instance = InstanceProcess(
        tmp_path / "amps", config_xml(journal_size="128KB", extra=QUEUE)
    ).start()
    try:
        await _publish(instance, "orders", TOTAL)
    finally:
        instance.stop()
    (instance.workdir / "journal" / "queues.db").unlink()
    segment, _offset = _damage_middle_of_oldest_segment(instance)
    status, output = await asyncio.to_thread(instance.run_to_exit)
    assert status == 65, output
    assert segment in output
    assert "Traceback" not in output


async def test_damage_to_the_newest_acknowledged_record_refuses_to_start(tmp_path: Path) -> None:
    """Issue 11 item 4, L8: after SIGKILL, the last record (acknowledged) damaged: refused with
    exit 65, segment, offset and txids; never cut silently. The last bytes (its commit
    marker) alone damaged: the restart warns and keeps every record."""
    instance = InstanceProcess(tmp_path / "amps", config_xml()).start()
    try:
        await _publish(instance, "events", 100)
    finally:
        instance.kill()
    (newest,) = _segments(instance)
    pristine = newest.read_bytes()
    last = [offset for offset, *_ in iter_keys(newest)][-1]
    for path in newest.parent.glob("*.tail"):
        path.unlink()  # as after a crash before any checkpoint covered the record

    newest.write_bytes(pristine[:-25] + b"\x00" * 25)
    instance.start()
    instance.stop()
    warned = [line for line in instance.output if "cut torn tail" in line]
    assert len(warned) == 1, instance.output
    assert newest.name in warned[0]
    assert "could not have been acknowledged" in warned[0]
    assert len([offset for offset, *_ in iter_keys(newest)]) == 100

    damaged = bytearray(pristine)
    damaged[last + 20] ^= 0xFF
    newest.write_bytes(bytes(damaged))
    for path in newest.parent.glob("*.tail"):
        path.unlink()
    status, output = await asyncio.to_thread(instance.run_to_exit)
    assert status == 65, output
    assert f"segment {newest.name} at offset {last}" in output
    assert "could have been acknowledged" in output
    assert newest.stat().st_size == len(pristine)


async def test_a_garbage_queue_store_is_set_aside_and_rebuilt_from_the_log(
    tmp_path: Path,
) -> None:
    """Issue 11 item 5: queues.db of random bytes is set aside with a warning and the queue is
    rebuilt from the log, as when the file is missing (no traceback, no exit 1)."""
    instance = InstanceProcess(tmp_path / "amps", config_xml(extra=QUEUE)).start()
    try:
        await _publish(instance, "orders", 20)
    finally:
        instance.stop()
    store = instance.workdir / "journal" / "queues.db"
    store.write_bytes(bytes(range(256)) * 64)
    instance.start()
    try:
        output = "".join(instance.output)
        assert "queue store" in output
        assert "set aside as queues.db.damaged-" in output
        assert len(list(store.parent.glob("queues.db.damaged-*"))) == 1
        assert await queue_ids(instance.address, "work", 20) == list(range(1, 21))
    finally:
        instance.kill()


async def test_a_queue_message_with_a_damaged_record_leaves_the_queue(tmp_path: Path) -> None:
    """Issue 11 item 1: a queued message whose record is damaged (met by a delivery after a
    restart from a snapshot) cannot be sent: it is reported, removed as expired, and never
    holds a backlog-1 consumer up; every other message is delivered, before and after it."""
    config = config_xml(extra=QUEUE.replace("20</MaxPer", "1</MaxPer"))
    instance = InstanceProcess(tmp_path / "amps", config).start()
    try:
        await _publish(instance, "orders", 20)
    finally:
        instance.stop()
    (segment,) = _segments(instance)
    offsets = {txid: offset for offset, _size, txid, *_ in iter_keys(segment)}
    data = bytearray(segment.read_bytes())
    data[offsets[5] + 40] ^= 0xFF  # message 5; the tail checkpoint keeps it unread at open
    segment.write_bytes(bytes(data))
    instance.start()
    try:
        async with Client("damage-consumer") as client:
            await client.connect(instance.address)
            subscription = await client.subscribe("work", max_backlog=1)
            ids = []
            for _ in range(19):  # each one acked: backlog 1 holds the next until then
                (message,) = await take(subscription, 1, timeout_s=20)
                ids.append(message.json()["id"])
                await message.ack()
        assert ids == [i for i in range(1, 21) if i != 5]
        output = "".join(instance.output)
        assert "removed, their journal records are damaged (txids 5)" in output
        assert output.count("damaged journal record met by") == 1
    finally:
        instance.stop()
    instance.start()
    try:
        assert "damaged journal record met by" not in "".join(instance.output)
    finally:
        instance.kill()
