"""Removing and archiving journal segments on real files (issue 11 item 8, AMPS-REFERENCE §1.4):
the log stays contiguous and readable, and de-duplication marks outlive their segments (L4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amps.errors import CorruptRecord
from amps.log.bookmarks import AtBookmark, Bookmark
from amps.log.compressed import COMPRESSED_SUFFIX
from amps.log.journal import Journal
from amps.log.marks_file import MARKS_FILE_NAME
from amps.log.raw import RawReader
from amps.log.records import PublishRecord
from amps.log.segments import segment_name, summary_name

SEGMENT_SIZE_BYTES = 16 * 1024
OLD_PUBLISHER = 7  # only in the oldest segments
NEW_PUBLISHER = 8


def _open(directory: Path, archive: Path | None = None, *, read_only: bool = False) -> Journal:
    return Journal.open(
        directory,
        segment_size_bytes=SEGMENT_SIZE_BYTES,
        archive_directory=archive,
        read_only=read_only,
    )


async def _filled(directory: Path, archive: Path | None = None) -> Journal:
    """Six or so segments: publisher 7 in the first two only, publisher 8 after."""
    journal = _open(directory, archive)
    for seq in range(1, 201):
        publisher = OLD_PUBLISHER if seq <= 120 else NEW_PUBLISHER
        journal.append_publish(
            topic="orders", data=b"m%05d" % seq + b"." * 300, publisher_id=publisher,
            seq=seq, timestamp_us=1_000_000 + seq,
        )  # fmt: skip
    await journal.commit()
    assert journal.segment_count >= 5
    return journal


def _oldest(journal: Journal, count: int) -> list[int]:
    return [s.first_txid for s in journal.segment_states()[:count]]


async def test_removal_keeps_a_contiguous_readable_log(tmp_path: Path) -> None:
    journal = await _filled(tmp_path)
    gone = _oldest(journal, 2)
    second = journal.segment_states()[1]
    await journal.remove_segments(gone)
    assert journal.first_txid == second.last_txid + 1
    for first in gone:
        assert not (tmp_path / segment_name(first)).exists()
        assert not (tmp_path / summary_name(first)).exists()
    records = journal.read(1, 1000)  # from before the first kept txid: starts there
    assert [r.txid for r in records] == list(range(journal.first_txid, 201))
    await journal.close()
    reopened = _open(tmp_path)
    assert reopened.first_txid == second.last_txid + 1
    assert reopened.last_txid == 200
    await reopened.close()


async def test_marks_outlive_the_segments_they_came_from(tmp_path: Path) -> None:
    """L4: publisher 7's sequence numbers are still duplicates after its segments are gone,
    also after a restart; a bookmark in a removed segment resumes at the oldest kept record."""
    journal = await _filled(tmp_path)
    states = journal.segment_states()
    held_by_7 = [s.first_txid for s in states if s.first_txid <= 120]
    await journal.remove_segments(held_by_7)
    assert journal.marks.is_duplicate(OLD_PUBLISHER, 120)
    start = journal.find_start(AtBookmark(Bookmark(OLD_PUBLISHER, 3)))
    assert start == journal.first_txid
    await journal.close()
    assert (tmp_path / MARKS_FILE_NAME).exists()
    reopened = _open(tmp_path)
    assert all(s.seq_range(OLD_PUBLISHER) is None for s in reopened.segments())
    assert reopened.marks.high_water(OLD_PUBLISHER) == 120
    assert reopened.marks.is_duplicate(OLD_PUBLISHER, 120)
    assert not reopened.marks.is_duplicate(OLD_PUBLISHER, 121)
    assert reopened.marks.high_water(NEW_PUBLISHER) == 200
    await reopened.close()


async def test_a_damaged_marks_file_refuses_to_open(tmp_path: Path) -> None:
    """The file is the only copy of those marks: never guess."""
    journal = await _filled(tmp_path)
    await journal.remove_segments(_oldest(journal, 1))
    await journal.close()
    path = tmp_path / MARKS_FILE_NAME
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecord, match=r"clients\.ack"):
        _open(tmp_path)


async def test_archived_segments_stay_in_the_log_and_replayable(tmp_path: Path) -> None:
    """§1.4: archived journals remain replayable: reads, raw replay reads and a reopen (with
    the archive directory) see the whole log; without it the log starts later, marks kept."""
    directory, archive = tmp_path / "journal", tmp_path / "archive"
    journal = await _filled(directory, archive)
    moved = _oldest(journal, 3)
    await journal.archive_segments(moved)
    for first in moved:
        assert not (directory / segment_name(first)).exists()
        assert (archive / segment_name(first)).exists()
        assert (archive / summary_name(first)).exists()
    assert [s.archived for s in journal.segment_states()][:4] == [True, True, True, False]
    assert [r.txid for r in journal.read(1, 1000)] == list(range(1, 201))
    reader = RawReader(journal)
    publishes, _reached = reader.read(1, 200, 1000)
    reader.close()
    assert [p[0] for p in publishes] == list(range(1, 201))
    await journal.close()

    reopened = _open(directory, archive, read_only=True)
    assert reopened.first_txid == 1
    assert [r.txid for r in reopened.read(1, 1000)] == list(range(1, 201))
    reopened.close_read_only()
    without = _open(directory, read_only=True)
    assert without.first_txid > 1
    assert without.marks.high_water(OLD_PUBLISHER) == 120
    without.close_read_only()


async def test_a_segment_left_in_both_places_by_a_crash_is_read_from_the_journal(
    tmp_path: Path,
) -> None:
    """An archive copies, then removes the original: a crash in between leaves two copies."""
    directory, archive = tmp_path / "journal", tmp_path / "archive"
    journal = await _filled(directory, archive)
    first = _oldest(journal, 1)[0]
    await journal.close()
    archive.mkdir()
    (archive / segment_name(first)).write_bytes((directory / segment_name(first)).read_bytes())
    reopened = _open(directory, archive)
    assert reopened.segment_states()[0].archived is False
    assert reopened.segment_path(first) == directory / segment_name(first)
    await reopened.archive_segments([first])
    assert not (directory / segment_name(first)).exists()
    assert [r.txid for r in reopened.read(1, 1000)] == list(range(1, 201))
    await reopened.close()


async def test_compressed_segments_read_as_before(tmp_path: Path) -> None:
    """§1.4: a compressed journal is still read, by every reader, and after a reopen; it can be
    archived and removed like any other."""
    directory, archive = tmp_path / "journal", tmp_path / "archive"
    journal = await _filled(directory, archive)
    firsts = _oldest(journal, 3)
    plain_bytes = sum((directory / segment_name(f)).stat().st_size for f in firsts)
    await journal.compress_segments(firsts)
    packed = [directory / (segment_name(f) + COMPRESSED_SUFFIX) for f in firsts]
    assert all(p.exists() for p in packed)
    assert not any((directory / segment_name(f)).exists() for f in firsts)
    assert sum(p.stat().st_size for p in packed) < plain_bytes / 4
    assert [s.compressed for s in journal.segment_states()][:4] == [True, True, True, False]
    assert [r.txid for r in journal.read(1, 1000)] == list(range(1, 201))
    reader = RawReader(journal)
    publishes, _reached = reader.read(1, 200, 1000)
    reader.close()
    read = journal.read(1, 1000)
    assert [p[7] for p in publishes] == [r.data for r in read if isinstance(r, PublishRecord)]
    assert journal.find_start(AtBookmark(Bookmark(OLD_PUBLISHER, 10))) == 11
    await journal.archive_segments(firsts[:1])
    assert (archive / (segment_name(firsts[0]) + COMPRESSED_SUFFIX)).exists()
    await journal.close()

    reopened = _open(directory, archive)
    assert [r.txid for r in reopened.read(1, 1000)] == list(range(1, 201))
    await reopened.remove_segments(firsts[:2])
    assert not (archive / (segment_name(firsts[0]) + COMPRESSED_SUFFIX)).exists()
    assert not (directory / (segment_name(firsts[1]) + COMPRESSED_SUFFIX)).exists()
    assert reopened.read(1, 1)[0].txid == firsts[2]
    await reopened.close()


async def test_damage_in_a_compressed_segment_is_named(tmp_path: Path) -> None:
    journal = await _filled(tmp_path)
    first = _oldest(journal, 1)[0]
    await journal.compress_segments([first])
    await journal.close()
    path = tmp_path / (segment_name(first) + COMPRESSED_SUFFIX)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # inside the last compressed block
    path.write_bytes(bytes(data))
    reopened = _open(tmp_path, read_only=True)
    with pytest.raises(CorruptRecord, match=path.name):
        reopened.read(1, 1000)
    reopened.close_read_only()
    (tmp_path / summary_name(first)).unlink()
    with pytest.raises(CorruptRecord, match="no valid summary"):
        _open(tmp_path, read_only=True)
