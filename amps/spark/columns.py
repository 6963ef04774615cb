"""Journal frames decoded column by column into Arrow: the Spark journal read's hot path.

`codec.decode_publishes` builds a Python object per record and `rows.publishes_batch` then one
Python list per column; here a chunk of a segment becomes Arrow arrays built from buffers:

- the frames are found with numpy (every position of the frame magic's third byte, found a
  word at a time; the magic and each frame's length read there through a view of the chunk as
  4-byte values at every byte offset, one index per frame; the chain of lengths checked from
  the chunk's first frame);
- every frame's CRC32C is checked, all of a chunk's frames in one CRC call (`_checksums_hold`:
  no Python step per record), in the read's own buffer (`decode_into`), once the columns are
  built: the chunk is not copied for it;
- the fixed fields of every publish are one numpy gather viewed through the codec's own layout
  (`codec._PUBLISH`, shared, not copied), strings are gathered into Arrow string arrays (UTF-8
  checked by Arrow), and the data bytes are copied by Arrow: a binary-view array over the chunk
  (each value's offset and length, no Python object per value) cast to binary, the type Spark
  takes (it refuses binary views). Names alike in every row (a topic, an origin) are compared
  a word at a time and built once; bookmarks of one publisher whose sequence numbers have as
  many digits are rows of one width, written digit by digit for all rows at once.

Anything else (a damaged frame, the magic inside a payload, a malformed string) is not decided
here: `decode` returns None and the caller reads that chunk with the journal's own reader,
which says precisely what is wrong. Control frames are checked by `codec.decode_control`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.records import RecordKind
from amps.spark.rows import ARROW_SCHEMA, TIMESTAMP, sequences

_HEADER = codec.HEADER_SIZE_BYTES
_FIXED = codec._PUBLISH  # the publish layout is codec's (a unit test compares the two decodes)
_FIXED_DTYPE = np.dtype(
    [("kind", "u1"), ("txid", "<u8"), ("ts", "<u8"), ("pub", "<u8"), ("seq", "<u8"),
     ("otx", "<u8"), ("exp", "<u4"), ("lt", "<u2"), ("loi", "<u2"), ("log", "<u2"),
     ("lc", "<u2")]
)  # fmt: skip
assert _FIXED_DTYPE.itemsize == _FIXED.size
_MAGIC_THIRD = codec._MAGIC_BYTES[2]
_PREFIX = 9  # kind u8 | txid u64: how every record payload starts
_KIND_PUBLISH = int(RecordKind.PUBLISH)
_CONTROL_KINDS = np.array(sorted(codec.CONTROL_KINDS), np.uint8)
_crc_extend = google_crc32c.extend

Int64s = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Decoded:
    """A chunk's publishes in from_txid..last_txid as one batch (None: none there), the bytes
    of whole frames consumed, and the txid after the last record consumed."""

    batch: pa.RecordBatch | None
    consumed: int
    next_txid: int


def _gather(arr: npt.NDArray[np.uint8], starts: Int64s, width: int) -> npt.NDArray[np.uint8]:
    """`width` bytes at each of `starts`, as an (n, width) array: rows of a sliding-window view,
    so numpy copies each row without an index per byte."""
    windows = np.lib.stride_tricks.sliding_window_view(arr, width)
    return windows[starts]


def _at_every_byte(arr: npt.NDArray[np.uint8], dtype: str) -> npt.NDArray[Any]:
    """The chunk as values of `dtype` starting at every byte offset (unaligned, overlapping): one
    field of every frame is then one index per frame, not one per byte."""
    width = np.dtype(dtype).itemsize
    return np.ndarray((max(0, len(arr) - width + 1),), dtype, arr, 0, (1,))


def _alike(arr: npt.NDArray[np.uint8], starts: Int64s, width: int) -> bool:
    """Whether the `width` bytes at each of `starts` are those at the first: compared a word at
    a time (the last word overlapping the one before), not byte by byte."""
    for dtype in ("<u8", "<u4", "<u2", "u1"):
        size = np.dtype(dtype).itemsize
        if width >= size:
            view = _at_every_byte(arr, dtype)
            for offset in (*range(0, width - size, size), width - size):
                values = view[starts + offset]
                if (values != values[0]).any():
                    return False
            return True
    return True  # width 0


_EIGHT = np.arange(8, dtype=np.int64)


def _positions(arr: npt.NDArray[np.uint8], byte: int) -> Int64s:
    """Where `byte` is in `arr`, ascending. It is rare (about one per frame): the 8-byte words
    holding one are found first, and in each the byte from the word's lowest set bit, which
    spares numpy's nonzero a scan of every byte of the chunk."""
    equal = arr == byte
    whole = len(arr) & ~7
    words = equal[:whole].view(np.uint64)
    at: Int64s = np.flatnonzero(words != 0)
    values = words[at]
    lowest = values & (~values + np.uint64(1))  # each found byte is 0x01: bit 0, 8, ... 56
    found: Int64s = at * 8 + (np.log2(lowest).astype(np.int64) >> 3)
    several = values != lowest
    if several.any():  # rare: a word holding it twice or more; its others put in their places
        more = (at[several][:, None] * 8 + _EIGHT).ravel()
        more = np.setdiff1d(more[equal[more]], found[several], assume_unique=True)
        found = np.insert(found, np.searchsorted(found, more), more)
    if whole < len(arr):
        found = np.concatenate([found, np.flatnonzero(equal[whole:]) + whole])
    return found


