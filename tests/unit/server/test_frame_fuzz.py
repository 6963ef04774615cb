"""Fuzzing client frames (issue 11, "Also"): bytes from a client decode to a ClientFrame or a
protobuf DecodeError, and every command of a decoded frame is carried out or refused with a
failure ack naming a declared error; nothing else escapes, nothing is fatal, memory stays
bounded per frame.

A real Instance (real journal in a temporary directory, a queue) handles the frames through
ClientService._on_frame, the code a gRPC stream feeds; an exception escaping it would end the
client's connection with only a log line.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from amps import errors
from amps.config import load_config
from amps.log.journal import Journal
from amps.server.client_service import ClientService
from amps.server.instance import Instance
from amps.server.session import Session
from amps.v1 import client_pb2 as pb
from tests.harness.bounds import peak_memory_below

CONFIG = """<AMPSConfig><Name>fuzz</Name>
<Transports><Transport><Name>grpc</Name><Type>grpc</Type><InetAddr>0</InetAddr>
<MaxMessageSize>64KB</MaxMessageSize></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>
<MessageType>json</MessageType><LeasePeriod>30s</LeasePeriod></Queue></SOW>
</AMPSConfig>"""

# Every error code the server may put in a failure ack: the declared AmpsError classes.
DECLARED_CODES = {
    cls.code
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.AmpsError)
} - {""}
FRAME_MEMORY_BYTES = 4 * 1024 * 1024
FUZZ = settings(
    max_examples=150,
    deadline=None,  # bounded by input size and the memory bound, not by the clock
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def pool(*values: str) -> st.SearchStrategy[str]:
    """Values that reach the interesting branches, and now and then any text."""
    return st.sampled_from(values) | st.text(max_size=12)


ANY = pool("", "\x00", "é", "a" * 300, "a,b,,c")
IDS = pool("", "s1", "s2", "all", "s1,s2", "s1,,x")
TOPICS = pool(
    "orders", "work", "orders.(", ".*", "^orders$", "a" * 1100, "o\x01", "ünï/cøde", "(a+)+$"
)
BOOKMARKS = pool(
    "0",
    "epoch",
    "now",
    "recent",
    "1|2|",
    "x|y|",
    "|",
    "18446744073709551616|1|",
    "20260101T000000Z",
    "20261301T000000Z",
    "1|1|,2|2|",
)
FILTERS = pool("/qty > 3", "/qty >", "LENGTH(/a) = 1", "(((((", "'", "[1,2", "/a LIKE '('")
OPTIONS = pool("replace", "cancel", "expire", "top_n=1", "cancel,expire", "live,oof")
ACK_TYPES = pool("processed", "persisted", "processed,persisted", "completed")
HEARTBEATS = pool("start,1", "start,0", "start,nan", "start,1e309", "start,", "start,x", "beat")
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
DATA = st.sampled_from([b"", b"{}", b'{"qty": 5}', b"\xff\xfe", b"x" * 70_000]) | st.binary(
    max_size=64
)

BODIES = st.one_of(
    st.builds(pb.Logon, client_name=ANY, user_id=ANY, password=ANY, version=ANY),
    st.builds(pb.Publish, topic=TOPICS, data=DATA, seq=U64, correlation_id=ANY, expiration_s=U32),
    st.builds(
        pb.Subscribe,
        topic=TOPICS,
        sub_id=IDS,
        filter=FILTERS,
        bookmark=BOOKMARKS,
        options=OPTIONS,
        max_backlog=U32,
        has_max_backlog=st.booleans(),
    ),
    st.builds(pb.Unsubscribe, sub_id=IDS),
    st.builds(
        pb.SowDelete, topic=TOPICS, bookmark=BOOKMARKS, filter=FILTERS, options=OPTIONS, seq=U64
    ),
    st.builds(pb.Sow, topic=TOPICS, filter=FILTERS, query_id=IDS, top_n=U32, batch_size=U32),
    st.builds(pb.Flush),
    st.builds(pb.Heartbeat, options=HEARTBEATS),
)
FIELD = {
    pb.Logon: "logon",
    pb.Publish: "publish",
    pb.Subscribe: "subscribe",
    pb.Unsubscribe: "unsubscribe",
    pb.SowDelete: "sow_delete",
    pb.Sow: "sow",
    pb.Flush: "flush",
    pb.Heartbeat: "heartbeat",
}


@st.composite
def commands(draw: st.DrawFn) -> pb.Command:
    body = draw(BODIES)
    command = pb.Command(cmd_id=draw(IDS), ack_type=draw(ACK_TYPES))
    getattr(command, FIELD[type(body)]).CopyFrom(body)
    return command


@st.composite
def frame_bytes(draw: st.DrawFn) -> bytes:
    """A frame that usually logs on first, its encoding perhaps damaged, or plain bytes."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=512))
    frame = pb.ClientFrame()
    if draw(st.integers(0, 3)):
        frame.commands.add(cmd_id="l", logon=pb.Logon(client_name=draw(st.sampled_from("abc"))))
    frame.commands.extend(draw(st.lists(commands(), max_size=6)))
    data = bytearray(frame.SerializeToString())
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        position = draw(st.integers(0, len(data) - 1))
        data[position] = draw(st.integers(0, 255))
    return bytes(data)


