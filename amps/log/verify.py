"""`amps journal verify`: check every frame of every segment and list each damaged range. [io]

Read-only and lock-free, like `amps journal dump`, so it runs on a live instance's directory as
well as offline. Unlike recovery it trusts no summary or checkpoint: every CRC is computed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.compressed import COMPRESSED_SUFFIX, CompressedSegment
from amps.log.segment_files import list_segments
from amps.log.storage import format_version, iter_keys, valid_frames_after

__all__ = ["DamagedRange", "SegmentReport", "verify_directory", "verify_segment"]


@dataclass(frozen=True, slots=True)
class DamagedRange:
    """Bytes of a segment that hold no valid frame: from the damage to the next valid frame."""

    segment: str
    start_offset: int
    end_offset: int  # the next valid frame, or the end of the file
    problem: str
    last_good_txid: int  # the last valid record before the damage (0: none before it here)
    next_good_txid: int | None  # the first valid record after it (None: none after it here)
    committed: bool  # a commit marker or a later segment follows: it was durable (fsynced)

    @property
    def size_bytes(self) -> int:
        return self.end_offset - self.start_offset


@dataclass(slots=True)
class SegmentReport:
    """What a check of one segment found."""

    name: str
    size_bytes: int
    format_version: int
    record_count: int = 0
    first_txid: int = 0  # of the valid records (0: none)
    last_txid: int = 0
    damaged: list[DamagedRange] = field(default_factory=list)
    incomplete_tail_bytes: int = 0  # an incomplete last frame (being written, or torn)


def verify_segment(path: Path, *, newest: bool) -> SegmentReport:
    """Check every frame of one segment file (plain or compressed)."""
    if path.name.endswith(COMPRESSED_SUFFIX):
        return _verify_compressed(path)
    size = path.stat().st_size
    report = SegmentReport(path.name, size, format_version(path))
    offset = 0
    while offset < size:
        reached = offset
        try:
            for off, frame_size, txid, _ts, _pub, _seq in iter_keys(path, offset, controls=True):
                reached = off + frame_size
                if txid >= 0:
                    _count(report, txid)
        except CorruptRecord as exc:
            damage_at = exc.offset
            offset = _damaged_range(path, report, damage_at, exc.message, size, newest=newest)
            continue
        report.incomplete_tail_bytes = size - reached
        break
    return report


def _verify_compressed(path: Path) -> SegmentReport:
    """A compressed (sealed) segment: every frame of its uncompressed bytes is checked; damage
    there (a block that does not decompress, or a bad frame) is reported from the last good
    frame to the end, without looking further (its blocks are read whole or not at all)."""
    try:
        segment = CompressedSegment(path)
    except CorruptRecord as exc:
        report = SegmentReport(path.name, path.stat().st_size, 0)
        damage = DamagedRange(path.name, 0, report.size_bytes, exc.message, 0, None, True)
        report.damaged.append(damage)
        return report
    try:
        report = SegmentReport(path.name, segment.size_bytes, 0)
        reached = 0
        try:
            head = segment.pread(codec.CONTROL_FRAME_BYTES, 0)
            if codec.frame_length(head, 0, len(head)) > 0:
                control = codec.check_payload(head[codec.HEADER_SIZE_BYTES :])
                if isinstance(control, codec.Control):
                    report.format_version = control.format_version
            keys = iter_keys(path, 0, controls=True, pread=segment.pread)
            for off, frame_size, txid, _ts, _pub, _seq in keys:
                reached = off + frame_size
                if txid >= 0:
                    _count(report, txid)
        except CorruptRecord as exc:
            damage = DamagedRange(
                path.name, reached, segment.size_bytes, exc.message, report.last_txid, None, True
            )
            report.damaged.append(damage)
        report.format_version = report.format_version or 1
        return report
    finally:
        segment.close()


def _count(report: SegmentReport, txid: int) -> None:
    if not report.first_txid:
        report.first_txid = txid
    report.last_txid = txid
    report.record_count += 1


def _damaged_range(
    path: Path, report: SegmentReport, start: int, problem: str, size: int, *, newest: bool
) -> int:
    """Record the damaged range that starts at `start`; return where checking resumes."""
    end = size
    next_txid: int | None = None
    committed = not newest
    for off, item in valid_frames_after(path, start, size):
        if end == size:
            end = off
        if isinstance(item, codec.Control):
            if item.kind == codec.COMMIT_KIND:
                committed = True
                break
        elif next_txid is None:
            next_txid = item.txid
            if not newest:
                break
    if newest and report.format_version < 2 and end < size:
        committed = True  # without commit markers, valid frames after it mean it was durable
    report.damaged.append(
        DamagedRange(path.name, start, end, problem, report.last_txid, next_txid, committed)
    )
    return end


def verify_directory(directory: Path) -> Iterator[SegmentReport]:
    """A report per segment file of `directory`, oldest first."""
    named = sorted(list_segments(directory).items())
    for i, (_first, path) in enumerate(named):
        yield verify_segment(path, newest=i == len(named) - 1)