@dataclass(frozen=True)
class _Frames:
    """The complete frames chained from a chunk's offset 0: where each starts, its payload
    length and its stored CRC."""

    starts: Int64s
    lengths: Int64s
    crcs: npt.NDArray[np.uint32]


def _frames(arr: npt.NDArray[np.uint8]) -> _Frames | None:
    """The complete frames chained from offset 0, or None when the chain is not plain (damage,
    or the magic inside a payload: the caller's ordinary reader decides)."""
    size = len(arr)
    if size < _HEADER:
        return None if size and not codec._MAGIC_BYTES.startswith(arr.tobytes()) else _NONE
    # Candidates: where the magic's third byte (0xB5, rare in text) is; then all four checked.
    starts = _positions(arr, _MAGIC_THIRD) - 2
    starts = starts[(starts >= 0) & (starts <= size - _HEADER)]
    u32 = _at_every_byte(arr, "<u4")
    starts = starts[u32[starts] == codec.MAGIC]
    if not len(starts) or starts[0] != 0:
        return None
    lengths = u32[starts + 8].astype(np.int64)
    if (lengths < _PREFIX).any() or (lengths > codec.MAX_PAYLOAD_BYTES).any():
        return None
    stops = starts + _HEADER + lengths
    if not (stops[:-1] == starts[1:]).all():
        return None
    complete = int(np.searchsorted(stops, size, side="right"))
    return _Frames(starts[:complete], lengths[:complete], u32[starts[:complete] + 4])


_NONE = _Frames(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.uint32))


def _checksums_hold(
    buffer: npt.NDArray[np.uint8], starts: Int64s, stops: Int64s, stored: npt.NDArray[np.uint32]
) -> bool:
    """Whether every frame's CRC32C (over its length field and payload) is the one stored in its
    header, checked by one CRC call over the frames rather than one call per frame, in
    `buffer`, which this overwrites (its frames' headers, and SPARE_BYTES after the last).

    With CRC32C's init and final complement folded into the bytes (the length field's four
    bytes complemented; the stored value complemented after the payload), a frame's raw CRC
    (zero init, no final xor) over `~length | payload | ~stored` is 0 exactly when its checksum
    holds. Those blocks are laid end to end, each followed by four zero bytes, where the frames'
    8-byte `magic | crc` gaps are; the raw CRC of the whole is the sum of each block's,
    multiplied by x to the power of its distance from the end, which is invertible: one damaged
    frame always makes the whole nonzero. A nonzero whole sends the chunk to the journal's
    reader, which names the frame."""
    end = int(stops[-1])
    buffer[:8] = 0
    # 4-byte words at any byte offset (the frames are not aligned), written in place.
    words = np.ndarray((end + 5,), "<u4", buffer, 0, (1,))
    words[starts + 8] ^= 0xFFFF_FFFF
    words[stops] = ~stored
    words[stops + 4] = 0
    # extend() complements the CRC it is given and the result: 0xFFFFFFFF starts from zero.
    return bool(_crc_extend(0xFFFF_FFFF, buffer[: end + SPARE_BYTES]) == 0xFFFF_FFFF)