@dataclass
class Running:
    loop: asyncio.AbstractEventLoop
    instance: Instance
    service: ClientService
    fatal: list[BaseException]


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    """One instance for every example (starting one per example would dominate the run)."""
    loop = asyncio.new_event_loop()
    fatal: list[BaseException] = []
    with tempfile.TemporaryDirectory() as directory:
        journal_dir = Path(directory) / "journal"

        async def start() -> Instance:
            journal = Journal.open(journal_dir, instance_name="fuzz", group="fuzz")
            instance = Instance(load_config(CONFIG), journal, fatal.append)
            await instance.start(journal_dir)
            return instance

        instance = loop.run_until_complete(start())
        try:
            yield Running(loop, instance, ClientService(instance), fatal)
        finally:

            async def stop() -> None:
                await instance.stop()
                await instance.journal.close()

            loop.run_until_complete(stop())
            loop.close()


def _handle(running: Running, frame: pb.ClientFrame) -> list[pb.ServerMessage]:
    """Feed one frame to a fresh connection; the messages it is sent before it goes away."""

    async def connection() -> list[pb.ServerMessage]:
        session = Session(running.instance.send_budget, "fuzz", running.instance.disconnected)
        running.instance.sessions.add(session)
        try:
            running.service._on_frame(session, frame)
            await asyncio.wait_for(session.wait_tasks(), timeout=30)
            await asyncio.sleep(0)  # replays and queue deliveries get a turn
        finally:
            running.instance.disconnected(session)
            session.outbox.close()
        sent = b"".join([frame async for frame in session.outbox.frames()])
        return list(pb.ServerFrame.FromString(sent).messages)

    return running.loop.run_until_complete(connection())


@FUZZ
@given(frame_bytes())
def test_client_frames_get_an_ack_or_a_declared_error(running: Running, data: bytes) -> None:
    with peak_memory_below(FRAME_MEMORY_BYTES + 4 * len(data)):
        try:
            frame = pb.ClientFrame.FromString(data)
        except DecodeError:
            return  # gRPC ends the call with INTERNAL: the declared outcome for undecodable bytes
        messages = _handle(running, frame)
    for message in messages:
        if message.WhichOneof("body") == "ack":
            event(f"{message.ack.status} ack")
            assert message.ack.status in {"success", "failure"}, message
            if message.ack.status == "failure":
                assert message.ack.error_code in DECLARED_CODES, message
                assert message.ack.reason
    assert not running.fatal, running.fatal
