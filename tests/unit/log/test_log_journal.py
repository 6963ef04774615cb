"""Journal on real files: rotation, reopen, torn tails, corruption, marks, group commit (L1-L8)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from amps.errors import CorruptRecord, InvalidBookmark, JournalError
from amps.log import journal as journal_module
from amps.log import storage as storage_module
from amps.log.bookmarks import (
    AtBookmark,
    AtTimestamp,
    Bookmark,
    BookmarkList,
    Epoch,
    Now,
    parse_bookmark_spec,
)
from amps.log.codec import SEGMENT_FORMAT_VERSION, encode
from amps.log.journal import INLINE_COMMIT_MAX_BYTES, Journal
from amps.log.kernel_fsync import KernelFsync
from amps.log.records import PublishRecord, QueueAction, QueueRecord, TransferRecord
from amps.log.segments import decode_summary
from amps.log.storage import format_version, iter_keys
from tests.harness.failing_disk import fail_fsyncs

SEGMENT_SIZE_BYTES = 16 * 1024


@pytest.fixture(autouse=True, params=["kernel", "thread"])
def fsync_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs twice: small batches fsynced by the kernel, and every batch from
    the writer thread (where the kernel refuses native AIO)."""
    if request.param == "thread":
        monkeypatch.setattr(Journal, "kernel_fsync_allowed", False)
    return str(request.param)


def _open(directory: Path, **kwargs: object) -> Journal:
    return Journal.open(directory, segment_size_bytes=SEGMENT_SIZE_BYTES, **kwargs)  # type: ignore[arg-type]


async def _fill(journal: Journal, count: int, *, publisher_id: int = 7, start_seq: int = 1) -> None:
    for i in range(count):
        seq = start_seq + i
        journal.append_publish(
            topic="orders", data=b"m%05d" % seq + b"." * 200, publisher_id=publisher_id,
            seq=seq, timestamp_us=1_000_000 + seq * 10,
        )  # fmt: skip
    await journal.commit()


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.journal"))


def _summaries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.summary"))


