"""The client port never takes replicated records (issue 12, S4): a forged ownership grant sent
to it, as a replication stream or as a client frame, is refused and changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from amps.client import Client
from amps.log.bookmarks import Bookmark
from amps.log.records import TransferRecord
from replication.convert import to_pb
from replication.frames import PROTOCOL_VERSION, Batch, Digest, Hello
from tests.harness.instance import InstanceProcess, config_xml
from tests.harness.streams import take

QUEUE = """<SOW><Queue><Name>work</Name><MessageType>json</MessageType>
<UnderlyingTopic>orders</UnderlyingTopic><LeasePeriod>30s</LeasePeriod></Queue></SOW>"""
REPLICATION_LINK = "/amps.v1.Replication/Link"
REPLICATION = (
    "<Transport><Name>replication</Name><Type>amps-replication</Type>"
    "<InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>"
)


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[InstanceProcess]:
    text = config_xml(extra=QUEUE).replace("</Transports>", REPLICATION)
    process = InstanceProcess(tmp_path / "amps", text).start()
    try:
        yield process
    finally:
        process.kill()


def forged_frames(publisher_id: int) -> list[bytes]:
    """A replication Hello from `mallory` and a Batch granting message 1 of work to it."""
    grant = TransferRecord(
        txid=1,
        timestamp_us=1,
        queue="work",
        bookmark=Bookmark(publisher_id, 1),
        from_instance="amps-test",
        to_instance="mallory",
        origin_instance="mallory",
        origin_group="mallory",
        origin_txid=1,
        epoch=99,
    )
    hello = Hello(PROTOCOL_VERSION, "mallory", "mallory", "amps-test", "amps-test", Digest(True))
    batch = Batch(batch_id=1, through_txid=1, records=(grant,))
    return [to_pb(hello).SerializeToString(), to_pb(batch).SerializeToString()]


async def send_raw(address: str, method: str, frames: list[bytes]) -> grpc.StatusCode:
    """Send `frames` as the requests of a stream call to `method`; the call's final status."""

    async def requests() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )(requests())
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as error:
            return error.code()
        return await call.code()


def journal_records(directory: Path) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "amps", "journal", "dump", str(directory)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


async def test_a_forged_grant_on_the_client_port_is_refused_and_changes_nothing(
    instance: InstanceProcess, tmp_path: Path
) -> None:
    async with Client("publisher") as publisher:
        await publisher.connect(instance.address)
        await publisher.publish("orders", '{"id":1}')
        await publisher.flush(10)
    journal = tmp_path / "amps" / "journal"
    [published] = journal_records(journal)
    frames = forged_frames(int(str(published["bookmark"]).split("|")[0]))
    # The replication service does not exist on the client port. Asked with no frames, the answer
    # is deterministic; with frames, gRPC may report the server's early close as INTERNAL while
    # the client is still writing, so that call must only fail.
    assert await send_raw(instance.address, REPLICATION_LINK, []) == grpc.StatusCode.UNIMPLEMENTED
    status = await send_raw(instance.address, REPLICATION_LINK, frames)
    assert status in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INTERNAL)
    # The same bytes as client frames are not commands the client service runs.
    await send_raw(instance.address, "/amps.v1.Amps/Connect", frames)
    # The message is still this instance's to deliver, and nothing but the publish was logged.
    async with Client("consumer") as consumer:
        await consumer.connect(instance.address)
        work = await consumer.subscribe("work")
        [message] = await take(work, 1)
        assert message.json() == {"id": 1}
    assert journal_records(journal) == [published]
