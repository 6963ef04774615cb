"""The journal lifecycle on a real instance (issue 11 item 8, AMPS-REFERENCE §1.4): removal
waits for a queue's unacknowledged messages, names what holds it, keeps de-duplication after a
restart; archived journals replay; a schedule runs the actions by itself."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import orjson

from amps.client import Client
from amps.log.segment_files import first_txid_of
from amps.v1 import client_pb2 as pb
from tests.harness.instance import InstanceProcess, amps_cli, config_xml
from tests.harness.streams import take
from tests.integration.test_admin import get, samples

TIMEOUT_S = 30
WORK_QUEUE = """
  <SOW><Queue><Name>work</Name><MessageType>json</MessageType>
    <UnderlyingTopic>orders</UnderlyingTopic></Queue></SOW>
"""
ARCHIVE = "<JournalArchiveDirectory>archive</JournalArchiveDirectory>"
TOPICS = f"<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>{ARCHIVE}"
PAD = "x" * 1000


def node(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"node": "amps-test", **labels}.items()))


def post(instance: InstanceProcess, path: str) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{instance.admin_port}{path}"
    request = urllib.request.Request(url, method="POST", data=b"")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def journals(instance: InstanceProcess) -> Any:
    status, body = get(instance, "/amps/instance/journals.json")
    assert status == 200
    return orjson.loads(body)


async def eventually(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def segment_files(directory: Path) -> list[int]:
    """First txids of the segments in `directory`, plain or compressed."""
    return sorted(first for p in directory.glob("*.journal*") if (first := first_txid_of(p.name)))


async def publish(address: str, first_seq: int, count: int, name: str = "pub") -> None:
    async with Client(name) as client:
        await client.connect(address)
        for seq in range(first_seq, first_seq + count):
            await client.publish("orders", orjson.dumps({"i": seq, "p": PAD}), seq=seq)
        await client.flush(timeout_s=TIMEOUT_S)


async def republish_raw(address: str, name: str, seq: int) -> None:
    """Publish `seq` again as `name`, past the client's own check, and wait for its ack."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(
            "/amps.v1.Amps/Connect",
            request_serializer=pb.ClientFrame.SerializeToString,
            response_deserializer=pb.ServerFrame.FromString,
        )()
        logon = pb.Command(cmd_id="1", logon=pb.Logon(client_name=name))
        data = orjson.dumps({"i": seq, "p": PAD})
        again = pb.Command(cmd_id="2", publish=pb.Publish(topic="orders", data=data, seq=seq))
        flush = pb.Command(cmd_id="3", ack_type="processed", flush=pb.Flush())
        await call.write(pb.ClientFrame(commands=[logon, again, flush]))
        for _ in range(10):  # the logon ack, then the flush's, once the publish was handled
            frame = await asyncio.wait_for(call.read(), TIMEOUT_S)
            if any(m.ack.cmd_id == "3" for m in frame.messages):
                break
        call.cancel()


async def test_removal_waits_for_the_queue_and_keeps_duplicates_out(tmp_path: Path) -> None:
    """Unacknowledged queue messages hold the journal (log, /metrics, the POST's answer); once
    acknowledged the segments go; after a restart a republished old seq is still a duplicate."""
    workdir = tmp_path / "amps"
    text = config_xml(journal_size="64KB", extra=WORK_QUEUE, topics=TOPICS)
    instance = InstanceProcess(workdir, text).start()
    try:
        await publish(instance.address, 1, 300)
        assert len(segment_files(workdir / "journal")) >= 4
        status, body = post(instance, "/amps/administrator/transaction_log/journals/all/remove")
        assert status == 200, body
        assert body["segments"] == []
        assert body["held"]
        assert all(h["holders"] == ["queue work"] for h in body["held"])
        metrics = samples(instance)
        assert metrics[node("amps_journal_hold_txid", holder="queue work")] == 1
        assert metrics[node("amps_journal_held_segments", holder="queue work")] == len(body["held"])
        assert any("kept: queue work needs txid 1 on" in line for line in instance.output)

        async with Client("worker") as worker:
            await worker.connect(instance.address)
            assert await worker.sow_delete("work", filter="1=1") == 300
        # The hold moves once the queue's recovery point is stored (its next checkpoint).
        await eventually(lambda: journals(instance)["holds"][0]["oldest_needed_txid"] > 300)
        status, body = post(instance, "/amps/administrator/transaction_log/journals/all/remove")
        assert status == 200, body
        assert body["segments"]
        assert body["held"] == []
        kept = segment_files(workdir / "journal")
        assert kept[0] > 1
        assert all(s not in kept for s in body["segments"])
        metrics = samples(instance)
        removed = metrics[node("amps_journal_lifecycle_segments_total", action="remove")]
        assert removed == len(body["segments"])
        assert metrics[node("amps_journal_first_txid")] == kept[0]
        assert instance.stop() == 0

        instance = InstanceProcess(workdir, text).start()
        await republish_raw(instance.address, "pub", 5)  # its segment is gone, its mark is not
        metrics = samples(instance)
        assert metrics[node("amps_duplicates_discarded_total")] == 1
        assert metrics[node("amps_queue_depth", queue="work")] == 0
    finally:
        instance.kill()


