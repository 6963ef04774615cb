"""Record codec: round trips of every record kind, and fuzzing of the decoder (L8)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.bookmarks import PackedBookmarks, bookmark_pairs
from amps.log.records import (
    Bookmark,
    PublishRecord,
    QueueAction,
    QueueRecord,
    Record,
    TransferRecord,
)

u64 = st.integers(min_value=0, max_value=2**64 - 1)
u32 = st.integers(min_value=0, max_value=2**32 - 1)
text = st.text(max_size=40)
bookmarks = st.builds(Bookmark, u64, u64)

publishes = st.builds(
    PublishRecord, u64, u64, text, st.binary(max_size=300), u64, u64, text, text, u64, text, u32
)


@st.composite
def queue_records(draw: st.DrawFn) -> QueueRecord:
    """Format 1 (no delivery facts) and format 2 (a last delivery time and count per txid)."""
    txids = tuple(draw(st.lists(u64, max_size=5)))
    delivered_us: tuple[int, ...] = ()
    deliveries: tuple[int, ...] = ()
    if bool(txids) and draw(st.booleans()):  # (a bare `txids and` types the draw as txids)
        delivered_us = tuple(draw(st.lists(u64, min_size=len(txids), max_size=len(txids))))
        deliveries = tuple(
            draw(st.lists(st.integers(0, 65_535), min_size=len(txids), max_size=len(txids)))
        )
    return QueueRecord(
        draw(u64), draw(u64), draw(text), draw(st.sampled_from(QueueAction)),
        tuple(draw(st.lists(bookmarks, max_size=5))), txids, draw(text), draw(text), draw(text),
        draw(u64), delivered_us, deliveries,
    )  # fmt: skip


transfers = st.builds(
    TransferRecord, u64, u64, text, bookmarks, text, text, st.booleans(), text, text, u64, u64
)
records = st.one_of(publishes, queue_records(), transfers)
FUZZ = settings(max_examples=150, deadline=None)


@given(records)
@FUZZ
def test_every_record_round_trips(record: Record) -> None:
    frame = codec.encode(record)
    decoded, consumed = codec.decode(frame)
    assert decoded == [record]
    assert type(decoded[0]) is type(record)
    assert consumed == len(frame)


@given(st.lists(records, max_size=8))
@FUZZ
def test_a_stream_of_records_round_trips(items: list[Record]) -> None:
    buf = b"".join(codec.encode(r) for r in items)
    assert codec.decode(buf) == (items, len(buf))


@given(publishes)
@FUZZ
def test_encode_publish_is_byte_identical_to_the_generic_frame(record: PublishRecord) -> None:
    """The append hot path writes exactly the on-disk format of encode_payload (L8)."""
    payload = codec.encode_payload(record)
    length = len(payload).to_bytes(4, "little")
    crc = codec._crc_extend(codec._crc_value(length), payload)
    expected = codec.MAGIC.to_bytes(4, "little") + crc.to_bytes(4, "little") + length + payload
    assert codec.encode(record) == expected
    assert codec.encode_publish(
        record.txid, record.timestamp_us, record.topic, record.data, record.publisher_id,
        record.seq, record.origin_instance, record.origin_group, record.origin_txid,
        record.correlation_id, record.expiration_s,
    ) == expected  # fmt: skip


def test_name_cache_tells_apart_names_with_the_same_concatenation() -> None:
    first = PublishRecord(1, 2, "ab", b"d", 3, 4, "", "g", 1, "", 0)
    second = PublishRecord(2, 2, "a", b"d", 3, 5, "b", "g", 1, "", 0)
    assert codec.decode(codec.encode(first))[0] == [first]
    assert codec.decode(codec.encode(second))[0] == [second]


def test_decoded_publish_is_a_real_frozen_record() -> None:
    record = PublishRecord(1, 2, "t", b"d", 3, 4, "i", "g", 1, "c", 0)
    (decoded,), _ = codec.decode(codec.encode(record))
    assert isinstance(decoded, PublishRecord)
    assert hash(decoded) == hash(record)
    with pytest.raises(AttributeError):
        decoded.txid = 9  # type: ignore[misc]


def _outcome(buf: bytes) -> tuple[list[Record], int] | CorruptRecord:
    try:
        return codec.decode(buf)
    except CorruptRecord as exc:
        return exc


@given(st.binary(max_size=400))
@FUZZ
def test_random_bytes_decode_or_fail_cleanly(buf: bytes) -> None:
    """Decoding random bytes gives records, "need more bytes", or CorruptRecord, nothing else."""
    result = _outcome(buf)
    if isinstance(result, CorruptRecord):
        assert 0 <= result.offset < len(buf)
    else:
        assert result[1] <= len(buf)


@given(st.lists(records, min_size=1, max_size=3))
@FUZZ
def test_every_truncation_is_need_more_bytes(items: list[Record]) -> None:
    """A valid stream cut anywhere decodes its whole frames and waits for the rest."""
    frames = [codec.encode(r) for r in items]
    buf = b"".join(frames)
    ends = [sum(len(f) for f in frames[: i + 1]) for i in range(len(frames))]
    for cut in range(len(buf)):
        decoded, consumed = codec.decode(buf[:cut])
        whole = sum(1 for end in ends if end <= cut)
        assert decoded == items[:whole]
        assert consumed == (ends[whole - 1] if whole else 0)


@given(records, st.data())
@settings(max_examples=40, deadline=None)
def test_every_single_bit_flip_is_detected(record: Record, data: st.DataObject) -> None:
    """A flipped bit anywhere in a frame is never decoded as a (different) record."""
    frame = codec.encode(record)
    for bit in range(len(frame) * 8):
        damaged = bytearray(frame)
        damaged[bit // 8] ^= 1 << (bit % 8)
        result = _outcome(bytes(damaged))
        if isinstance(result, CorruptRecord):
            assert result.offset == 0
        else:
            assert result == ([], 0)  # a flipped length that now asks for more bytes


def test_corrupt_record_names_the_offset_of_the_damaged_frame() -> None:
    good = codec.encode(QueueRecord(1, 1, "q", QueueAction.ACK))
    bad = bytearray(codec.encode(QueueRecord(2, 2, "q", QueueAction.CANCEL)))
    bad[-1] ^= 0x40
    with pytest.raises(CorruptRecord, match="checksum") as caught:
        codec.decode(good + bytes(bad))
    assert caught.value.offset == len(good)


def test_find_next_frame_skips_damage() -> None:
    frame = codec.encode(QueueRecord(1, 1, "q", QueueAction.ACK))
    assert codec.find_next_frame(b"\xa3\xb5junk" + frame, 0, 6 + len(frame)) == 6
    assert codec.find_next_frame(b"junk" * 100, 0, 400) is None


def test_limit_stops_early() -> None:
    buf = b"".join(codec.encode(QueueRecord(i, i, "q", QueueAction.ACK)) for i in range(1, 6))
    decoded, consumed = codec.decode(buf, limit=2)
    assert [r.txid for r in decoded] == [1, 2]
    assert codec.decode(buf, consumed)[0][0].txid == 3


# A queue record as the format 1 codec wrote it (before delivery facts): still read (L8).
_FORMAT_1_ACK = bytes.fromhex(
    "7e1ab5a31f1aaf475300000002070000000000000000401e18240a0600090000000000000001060001000100"
    "010001000000020000006f72646572736167720300000000000000040000000000000005000000000000000600"
    "000000000000"
)


def test_a_format_1_queue_record_still_decodes_and_is_written_the_same() -> None:
    record = QueueRecord(
        7, 1_700_000_000_000_000, "orders", QueueAction.ACK, (Bookmark(3, 4),), (5, 6), "r",
        "a", "g", 9,
    )  # fmt: skip
    assert codec.decode(_FORMAT_1_ACK) == ([record], len(_FORMAT_1_ACK))
    assert codec.encode(record) == _FORMAT_1_ACK


def test_a_removal_carries_each_message_s_last_delivery_and_count() -> None:
    record = QueueRecord(
        7, 9, "q", QueueAction.ACK, txids=(5, 6), delivered_us=(3, 4), deliveries=(1, 2)
    )
    frame = codec.encode(record)
    assert len(frame) == len(codec.encode(replace(record, delivered_us=(), deliveries=()))) + 21
    assert codec.decode(frame)[0] == [record]


def test_delivery_facts_must_match_the_txids() -> None:
    with pytest.raises(ValueError, match="one per txid"):
        codec.encode(QueueRecord(1, 1, "q", QueueAction.ACK, txids=(5, 6), deliveries=(1,)))


def test_a_wrong_queue_record_version_is_corrupt() -> None:
    record = QueueRecord(1, 1, "q", QueueAction.ACK, txids=(5,), delivered_us=(3,), deliveries=(1,))
    payload = bytearray(codec.encode_payload(record))
    payload[-11] = 3  # the version byte before one (u64, u16) pair
    with pytest.raises(CorruptRecord, match="does not match"):
        codec.decode_payload(bytes(payload))


def test_a_transfer_without_an_epoch_keeps_the_first_format() -> None:
    """Issue 9: the epoch is a versioned tail; records written before it read as epoch 0."""
    old = TransferRecord(1, 1, "q", Bookmark(5, 2), "a", "b")
    new = replace(old, epoch=3)
    assert len(codec.encode(new)) == len(codec.encode(old)) + 9
    assert codec.decode(codec.encode(old))[0] == [old]
    assert codec.decode(codec.encode(new))[0] == [new]
    payload = bytearray(codec.encode_payload(new))
    payload[-9] = 1  # a wrong version byte
    with pytest.raises(CorruptRecord, match="does not match"):
        codec.decode_payload(bytes(payload))


def test_control_frames_carry_no_record_and_are_skipped() -> None:
    """Segment headers and commit markers take no txid: readers of records step over them."""
    head = codec.encode_segment_header(1)
    first = codec.encode(QueueRecord(1, 1, "q", QueueAction.ACK))
    commit = codec.encode_commit(1, 1)
    second = codec.encode(QueueRecord(2, 2, "q", QueueAction.ACK))
    buf = head + first + commit + second
    decoded, consumed = codec.decode(buf)
    assert [r.txid for r in decoded] == [1, 2]
    assert consumed == len(buf)
    assert len(head) == len(commit) == codec.CONTROL_FRAME_BYTES
    assert codec.decode(buf, limit=1)[0][0].txid == 1
    assert codec.decode(buf, len(head) + len(first), limit=1)[0][0].txid == 2
    marker = codec.check_payload(commit[codec.HEADER_SIZE_BYTES :])
    assert marker == codec.Control(codec.COMMIT_KIND, 1, 1, 0)
    header = codec.check_payload(head[codec.HEADER_SIZE_BYTES :])
    assert header == codec.Control(codec.SEGMENT_HEADER_KIND, 1, 0, codec.SEGMENT_FORMAT_VERSION)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (bytes([codec.COMMIT_KIND]) + bytes(31), "control frame of 32 bytes"),
        (bytes([codec.COMMIT_KIND]) + (1).to_bytes(8, "little") + bytes(24), "malformed"),
        (bytes([codec.COMMIT_KIND]) + bytes(8) + (5).to_bytes(8, "little") + bytes(16), "5..0"),
        (bytes([codec.SEGMENT_HEADER_KIND]) + bytes(24) + (9).to_bytes(8, "little"), "version 9"),
    ],
)
def test_malformed_control_frames_are_corrupt(payload: bytes, message: str) -> None:
    with pytest.raises(CorruptRecord, match=message):
        codec.decode_control(payload)


def test_find_next_frame_can_look_for_commit_markers_only() -> None:
    record = codec.encode(QueueRecord(1, 1, "q", QueueAction.ACK))
    commit = codec.encode_commit(1, 1)
    buf = b"junk" + record + commit
    assert codec.find_next_frame(buf, 0, len(buf)) == 4
    assert codec.find_next_frame(buf, 0, len(buf), commit_only=True) == 4 + len(record)
    assert codec.find_next_frame(b"junk" + record, 0, 4 + len(record), commit_only=True) is None


@given(st.lists(bookmarks, max_size=6))
@FUZZ
def test_a_decoded_queue_record_s_bookmarks_read_as_the_ones_written(
    written: list[Bookmark],
) -> None:
    record = QueueRecord(7, 8, "q", QueueAction.ACK, bookmarks=tuple(written))
    [decoded], _ = codec.decode(codec.encode(record))
    assert isinstance(decoded, QueueRecord)
    packed = decoded.bookmarks
    assert isinstance(packed, PackedBookmarks)  # built into Bookmarks only when read
    assert list(packed) == written
    assert len(packed) == len(written)
    assert [packed[i] for i in range(-len(written), len(written))] == written * 2
    assert packed[1:] == tuple(written[1:])
    assert packed.pairs() == bookmark_pairs(tuple(written))
    assert packed == tuple(written)
    assert tuple(written) == packed
    assert hash(packed) == hash(tuple(written))
    assert packed != (*written, Bookmark(1, 2))
    assert all(type(b) is Bookmark for b in packed)
    # Encoded again (a link forwarding a peer's record): the same bytes, no rebuild.
    assert codec.encode(decoded) == codec.encode(record)


def test_packed_bookmarks_out_of_range_and_of_a_wrong_length_are_refused() -> None:
    packed = PackedBookmarks(bytes(32))
    with pytest.raises(IndexError):
        packed[2]
    with pytest.raises(ValueError, match="multiple of 16"):
        PackedBookmarks(bytes(17))
