"""Resolve a bookmark spec to the first txid to replay (L7), skipping segments by summary. [io]"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from amps.errors import CorruptRecord, InvalidBookmark
from amps.log.bookmarks import AtBookmark, AtTimestamp, BookmarkList, BookmarkSpec, Epoch, Now
from amps.log.compressed import COMPRESSED_SUFFIX, CompressedSegment
from amps.log.dedup import PublisherMarks
from amps.log.reader import Segment
from amps.log.storage import iter_keys

__all__ = ["find_start"]

NOT_FOUND = "bookmark not found in the transaction log"


class Journal(Protocol):
    """What a look-up reads of amps.log.journal.Journal (which calls this module)."""

    @property
    def first_txid(self) -> int: ...

    @property
    def last_txid(self) -> int: ...

    @property
    def durable_txid(self) -> int: ...

    @property
    def marks(self) -> PublisherMarks: ...

    @property
    def retired_marks(self) -> PublisherMarks: ...

    def segments(self) -> list[Segment]: ...

    def segment_path(self, first_txid: int) -> Path: ...

    def pending_keys(self) -> Iterator[tuple[int, int, int, int]]: ...


def find_start(journal: Journal, spec: BookmarkSpec) -> int:
    """epoch: first txid; now: last txid + 1; a bookmark: the txid after that message (unknown:
    InvalidBookmark); a timestamp: the first txid logged at or after it; a list: the earliest of
    its items that resolve (InvalidBookmark if none does)."""
    match spec:
        case Epoch():
            return journal.first_txid
        case Now():
            return journal.last_txid + 1
        case AtTimestamp(timestamp_us=timestamp_us):
            return _by_timestamp(journal, timestamp_us)
        case AtBookmark(bookmark=bookmark):
            found = _by_bookmark(journal, bookmark.publisher_id, bookmark.seq)
            if found is None:
                raise InvalidBookmark(f"{NOT_FOUND}: {bookmark.format()}")
            return found
        case BookmarkList(items=items):
            starts: list[int] = []
            for item in items:
                if isinstance(item, AtBookmark):
                    found = _by_bookmark(journal, item.bookmark.publisher_id, item.bookmark.seq)
                    if found is not None:
                        starts.append(found)
                else:
                    starts.append(find_start(journal, item))
            if not starts:
                raise InvalidBookmark(f"{NOT_FOUND}: {spec.format()}")
            return min(starts)


def _keys(journal: Journal, segment: Segment, offset: int) -> Iterator[tuple[int, int, int, int]]:
    """(txid, timestamp_us, publisher_id, seq) from `offset` on: durable frames from the file,
    then frames still waiting for a commit; never past the last appended record."""
    durable = journal.durable_txid
    last = 0
    if segment.first_txid <= durable:
        path = journal.segment_path(segment.first_txid)
        compressed = CompressedSegment(path) if path.name.endswith(COMPRESSED_SUFFIX) else None
        try:
            pread = compressed.pread if compressed is not None else None
            for _off, _size, txid, ts, pub, seq in iter_keys(path, offset, pread=pread):
                yield txid, ts, pub, seq
                last = txid
                if txid >= min(durable, segment.last_txid):
                    break
        except CorruptRecord as exc:
            where = f"in segment {exc.segment} at offset {exc.offset}"
            raise CorruptRecord(f"{exc.message} {where}", exc.segment, exc.offset) from None
        finally:
            if compressed is not None:
                compressed.close()
    if segment.last_txid > durable:
        for txid, ts, pub, seq in journal.pending_keys():
            if txid > last and segment.first_txid <= txid <= segment.last_txid:
                yield txid, ts, pub, seq


def _by_timestamp(journal: Journal, timestamp_us: int) -> int:
    for segment in journal.segments():
        if not segment.record_count or segment.last_timestamp_us < timestamp_us:
            continue
        j = max(0, bisect_left(segment.index_timestamps_us, timestamp_us) - 1)
        for txid, ts, _pub, _seq in _keys(journal, segment, segment.index_offsets[j]):
            if ts >= timestamp_us:
                return txid
    return journal.last_txid + 1


def _by_bookmark(journal: Journal, publisher_id: int, seq: int) -> int | None:
    if seq > journal.marks.high_water(publisher_id):
        return None
    for segment in reversed(journal.segments()):
        seq_range = segment.seq_range(publisher_id)
        if seq_range is None or not seq_range[0] <= seq <= seq_range[1]:
            continue
        for txid, _ts, pub, found_seq in _keys(journal, segment, 0):
            if pub == publisher_id and found_seq == seq:
                return txid + 1
        # Not here: a gap filled later (amps.log.dedup) widened a newer segment's range over
        # numbers an older segment holds, so look on.
    if seq <= journal.retired_marks.high_water(publisher_id):
        # Its segment was removed by the journal lifecycle: resume at the oldest record kept.
        return journal.first_txid
    return None