SPARE_BYTES = 8  # after a chunk in decode_into's buffer: where the last frame's check goes
SKIPPABLE = frozenset({"data", "bookmark", "publisher"})  # columns a read may leave unbuilt
_NOTHING: frozenset[str] = frozenset()


def decode(chunk: bytes, from_txid: int, last_txid: int) -> Decoded | None:
    """The publishes of txids from_txid..last_txid among the complete frames of `chunk` (which
    starts at a frame); None when the chunk needs the journal's ordinary reader.

    Frames after the last record at or below last_txid are not consumed."""
    buffer = np.empty(len(chunk) + SPARE_BYTES, np.uint8)
    buffer[: len(chunk)] = np.frombuffer(chunk, np.uint8)
    return decode_into(buffer, from_txid, last_txid)


def decode_into(
    buffer: npt.NDArray[np.uint8], from_txid: int, last_txid: int, skip: frozenset[str] = _NOTHING
) -> Decoded | None:
    """`decode` of the chunk in `buffer` but its last SPARE_BYTES, without a copy of it: the
    checksums are checked in the buffer itself, which this overwrites, once the columns are
    built (each copies what it takes from the chunk, so the batch holds none of the buffer).
    Columns named in `skip` (of SKIPPABLE) are left null: a read that does not return them."""
    arr = buffer[:-SPARE_BYTES]
    found = _frames(arr)
    if found is None:
        return None
    # Every payload starts kind u8 | txid u64; a control frame has 0 where a record has its txid.
    txids = _at_every_byte(arr, "<u8")[found.starts + _HEADER + 1]
    kept = int(np.searchsorted(np.maximum.accumulate(txids), last_txid, side="right"))
    if not kept:
        return Decoded(None, 0, from_txid)
    starts, txids = found.starts[:kept], txids[:kept]
    kinds = arr[starts + _HEADER]
    stops = starts + _HEADER + found.lengths[:kept]
    control = np.isin(kinds, _CONTROL_KINDS)
    try:
        for i in np.flatnonzero(control).tolist():
            codec.decode_control(arr[int(starts[i]) + _HEADER : int(stops[i])].tobytes())
    except CorruptRecord:
        return None
    record_txids = txids[~control]
    next_txid = int(record_txids[-1]) + 1 if len(record_txids) else from_txid
    wanted = (kinds == _KIND_PUBLISH) & (txids >= from_txid)
    batch = None
    if wanted.any():
        batch = _publishes(arr, starts[wanted] + _HEADER, stops[wanted], skip)
        if batch is None:
            return None
    # Last: the check overwrites the frames' headers (a damaged chunk's columns are dropped).
    if not _checksums_hold(buffer, starts, stops, found.crcs[:kept]):
        return None
    return Decoded(batch, int(stops[-1]), next_txid)


def _strings(
    arr: npt.NDArray[np.uint8], starts: Int64s, lengths: Int64s, valid: pa.Buffer | None = None
) -> pa.Array | None:
    """The UTF-8 strings at `starts` as an Arrow string array (null where `valid`, a validity
    bitmap, says so); None if one is not UTF-8."""
    n = len(starts)
    width = int(lengths[0])
    if valid is None and (lengths == width).all() and _alike(arr, starts, width):
        # Names repeat (a topic, an origin): all alike is a few comparisons, and one string.
        first = int(starts[0])
        try:
            return _repeated(arr[first : first + width].tobytes().decode(), n)
        except UnicodeDecodeError:
            return None
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    index = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    raw = pa.Array.from_buffers(
        pa.binary(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(arr[index])]
    )
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return None


# Arrays are built from buffers here, never by pa.array or pa.scalar: those import pandas (about
# a second of CPU in each fresh Spark Python worker) to check whether their input is a pandas
# object.


