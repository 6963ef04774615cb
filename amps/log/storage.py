"""Segment files on disk: scanning, sidecar summaries, and the writer thread's batches. [io]

Everything here blocks; the journal calls the writer only through `asyncio.to_thread`, one batch
at a time, so the writer needs no lock.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import google_crc32c

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.dedup import PublisherMarks
from amps.log.records import Record, RecordKind
from amps.log.recovery import CommitMarker, TailScan
from amps.log.segments import (
    SegmentBuilder,
    SegmentSummary,
    checkpoint_name,
    decode_summary,
    encode_summary,
    segment_name,
    summary_name,
)

__all__ = [
    "Rotate",
    "SegmentWriter",
    "iter_keys",
    "load_checkpoint",
    "load_summary",
    "scan_segment",
    "write_summary",
]

SCAN_CHUNK_BYTES = 16 << 20
_FIRST_KEYS_CHUNK_BYTES = 64 << 10
# Frame header followed by the fields every payload starts with, plus a publish's ids: one unpack
# per record while scanning. Every valid payload is at least _MIN_PAYLOAD bytes long.
_SCAN = struct.Struct("<IIIBQQQQ")
_MIN_PAYLOAD = _SCAN.size - codec.HEADER_SIZE_BYTES


def _chunks(path: Path, offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """(file offset of chunk, chunk) pairs; the consumer re-reads any partial frame itself."""
    with path.open("rb", buffering=0) as f:
        while True:
            data = os.pread(f.fileno(), SCAN_CHUNK_BYTES, offset)
            if not data:
                return
            yield offset, data
            offset += len(data)


def iter_keys(
    path: Path,
    offset: int = 0,
    *,
    controls: bool = False,
    pread: Callable[[int, int], bytes] | None = None,
) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(offset, size, txid, timestamp_us, publisher_id, seq) of each valid record, in file order;
    with `controls`, control frames too, as (offset, size, -1, 0, 0, 0).

    Stops silently at an incomplete frame at the end; raises CorruptRecord (with the file offset)
    at damage. publisher_id and seq are 0 for records other than publishes.
    """
    with path.open("rb", buffering=0) as f:
        read = pread or partial(os.pread, f.fileno())  # pread: a compressed segment's reader
        pos = offset
        # os.pread allocates the size it is asked for before it reads: start small, so that a
        # lookup in a small segment does not cost a 16 MiB buffer, and double up to the chunk.
        size = _FIRST_KEYS_CHUNK_BYTES
        while True:
            buf = read(size, pos)
            try:
                off = yield from _keys_in_chunk(buf, pos, controls)
                if len(buf) < size:  # end of file: what is left must be a frame's beginning
                    if off < len(buf):
                        codec.frame_length(buf, off, len(buf))
                    return
            except CorruptRecord as exc:
                raise CorruptRecord(exc.message, path.name, pos + exc.offset) from None
            # A frame longer than the chunk: read a larger window from it.
            size = size * 2 if off == 0 else min(size * 2, SCAN_CHUNK_BYTES)
            pos += off


def _keys_in_chunk(
    buf: bytes, pos: int, controls: bool
) -> Generator[tuple[int, int, int, int, int, int], None, int]:
    """Keys of the complete frames in `buf` (file offset `pos`); returns the offset reached."""
    unpack = _SCAN.unpack_from
    crc_value = google_crc32c.value
    off, stop = 0, len(buf)
    while stop - off >= _SCAN.size:
        magic, crc, length, kind, txid, ts, pub, seq = unpack(buf, off)
        end = off + codec.HEADER_SIZE_BYTES + length
        if magic != codec.MAGIC or not _MIN_PAYLOAD <= length <= codec.MAX_PAYLOAD_BYTES:
            codec.frame_length(buf, off, stop)  # raises with the precise reason
            raise CorruptRecord(f"bad frame length {length}", offset=off)
        if end > stop:
            break
        if crc_value(buf[off + 8 : end]) != crc:
            raise CorruptRecord("frame checksum mismatch", offset=off)
        if kind != RecordKind.PUBLISH:
            if kind in codec.CONTROL_KINDS:  # a segment header or commit marker: no record
                try:
                    codec.decode_control(buf[off + codec.HEADER_SIZE_BYTES : end])
                except CorruptRecord as exc:
                    raise CorruptRecord(exc.message, offset=off) from None
                if controls:
                    yield pos + off, end - off, -1, 0, 0, 0
                off = end
                continue
            pub = seq = 0
        yield pos + off, end - off, txid, ts, pub, seq
        off = end
    return off