def _checkpoints(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.tail"))


def _record_offsets(path: Path) -> list[int]:
    """The file offset of each record in a segment (control frames left out)."""
    return [offset for offset, _size, *_keys in iter_keys(path)]


def _forget_checkpoints(directory: Path) -> None:
    """As after a crash that came before any checkpoint covered the damaged bytes."""
    for path in directory.glob("*.tail"):
        path.unlink()


async def test_append_commit_read_round_trip(tmp_path: Path) -> None:
    """L1: every record gets the next txid and reads back identical after commit."""
    journal = _open(tmp_path)
    published = [
        journal.append_publish(topic="t", data=bytes([i]) * 10, publisher_id=5, seq=i + 1,
                               timestamp_us=100 + i, correlation_id=f"c{i}", expiration_s=i)
        for i in range(20)
    ]  # fmt: skip
    ack = journal.append(QueueRecord(0, 200, "q", QueueAction.ACK, (Bookmark(5, 1),), (1, 2)))
    move = journal.append(TransferRecord(0, 201, "q", Bookmark(5, 2), "amps-1", "amps-2"))
    assert journal.read(1, 100) == []  # nothing durable yet
    assert await journal.commit() == 22
    assert journal.read(1, 100) == [*published, ack, move]
    assert journal.read(21, 100) == [ack, move]
    assert [r.txid for r in journal.read(3, 4)] == [3, 4, 5, 6]
    assert published[0].origin_instance == "amps-1"
    assert published[0].origin_txid == 1
    await journal.close()


async def test_append_client_publish_matches_append_publish(tmp_path: Path) -> None:
    """The positional hot path builds the same records, frames, marks and summaries."""
    one, two = _open(tmp_path / "one"), _open(tmp_path / "two")
    for i in range(400):
        args = ("tópico" if i % 3 else "t", bytes([i % 256]) * 90, 5 + i % 2, i + 1, 100 - i)
        corr, exp = (f"c{i}" if i % 4 else ""), i % 3
        a = one.append_publish(
            topic=args[0],
            data=args[1],
            publisher_id=args[2],
            seq=args[3],
            timestamp_us=args[4],
            correlation_id=corr,
            expiration_s=exp,
        )
        b = two.append_client_publish(*args, corr, exp)  # fmt: skip
        assert a == b
        assert type(b) is PublishRecord
    assert one._pending == two._pending
    assert one.marks == two.marks
    assert one.segment_count == two.segment_count > 1
    assert [s.summary() if hasattr(s, "summary") else s for s in one.segments()] == [
        s.summary() if hasattr(s, "summary") else s for s in two.segments()
    ]
    await one.commit()
    await two.commit()
    assert one.read(1, 1000) == two.read(1, 1000)
    await one.close()
    await two.close()


async def test_timestamps_never_go_back(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    journal.append_publish(topic="t", data=b"a", publisher_id=1, seq=1, timestamp_us=500)
    late = journal.append_publish(topic="t", data=b"b", publisher_id=1, seq=2, timestamp_us=100)
    assert late.timestamp_us == 500
    await journal.close()


async def test_rotation_and_reopen_keep_everything(tmp_path: Path) -> None:
    """Segments rotate at segment_size_bytes; a reopen sees every record and the same marks."""
    journal = _open(tmp_path)
    await _fill(journal, 300)
    assert journal.segment_count > 3
    assert all(p.stat().st_size <= SEGMENT_SIZE_BYTES for p in _segments(tmp_path))
    assert len(_summaries(tmp_path)) == journal.segment_count - 1
    before = journal.read(1, 1000)
    await journal.close()
    reopened = _open(tmp_path)
    assert reopened.last_txid == 300
    assert reopened.durable_txid == 300
    assert reopened.read(1, 1000) == before
    assert reopened.marks.high_water(7) == 300
    await _fill(reopened, 10, start_seq=301)
    assert reopened.read(295, 100)[-1].txid == 310
    await reopened.close()


async def test_missing_or_damaged_summary_is_rebuilt(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    await _fill(journal, 200)
    await journal.close()
    summaries = _summaries(tmp_path)
    summaries[0].unlink()
    summaries[1].write_bytes(b"garbage")
    reopened = _open(tmp_path)
    assert reopened.last_txid == 200
    assert reopened.marks.high_water(7) == 200
    assert len(reopened.read(1, 1000)) == 200
    await reopened.close()
    assert len(_summaries(tmp_path)) == len(summaries)


@pytest.mark.parametrize("garbage", [b"\x00" * 100, b"\xa3", b"junk-after-crash"])
async def test_torn_tail_garbage_is_cut(tmp_path: Path, garbage: bytes) -> None:
    """L8: garbage at the very end of the newest segment is cut, never served."""
    journal = _open(tmp_path)
    await _fill(journal, 30)
    await journal.close()
    newest = _segments(tmp_path)[-1]
    size = newest.stat().st_size
    with newest.open("ab") as f:
        f.write(garbage)
    reopened = _open(tmp_path)
    assert reopened.last_txid == 30
    assert "cut torn tail" in reopened.recovery_note
    assert newest.stat().st_size == size
    await _fill(reopened, 5, start_seq=31)
    assert len(reopened.read(1, 100)) == 35
    await reopened.close()


async def test_partial_last_record_is_cut(tmp_path: Path) -> None:
    """L8: a record cut short by a crash (every truncation point of it) disappears, with a
    warning naming the segment, the offset and the txids: no commit marker follows it, so it
    could not have been acknowledged."""
    journal = _open(tmp_path)
    await _fill(journal, 10)
    await journal.close()
    newest = _segments(tmp_path)[-1]
    whole = newest.read_bytes()
    *_, before, last = _record_offsets(newest)
    for keep in (1, 11, 12, 50, last - before - 1):
        newest.write_bytes(whole[: last + keep])
        _forget_checkpoints(tmp_path)
        reopened = _open(tmp_path)
        assert reopened.last_txid == 9
        assert newest.stat().st_size == last
        note = reopened.recovery_note
        assert f"segment {newest.name} at offset {last}" in note
        assert "txid 10" in note
        assert "could not have been acknowledged" in note
        await reopened.close()


async def test_damaged_last_acknowledged_record_refuses_to_start(tmp_path: Path) -> None:
    """L8, issue 11: the newest record, damaged before its commit marker, could have been
    acknowledged: never cut, refused with the segment, the offset and the txid range."""
    journal = _open(tmp_path)
    await _fill(journal, 10)
    await journal.close()
    newest = _segments(tmp_path)[-1]
    data = bytearray(newest.read_bytes())
    last = _record_offsets(newest)[-1]
    data[last + 30] ^= 0x01
    newest.write_bytes(bytes(data))
    _forget_checkpoints(tmp_path)
    with pytest.raises(CorruptRecord, match="could have been acknowledged") as caught:
        _open(tmp_path)
    assert (caught.value.segment, caught.value.offset) == (newest.name, last)
    assert "txids 10..10" in str(caught.value)
    assert newest.stat().st_size == len(data)  # nothing was cut


async def test_a_damaged_commit_marker_alone_loses_no_record(tmp_path: Path) -> None:
    """Damage to the last bytes of the newest segment (its commit marker): the marker is cut,
    every record stays."""
    journal = _open(tmp_path)
    await _fill(journal, 10)
    await journal.close()
    newest = _segments(tmp_path)[-1]
    data = bytearray(newest.read_bytes())
    data[-3] ^= 0x01
    newest.write_bytes(bytes(data))
    _forget_checkpoints(tmp_path)
    reopened = _open(tmp_path)
    assert reopened.last_txid == 10
    assert len(reopened.read(1, 100)) == 10
    assert "cut torn tail" in reopened.recovery_note
    await _fill(reopened, 5, start_seq=11)
    await reopened.close()
    again = _open(tmp_path)
    assert [r.txid for r in again.read(1, 100)] == list(range(1, 16))
    await again.close()


async def test_a_torn_unsynced_batch_with_valid_records_after_the_damage_is_cut(
    tmp_path: Path,
) -> None:
    """The design doc's former known limit: power lost mid-write, a later page persisted but an
    earlier one not. Damage followed by valid records but no commit marker was never
    acknowledged: cut with a warning, not refused."""
    journal = _open(tmp_path)
    await _fill(journal, 10)
    await journal.close()
    newest = _segments(tmp_path)[-1]
    durable = newest.read_bytes()
    reopened = _open(tmp_path)
    await _fill(reopened, 5, start_seq=11)
    await reopened.close()
    offsets = _record_offsets(newest)
    data = bytearray(newest.read_bytes())
    end = offsets[-1] + (offsets[-1] - offsets[-2])  # the last record's end: its marker follows
    data = data[:end]  # the batch's commit marker never reached the disk
    data[offsets[11] + 20] ^= 0xFF  # txid 12 torn; 13..15 intact after it
    newest.write_bytes(bytes(data))
    _forget_checkpoints(tmp_path)
    again = _open(tmp_path)
    assert again.last_txid == 11
    assert newest.stat().st_size == offsets[11]
    assert "txids 12..15" in again.recovery_note
    assert len(durable) < offsets[11]
    await again.close()


async def test_corruption_followed_by_valid_records_refuses_to_start(tmp_path: Path) -> None:
    """L8: a damaged record with valid records after it is corruption: refuse, name the spot."""
    journal = _open(tmp_path)
    await _fill(journal, 10)
    await journal.close()
    newest = _segments(tmp_path)[-1]
    data = bytearray(newest.read_bytes())
    fourth = _record_offsets(newest)[3]
    data[fourth + 40] ^= 0xFF
    newest.write_bytes(bytes(data))
    _forget_checkpoints(tmp_path)
    with pytest.raises(CorruptRecord) as caught:
        _open(tmp_path)
    assert caught.value.segment == newest.name
    assert caught.value.offset == fourth
    assert newest.stat().st_size == len(data)  # nothing was cut
    assert newest.name in str(caught.value)
    assert "txids 4..10" in str(caught.value)


async def test_corruption_in_a_sealed_segment_refuses_to_start(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    await _fill(journal, 200)
    await journal.close()
    first = _segments(tmp_path)[0]
    (tmp_path / first.name.replace(".journal", ".summary")).unlink()
    data = bytearray(first.read_bytes())
    data[-5] ^= 0x10  # the last record of a sealed segment: still refused
    first.write_bytes(bytes(data))
    with pytest.raises(CorruptRecord) as caught:
        _open(tmp_path)
    assert caught.value.segment == first.name


async def test_missing_segment_refuses_to_start(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    await _fill(journal, 200)
    await journal.close()
    middle = _segments(tmp_path)[1]
    middle.unlink()
    with pytest.raises(CorruptRecord, match="missing"):
        _open(tmp_path)


async def test_marks_survive_restart(tmp_path: Path) -> None:
    """L4: high-water marks of every publisher come back after a restart."""
    journal = _open(tmp_path)
    await _fill(journal, 150, publisher_id=1)
    await _fill(journal, 3, publisher_id=2, start_seq=40)
    await journal.close()
    reopened = _open(tmp_path)
    assert reopened.marks.is_duplicate(1, 150)
    assert not reopened.marks.is_duplicate(1, 151)
    assert reopened.marks.high_water(2) == 42
    assert not reopened.marks.is_duplicate(3, 1)
    await reopened.close()


async def test_concurrent_commits_share_one_fsync(tmp_path: Path) -> None:
    """L2: one fsync covers every record appended since the last (group commit)."""
    journal = _open(tmp_path)
    observed: list[float] = []
    journal.on_fsync = observed.append

    async def publish_and_commit(seq: int) -> int:
        journal.append_publish(topic="t", data=b"x", publisher_id=9, seq=seq, timestamp_us=seq)
        return await journal.commit()

    results = await asyncio.gather(*(publish_and_commit(i) for i in range(1, 101)))
    assert journal.fsync_count <= 2
    assert len(observed) == journal.fsync_count
    assert all(r >= seq for r, seq in zip(results, range(1, 101), strict=True))
    assert journal.durable_txid == 100
    await journal.close()


async def test_the_last_flush_is_timed_in_order_with_its_fsyncs(tmp_path: Path) -> None:
    """Issue 8: a replicated batch made durable is timed stage by stage from the batch the
    writer finished last: handed over, running, done, back on the loop, and its fsyncs."""
    journal = _open(tmp_path)
    fsyncs: list[float] = []
    journal.on_fsync = fsyncs.append
    assert journal.last_flush is None
    await _fill(journal, 3)
    flush = journal.last_flush
    assert flush is not None
    assert flush.submitted_ns <= flush.started_ns <= flush.finished_ns <= flush.returned_ns
    assert flush.handoff_ns == flush.started_ns - flush.submitted_ns
    assert 0 < flush.fsync_ns <= flush.finished_ns - flush.started_ns
    assert flush.fsync_ns == int(sum(fsyncs) * 1e9)
    await _fill(journal, 1, start_seq=4)
    assert journal.last_flush is not None
    assert journal.last_flush.submitted_ns > flush.returned_ns
    await journal.close()


async def test_appends_continue_while_an_fsync_runs(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    journal.append_publish(topic="t", data=b"x", publisher_id=9, seq=1, timestamp_us=1)
    first = asyncio.ensure_future(journal.commit())
    await asyncio.sleep(0)
    journal.append_publish(topic="t", data=b"y", publisher_id=9, seq=2, timestamp_us=2)
    assert await journal.commit() == 2
    assert await first >= 1
    await journal.close()


async def test_fsync_failure_fails_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync error is JournalError, and the journal refuses every later write."""
    journal = _open(tmp_path)
    journal.append_publish(topic="t", data=b"x", publisher_id=9, seq=1, timestamp_us=1)

    fail_fsyncs(monkeypatch)
    with pytest.raises(JournalError, match="fsync failed"):
        await journal.commit()
    monkeypatch.undo()
    assert journal.durable_txid == 0
    with pytest.raises(JournalError):
        journal.append_publish(topic="t", data=b"x", publisher_id=9, seq=2, timestamp_us=2)
    with pytest.raises(JournalError):
        await journal.commit()
    await journal.close()


async def test_each_commit_takes_the_path_its_batch_needs(tmp_path: Path, fsync_path: str) -> None:
    """Small batches go to the kernel's fsync (where it has native AIO), large ones to the
    writer thread; mixed, every record is durable, in order, after a reopen."""
    journal = _open(tmp_path)
    available = not isinstance(KernelFsync.open(), str)
    assert journal.fsync_mode == ("not yet" if fsync_path == "kernel" else "thread: turned off")
    await _fill(journal, 3)
    expected = "kernel" if available else journal.fsync_mode
    assert journal.fsync_mode == (expected if fsync_path == "kernel" else "thread: turned off")
    small = journal.last_flush
    assert small is not None
    if journal.fsync_mode == "kernel":
        assert small.handoff_ns == 0  # written on the loop: no thread to wake
    big = b"b" * (INLINE_COMMIT_MAX_BYTES // 4)
    for seq in range(4, 10):  # past the inline bound: the writer thread
        journal.append_publish(topic="t", data=big, publisher_id=7, seq=seq, timestamp_us=seq)
    await journal.commit()
    await _fill(journal, 3, start_seq=10)
    assert journal.durable_txid == 12
    await journal.close()
    reopened = _open(tmp_path)
    assert [r.txid for r in reopened.read(1, 100)] == list(range(1, 13))
    await reopened.close()


async def test_flusher_commits_without_being_asked(tmp_path: Path) -> None:
    journal = _open(tmp_path, flush_interval_ms=5)
    journal.start_flusher()
    journal.append_publish(topic="t", data=b"x", publisher_id=9, seq=1, timestamp_us=1)
    for _ in range(200):
        if journal.durable_txid == 1:
            break
        await asyncio.sleep(0.005)
    assert journal.durable_txid == 1
    await journal.close()


async def test_second_writer_is_refused(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    with pytest.raises(JournalError, match="in use"):
        _open(tmp_path)
    await journal.close()


async def test_read_only_open_never_cuts(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    await _fill(journal, 20)
    await journal.close()
    newest = _segments(tmp_path)[-1]
    with newest.open("ab") as f:
        f.write(b"\xa3\xb5")
    size = newest.stat().st_size
    reader = _open(tmp_path, read_only=True)
    assert reader.last_txid == 20
    assert len(reader.read(1, 100)) == 20
    with pytest.raises(JournalError, match="read-only"):
        reader.append_publish(topic="t", data=b"x", publisher_id=9, seq=1, timestamp_us=1)
    reader.close_read_only()
    assert newest.stat().st_size == size


async def test_find_start_every_spec_kind(tmp_path: Path) -> None:
    """L7: epoch, now, bookmark, timestamp and lists resolve to the first txid to replay."""
    journal = _open(tmp_path)
    await _fill(journal, 200, publisher_id=7)  # txid n has seq n, timestamp 1_000_000 + 10 n
    journal.append_publish(topic="t", data=b"p", publisher_id=8, seq=5, timestamp_us=1_003_000)
    assert journal.find_start(Epoch()) == 1
    assert journal.find_start(Now()) == 202
    assert journal.find_start(AtBookmark(Bookmark(7, 1))) == 2
    assert journal.find_start(AtBookmark(Bookmark(7, 150))) == 151
    assert journal.find_start(AtBookmark(Bookmark(8, 5))) == 202  # not yet committed: found
    assert journal.find_start(AtTimestamp(0)) == 1
    assert journal.find_start(AtTimestamp(1_000_000 + 10 * 123)) == 123
    assert journal.find_start(AtTimestamp(1_000_000 + 10 * 123 - 5)) == 123
    assert journal.find_start(AtTimestamp(1_002_500)) == 201
    assert journal.find_start(AtTimestamp(9_999_999)) == 202
    spec = BookmarkList((AtBookmark(Bookmark(7, 90)), AtBookmark(Bookmark(7, 40))))
    assert journal.find_start(spec) == 41
    partly_unknown = BookmarkList((AtBookmark(Bookmark(3, 1)), AtBookmark(Bookmark(7, 40))))
    assert journal.find_start(partly_unknown) == 41
    with pytest.raises(InvalidBookmark, match="bookmark not found in the transaction log"):
        journal.find_start(AtBookmark(Bookmark(7, 999)))
    with pytest.raises(InvalidBookmark, match="bookmark not found"):
        journal.find_start(AtBookmark(Bookmark(123, 1)))
    assert journal.find_start(parse_bookmark_spec("0")) == 1
    await journal.close()
    reopened = _open(tmp_path)
    assert reopened.find_start(AtBookmark(Bookmark(7, 150))) == 151
    assert reopened.find_start(AtTimestamp(1_000_000 + 10 * 77)) == 77
    await reopened.close()


async def test_empty_journal(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    assert journal.last_txid == 0
    assert journal.find_start(Epoch()) == 1
    assert journal.find_start(Now()) == 1
    assert journal.read(1, 10) == []
    assert await journal.commit() == 0
    assert journal.fsync_count == 0
    await journal.close()


async def test_replicated_publish_keeps_its_origin(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    record = journal.append_publish(
        topic="t", data=b"x", publisher_id=9, seq=1, timestamp_us=1,
        origin_instance="amps-2", origin_group="east", origin_txid=77,
    )  # fmt: skip
    await journal.commit()
    assert journal.read(1, 1) == [record]
    assert isinstance(record, PublishRecord)
    origin = (record.origin_instance, record.origin_group, record.origin_txid)
    assert origin == ("amps-2", "east", 77)
    await journal.close()


async def test_checkpoint_bounds_the_scan_and_damage_is_caught_on_read(tmp_path: Path) -> None:
    """A clean close checkpoints the newest segment: reopen trusts that prefix (like a sealed
    segment's summary) and the CRC still catches damage there when the record is read."""
    journal = _open(tmp_path)
    await _fill(journal, 10)
    await journal.close()
    assert len(_checkpoints(tmp_path)) == 1
    newest = _segments(tmp_path)[-1]
    data = bytearray(newest.read_bytes())
    fourth = _record_offsets(newest)[3]
    data[fourth + 40] ^= 0xFF
    newest.write_bytes(bytes(data))
    reopened = _open(tmp_path)
    assert reopened.last_txid == 10
    assert reopened.marks.high_water(7) == 10
    assert len(reopened.read(1, 3)) == 3
    with pytest.raises(CorruptRecord, match="checksum") as caught:
        reopened.read(1, 10)
    assert (caught.value.segment, caught.value.offset) == (newest.name, fourth)
    await reopened.close()


async def test_a_damaged_checkpoint_means_a_full_scan(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    await _fill(journal, 10)
    await journal.close()
    (checkpoint,) = _checkpoints(tmp_path)
    checkpoint.write_bytes(checkpoint.read_bytes()[:-1] + b"?")
    reopened = _open(tmp_path)
    assert reopened.last_txid == 10
    await _fill(reopened, 5, start_seq=11)
    await reopened.close()
    again = _open(tmp_path)
    assert [r.txid for r in again.read(1, 100)] == list(range(1, 16))
    await again.close()


async def test_a_cancelled_commit_leaves_other_waiters_waiting(tmp_path: Path) -> None:
    """Each commit waits on its own future: cancelling one caller does not fail the others."""
    journal = _open(tmp_path)
    journal.append_publish(topic="t", data=b"x", publisher_id=9, seq=1, timestamp_us=1)
    first = asyncio.ensure_future(journal.commit())
    second = asyncio.ensure_future(journal.commit())
    await asyncio.sleep(0)
    first.cancel()
    assert await second == 1
    assert journal.durable_txid == 1
    await journal.close()


async def test_start_commit_writes_without_being_awaited(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    journal.append_publish(topic="t", data=b"x", publisher_id=9, seq=1, timestamp_us=1)
    journal.start_commit()
    journal.start_commit()  # one batch at a time: nothing new to hand over
    for _ in range(500):
        if journal.durable_txid == 1:
            break
        await asyncio.sleep(0.01)
    assert journal.durable_txid == 1
    assert journal.statistics().fsync_count == 1
    await journal.close()


def _write_format_1_segment(directory: Path, count: int) -> Path:
    """A segment as written before segment headers and commit markers: records only."""
    frames = [
        encode(PublishRecord(txid, 1_000 + txid, "orders", b"old %d" % txid, 7, txid))
        for txid in range(1, count + 1)
    ]
    path = directory / "00000000000000000001.journal"
    path.write_bytes(b"".join(frames))
    return path


async def test_a_format_1_segment_stays_readable_and_takes_appends(tmp_path: Path) -> None:
    """Segments written before the format version 2 read back; appends continue in them."""
    path = _write_format_1_segment(tmp_path, 5)
    assert format_version(path) == 1
    journal = _open(tmp_path)
    assert [r.txid for r in journal.read(1, 100)] == [1, 2, 3, 4, 5]
    await _fill(journal, 3, start_seq=6)
    await journal.close()
    again = _open(tmp_path)
    assert [r.txid for r in again.read(1, 100)] == list(range(1, 9))
    assert again.marks.high_water(7) == 8
    await again.close()


async def test_a_format_1_segment_refuses_damage_followed_by_a_valid_record(
    tmp_path: Path,
) -> None:
    """Without commit markers a torn write cannot be told from damage: refused as before."""
    path = _write_format_1_segment(tmp_path, 5)
    data = bytearray(path.read_bytes())
    data[_record_offsets(path)[3] + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecord, match="segment format 1"):
        _open(tmp_path)


async def test_new_segments_open_with_a_header_of_the_current_format(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    await _fill(journal, 200)
    await journal.close()
    assert {format_version(path) for path in _segments(tmp_path)} == {SEGMENT_FORMAT_VERSION}


async def test_a_checkpoint_costs_its_commit_no_second_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 8: a commit that writes the tail checkpoint fsyncs the segment once, as any other
    (a second fsync held the commit's acknowledgement every CHECKPOINT_EVERY_BYTES); the
    checkpoint is still written, and a reopen finds every record."""
    monkeypatch.setattr(journal_module, "CHECKPOINT_EVERY_BYTES", 4096)
    synced: list[str] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(Journal, "kernel_fsync_allowed", False)  # counts the thread's fsyncs
    journal = _open(tmp_path)
    monkeypatch.setattr(os, "fsync", counting_fsync)
    for round_ in range(4):  # ~2,600 bytes a round, one segment: checkpoints at 4 and 8 KiB
        await _fill(journal, 10, start_seq=1 + 10 * round_)
    (checkpoint,) = _checkpoints(tmp_path)
    assert [path for path in synced if ".tail" in path] == []
    assert len([path for path in synced if path.endswith(".journal")]) >= 4
    covered = decode_summary(checkpoint.read_bytes())
    assert covered is not None
    assert covered.size_bytes >= 4096
    monkeypatch.setattr(os, "fsync", real_fsync)
    await journal.close()
    reopened = _open(tmp_path)
    assert reopened.last_txid == 40
    await reopened.close()


async def test_a_new_segment_is_checkpointed_like_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a rotation the next checkpoint counts from the new segment's start, so a reopen
    (or a read-only open: the Spark read's planning) scans at most CHECKPOINT_EVERY_BYTES of
    the newest segment, not all of it (issue 10)."""
    monkeypatch.setattr(journal_module, "CHECKPOINT_EVERY_BYTES", 4096)
    journal = _open(tmp_path)
    for round_ in range(20):  # ~230 B per record: the first segment rotates after ~70 records
        await _fill(journal, 10, start_seq=1 + 10 * round_)
    segments = _segments(tmp_path)
    assert len(segments) >= 2
    (checkpoint,) = _checkpoints(tmp_path)  # taken while running, not by close
    assert checkpoint.name == segments[-1].name.replace(".journal", ".tail")
    summary = decode_summary(checkpoint.read_bytes())
    assert summary is not None
    covered = summary.size_bytes
    assert segments[-1].stat().st_size - covered < 4096 + 10 * 300
    await journal.close()


async def test_keys_are_read_in_growing_chunks_across_frames_larger_than_a_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iter_keys starts with a small read (a lookup in a small segment allocates no 16 MiB
    buffer) and doubles it: every record is found, whether a frame spans several first-size
    chunks or many frames fill the largest one."""
    monkeypatch.setattr(storage_module, "SCAN_CHUNK_BYTES", 256 << 10)
    journal = Journal.open(tmp_path / "j", segment_size_bytes=64 << 20)
    sizes = [100, 200_000, 50, 700_000, 10] + [3_000] * 400
    for seq, size in enumerate(sizes, start=1):
        journal.append_publish(
            topic="t", data=b"d" * size, publisher_id=5, seq=seq, timestamp_us=seq
        )
    await journal.commit()
    (segment,) = list((tmp_path / "j").glob("*.journal"))
    reads: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        reads.append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    keys = [(txid, seq) for _offset, _size, txid, _ts, _pub, seq in iter_keys(segment)]
    assert keys == [(seq, seq) for seq in range(1, len(sizes) + 1)]
    assert reads[0] == 64 << 10
    assert max(reads) >= 700_000  # the large frame was read whole
    await journal.close()
