"""A peer's batch received as frames: checked like a decode, appended restamped without building
records, and built into records only on demand (issue 8: the receive path; L4, R1, R10)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.bookmarks import Bookmark
from amps.log.journal import Journal
from amps.log.received import ReceivedFrames, scan
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from amps.log.segments import SegmentBuilder
from amps.log.storage import _write_parts
from amps.publishing import PublishingCore
from amps.v1 import replication_pb2 as pb
from replication.convert import BadFrame, from_pb, to_pb
from replication.frames import Batch

SEGMENT_SIZE_BYTES = 16 * 1024


def _publish(
    txid: int, publisher_id: int, seq: int, *, topic: str = "orders", origin: str = "a"
) -> PublishRecord:
    return PublishRecord(
        txid, 1_000 + txid, topic, b"m%d" % seq + b"." * 300, publisher_id, seq, origin,
        "g" + origin, txid + 500, "corr" if seq % 2 else "", seq % 3,
    )  # fmt: skip


def _mixed() -> list[Record]:
    return [
        _publish(1, 7, 1),
        _publish(2, 8, 1, topic="tópico"),
        QueueRecord(3, 1_003, "q", QueueAction.ACK, (Bookmark(7, 1),), (), "", "c", "gc", 33),
        _publish(4, 7, 2, origin="c"),
        TransferRecord(5, 1_005, "q", Bookmark(7, 1), "a", "b", False, "a", "ga", 55, 2),
        _publish(6, 7, 3),
    ]


def _frames(records: list[Record]) -> bytes:
    return b"".join(codec.encode(r) for r in records)


def _open(directory: Path) -> Journal:
    return Journal.open(
        directory, segment_size_bytes=SEGMENT_SIZE_BYTES, instance_name="b", group="g"
    )


def test_scan_builds_what_decode_builds_and_the_batch_summary() -> None:
    records = _mixed()
    data = _frames(records)
    frames = scan(data)
    assert list(frames) == codec.decode(data)[0] == records
    assert frames == records
    assert frames[-1] == records[-1]
    assert frames[1:3] == records[1:3]
    assert not frames.only_publishes
    assert frames.increasing
    assert frames.last_txid == 6
    # Each origin's last record: R10's position per origin, from one batch.
    assert frames.ends == {"a": (506, 6), "c": (504, 4)}
    assert scan(_frames(records[:5])).ends == {"a": (55, 5), "c": (504, 4)}
    assert scan(b"") == []
    assert scan(b"").ends == {}


def test_txids_not_increasing_are_reported() -> None:
    records: list[Record] = [_publish(2, 7, 1), _publish(2, 7, 2)]
    assert not scan(_frames(records)).increasing


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_damage_or_truncation_is_refused_whole(data: st.DataObject) -> None:
    """A damaged or torn batch raises before anything is appended: never half-applied."""
    records = _mixed()
    good = _frames(records)
    at = data.draw(st.integers(0, len(good) - 1))
    if data.draw(st.booleans()):
        damaged = good[:at] + bytes([good[at] ^ data.draw(st.integers(1, 255))]) + good[at + 1 :]
    else:
        damaged = good[:at]  # torn: cut anywhere but at the end
        if not damaged:
            return
    boundaries = {len(_frames(records[:k])): k for k in range(1, len(records))}
    if len(damaged) == at and at in boundaries:
        # Cut between two frames: the frames alone are a shorter batch; only the batch's
        # record count (below) tells that some are missing.
        assert len(scan(damaged)) == boundaries[at]
    else:
        with pytest.raises(CorruptRecord):
            scan(damaged)
    message = pb.LinkFrame()
    message.batch.batch_id, message.batch.through_txid = 1, 6
    message.batch.records, message.batch.record_count = damaged, 6
    with pytest.raises(BadFrame):
        from_pb(message)


def test_a_control_frame_in_a_batch_is_refused() -> None:
    with pytest.raises(CorruptRecord, match="control frame"):
        scan(_frames([_publish(1, 7, 1)]) + codec.encode_commit(1, 1))


def test_restamp_is_encode_of_the_record_restamped() -> None:
    record = _publish(9, 7, 1)
    frame = codec.encode(record)
    assert codec.restamp(frame, 0, len(frame) - codec.HEADER_SIZE_BYTES, 42, 77) == codec.encode(
        replace(record, txid=42, timestamp_us=77)
    )


def test_a_received_batch_round_trips_through_the_link_frame() -> None:
    records = tuple(_mixed())
    batch = Batch(3, 6, records)
    received = from_pb(pb.LinkFrame.FromString(to_pb(batch).SerializeToString()))
    assert isinstance(received, Batch)
    assert type(received.records) is ReceivedFrames
    assert received == batch


async def test_appending_frames_gives_the_bytes_of_appending_records(tmp_path: Path) -> None:
    """Same frames, marks, segment summaries (rotation included) and records as the record
    path; timestamps never go back; origin and origin txid kept (R1)."""
    batches = [
        [_publish(t, 7 + t % 3, 1 + t // 3, topic=f"t{t % 2}") for t in range(s, s + 25)]
        for s in range(1, 200, 25)
    ]
    batches[3] = [replace(r, timestamp_us=5) for r in batches[3]]  # older than the log's last
    # One publisher's consecutive numbers: the marks move once per batch (`advance_run`).
    batches += [[_publish(t, 9, t - 199) for t in range(s, s + 25)] for s in range(200, 300, 25)]
    by_record, by_frame = _open(tmp_path / "records"), _open(tmp_path / "frames")
    expected: list[PublishRecord] = []
    got: list[PublishRecord] = []
    for batch in batches:
        expected += by_record.append_replicated(batch)
        frames = scan(_frames(list(batch)))
        got += by_frame.append_received(frames, range(len(frames))).records()
    assert got == expected
    assert by_frame._pending == by_record._pending
    assert by_frame.marks == by_record.marks
    assert by_frame.segment_count == by_record.segment_count > 2
    assert [s.summary() if hasattr(s, "summary") else s for s in by_frame.segments()] == [
        s.summary() if hasattr(s, "summary") else s for s in by_record.segments()
    ]
    await by_record.commit()
    await by_frame.commit()
    assert by_frame.read(1, 1000) == expected
    assert [(r.origin_instance, r.origin_txid) for r in expected[:2]] == [("a", 501), ("a", 502)]
    await by_record.close()
    await by_frame.close()
    reopened = _open(tmp_path / "frames")
    assert reopened.read(1, 1000) == expected
    await reopened.close()


async def test_duplicates_are_skipped_and_the_rest_restamped(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    publishing: PublishingCore[str] = PublishingCore("b", journal.marks)
    first = scan(_frames([_publish(1, 7, 1), _publish(2, 7, 2)]))
    fresh = publishing.admit_received(first.heads)
    assert [r.txid for r in journal.append_received(first, fresh).records()] == [1, 2]
    # A resend after a broken link: seq 2 again, and seq 3 twice in one batch (L4).
    again = scan(_frames([_publish(2, 7, 2), _publish(3, 7, 3), _publish(4, 7, 3)]))
    fresh = publishing.admit_received(again.heads)
    assert fresh == [1]
    assert publishing.statistics().duplicates == 2
    run = journal.append_received(again, fresh)
    assert [(r.txid, r.seq, r.origin_txid) for r in run.records()] == [(3, 3, 503)]
    assert run.last_txid == 3
    assert len(run) == 1
    assert journal.marks.high_water(7) == 3
    assert again.topic_totals(fresh) == {"orders": (1, len(again[1].data))}  # type: ignore[union-attr]
    assert first.topic_totals([0, 1]) == {"orders": (2, len(first[0].data) * 2)}  # type: ignore[union-attr]
    await journal.close()


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(20, 40_000), min_size=1, max_size=40),
    before=st.lists(st.integers(20, 40_000), max_size=5),
    seqs=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 1000)), min_size=40, max_size=40),
)
def test_add_run_is_add_frame_by_frame(
    sizes: list[int], before: list[int], seqs: list[tuple[int, int]]
) -> None:
    one, bulk = SegmentBuilder(10), SegmentBuilder(10)
    for builder in (one, bulk):
        builder.add_control(codec.CONTROL_FRAME_BYTES)
        for k, size in enumerate(before):
            builder.add(size, 10 + k, k, 0, 0)
    first = 10 + len(before)
    timestamps = [100 + k for k in range(len(sizes))]
    ranges: dict[int, tuple[int, int]] = {}
    for k, size in enumerate(sizes):
        pub, seq = seqs[k]
        one.add(size, first + k, timestamps[k], pub, seq)
        low, high = ranges.get(pub, (seq, seq))
        ranges[pub] = (min(low, seq), max(high, seq))
    bulk.add_run(sizes, timestamps, ranges)
    for pub, seq in seqs[: len(sizes)]:  # the caller's part: the marks, record by record
        if pub:
            bulk.marks.advance(pub, seq)
    assert bulk.summary() == one.summary()


def test_write_parts_writes_more_than_iov_max_parts_in_order(tmp_path: Path) -> None:
    parts = [bytes([i % 251]) * (1 + i % 7) for i in range(2_500)]
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        _write_parts(fd, parts)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"".join(parts)


async def test_a_run_gives_its_last_record_per_topic_and_origin(tmp_path: Path) -> None:
    """What the origin positions need of a run nobody reads (amps/server/positions.py)."""
    journal = _open(tmp_path)
    batch = [
        _publish(1, 7, 1, topic="x"),
        _publish(2, 7, 2, topic="y"),
        _publish(3, 8, 1, topic="x", origin="c"),
        _publish(4, 7, 3, topic="x"),
        _publish(5, 7, 4, topic="y"),
    ]
    frames = scan(_frames(list(batch)))
    run = journal.append_received(frames, [0, 1, 2, 3])  # the last one skipped as a duplicate
    built = run.records()
    assert run.last_records() == [built[1], built[2], built[3]]
    await journal.close()


def test_names_are_read_again_whenever_they_change_from_one_publish_to_the_next() -> None:
    """The scan reuses the names of the publish before when its bytes start the same way: the
    same letters split differently, or other letters of the same lengths, are other names."""
    names = [("ab", "c"), ("a", "bc"), ("a", "bc"), ("x", "bc"), ("ab", "c"), ("ab", "c")]
    records: list[Record] = [
        PublishRecord(t, t, topic, b"{}", 7, t, origin, "g", t)
        for t, (topic, origin) in enumerate(names, start=1)
    ]
    data = _frames(records)
    assert list(scan(data)) == records
    scanned = [(r.topic, r.origin_instance) for r in scan(data) if isinstance(r, PublishRecord)]
    assert scanned == names


def test_a_frame_whose_crc_does_not_check_is_refused_by_its_offset() -> None:
    """A flipped bit in a record's data (not its head, not its length) is named with the
    frame's offset, before anything is restamped or appended."""
    records = [_publish(t, 9, t) for t in range(1, 6)]
    frames = [codec.encode(r) for r in records]
    data = bytearray(b"".join(frames))
    at = len(frames[0]) + len(frames[1])  # the third frame
    data[at + len(frames[2]) - 5] ^= 0x10
    with pytest.raises(CorruptRecord, match="frame checksum mismatch") as refused:
        scan(bytes(data))
    assert refused.value.offset == at
    message = pb.LinkFrame()
    message.batch.batch_id, message.batch.through_txid = 1, 5
    message.batch.records, message.batch.record_count = bytes(data), 5
    with pytest.raises(BadFrame, match="frame checksum mismatch"):
        from_pb(message)