def scan_segment(
    path: Path, first_txid: int, start: SegmentBuilder | None = None
) -> tuple[TailScan, SegmentBuilder]:
    """Summarise a segment's valid records; report where and why decoding stopped, if early,
    and what lies after the damage (see recovery.TailScan).

    `start` (a checkpoint) covers a prefix already known valid; scanning resumes after it. Also
    returns the builder, ready to take further appends after the valid records.
    """
    builder = start or SegmentBuilder(first_txid)
    problem = ""
    try:
        for _off, size, txid, ts, pub, seq in iter_keys(path, builder.size_bytes, controls=True):
            if txid < 0:
                builder.add_control(size)
                continue
            if txid != builder.last_txid + 1:
                raise CorruptRecord(
                    f"txid {txid} out of sequence (expected {builder.last_txid + 1})",
                    offset=builder.size_bytes,
                )
            builder.add(size, txid, ts, pub, seq)
    except CorruptRecord as exc:
        problem = exc.message
    file_size = path.stat().st_size
    stop = builder.size_bytes
    next_valid: int | None = None
    commit: CommitMarker | None = None
    last_after = 0
    if stop < file_size:
        problem = problem or "incomplete record"
        for offset, item in valid_frames_after(path, stop, file_size):
            if next_valid is None:
                next_valid = offset
            if isinstance(item, codec.Control):
                if item.kind == codec.COMMIT_KIND:
                    commit = CommitMarker(offset, item.first_txid, item.last_txid)
                    break
            else:
                last_after = max(last_after, item.txid)
    version = format_version(path)
    scan = TailScan(path.name, builder.summary(), file_size, problem, next_valid, version, commit,
                    last_after)  # fmt: skip
    return scan, builder


def format_version(path: Path) -> int:
    """The format of a segment: its header's version, or 1 for a segment without a header."""
    with path.open("rb", buffering=0) as f:
        head = os.pread(f.fileno(), codec.CONTROL_FRAME_BYTES, 0)
    try:
        length = codec.frame_length(head, 0, len(head))
        if length > 0:
            control = codec.check_payload(head[codec.HEADER_SIZE_BYTES :])
            if isinstance(control, codec.Control) and control.format_version:
                return control.format_version
    except CorruptRecord:
        pass
    return 1


def valid_frames_after(
    path: Path, offset: int, file_size: int
) -> Iterator[tuple[int, Record | codec.Control]]:
    """(file offset, decoded frame) of every valid frame after the damaged one at `offset`,
    finding the next one again after further damage; only runs on a damaged log."""
    # A search for the next frame reads windows that overlap by 1 MiB: a valid frame longer than
    # that, straddling a window's end, is missed, but the frame after it is found.
    overlap = 1 << 20
    window = SCAN_CHUNK_BYTES + overlap
    with path.open("rb", buffering=0) as f:
        pos = offset
        searching = True
        while pos < file_size:
            buf = os.pread(f.fileno(), window, pos)
            at = 0
            if searching:
                hit = codec.find_next_frame(buf, 0, len(buf))
                if hit is None:
                    if pos + len(buf) >= file_size:
                        return
                    pos += len(buf) - overlap
                    continue
                at, searching = hit, False
            size = len(buf)
            while True:
                try:
                    length = codec.frame_length(buf, at, size)
                    if length < 0:
                        break  # incomplete here: the next window starts with it
                    start = at + codec.HEADER_SIZE_BYTES
                    item = codec.check_payload(buf[start : start + length])
                except CorruptRecord:
                    searching = True  # look again after this frame's first byte
                    break
                yield pos + at, item
                at = start + length
            if at == 0 and not searching:
                if pos + size >= file_size:
                    return  # an incomplete frame ends the file
                window *= 2  # one frame longer than the window
                continue
            pos += at


def load_summary(directory: Path, first_txid: int, size_bytes: int) -> SegmentSummary | None:
    """The sidecar summary of a sealed segment, or None if missing, damaged or stale."""
    summary = _read_summary(directory / summary_name(first_txid))
    if summary is None or summary.size_bytes != size_bytes or summary.first_txid != first_txid:
        return None
    return summary


def load_checkpoint(
    directory: Path, first_txid: int, size_bytes: int, marks: PublisherMarks | None = None
) -> SegmentBuilder | None:
    """A builder covering the checkpointed prefix of the newest segment, or None; `marks`
    (those of the segments before) take the checkpoint's ranges and gaps."""
    summary = _read_summary(directory / checkpoint_name(first_txid))
    if summary is None or summary.size_bytes > size_bytes or summary.first_txid != first_txid:
        return None
    return SegmentBuilder.from_summary(summary, marks)


