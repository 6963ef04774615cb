"""Fuzzing replication frames (issue 11, "Also"): the bytes a peer sends decode to a LinkFrame
or a protobuf DecodeError, and a LinkFrame to a frame or BadFrame (the link closes with its
text); nothing else escapes, memory stays bounded per frame."""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from amps.log.records import PublishRecord
from amps.v1 import replication_pb2 as pb
from replication.convert import (
    BadFrame,
    WireBatch,
    decode_link_frame,
    encode_batch,
    from_pb,
    to_pb,
)
from replication.frames import (
    Ack,
    Batch,
    Digest,
    Frame,
    Heartbeat,
    Hello,
    OriginPosition,
    QueueDigest,
    Refusal,
    TopicDigest,
    TransferRequest,
)
from tests.harness.bounds import peak_memory_below

FUZZ = settings(
    max_examples=300,
    deadline=None,  # bounded by the frame's size and the memory bound, not the clock
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FIXED_MEMORY_BYTES = 1024 * 1024
MEMORY_PER_INPUT_BYTE = 16

TEXT = st.text(max_size=12)
U64 = st.integers(0, 2**64 - 1)
TXID = st.integers(1, 2**63 - 1)
RECORDS = st.builds(
    PublishRecord,
    txid=TXID,
    timestamp_us=st.integers(0, 2**62),
    topic=st.text(min_size=1, max_size=12),
    data=st.binary(max_size=64),
    publisher_id=U64,
    seq=U64,
    origin_instance=TEXT,
    origin_group=TEXT,
    origin_txid=st.integers(0, 2**63 - 1),
)
FRAMES: st.SearchStrategy[Frame] = st.one_of(
    st.builds(
        Hello,
        protocol_version=st.integers(0, 2**32 - 1),
        instance=TEXT,
        group=TEXT,
        expected_peer=TEXT,
        expected_group=TEXT,
        digest=st.builds(
            Digest,
            sends=st.booleans(),
            topics=st.lists(st.builds(TopicDigest, TEXT, TEXT, TEXT), max_size=3).map(tuple),
            sync=st.booleans(),
            queues=st.lists(
                st.builds(
                    QueueDigest,
                    TEXT,
                    TEXT,
                    TEXT,
                    TEXT,
                    TEXT,
                    TEXT,
                    st.lists(st.tuples(TEXT, TEXT), max_size=3).map(tuple),
                ),
                max_size=3,
            ).map(tuple),
        ),
        positions=st.lists(st.builds(OriginPosition, TEXT, U64, U64), max_size=3).map(tuple),
    ),
    st.builds(Batch, U64, U64, st.lists(RECORDS, max_size=4).map(tuple)),
    st.builds(Ack, U64),
    st.builds(
        Heartbeat,
        st.lists(st.tuples(TEXT, st.integers(0, 2**32 - 1)), max_size=3).map(tuple),
        st.lists(st.builds(OriginPosition, TEXT, U64, U64), max_size=3).map(tuple),
        U64,
    ),
    st.builds(Refusal, TEXT, TEXT),
    st.builds(
        TransferRequest,
        st.text(min_size=1, max_size=12),
        st.lists(st.tuples(U64, U64), max_size=4).map(tuple),
        st.text(min_size=1, max_size=12),
        st.text(min_size=1, max_size=12),
        st.integers(0, 2**32 - 1),
        U64,
    ),
)


@st.composite
def frame_bytes(draw: st.DrawFn) -> bytes:
    """A well-formed frame with a few bytes changed (often inside a batch's records), or any
    bytes at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=1024))
    frame = draw(FRAMES)
    if isinstance(frame, Batch) and draw(st.booleans()):
        data = bytearray(encode_batch(frame))  # as a link writes a batch
    else:
        data = bytearray(to_pb(frame).SerializeToString())
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        position = draw(st.integers(0, len(data) - 1))
        data[position] = draw(st.integers(0, 255))
    return bytes(data)


@FUZZ
@given(frame_bytes())
def test_peer_bytes_give_a_frame_or_a_declared_error(data: bytes) -> None:
    with peak_memory_below(FIXED_MEMORY_BYTES + MEMORY_PER_INPUT_BYTE * len(data)):
        try:
            message = pb.LinkFrame.FromString(data)
        except DecodeError:
            event("DecodeError")
            return
        outcome: Frame | BadFrame
        try:
            outcome = from_pb(message)
        except BadFrame as error:
            outcome = error
    event(type(outcome).__name__)
    if isinstance(outcome, BadFrame):
        assert str(outcome), "the link closes with this text: it must say something"


@FUZZ
@given(FRAMES)
def test_every_frame_survives_the_wire(frame: Frame) -> None:
    assert from_pb(pb.LinkFrame.FromString(to_pb(frame).SerializeToString())) == frame


def _outcome(read: Callable[[bytes], pb.LinkFrame | WireBatch], data: bytes) -> object:
    try:
        message = read(data)
    except DecodeError:
        return DecodeError
    try:
        return from_pb(message)
    except BadFrame as error:
        return str(error)


@FUZZ
@given(frame_bytes())
def test_a_batch_read_from_its_bytes_is_the_batch_protobuf_reads(data: bytes) -> None:
    """The links' deserializer reads a batch itself: the same frame, or the same refusal."""
    assert _outcome(decode_link_frame, data) == _outcome(pb.LinkFrame.FromString, data)


@FUZZ
@given(FRAMES)
def test_a_batch_written_as_bytes_is_the_batch_protobuf_writes(frame: Frame) -> None:
    if isinstance(frame, Batch):
        assert pb.LinkFrame.FromString(encode_batch(frame)) == to_pb(frame)
        assert from_pb(decode_link_frame(encode_batch(frame))) == frame
