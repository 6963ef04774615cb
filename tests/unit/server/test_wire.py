"""The hand-written delivery encoding is byte-for-byte what protobuf produces (amps.server.wire)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from amps.server import wire
from amps.server.outbox import MAX_FRAME_MESSAGES, Outbox
from amps.v1 import client_pb2 as pb

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
# Unicode text including astral characters and NUL; surrogates cannot be UTF-8 encoded.
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
EDGES = st.sampled_from([0, 1, 127, 128, 16383, 16384, 2**28 - 1, 2**28, 2**42, 2**56 - 1, 2**56])

DELIVERIES = st.fixed_dictionaries(
    {
        "topic": TEXT,
        "data": st.binary(max_size=20_000),
        "bookmark": TEXT,
        "sub_ids": st.lists(TEXT, max_size=4),
        "txid": U64 | EDGES,
        "timestamp_us": I64 | EDGES,
        "lease_deadline_us": I64 | EDGES,
        "delivery_count": U32,
        "queue": st.booleans(),
        "correlation_id": TEXT,
        "query_id": TEXT,
        "origin_instance": TEXT,
        "origin_txid": U64 | EDGES,
    }
)


def _entry_of(message: pb.ServerMessage) -> bytes:
    return pb.ServerFrame(messages=[message]).SerializeToString()


def test_varint_tables_are_what_they_say() -> None:
    """The tables are built from one buffer each; entry by entry they are these values."""
    for v in range(1 << 14):
        small = bytes((v,)) if v < 0x80 else bytes(((v & 0x7F) | 0x80, v >> 7))
        assert wire._SMALL[v] == small
        assert wire._MORE[v] == bytes(((v & 0x7F) | 0x80, (v >> 7) | 0x80))
        assert wire._DATA_KEYS[v] == (b"\x12" + small if v else b"")
        assert type(wire._SMALL[v]) is type(wire._MORE[v]) is type(wire._DATA_KEYS[v]) is bytes


@given(U64 | EDGES | I64)
def test_varint_matches_protobuf(value: int) -> None:
    field = pb.Delivery(timestamp_us=value) if value < 2**63 else pb.Delivery(txid=value)
    encoded = field.SerializeToString()
    if value:
        assert encoded[1:] == wire.varint(value)


@given(DELIVERIES)
def test_delivery_entry_is_the_protobuf_encoding(fields: dict[str, object]) -> None:
    message = pb.ServerMessage(delivery=pb.Delivery(**fields))  # type: ignore[arg-type]
    entry = wire.delivery_entry(**fields)
    assert entry == _entry_of(message)
    assert pb.ServerFrame.FromString(entry).messages[0] == message


def test_empty_delivery_still_says_delivery() -> None:
    entry = wire.delivery_entry()
    assert entry == _entry_of(pb.ServerMessage(delivery=pb.Delivery()))
    assert pb.ServerFrame.FromString(entry).messages[0].WhichOneof("body") == "delivery"


@given(
    topic=TEXT,
    sub_ids=st.lists(TEXT, max_size=3),
    data=st.binary(max_size=20_000),
    publisher_id=U64,
    seq=U64,
    txid=U64 | EDGES,
    timestamp_us=I64 | EDGES,
    correlation_id=TEXT,
)
def test_delivery_encoder_matches_protobuf(
    topic: str, sub_ids: list[str], data: bytes, publisher_id: int, seq: int, txid: int,
    timestamp_us: int, correlation_id: str,
) -> None:  # fmt: skip
    encoder = wire.DeliveryEncoder(topic.encode(), sub_ids)
    entry = encoder.encode(data, publisher_id, seq, txid, timestamp_us, correlation_id.encode())
    expected = pb.ServerMessage(
        delivery=pb.Delivery(
            topic=topic,
            data=data,
            bookmark=f"{publisher_id}|{seq}|",
            sub_ids=sub_ids,
            txid=txid,
            timestamp_us=timestamp_us,
            correlation_id=correlation_id,
        )
    )
    assert entry == _entry_of(expected)
    # The shared encoders give the same bytes (second call: from the cache).
    for _ in range(2):
        shared = wire.encoder_for(topic, sub_ids)
        again = shared.encode(data, publisher_id, seq, txid, timestamp_us, correlation_id.encode())
        assert again == entry


@given(
    topic=TEXT,
    data=st.binary(max_size=2_000),
    publisher_id=U64,
    seq=U64,
    txid=U64 | EDGES,
    correlation_id=TEXT,
    origin=TEXT,
    origin_txid=U64 | EDGES,
)
def test_replayed_deliveries_with_their_origin_match_protobuf(
    topic: str, data: bytes, publisher_id: int, seq: int, txid: int, correlation_id: str,
    origin: str, origin_txid: int,
) -> None:  # fmt: skip
    """The `origin` subscribe option: fields 12 and 13 after the others (docs/guide/spark.md)."""
    parts: list[bytes] = []
    size = wire.DeliveryEncoder(topic.encode(), ("s",)).encode_into(
        parts, data, publisher_id, seq, txid, 1 << 50, correlation_id.encode(), origin.encode(),
        origin_txid,
    )  # fmt: skip
    expected = pb.ServerMessage(
        delivery=pb.Delivery(
            topic=topic, data=data, bookmark=f"{publisher_id}|{seq}|", sub_ids=["s"], txid=txid,
            timestamp_us=1 << 50, correlation_id=correlation_id, origin_instance=origin,
            origin_txid=origin_txid,
        )
    )  # fmt: skip
    assert b"".join(parts) == _entry_of(expected)
    assert size == len(_entry_of(expected))


@given(
    topic=TEXT,
    sub_id=TEXT,
    data=st.binary(max_size=20_000),
    publisher_id=U64,
    seq=U64,
    txid=U64 | EDGES,
    timestamp_us=I64 | EDGES,
    lease_deadline_us=I64 | EDGES,
    delivery_count=U32,
    correlation_id=TEXT,
)
def test_queue_delivery_encoder_matches_protobuf(
    topic: str, sub_id: str, data: bytes, publisher_id: int, seq: int, txid: int,
    timestamp_us: int, lease_deadline_us: int, delivery_count: int, correlation_id: str,
) -> None:  # fmt: skip
    encoder = wire.QueueDeliveryEncoder(topic.encode(), sub_id)
    fields: dict[str, object] = {
        "topic": topic,
        "data": data,
        "bookmark": f"{publisher_id}|{seq}|",
        "sub_ids": [sub_id],
        "txid": txid,
        "timestamp_us": timestamp_us,
        "lease_deadline_us": lease_deadline_us,
        "delivery_count": delivery_count,
        "queue": True,
        "correlation_id": correlation_id,
    }
    expected = _entry_of(pb.ServerMessage(delivery=pb.Delivery(**fields)))  # type: ignore[arg-type]
    # A delivery with another lease first: the cached lease field must follow the value.
    encoder.encode(data, publisher_id, seq, txid, timestamp_us, 12_345, 1, b"")
    for _ in range(2):  # the second time from the cached publisher prefix and lease field
        entry = encoder.encode(
            data, publisher_id, seq, txid, timestamp_us, lease_deadline_us, delivery_count,
            correlation_id.encode(),
        )  # fmt: skip
        assert entry == expected
        assert entry == wire.delivery_entry(**fields)


# One encoder over a run of deliveries whose values are near each other (as in one engine
# step) or far apart: every cached part (bookmark head, lease and count fields, high bits of
# txid and timestamp, headers) must follow the values.
NEAR = st.tuples(
    st.sampled_from([1, 2, 2**63 + 5]),  # publisher_id
    st.integers(0, 20_000) | U64,  # seq
    st.integers(0, 40_000) | U64,  # txid
    st.integers(1_763_870_000_000_000, 1_763_870_000_100_000) | I64,  # timestamp_us
    st.sampled_from([0, 1_763_870_300_000_000, 1_763_870_300_001_000]),  # lease deadline
    st.sampled_from([0, 1, 2, 300]),  # delivery count
    st.sampled_from(["", "c1", "ü" * 70]),  # correlation id
    st.sampled_from([b"", b"{}", b"x" * 130, b"y" * 17_000]),  # data
)


@given(st.lists(NEAR, min_size=1, max_size=30))
def test_one_queue_encoder_follows_every_value(deliveries: list[tuple[object, ...]]) -> None:
    encoder = wire.QueueDeliveryEncoder(b"queue", "sub")
    for pub, seq, txid, ts, lease, count, corr, data in deliveries:
        assert isinstance(corr, str)
        fields = {
            "topic": "queue", "data": data, "bookmark": f"{pub}|{seq}|", "sub_ids": ["sub"],
            "txid": txid, "timestamp_us": ts, "lease_deadline_us": lease,
            "delivery_count": count, "queue": True, "correlation_id": corr,
        }  # fmt: skip
        entry = encoder.encode(data, pub, seq, txid, ts, lease, count, corr.encode())  # type: ignore[arg-type]
        assert entry == _entry_of(pb.ServerMessage(delivery=pb.Delivery(**fields)))  # type: ignore[arg-type]


@given(st.lists(DELIVERIES, min_size=1, max_size=5))
def test_a_frame_is_the_concatenation_of_entries(many: list[dict[str, object]]) -> None:
    messages = [pb.ServerMessage(delivery=pb.Delivery(**f)) for f in many]  # type: ignore[arg-type]
    frame = b"".join(wire.delivery_entry(**f) for f in many)
    assert frame == pb.ServerFrame(messages=messages).SerializeToString()


@given(U64 | EDGES)
def test_persisted_ack_entry_is_the_protobuf_encoding(seq: int) -> None:
    ack = pb.Ack(ack_type="persisted", status="success", seq=seq)
    assert wire.persisted_ack_entry(seq) == wire.message_entry(pb.ServerMessage(ack=ack))


def test_other_messages_go_through_protobuf() -> None:
    ack = pb.ServerMessage(ack=pb.Ack(cmd_id="c", ack_type="processed", status="success", seq=9))
    beat = pb.ServerMessage(heartbeat=pb.Heartbeat(options="beat"))
    frame = wire.message_entry(ack) + wire.message_entry(beat)
    assert pb.ServerFrame.FromString(frame) == pb.ServerFrame(messages=[ack, beat])


async def test_outbox_frames_are_server_frames_within_limits() -> None:
    outbox = Outbox()
    entries = [wire.delivery_entry(topic="t", data=b"x" * i, txid=i + 1) for i in range(1_200)]
    outbox.put(wire.message_entry(pb.ServerMessage(heartbeat=pb.Heartbeat(options="beat"))))
    outbox.put_many(entries)
    outbox.close()
    frames = [pb.ServerFrame.FromString(frame) async for frame in outbox.frames()]
    assert all(len(frame.messages) <= MAX_FRAME_MESSAGES for frame in frames)
    messages = [m for frame in frames for m in frame.messages]
    assert messages[0].WhichOneof("body") == "heartbeat"
    assert [m.delivery.txid for m in messages[1:]] == list(range(1, 1_201))
    assert outbox.sent_messages == 1_201


def test_queue_encoder_caches_stay_bounded_and_right() -> None:
    """More distinct sizes and publishers than the caches hold: cleared, still the same bytes."""
    encoder = wire.QueueDeliveryEncoder(b"queue", "sub")
    for i in range(600):
        data, pub, seq = b"d" * (i % 300), i % 290 + 1, 10**i % 2**64
        txid, ts, lease = 2**14 * i + 5, 1_763_870_000_000_000 + 2**14 * i, 1_763_870_300_000_000
        entry = encoder.encode(data, pub, seq, txid, ts, lease, 1, b"")
        delivery = pb.Delivery(
            topic="queue", data=data, bookmark=f"{pub}|{seq}|", sub_ids=["sub"], txid=txid,
            timestamp_us=ts, lease_deadline_us=lease, delivery_count=1, queue=True,
        )  # fmt: skip
        assert entry == _entry_of(pb.ServerMessage(delivery=delivery))
    assert len(encoder._heads) <= wire._QUEUE_HEADS_MAX
    assert len(encoder._bookmarks) <= wire._QUEUE_BOOKMARKS_MAX
