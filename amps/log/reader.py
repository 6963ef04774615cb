"""Sequential reads of records by txid, through each segment's sparse index. [io]"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.compressed import COMPRESSED_SUFFIX, CompressedSegment, PlainSegment
from amps.log.received import ReceivedFrames, scan_log
from amps.log.records import PublishRecord, Record
from amps.log.segments import SegmentBuilder, SegmentSummary, segment_name
from amps.log.storage import valid_frames_after

__all__ = ["Segment", "SegmentFiles", "SegmentReader"]

Segment = SegmentSummary | SegmentBuilder
SegmentFile = PlainSegment | CompressedSegment
MIN_READ_BYTES = 256 * 1024


def located(exc: CorruptRecord, first_txid: int, offset: int) -> CorruptRecord:
    """A decode error of a chunk read at `offset`, named by segment and file offset."""
    name = segment_name(first_txid)
    return CorruptRecord(
        f"{exc.message} in segment {name} at offset {offset + exc.offset}",
        segment=name,
        offset=offset + exc.offset,
    )


def ends_before(first_txid: int, txid: int, offset: int) -> CorruptRecord:
    """A segment whose file stops before a txid its summary promises."""
    name = segment_name(first_txid)
    return CorruptRecord(f"segment {name} ends before txid {txid}", segment=name, offset=offset)


MAX_OPEN_FILES = 16


class SegmentFiles:
    """Open segments (at most `max_open`, the oldest opened closed first), plain or compressed:
    each is read with `pread(size, offset)` over its uncompressed bytes."""

    def __init__(self, path_of: Callable[[int], Path], max_open: int) -> None:
        self.path_of = path_of  # first txid -> file (the journal or the archive directory)
        self.max_open = max_open
        self._files: dict[int, SegmentFile] = {}

    def file(self, first_txid: int) -> SegmentFile:
        """The segment starting at first_txid (opened on first use)."""
        found = self._files.get(first_txid)
        if found is None:
            if len(self._files) >= self.max_open:
                self._files.pop(next(iter(self._files))).close()
            path = self.path_of(first_txid)
            compressed = path.name.endswith(COMPRESSED_SUFFIX)
            found = CompressedSegment(path) if compressed else PlainSegment(path)
            self._files[first_txid] = found
        return found

    def close(self) -> None:
        for found in self._files.values():
            found.close()
        self._files.clear()


class SegmentReader:
    """Keeps a few read-only descriptors open; reads never touch the writer's descriptor."""

    def __init__(self, path_of: Callable[[int], Path]) -> None:
        self._files = SegmentFiles(path_of, MAX_OPEN_FILES)
        self._file = self._files.file

    def read(
        self, segments: list[Segment], from_txid: int, upper_txid: int, max_records: int,
        frames: dict[int, bytes] | None = None,
    ) -> list[Record]:  # fmt: skip
        """Records from_txid..upper_txid (at most max_records) from `segments` (oldest first);
        with `frames`, each record's frame goes there too, by txid."""
        out = self._read(segments, from_txid, upper_txid, max_records, heads=False, frames=frames)
        return out  # type: ignore[return-value]

    def read_heads(
        self, segments: list[Segment], from_txid: int, upper_txid: int, max_records: int
    ) -> list[Record | codec.PublishHead]:
        """`read`, with each publish as its `codec.PublishHead` (see `codec.decode_heads`)."""
        return self._read(segments, from_txid, upper_txid, max_records, heads=True)

    def _read(
        self, segments: list[Segment], from_txid: int, upper_txid: int, max_records: int,
        *, heads: bool, frames: dict[int, bytes] | None = None,
    ) -> list[Record | codec.PublishHead]:  # fmt: skip
        out: list[Record | codec.PublishHead] = []
        firsts = [s.first_txid for s in segments]
        i = max(0, bisect_right(firsts, from_txid) - 1)
        txid = from_txid
        while len(out) < max_records and txid <= upper_txid and i < len(segments):
            segment = segments[i]
            if txid > segment.last_txid:
                i += 1
                continue
            want = min(max_records - len(out), upper_txid - txid + 1, segment.last_txid - txid + 1)
            self._read_segment(segment, txid, want, out, heads, frames)
            last = out[-1]
            txid = (last[0] if type(last) is tuple else last.txid) + 1  # type: ignore[union-attr]
        return out

    def _read_segment(
        self,
        segment: Segment,
        from_txid: int,
        want: int,
        out: list[Record | codec.PublishHead],
        heads: bool,
        frames: dict[int, bytes] | None = None,
    ) -> None:
        j = bisect_right(segment.index_txids, from_txid) - 1
        assert j >= 0, (segment.first_txid, from_txid)
        offset = segment.index_offsets[j]
        skip = from_txid - segment.index_txids[j]
        left = skip + want
        average = segment.size_bytes // max(1, segment.record_count)
        size = max(MIN_READ_BYTES, left * average + average)
        pread = self._file(segment.first_txid).pread
        while left > 0:
            chunk = pread(size, offset)
            try:
                if heads:
                    records, consumed = codec.decode_heads(chunk, 0, len(chunk), left)
                else:  # each record's frame into `frames` as it is decoded (no second pass)
                    records, consumed = codec.decode(chunk, 0, len(chunk), left, frames)  # type: ignore[assignment]
            except CorruptRecord as exc:
                raise located(exc, segment.first_txid, offset) from None
            if not consumed:
                if len(chunk) < size:
                    raise ends_before(segment.first_txid, from_txid + want - 1, offset)
                size *= 2  # one frame longer than the read
                continue
            left -= len(records)
            if skip:
                dropped = min(skip, len(records))
                records = records[dropped:]
                skip -= dropped
            out.extend(records)
            offset += consumed

    def read_frames(
        self, segments: list[Segment], from_txid: int, upper_txid: int, max_records: int
    ) -> ReceivedFrames:
        """The record frames from_txid..upper_txid (at most max_records) of one read of one
        segment, checked as `read` checks them but not built (`scan_log`): a prefix of what
        `read` returns, empty past the last segment."""
        firsts = [s.first_txid for s in segments]
        i = max(0, bisect_right(firsts, from_txid) - 1)
        while i < len(segments) and from_txid > segments[i].last_txid:
            i += 1
        if i == len(segments) or from_txid > upper_txid:
            return ReceivedFrames(b"")
        segment = segments[i]
        want = min(max_records, upper_txid - from_txid + 1, segment.last_txid - from_txid + 1)
        j = bisect_right(segment.index_txids, from_txid) - 1
        assert j >= 0, (segment.first_txid, from_txid)
        offset = segment.index_offsets[j]
        average = segment.size_bytes // max(1, segment.record_count)
        size = max(MIN_READ_BYTES, (from_txid - segment.index_txids[j] + want) * average + average)
        pread = self._file(segment.first_txid).pread
        while True:
            chunk = pread(size, offset)
            try:
                frames, consumed = scan_log(chunk, 0, from_txid, want)
            except CorruptRecord as exc:
                raise located(exc, segment.first_txid, offset) from None
            if frames:
                return frames
            if consumed:
                offset += consumed  # only records before from_txid and control frames so far
                continue
            if len(chunk) < size:
                raise ends_before(segment.first_txid, from_txid + want - 1, offset)
            size *= 2  # one frame longer than the read

    def read_publishes(
        self, segments: list[Segment], from_txid: int, upper_txid: int, max_records: int,
        max_bytes: int = 1 << 62,
    ) -> list[PublishRecord]:  # fmt: skip
        """The publishes among txids from_txid..upper_txid, oldest first: at most max_records,
        and none after the one whose data brings the total to max_bytes (one at least).

        Other records in the range are checked but not built (see codec.decode_publishes).
        """
        out: list[PublishRecord] = []
        firsts = [s.first_txid for s in segments]
        i = max(0, bisect_right(firsts, from_txid) - 1)
        txid = from_txid
        budget = max_bytes
        while len(out) < max_records and budget > 0 and txid <= upper_txid and i < len(segments):
            segment = segments[i]
            if txid > segment.last_txid:
                i += 1
                continue
            upper = min(upper_txid, segment.last_txid)
            txid, budget, damaged = self._read_segment_publishes(
                segment, txid, upper, max_records, budget, out
            )
            if damaged:
                break  # what came before the damage; a read that asks for it next raises
        return out

    def _read_segment_publishes(
        self, segment: Segment, from_txid: int, upper_txid: int, max_records: int, budget: int,
        out: list[PublishRecord],
    ) -> tuple[int, int, bool]:  # fmt: skip
        """Read publishes from_txid..upper_txid of one segment into `out`; the next txid, the
        budget left, and whether damage stopped the read after some of them.

        Damage before from_txid (between the index entry the read starts at and from_txid) is
        stepped over: the read goes on at the first valid record after it, if that is not
        after from_txid. Damage at from_txid raises CorruptRecord.
        """
        j = bisect_right(segment.index_txids, from_txid) - 1
        assert j >= 0, (segment.first_txid, from_txid)
        offset = segment.index_offsets[j]
        average = segment.size_bytes // max(1, segment.record_count)
        skip = from_txid - segment.index_txids[j]
        records = min(upper_txid - from_txid + 1, max_records - len(out))
        wanted = min(records * average, budget + average)  # what the budget lets be read
        size = max(MIN_READ_BYTES, skip * average + wanted + average)
        pread = self._file(segment.first_txid).pread
        txid = from_txid
        while txid <= upper_txid and len(out) < max_records and budget > 0:
            chunk = pread(size, offset)
            before = len(out)
            try:
                consumed, txid, budget = codec.decode_publishes(
                    chunk, 0, len(chunk), txid, upper_txid, max_records - len(out), out, budget
                )
                if not consumed and len(chunk) < size:
                    # Stopped at a frame whose txid is past the range: a damaged txid field
                    # reads so too; the checksum tells.
                    codec.frame_length(chunk, 0, len(chunk))
            except CorruptRecord as exc:
                error = located(exc, segment.first_txid, offset)
                if len(out) > before or txid > from_txid:
                    return txid, budget, True
                resumed = self._resume_after(segment, error.offset)
                if resumed is None or resumed[1] > from_txid:
                    raise error from None
                offset = resumed[0]
                continue
            if not consumed:
                if len(chunk) < size:
                    raise ends_before(segment.first_txid, upper_txid, offset)
                size *= 2  # one frame longer than the read
                continue
            offset += consumed
        return txid, budget, False

    def _resume_after(self, segment: Segment, damage_offset: int) -> tuple[int, int] | None:
        """(offset, txid) of the first valid record after damage in a segment, or None."""
        path = self._files.path_of(segment.first_txid)
        if path.name.endswith(COMPRESSED_SUFFIX) or not path.exists():
            return None  # a compressed segment: its blocks are read whole or not at all
        for offset, item in valid_frames_after(path, damage_offset, path.stat().st_size):
            if not isinstance(item, codec.Control):
                return offset, item.txid
        return None

    def close(self) -> None:
        self._files.close()
