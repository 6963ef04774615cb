"""QueueSnapshot <-> bytes, for the queue state store (pure; the caller does the I/O).

Layout: a fixed header, then each column as raw little-endian machine words. Arrays of 8-byte
integers are copied in one call each, so a snapshot of a million messages encodes and decodes in
milliseconds.
"""

from __future__ import annotations

import struct
import sys
from array import array

from amps.queue.recovery import QueueSnapshot

MAGIC = b"AQS2"  # AQS1 plus the snapshot's hints (a u32 after the header)
MAGIC_V1 = b"AQS1"  # still read: hints 0, so restore checks the columns itself
_HEADER = struct.Struct("<4sqqqI")  # magic, high_water_txid, taken_mono_ms, taken_wall_us, count
_HINTS = struct.Struct("<I")
_DEFERRED = struct.Struct("<QQq")


class SnapshotFormatError(ValueError):
    """Bytes that are not a snapshot this version wrote."""


def _column(values: array[int], typecode: str) -> bytes:
    column = values if values.typecode == typecode else array(typecode, values)
    if sys.byteorder != "little":
        column = array(typecode, column)
        column.byteswap()
    return column.tobytes()


def _read_column(
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
        _column(snap.txids, "q"),
        _column(snap.publisher_ids, "Q"),
        _column(snap.seqs, "Q"),
        _column(snap.timestamps_ms, "q"),
        _column(snap.priorities, "Q"),
        snap.barrier_flags,
        _column(snap.expire_at_ms, "q"),
        struct.pack("<I", len(snap.deferred_acks)),
        *(_DEFERRED.pack(*item) for item in snap.deferred_acks),
    ]
    return b"".join(parts)


def decode_snapshot(data: bytes) -> tuple[QueueSnapshot, int, int]:
    """-> (snapshot, taken_mono_ms, taken_wall_us); SnapshotFormatError on anything else."""
    if len(data) < _HEADER.size:
        raise SnapshotFormatError("snapshot is truncated")
    magic, high_water, mono_ms, wall_us, count = _HEADER.unpack_from(data, 0)
    if magic not in (MAGIC, MAGIC_V1):
        raise SnapshotFormatError("not a queue snapshot")
    view = memoryview(data)
    offset = _HEADER.size
    hints = 0
    if magic == MAGIC:
        if offset + _HINTS.size > len(data):
            raise SnapshotFormatError("snapshot is truncated")
        (hints,) = _HINTS.unpack_from(data, offset)
        offset += _HINTS.size
    txids, offset = _read_column(view, offset, count, "q")
    publishers, offset = _read_column(view, offset, count, "Q")
    seqs, offset = _read_column(view, offset, count, "Q")
    stamps, offset = _read_column(view, offset, count, "q")
    priorities, offset = _read_column(view, offset, count, "Q")
    barriers = bytes(view[offset : offset + count])
    offset += count
    expiries, offset = _read_column(view, offset, count, "q")
    if offset + 4 > len(data):
        raise SnapshotFormatError("snapshot is truncated")
    (deferred_count,) = struct.unpack_from("<I", data, offset)
    offset += 4
    if offset + deferred_count * _DEFERRED.size != len(data):
        raise SnapshotFormatError("snapshot length does not match its contents")
    deferred = tuple(
        _DEFERRED.unpack_from(data, offset + i * _DEFERRED.size) for i in range(deferred_count)
    )
    snap = QueueSnapshot(
        high_water, txids, publishers, seqs, stamps, priorities, barriers, expiries, deferred,
        hints,
    )  # fmt: skip
    return snap, mono_ms, wall_us
