"""QueueSnapshot <-> bytes, for the queue state store (pure; the caller does the I/O).

Layout (AQS3): a fixed header and the hints word; the message columns as raw little-endian
machine words (txids, timestamps, priorities, barrier bytes, expiries); the bookmark runs, each a
publisher id and length then its seqs and txids; the out-of-order bookmarks; the deferred acks.
Arrays of 8-byte integers are copied in one call each, so a snapshot of a million messages
encodes and decodes in milliseconds whatever the number of publishers. AQS2 and AQS1 (bookmarks
as two columns in txid order) are still read, and turned into runs.
"""

from __future__ import annotations

import struct
import sys
from array import array

from amps.queue.recovery import (
    HINT_SEQS_IN_ORDER,
    BookmarkRun,
    QueueSnapshot,
    bookmark_runs_of,
)

MAGIC = b"AQS3"  # AQS2 with the bookmarks as runs per publisher
MAGIC_V2 = b"AQS2"  # still read: AQS1 plus the snapshot's hints (a u32 after the header)
MAGIC_V1 = b"AQS1"  # still read: hints 0, so restore checks the columns itself
_HEADER = struct.Struct("<4sqqqI")  # magic, high_water_txid, taken_mono_ms, taken_wall_us, count
_HINTS = struct.Struct("<I")
_DEFERRED = struct.Struct("<QQq")
_RUN = struct.Struct("<QI")  # publisher id, entries
_UNORDERED = struct.Struct("<QQq")  # publisher id, seq, txid
_COUNT = struct.Struct("<I")


class SnapshotFormatError(ValueError):
    """Bytes that are not a snapshot this version wrote."""


def encode_column(values: array[int], typecode: str) -> bytes:
    column = values if values.typecode == typecode else array(typecode, values)
    if sys.byteorder != "little":
        column = array(typecode, column)
        column.byteswap()
    return column.tobytes()


def decode_column(
    data: memoryview, offset: int, count: int, typecode: str
) -> tuple[array[int], int]:
    column: array[int] = array(typecode)
    size = count * column.itemsize
    if offset + size > len(data):
        raise SnapshotFormatError("snapshot is truncated")
    column.frombytes(data[offset : offset + size])
    if sys.byteorder != "little":
        column.byteswap()
    return column, offset + size


def encode_snapshot(snap: QueueSnapshot, taken_mono_ms: int, taken_wall_us: int) -> bytes:
    """The snapshot and the two clocks at the moment it was taken (to shift times on restore)."""
    count = len(snap.txids)
    parts = [
        _HEADER.pack(MAGIC, snap.high_water_txid, taken_mono_ms, taken_wall_us, count),
        _HINTS.pack(snap.hints),
        encode_column(snap.txids, "q"),
        encode_column(snap.timestamps_ms, "q"),
        encode_column(snap.priorities, "Q"),
        snap.barrier_flags,
        encode_column(snap.expire_at_ms, "q"),
        _COUNT.pack(len(snap.bookmark_runs)),
    ]
    for run in snap.bookmark_runs:
        parts += [
            _RUN.pack(run.publisher_id, len(run.txids)),
            encode_column(run.seqs, "Q"),
            encode_column(run.txids, "q"),
        ]
    parts.append(_COUNT.pack(len(snap.unordered_bookmarks)))
    parts.extend(_UNORDERED.pack(*item) for item in snap.unordered_bookmarks)
    parts.append(_COUNT.pack(len(snap.deferred_acks)))
    parts.extend(_DEFERRED.pack(*item) for item in snap.deferred_acks)
    return b"".join(parts)


def decode_snapshot(data: bytes | memoryview) -> tuple[QueueSnapshot, int, int]:
    """-> (snapshot, taken_mono_ms, taken_wall_us); SnapshotFormatError on anything else. A
    memoryview (a part of a larger snapshot's bytes) is read in place, not copied."""
    if len(data) < _HEADER.size:
        raise SnapshotFormatError("snapshot is truncated")
    magic, high_water, mono_ms, wall_us, count = _HEADER.unpack_from(data, 0)
    if magic not in (MAGIC, MAGIC_V2, MAGIC_V1):
        raise SnapshotFormatError("not a queue snapshot")
    view = memoryview(data)
    offset = _HEADER.size
    hints = 0
    if magic != MAGIC_V1:
        (hints,), offset = _unpack(_HINTS, data, offset)
    txids, offset = decode_column(view, offset, count, "q")
    if magic == MAGIC:
        stamps, offset = decode_column(view, offset, count, "q")
    else:
        publishers, offset = decode_column(view, offset, count, "Q")
        seqs, offset = decode_column(view, offset, count, "Q")
        stamps, offset = decode_column(view, offset, count, "q")
    priorities, offset = decode_column(view, offset, count, "Q")
    if offset + count > len(data):
        raise SnapshotFormatError("snapshot is truncated")
    barriers = bytes(view[offset : offset + count])
    offset += count
    expiries, offset = decode_column(view, offset, count, "q")
    if magic == MAGIC:
        runs, unordered, offset = _read_bookmarks(data, view, offset, count)
    else:
        in_order = bool(hints & HINT_SEQS_IN_ORDER)
        runs, unordered = bookmark_runs_of(publishers, seqs, txids, in_order=in_order)
    deferred, offset = _read_items(_DEFERRED, data, offset)
    if offset != len(data):
        raise SnapshotFormatError("snapshot length does not match its contents")
    snap = QueueSnapshot(
        high_water, txids, stamps, priorities, barriers, expiries, runs, unordered, deferred,
        hints,
    )  # fmt: skip
    return snap, mono_ms, wall_us


def _read_bookmarks(
    data: bytes | memoryview, view: memoryview, offset: int, count: int
) -> tuple[tuple[BookmarkRun, ...], tuple[tuple[int, int, int], ...], int]:
    """The runs and out-of-order bookmarks; together they must name `count` messages."""
    (run_count,), offset = _unpack(_COUNT, data, offset)
    runs = []
    publishers = set()
    named = 0
    for _ in range(run_count):
        (publisher_id, length), offset = _unpack(_RUN, data, offset)
        if not length or publisher_id in publishers:
            raise SnapshotFormatError("snapshot has an empty or repeated bookmark run")
        publishers.add(publisher_id)
        seqs, offset = decode_column(view, offset, length, "Q")
        txids, offset = decode_column(view, offset, length, "q")
        runs.append(BookmarkRun(publisher_id, seqs, txids))
        named += length
    unordered, offset = _read_items(_UNORDERED, data, offset)
    if named + len(unordered) != count:
        raise SnapshotFormatError("snapshot bookmarks do not match its messages")
    return tuple(runs), unordered, offset


def _unpack(
    layout: struct.Struct, data: bytes | memoryview, offset: int
) -> tuple[tuple[int, ...], int]:
    if offset + layout.size > len(data):
        raise SnapshotFormatError("snapshot is truncated")
    return layout.unpack_from(data, offset), offset + layout.size


def _read_items(
    layout: struct.Struct, data: bytes | memoryview, offset: int
) -> tuple[tuple[tuple[int, int, int], ...], int]:
    """A u32 count then that many fixed-size triples."""
    (count,), offset = _unpack(_COUNT, data, offset)
    end = offset + count * layout.size
    if end > len(data):
        raise SnapshotFormatError("snapshot is truncated")
    items = tuple(layout.unpack_from(data, offset + i * layout.size) for i in range(count))
    return items, end