async def test_compressed_and_archived_journals_replay_and_dump(tmp_path: Path) -> None:
    """§1.4: compressed journals move to JournalArchiveDirectory and remain replayable: an epoch
    bookmark subscription and `amps journal dump --archive-directory` read them."""
    workdir = tmp_path / "amps"
    text = config_xml(journal_size="64KB", topics=TOPICS)
    instance = InstanceProcess(workdir, text).start()
    try:
        await publish(instance.address, 1, 200)
        server = f"127.0.0.1:{instance.admin_port}"
        packed = amps_cli("admin", "journal", "compress", "all", "--server", server)
        assert packed.returncode == 0, packed.stderr
        assert packed.stdout.startswith("compressed ")
        assert list((workdir / "journal").glob("*.journal.z"))
        done = amps_cli("admin", "journal", "archive", "all", "--server", server)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("archived ")
        archived = segment_files(workdir / "archive")
        assert archived
        assert archived[0] == 1
        assert not set(archived) & set(segment_files(workdir / "journal"))
        listing = amps_cli("admin", "journals", "--server", server, "--output", "json")
        segments = json.loads(listing.stdout)["segments"]
        assert [s["id"] for s in segments if s["archived"]] == archived
        async with Client("reader") as client:
            await client.connect(instance.address)
            sub = await client.subscribe("orders", bookmark="epoch")
            messages = await take(sub, 200, TIMEOUT_S)
        assert [orjson.loads(m.data)["i"] for m in messages] == list(range(1, 201))
    finally:
        instance.kill()
    dump = amps_cli(
        "journal", "dump", str(workdir / "journal"), "--archive-directory", str(workdir / "archive")
    )
    assert dump.returncode == 0, dump.stderr
    assert len(dump.stdout.splitlines()) == 200


async def test_a_schedule_removes_old_journals_by_itself(tmp_path: Path) -> None:
    """amps-action-on-schedule + amps-action-do-remove-journal with an Age."""
    schedule = """
  <Actions><Action>
    <On><Module>amps-action-on-schedule</Module><Options><Every>1s</Every></Options></On>
    <Do><Module>amps-action-do-remove-journal</Module><Options><Age>0s</Age></Options></Do>
  </Action></Actions>
"""
    workdir = tmp_path / "amps"
    instance = InstanceProcess(workdir, config_xml(journal_size="64KB", extra=schedule)).start()
    try:
        await publish(instance.address, 1, 200)
        await eventually(lambda: samples(instance)[node("amps_journal_first_txid")] > 1)
        assert len(segment_files(workdir / "journal")) <= 2
    finally:
        instance.kill()


async def test_a_destination_that_has_not_acknowledged_holds_the_journal(tmp_path: Path) -> None:
    """A replication destination needs what it has not acknowledged: while it is away, removal
    keeps everything and names it (it will catch up from the log, R10)."""
    port = free_port()
    destination = (
        "<Replication><Destination><Name>amps-2</Name><Group>amps-2</Group>"
        "<SyncType>async</SyncType><Transport><Type>amps-replication</Type>"
        f"<InetAddr>127.0.0.1:{port}</InetAddr></Transport>"
        "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>"
        "</Destination></Replication>"
    )
    workdir = tmp_path / "amps"
    instance = InstanceProcess(workdir, config_xml(journal_size="64KB", extra=destination)).start()
    try:
        await publish(instance.address, 1, 200)
        status, body = post(instance, "/amps/administrator/transaction_log/journals/all/remove")
        assert status == 200, body
        assert body["segments"] == []
        assert body["held"]
        assert all(h["holders"] == ["destination amps-2"] for h in body["held"])
        metrics = samples(instance)
        assert metrics[node("amps_journal_hold_txid", holder="destination amps-2")] == 1
    finally:
        instance.kill()


def free_port() -> int:
    """A loopback port nothing listens on (bound and released at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