def _repeated(text: str, n: int) -> pa.Array:
    """`text` n times, as an Arrow string array."""
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]
    )


def texts(values: list[str]) -> pa.Array:
    """Python strings as an Arrow string array."""
    raw = [value.encode() for value in values]
    offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(raw), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))]
    )


def _numbers(values: npt.NDArray[Any], kind: pa.DataType) -> pa.Array:
    """A numpy array as an Arrow array of `kind` (of the same width), without a copy."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


# `publisher|seq|` (scalars taken from arrays: pa.scalar imports pandas).
_EMPTY, _BAR = _repeated("", 1)[0], _repeated("|", 1)[0]


def _bitmap(mask: npt.NDArray[np.bool_]) -> pa.Buffer:
    """A validity bitmap (Arrow's bit order) of a boolean mask."""
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def _same_names(
    arr: npt.NDArray[np.uint8], topic_at: Int64s, lt: Int64s, loi: Int64s, log: Int64s
) -> tuple[pa.Array, pa.Array] | None:
    """(topics, origins) when every publish has the same topic, origin and origin group (the
    three lie side by side: one gather, one comparison); None otherwise, or if one of them is
    not UTF-8 (the caller's per-field path then decides)."""
    lt0, loi0, log0 = int(lt[0]), int(loi[0]), int(log[0])
    width = lt0 + loi0 + log0
    if not width or (lt != lt0).any() or (loi != loi0).any() or (log != log0).any():
        return None
    if not _alike(arr, topic_at, width):
        return None
    first = arr[int(topic_at[0]) : int(topic_at[0]) + width].tobytes()
    try:
        topic, origin = first[:lt0].decode(), first[lt0 : lt0 + loi0].decode()
        first[lt0 + loi0 :].decode()
    except UnicodeDecodeError:
        return None
    n = len(topic_at)
    return _repeated(topic, n), _repeated(origin, n)


_INLINE = 12  # a binary-view value this long or shorter is held in its view, not referenced


def _binary(arr: npt.NDArray[np.uint8], starts: Int64s, lengths: Int64s) -> pa.Array:
    """The bytes at `starts` as an Arrow binary array, copied by Arrow (a cast from a
    binary-view array over the chunk) rather than sliced and joined per value in Python."""
    n = len(starts)
    views = np.zeros((n, 4), np.int32)  # length, prefix (4 bytes), buffer index, offset
    views[:, 0] = lengths
    referenced = lengths > _INLINE
    if referenced.all():
        views[:, 1] = _at_every_byte(arr, "<i4")[starts]
        views[:, 3] = starts
    else:
        at = starts[referenced]
        views[referenced, 1] = _at_every_byte(arr, "<i4")[at]
        views[referenced, 3] = at
        # Short values are held inline: up to 12 bytes after the length, zero-padded.
        short = ~referenced
        columns = np.arange(_INLINE)
        window = np.minimum(starts[short][:, None] + columns, len(arr) - 1)
        inline = np.where(columns < lengths[short][:, None], arr[window], 0)
        views.view(np.uint8).reshape(n, 16)[short, 4:] = inline
    array = pa.Array.from_buffers(
        pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(arr)]
    )
    try:
        return array.cast(pa.binary())
    except pa.ArrowNotImplementedError:  # an Arrow without this cast: copy value by value
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        ends = (starts + lengths).tolist()
        joined = b"".join([arr[a:b].tobytes() for a, b in zip(starts.tolist(), ends, strict=True)])
        return pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(joined)]
        )


_POWERS = 10 ** np.arange(1, 19, dtype=np.int64)  # where a decimal number gets another digit


