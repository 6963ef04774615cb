"""Segment files on disk: scanning, sidecar summaries, and the writer thread's batches. [io]

Everything here blocks; the journal calls the writer only through `asyncio.to_thread`, one batch
at a time, so the writer needs no lock.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import google_crc32c

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.records import RecordKind
from amps.log.recovery import TailScan
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


def iter_keys(path: Path, offset: int = 0) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(offset, size, txid, timestamp_us, publisher_id, seq) of each valid frame, in file order.

    Stops silently at an incomplete frame at the end; raises CorruptRecord (with the file offset)
    at damage. publisher_id and seq are 0 for records other than publishes.
    """
    with path.open("rb", buffering=0) as f:
        pos = offset
        size = SCAN_CHUNK_BYTES
        while True:
            buf = os.pread(f.fileno(), size, pos)
            try:
                off = yield from _keys_in_chunk(buf, pos)
                if len(buf) < size:  # end of file: what is left must be a frame's beginning
                    if off < len(buf):
                        codec.frame_length(buf, off, len(buf))
                    return
            except CorruptRecord as exc:
                raise CorruptRecord(exc.message, offset=pos + exc.offset) from None
            # A frame longer than the chunk: read a larger window from it.
            size = size * 2 if off == 0 else SCAN_CHUNK_BYTES
            pos += off


def _keys_in_chunk(
    buf: bytes, pos: int
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
            pub = seq = 0
        yield pos + off, end - off, txid, ts, pub, seq
        off = end
    return off


def scan_segment(
    path: Path, first_txid: int, start: SegmentBuilder | None = None
) -> tuple[TailScan, SegmentBuilder]:
    """Summarise a segment's valid records; report where and why decoding stopped, if early.

    `start` (a checkpoint) covers a prefix already known valid; scanning resumes after it. Also
    returns the builder, ready to take further appends after the valid records.
    """
    builder = start or SegmentBuilder(first_txid)
    problem = ""
    try:
        for _off, size, txid, ts, pub, seq in iter_keys(path, builder.size_bytes):
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
    if stop < file_size:
        problem = problem or "incomplete record"
        next_valid = _find_valid_after(path, stop, file_size)
    return TailScan(path.name, builder.summary(), file_size, problem, next_valid), builder


def _find_valid_after(path: Path, offset: int, file_size: int) -> int | None:
    """Offset of a valid frame after the damage at `offset`; reads in overlapping windows."""
    # Windows overlap by 1 MiB: a valid frame longer than that, straddling a window's end, is
    # missed, but the frame after it is found (this only runs on a damaged log).
    window = SCAN_CHUNK_BYTES + (1 << 20)
    with path.open("rb", buffering=0) as f:
        pos = offset
        while pos < file_size:
            buf = os.pread(f.fileno(), window, pos)
            found = codec.find_next_frame(buf, 0 if pos == offset else -1, len(buf))
            if found is not None:
                return pos + found
            pos += SCAN_CHUNK_BYTES
    return None


def load_summary(directory: Path, first_txid: int, size_bytes: int) -> SegmentSummary | None:
    """The sidecar summary of a sealed segment, or None if missing, damaged or stale."""
    summary = _read_summary(directory / summary_name(first_txid))
    if summary is None or summary.size_bytes != size_bytes or summary.first_txid != first_txid:
        return None
    return summary


def load_checkpoint(directory: Path, first_txid: int, size_bytes: int) -> SegmentBuilder | None:
    """A builder covering the checkpointed prefix of the newest segment, or None."""
    summary = _read_summary(directory / checkpoint_name(first_txid))
    if summary is None or summary.size_bytes > size_bytes or summary.first_txid != first_txid:
        return None
    return SegmentBuilder.from_summary(summary)


def _read_summary(path: Path) -> SegmentSummary | None:
    try:
        return decode_summary(path.read_bytes())
    except FileNotFoundError:
        return None


def write_summary(directory: Path, summary: SegmentSummary, *, checkpoint: bool = False) -> None:
    """Write a sidecar (or checkpoint) atomically: temporary file, fsync, rename."""
    name = checkpoint_name if checkpoint else summary_name
    final = directory / name(summary.first_txid)
    tmp = final.with_name(final.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, encode_summary(summary))
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


@dataclass(frozen=True, slots=True)
class Rotate:
    """In a batch: seal the current segment with `summary`, continue in a new one."""

    summary: SegmentSummary
    next_first_txid: int


class SegmentWriter:
    """Owns the active segment's file descriptor; runs in a worker thread, one batch at a time."""

    def __init__(self, directory: Path, first_txid: int) -> None:
        self.directory = directory
        self.fsync_count = 0
        self._fd = self._open(first_txid)

    def _open(self, first_txid: int) -> int:
        path = self.directory / segment_name(first_txid)
        existed = path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if not existed:
            fsync_directory(self.directory)  # the new file's name must survive a crash too
        return fd

    def write_batch(
        self, items: list[bytes | Rotate], checkpoint: SegmentSummary | None = None
    ) -> list[float]:
        """Write the batch and fsync it; return the duration of each fsync in seconds.

        `checkpoint`, the active segment's summary at the end of the batch, is written after the
        fsync, so it never describes bytes that are not durable.
        """
        durations: list[float] = []
        chunk: list[bytes] = []
        for item in items:
            if isinstance(item, bytes):
                chunk.append(item)
                continue
            _write_all(self._fd, b"".join(chunk))
            chunk.clear()
            durations.append(self._fsync())
            os.close(self._fd)
            self._fd = -1
            write_summary(self.directory, item.summary)
            (self.directory / checkpoint_name(item.summary.first_txid)).unlink(missing_ok=True)
            self._fd = self._open(item.next_first_txid)
        if chunk:
            _write_all(self._fd, b"".join(chunk))
        durations.append(self._fsync())
        if checkpoint is not None:
            write_summary(self.directory, checkpoint, checkpoint=True)
        return durations

    def _fsync(self) -> float:
        started = time.perf_counter()
        os.fsync(self._fd)
        self.fsync_count += 1
        return time.perf_counter() - started

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