def _read_summary(path: Path) -> SegmentSummary | None:
    try:
        return decode_summary(path.read_bytes())
    except FileNotFoundError:
        return None


def write_summary(directory: Path, summary: SegmentSummary, *, checkpoint: bool = False) -> None:
    """Write a sidecar (or checkpoint) atomically: temporary file, fsync, rename.

    A checkpoint is not fsynced: it is written in a commit after that commit's fsync, before
    the commit is acknowledged, and a second fsync there (of a new file: ~1.4 ms mean, p99
    13 ms on a shared disk) held every record of the commit, and those behind it, once per
    CHECKPOINT_EVERY_BYTES (issue 8: the replication lag's tail). It only describes bytes
    already durable, and a checkpoint lost or torn by a power failure is refused on open (its
    CRC, its size against the segment's), which then scans the segment: a slower start, never
    a record lost."""
    name = checkpoint_name if checkpoint else summary_name
    final = directory / name(summary.first_txid)
    tmp = final.with_name(final.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, encode_summary(summary))
        if not checkpoint:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# os.writev takes at most IOV_MAX buffers (1024 on Linux).
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


def _write_parts(fd: int, parts: list[bytes]) -> None:
    """Write `parts` in order, IOV_MAX at a time with writev: no joined copy of a batch (a
    multi-megabyte allocation per commit, whose fresh pages the kernel zeroes each time)."""
    for first in range(0, len(parts), _IOV_MAX):
        group = parts[first : first + _IOV_MAX]
        written = os.writev(fd, group)
        if written != sum(map(len, group)):  # a short write: the rest in order
            _write_all(fd, b"".join(group)[written:])


@dataclass(frozen=True, slots=True)
class Rotate:
    """In a batch: seal the current segment with `summary`, continue in a new one."""

    summary: SegmentSummary
    next_first_txid: int


class SegmentWriter:
    """Owns the active segment's file descriptor; writes one batch at a time, in the journal's
    writer thread or (a small batch whose fsync the kernel runs) on the event loop."""

    def __init__(self, directory: Path, first_txid: int) -> None:
        self.directory = directory
        self.fsync_count = 0
        self._fd = self._open(first_txid)

    def _open(self, first_txid: int) -> int:
        """Open a segment for appending; an empty one gets its segment header first (the
        journal's builder counts it with `add_control`)."""
        path = self.directory / segment_name(first_txid)
        existed = path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size == 0:
                _write_all(fd, codec.encode_segment_header(first_txid))
            if not existed:
                fsync_directory(self.directory)  # the new file's name must survive a crash too
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_batch(
        self,
        items: list[bytes | Rotate],
        checkpoint: SegmentSummary | None = None,
        commit: bytes = b"",
    ) -> list[float]:
        """Write the batch and fsync it; return the duration of each fsync in seconds.

        `commit`, the batch's commit marker, is written right after the last fsync and before
        this returns (so before any acknowledgement goes out): an acknowledged record is always
        followed by a marker, and recovery can tell damage it must refuse from a torn write it
        may cut. `checkpoint`, the active segment's summary at the end of the batch (without
        the marker), is written after the fsync, so it never describes bytes that are not
        durable.
        """
        durations: list[float] = []
        chunk: list[bytes] = []
        for item in items:
            if isinstance(item, bytes):
                chunk.append(item)
                continue
            _write_parts(self._fd, chunk)
            chunk.clear()
            durations.append(self._fsync())
            os.close(self._fd)
            self._fd = -1
            write_summary(self.directory, item.summary)
            (self.directory / checkpoint_name(item.summary.first_txid)).unlink(missing_ok=True)
            self._fd = self._open(item.next_first_txid)
        if chunk:
            _write_parts(self._fd, chunk)
        durations.append(self._fsync())
        if commit:
            _write_all(self._fd, commit)
        if checkpoint is not None:
            write_summary(self.directory, checkpoint, checkpoint=True)
        return durations

    @property
    def fd(self) -> int:
        """The active segment's descriptor (for an fsync the kernel runs, kernel_fsync.py)."""
        return self._fd

    def write_frames(self, frames: list[bytes]) -> None:
        """Write a batch that holds no rotation, without fsyncing it (the caller has it
        fsynced, then calls `fsynced`)."""
        _write_parts(self._fd, frames)

    def fsynced(self, commit: bytes) -> None:
        """The batch of `write_frames` is fsynced: write its commit marker (see `write_batch`)."""
        self.fsync_count += 1
        if commit:
            _write_all(self._fd, commit)

    def _fsync(self) -> float:
        started = time.perf_counter()
        os.fsync(self._fd)
        self.fsync_count += 1
        return time.perf_counter() - started

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