def _bookmarks(publisher: str, seqs: npt.NDArray[np.int64]) -> pa.Array | None:
    """`publisher|seq|` for each of `seqs` when all have as many digits (the usual chunk: the
    sequence numbers of one publisher, close together): rows of one width, written digit by digit
    for all rows at once; None otherwise (Arrow joins them)."""
    low, high = int(seqs.min()), int(seqs.max())
    digits = int(np.searchsorted(_POWERS, high, side="right")) + 1
    if low < 0 or int(np.searchsorted(_POWERS, low, side="right")) + 1 != digits:
        return None
    head = np.frombuffer(publisher.encode() + b"|", np.uint8)
    width = len(head) + digits + 1
    rows = np.empty((len(seqs), width), np.uint8)
    rows[:, : len(head)] = head
    rest = seqs
    for column in range(len(head) + digits - 1, len(head) - 1, -1):
        tens = rest // 10
        rows[:, column] = rest - tens * 10 + 48  # the digit's character
        rest = tens
    rows[:, -1] = ord("|")
    offsets = np.arange(len(seqs) + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(
        pa.string(), len(seqs), [None, pa.py_buffer(offsets), pa.py_buffer(rows)]
    )


def _publishes(
    arr: npt.NDArray[np.uint8], payloads: Int64s, stops: Int64s, skip: frozenset[str]
) -> pa.RecordBatch | None:
    """The publishes' batch; the columns named in `skip` (`data`, `bookmark`, `publisher`: the
    dearest, no check depends on them) are left null."""
    n = len(payloads)
    if ((stops - payloads) < _FIXED.size).any():
        return None
    fixed = _gather(arr, payloads, _FIXED.size).view(_FIXED_DTYPE).ravel()
    lt, loi, log, lc = (fixed[name].astype(np.int64) for name in ("lt", "loi", "log", "lc"))
    topic_at = payloads + _FIXED.size
    origin_at = topic_at + lt
    corr_at = origin_at + loi + log
    data_at = corr_at + lc
    if (data_at > stops).any():
        return None
    names = _same_names(arr, topic_at, lt, loi, log)
    if names is not None:
        topics, origins = names
        groups: pa.Array | None = origins  # checked by _same_names; not a column
    else:
        topics = _strings(arr, topic_at, lt)
        origins = _strings(arr, origin_at, loi)
        groups = _strings(arr, origin_at + loi, log)  # checked as codec checks it
    if lc.any():
        correlations = _strings(arr, corr_at, lc, _bitmap(lc > 0))
    else:
        correlations = pa.nulls(n, pa.string())
    if topics is None or origins is None or groups is None or correlations is None:
        return None
    data = None if "data" in skip else _binary(arr, data_at, stops - data_at)
    ids = fixed["pub"]
    useqs = _numbers(fixed["seq"], pa.uint64())
    seqs = sequences(useqs)
    bookmarks: pa.Array | None = None
    if {"bookmark", "publisher"} <= skip:
        publishers = None
    elif (ids == ids[0]).all():  # one publisher (the usual chunk): one string, not a cast each
        publisher = str(int(ids[0]))
        publishers = _repeated(publisher, n)
        if "bookmark" not in skip:
            bookmarks = _bookmarks(publisher, fixed["seq"].astype(np.int64))
        if bookmarks is None and "bookmark" not in skip:
            prefix = _repeated(publisher, 1)[0]  # a scalar (pa.scalar imports pandas)
            bookmarks = pc.binary_join_element_wise(prefix, useqs.cast(pa.string()), _EMPTY, _BAR)
    else:
        publishers = _numbers(ids, pa.uint64()).cast(pa.string())
        if "bookmark" not in skip:
            bookmarks = pc.binary_join_element_wise(
                publishers, useqs.cast(pa.string()), _EMPTY, _BAR
            )
    columns = [
        topics,
        bookmarks,
        _numbers(fixed["txid"].astype(np.int64), pa.int64()),
        _numbers(fixed["ts"].astype(np.int64), TIMESTAMP),
        data,
        publishers,
        seqs,
        origins,
        _numbers(fixed["otx"].astype(np.int64), pa.int64()),
        correlations,
        _repeated("publish", n),
    ]
    columns += [None] * (len(ARROW_SCHEMA) - len(columns))
    return pa.RecordBatch.from_arrays(
        [
            pa.nulls(n, ARROW_SCHEMA.field(i).type) if column is None else column
            for i, column in enumerate(columns)
        ],
        schema=ARROW_SCHEMA,
    )
