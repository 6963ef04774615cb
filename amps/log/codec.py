"""Binary record layout and length + CRC32C framing. [core]

Frame: `magic u32 | crc u32 | length u32 | payload`, little-endian. The CRC32C covers the length
field and the payload, so a flipped length is caught too. The magic lets recovery find the next
frame after a damaged one with `bytes.find` instead of trying every byte offset.

Payload: `kind u8 | txid u64 | timestamp_us u64 | ...kind-specific fixed fields... | strings`,
strings as UTF-8 with their u16 lengths in the fixed part; a publish ends with its data bytes.

A queue record may end with an extension (queue record format 2): `version u8 (= 2)` then, per
txid, the last delivery time (u64 UTC microseconds) and the delivery count (u16). A format 1
record ends after its txids; both decode, and a record without delivery facts is written as
format 1, byte for byte as before.

Decoding never raises anything but `CorruptRecord`; an incomplete frame at the end of the buffer
is "need more bytes" (the consumed offset stops before it), never an error.

Control frames share the frame format but carry no record and take no txid; readers of records
skip them. Their payload is `kind u8 | 0 u64 | a u64 | b u64 | c u64` (the zero sits where a
record has its txid): a *segment header* (kind 0xF0: a = the segment's first txid, c = the
segment format version) opens every segment of format 2, and a *commit marker* (kind 0xF1:
a, b = the first and last txid the fsync before it made durable) follows every fsync of the
newest segment. See docs/design/journal.md.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import google_crc32c

from amps.errors import CorruptRecord
from amps.log.bookmarks import Bookmark, PackedBookmarks
from amps.log.records import (
    PublishRecord,
    QueueAction,
    QueueRecord,
    Record,
    RecordKind,
    TransferRecord,
)

__all__ = [
    "COMMIT_KIND",
    "CONTROL_FRAME_BYTES",
    "HEADER_SIZE_BYTES",
    "HEAD_PUBLISH",
    "KIND_PUBLISH",
    "MAX_PAYLOAD_BYTES",
    "PUBLISH_FIXED_BYTES",
    "QUEUE_RECORD_VERSION",
    "SEGMENT_FORMAT_VERSION",
    "SEGMENT_HEADER_KIND",
    "Control",
    "check_payload",
    "crc_value",
    "decode",
    "decode_control",
    "decode_payload",
    "decode_publishes",
    "encode",
    "encode_commit",
    "encode_payload",
    "encode_publish",
    "encode_segment_header",
    "find_next_frame",
    "frame_length",
    "new_publish",
    "peek_payload",
    "restamp",
    "restamp_publishes",
]

MAGIC = 0xA3B5_1A7E
HEADER = struct.Struct("<III")
HEADER_SIZE_BYTES = HEADER.size
MAX_PAYLOAD_BYTES = 1 << 26  # 64 MiB: a larger length field is damage, not a record
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_LENGTH = struct.Struct("<I")

_PUBLISH = struct.Struct("<BQQQQQIHHHH")
# The frame's length field followed by a publish's fixed fields: one pack, and the CRC's first part.
_LENGTH_PUBLISH = struct.Struct("<IBQQQQQIHHHH")
_MAGIC_CRC = struct.Struct("<II")
_KIND_PUBLISH = int(RecordKind.PUBLISH)
_QUEUE = struct.Struct("<BQQQBHHHHII")
_TRANSFER = struct.Struct("<BQQQQQBHHHHH")
_PREFIX = struct.Struct("<BQQ")  # kind, txid, timestamp_us: shared by every kind
_PAIR = struct.Struct("<QQ")
QUEUE_RECORD_VERSION = 2  # the version byte of a queue record's delivery extension
TRANSFER_RECORD_VERSION = 2  # the version byte of a transfer record's epoch extension
_EPOCH = struct.Struct("<BQ")
_CONTROL = struct.Struct("<BQQQQ")
# Segment format: 1 = records only (before commit markers); 2 = a segment header first, and a
# commit marker after every fsync. Format 1 segments stay readable.
SEGMENT_FORMAT_VERSION = 2
SEGMENT_HEADER_KIND = 0xF0
COMMIT_KIND = 0xF1
CONTROL_KINDS = frozenset((SEGMENT_HEADER_KIND, COMMIT_KIND))
CONTROL_FRAME_BYTES = HEADER.size + _CONTROL.size
_U64 = struct.Struct("<Q")
_crc_value = google_crc32c.value
_crc_extend = google_crc32c.extend


def encode_payload(record: Record) -> bytes:
    """The payload bytes of one record (no frame)."""
    if isinstance(record, PublishRecord):
        topic = record.topic.encode()
        oi = record.origin_instance.encode()
        og = record.origin_group.encode()
        corr = record.correlation_id.encode()
        fixed = _PUBLISH.pack(
            RecordKind.PUBLISH, record.txid, record.timestamp_us, record.publisher_id,
            record.seq, record.origin_txid, record.expiration_s,
            len(topic), len(oi), len(og), len(corr),
        )  # fmt: skip
        return b"".join((fixed, topic, oi, og, corr, record.data))
    if isinstance(record, QueueRecord):
        queue = record.queue.encode()
        oi = record.origin_instance.encode()
        og = record.origin_group.encode()
        reason = record.reason.encode()
        fixed = _QUEUE.pack(
            RecordKind.QUEUE, record.txid, record.timestamp_us, record.origin_txid,
            record.action, len(queue), len(oi), len(og), len(reason),
            len(record.bookmarks), len(record.txids),
        )  # fmt: skip
        bookmarks = record.bookmarks
        if type(bookmarks) is PackedBookmarks:  # as read: its bytes are the encoding
            pairs = bookmarks.data
        else:
            pairs = b"".join(_PAIR.pack(b.publisher_id, b.seq) for b in bookmarks)
        nt = len(record.txids)
        txids = struct.pack(f"<{nt}Q", *record.txids)
        if not record.delivered_us and not record.deliveries:
            return b"".join((fixed, queue, oi, og, reason, pairs, txids))
        if len(record.delivered_us) != nt or len(record.deliveries) != nt:
            raise ValueError("a queue record's delivery facts must be one per txid")
        delivered = struct.pack(f"<B{nt}Q{nt}H", QUEUE_RECORD_VERSION, *record.delivered_us,
                                *record.deliveries)  # fmt: skip
        return b"".join((fixed, queue, oi, og, reason, pairs, txids, delivered))
    queue = record.queue.encode()
    src = record.from_instance.encode()
    dst = record.to_instance.encode()
    oi = record.origin_instance.encode()
    og = record.origin_group.encode()
    fixed = _TRANSFER.pack(
        RecordKind.TRANSFER, record.txid, record.timestamp_us, record.origin_txid,
        record.bookmark.publisher_id, record.bookmark.seq, record.proxied,
        len(queue), len(src), len(dst), len(oi), len(og),
    )  # fmt: skip
    if not record.epoch:  # format 1, as written before epochs
        return b"".join((fixed, queue, src, dst, oi, og))
    return b"".join(
        (fixed, queue, src, dst, oi, og, _EPOCH.pack(TRANSFER_RECORD_VERSION, record.epoch))
    )


def encode(record: Record) -> bytes:
    """One framed record, ready to append to a segment."""
    if isinstance(record, PublishRecord):
        return encode_publish(
            record.txid, record.timestamp_us, record.topic, record.data, record.publisher_id,
            record.seq, record.origin_instance, record.origin_group, record.origin_txid,
            record.correlation_id, record.expiration_s,
        )  # fmt: skip
    payload = encode_payload(record)
    assert 0 < len(payload) <= MAX_PAYLOAD_BYTES, len(payload)
    length = _LENGTH.pack(len(payload))
    crc = _crc_extend(_crc_value(length), payload)
    return b"".join((_MAGIC_BYTES, _LENGTH.pack(crc), length, payload))


@dataclass(frozen=True, slots=True)
class Control:
    """A decoded control frame (a segment header or a commit marker)."""

    kind: int
    first_txid: int
    last_txid: int  # commit marker: the last txid its fsync made durable (0 in a header)
    format_version: int  # segment header: the segment's format (0 in a commit marker)


def _encode_control(kind: int, a: int, b: int, c: int) -> bytes:
    payload = _CONTROL.pack(kind, 0, a, b, c)
    length = _LENGTH.pack(len(payload))
    crc = _crc_extend(_crc_value(length), payload)
    return b"".join((_MAGIC_BYTES, _LENGTH.pack(crc), length, payload))


def encode_segment_header(first_txid: int) -> bytes:
    """The frame that opens a segment of the current format."""
    return _encode_control(SEGMENT_HEADER_KIND, first_txid, 0, SEGMENT_FORMAT_VERSION)


def encode_commit(first_txid: int, last_txid: int) -> bytes:
    """The marker written after an fsync that made first_txid..last_txid durable."""
    assert 0 < first_txid <= last_txid, (first_txid, last_txid)
    return _encode_control(COMMIT_KIND, first_txid, last_txid, 0)


def decode_control(payload: bytes | memoryview) -> Control:
    """A checked payload whose first byte is a control kind; malformed is CorruptRecord."""
    if len(payload) != _CONTROL.size:
        raise CorruptRecord(f"control frame of {len(payload)} bytes, expected {_CONTROL.size}")
    kind, zero, a, b, c = _CONTROL.unpack_from(payload)
    if kind not in CONTROL_KINDS or zero:
        raise CorruptRecord(f"malformed control frame (kind {kind:#x})")
    if kind == SEGMENT_HEADER_KIND:
        if b or not 2 <= c <= SEGMENT_FORMAT_VERSION:
            raise CorruptRecord(f"segment header of unknown format version {c}")
        return Control(kind, a, 0, c)
    if c or not 0 < a <= b:
        raise CorruptRecord(f"commit marker with a bad txid range {a}..{b}")
    return Control(kind, a, b, 0)


# (topic, origin instance, origin group) -> (their UTF-8 bytes joined, each one's length).
_ENCODED_NAMES_ENTRIES = 4096
_encoded_names: dict[tuple[str, str, str], tuple[bytes, int, int, int]] = {}


def encode_publish(
    txid: int, timestamp_us: int, topic: str, data: bytes, publisher_id: int, seq: int,
    origin_instance: str, origin_group: str, origin_txid: int, correlation_id: str,
    expiration_s: int,
) -> bytes:  # fmt: skip
    """The frame of one publish, without building a record first (the append hot path).

    Byte for byte what `encode` makes of the same PublishRecord: the names are encoded once per
    distinct (topic, origin), the length and fixed fields are one pack, and one CRC call covers
    them with the payload (one call over contiguous bytes beats several over parts).
    """
    key = (topic, origin_instance, origin_group)
    names = _encoded_names.get(key)
    if names is None:
        t, oi, og = topic.encode(), origin_instance.encode(), origin_group.encode()
        names = (t + oi + og, len(t), len(oi), len(og))
        if len(_encoded_names) >= _ENCODED_NAMES_ENTRIES:
            _encoded_names.clear()
        _encoded_names[key] = names
    strings, lt, loi, log = names
    lc = 0
    if correlation_id:
        corr = correlation_id.encode()
        lc = len(corr)
        strings += corr
    length = _PUBLISH.size + len(strings) + len(data)
    if length > MAX_PAYLOAD_BYTES:
        raise AssertionError(length)
    head = _LENGTH_PUBLISH.pack(
        length, _KIND_PUBLISH, txid, timestamp_us, publisher_id, seq, origin_txid,
        expiration_s, lt, loi, log, lc,
    )  # fmt: skip
    body = b"".join((head, strings, data))
    return _MAGIC_CRC.pack(MAGIC, _crc_value(body)) + body


def _strings(buf: bytes, start: int, lengths: tuple[int, ...]) -> tuple[list[str], int]:
    out: list[str] = []
    for n in lengths:
        out.append(buf[start : start + n].decode())
        start += n
    return out, start


class _PublishSlots:
    """Same slots, same order as PublishRecord; decoding builds one and retypes it.

    A frozen dataclass __init__ sets each field through object.__setattr__: ~3.5 us per publish
    on this hardware, most of the 5 us a record may cost during replay (200,000/s). A plain
    slotted __init__ followed by a `__class__` swap costs ~1 us; CPython allows the swap because
    both layouts are identical (asserted below, and in the tests).
    """

    __slots__ = (
        "correlation_id",
        "data",
        "expiration_s",
        "origin_group",
        "origin_instance",
        "origin_txid",
        "publisher_id",
        "seq",
        "timestamp_us",
        "topic",
        "txid",
    )  # fmt: skip

    def __init__(
        self, txid: int, timestamp_us: int, topic: str, data: bytes, publisher_id: int, seq: int,
        origin_instance: str, origin_group: str, origin_txid: int, correlation_id: str,
        expiration_s: int,
    ) -> None:  # fmt: skip
        self.txid = txid
        self.timestamp_us = timestamp_us
        self.topic = topic
        self.data = data
        self.publisher_id = publisher_id
        self.seq = seq
        self.origin_instance = origin_instance
        self.origin_group = origin_group
        self.origin_txid = origin_txid
        self.correlation_id = correlation_id
        self.expiration_s = expiration_s


assert sorted(_PublishSlots.__slots__) == sorted(PublishRecord.__slots__)


def new_publish(
    txid: int, timestamp_us: int, topic: str, data: bytes, publisher_id: int, seq: int,
    origin_instance: str, origin_group: str, origin_txid: int, correlation_id: str,
    expiration_s: int,
) -> PublishRecord:  # fmt: skip
    """A PublishRecord at a third of the cost of its dataclass __init__ (see _PublishSlots)."""
    rec = _PublishSlots(
        txid, timestamp_us, topic, data, publisher_id, seq, origin_instance, origin_group,
        origin_txid, correlation_id, expiration_s,
    )  # fmt: skip
    rec.__class__ = PublishRecord  # type: ignore[assignment]
    return rec  # type: ignore[return-value]


def _decode_publish(buf: bytes, start: int, stop: int) -> PublishRecord:
    _, txid, ts, pub, seq, otx, exp, lt, loi, log, lc = _PUBLISH.unpack_from(buf, start)
    a = start + _PUBLISH.size
    b = a + lt
    c = b + loi
    d = c + log
    end = d + lc
    if end > stop:
        raise CorruptRecord("publish record strings overrun the payload")
    rec = _PublishSlots(
        txid, ts, buf[a:b].decode(), buf[end:stop], pub, seq,
        buf[b:c].decode(), buf[c:d].decode(), otx, buf[d:end].decode(), exp,
    )  # fmt: skip
    rec.__class__ = PublishRecord  # type: ignore[assignment]
    return rec  # type: ignore[return-value]


def _decode_queue(buf: bytes, start: int, stop: int) -> QueueRecord:
    _, txid, ts, otx, action, lq, loi, log, lr, nb, nt = _QUEUE.unpack_from(buf, start)
    (queue, oi, og, reason), pos = _strings(buf, start + _QUEUE.size, (lq, loi, log, lr))
    end = pos + 16 * nb + 8 * nt
    delivered_us: tuple[int, ...] = ()
    deliveries: tuple[int, ...] = ()
    if end != stop:  # format 2: the delivery extension follows
        if stop - end != 1 + 10 * nt or buf[end] != QUEUE_RECORD_VERSION:
            raise CorruptRecord("queue record length does not match its counts")
        facts = struct.unpack_from(f"<{nt}Q{nt}H", buf, end + 1)
        delivered_us, deliveries = facts[:nt], facts[nt:]
    # Built into Bookmarks only when read: a link that skips a peer's record of 500 acks, or a
    # replay that takes them as pairs, builds none (1 us each).
    bookmarks = PackedBookmarks(buf[pos : pos + 16 * nb])
    txids = struct.unpack_from(f"<{nt}Q", buf, pos + 16 * nb)
    return QueueRecord(
        txid, ts, queue, QueueAction(action), bookmarks, txids, reason, oi, og, otx,
        delivered_us, deliveries,
    )  # fmt: skip


def _decode_transfer(buf: bytes, start: int, stop: int) -> TransferRecord:
    _, txid, ts, otx, bp, bs, proxied, *lengths = _TRANSFER.unpack_from(buf, start)
    (queue, src, dst, oi, og), end = _strings(buf, start + _TRANSFER.size, tuple(lengths))
    epoch = 0
    if end != stop:  # format 2: the ownership epoch follows (R2)
        if stop - end != _EPOCH.size or buf[end] != TRANSFER_RECORD_VERSION:
            raise CorruptRecord("transfer record length does not match its format")
        _, epoch = _EPOCH.unpack_from(buf, end)
    if proxied > 1:
        raise CorruptRecord("transfer record malformed")
    return TransferRecord(
        txid, ts, queue, Bookmark(bp, bs), src, dst, bool(proxied), oi, og, otx, epoch
    )


def _decode_at(buf: bytes, start: int, stop: int) -> Record:
    try:
        kind = buf[start]
        if kind == RecordKind.PUBLISH:
            return _decode_publish(buf, start, stop)
        if kind == RecordKind.QUEUE:
            return _decode_queue(buf, start, stop)
        if kind == RecordKind.TRANSFER:
            return _decode_transfer(buf, start, stop)
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise CorruptRecord(f"malformed record payload: {exc}") from None
    raise CorruptRecord(f"unknown record kind {kind}")


def decode_payload(payload: bytes) -> Record:
    """Decode one payload whose CRC already matched; malformed content is CorruptRecord."""
    return _decode_at(payload, 0, len(payload))


def peek_payload(buf: bytes | memoryview, start: int) -> tuple[int, int, int, int, int]:
    """(kind, txid, timestamp_us, publisher_id, seq) of a checked payload, without decoding it.

    publisher_id and seq are 0 for records other than publishes.
    """
    kind, txid, ts = _PREFIX.unpack_from(buf, start)
    if kind == RecordKind.PUBLISH:
        _, _, _, pub, seq = _PUBLISH.unpack_from(buf, start)[:5]
        return kind, txid, ts, pub, seq
    return kind, txid, ts, 0, 0


def frame_length(buf: bytes | memoryview, offset: int, end: int) -> int:
    """Payload length of the complete, checksummed frame at `offset`; -1 if it needs more bytes.

    Raises CorruptRecord (with `offset`) for a bad magic, length or checksum.
    """
    if end - offset < HEADER_SIZE_BYTES:
        seen = min(end - offset, len(_MAGIC_BYTES))
        if bytes(buf[offset : offset + seen]) != _MAGIC_BYTES[:seen]:
            raise CorruptRecord("bad frame magic in a partial header", offset=offset)
        return -1
    magic, crc, length = HEADER.unpack_from(buf, offset)
    assert isinstance(length, int)
    if magic != MAGIC:
        raise CorruptRecord(f"bad frame magic {magic:#010x}", offset=offset)
    if length == 0 or length > MAX_PAYLOAD_BYTES:
        raise CorruptRecord(f"bad frame length {length}", offset=offset)
    stop = offset + HEADER_SIZE_BYTES + length
    if stop > end:
        return -1
    if _crc_value(bytes(buf[offset + 8 : stop])) != crc:
        raise CorruptRecord("frame checksum mismatch", offset=offset)
    return length


_NAME_CACHE_ENTRIES = 4096
_name_cache: dict[bytes, tuple[str, str, str]] = {}


PublishHead = tuple[int, int, str, int, int, int]
"""(txid, timestamp_us, topic, publisher_id, seq, expiration_s) of a publish: what queue
recovery reads of it (`decode_heads`)."""


def decode(
    buf: bytes,
    offset: int = 0,
    end: int | None = None,
    limit: int | None = None,
    frames: dict[int, bytes] | None = None,
) -> tuple[list[Record], int]:
    """Decode complete frames from `offset` (at most `limit`); return them and the offset reached.

    The offset reached stops before an incomplete frame at the end. Damage raises CorruptRecord
    whose `offset` is the damaged frame's offset in `buf`. With `frames`, each record's frame
    is put there by txid as it is decoded (a link ships publishes as read).
    """
    return _decode(buf, offset, end, limit, heads=False, frames=frames)  # type: ignore[return-value]


def decode_heads(
    buf: bytes, offset: int = 0, end: int | None = None, limit: int | None = None
) -> tuple[list[Record | PublishHead], int]:
    """`decode`, with each publish as its `PublishHead`: checked as `decode` checks it, but
    neither its data copied nor a record built (~a third of the cost, for queue recovery)."""
    return _decode(buf, offset, end, limit, heads=True)


def _decode(
    buf: bytes,
    offset: int,
    end: int | None,
    limit: int | None,
    *,
    heads: bool,
    frames: dict[int, bytes] | None = None,
) -> tuple[list[Record | PublishHead], int]:
    stop = len(buf) if end is None else end
    records: list[Record | PublishHead] = []
    append = records.append
    unpack_header = HEADER.unpack_from
    unpack_publish = _PUBLISH.unpack_from
    name_cache = _name_cache
    kind_publish = _KIND_PUBLISH  # an int: comparing with the IntEnum member costs twice as much
    remaining = -1 if limit is None else limit
    while stop - offset >= HEADER_SIZE_BYTES and remaining != 0:
        remaining -= 1
        magic, crc, length = unpack_header(buf, offset)
        start = offset + HEADER_SIZE_BYTES
        if magic != MAGIC or length == 0 or length > MAX_PAYLOAD_BYTES:
            frame_length(buf, offset, stop)  # raises with the precise reason
        if start + length > stop:
            return records, offset
        stop_at = start + length
        if _crc_value(buf[offset + 8 : stop_at]) != crc:
            raise CorruptRecord("frame checksum mismatch", offset=offset)
        try:
            if buf[start] == kind_publish and length >= _PUBLISH.size:
                # The replay hot path, inlined: _decode_publish without two calls per record.
                _, txid, ts, pub, seq, otx, exp, lt, loi, log, lc = unpack_publish(buf, start)
                a = start + _PUBLISH.size
                b = a + lt
                c = b + loi
                d = c + log
                e = d + lc
                if e > stop_at:
                    raise CorruptRecord("publish record strings overrun the payload")
                # Topic and origin repeat from record to record: decode each distinct one once.
                # The key starts at the string lengths: ("ab", "") and ("a", "b") must differ.
                key = buf[a - 8 : d]
                names = name_cache.get(key)
                if names is None:
                    names = (buf[a:b].decode(), buf[b:c].decode(), buf[c:d].decode())
                    if len(name_cache) >= _NAME_CACHE_ENTRIES:
                        name_cache.clear()
                    name_cache[key] = names
                if heads:
                    if lc:
                        buf[d:e].decode()  # checked as a record's correlation id would be
                    append((txid, ts, names[0], pub, seq, exp))
                    offset = stop_at
                    continue
                rec = _PublishSlots(
                    txid, ts, names[0], buf[e:stop_at], pub, seq, names[1], names[2], otx,
                    buf[d:e].decode() if lc else "", exp,
                )  # fmt: skip
                rec.__class__ = PublishRecord  # type: ignore[assignment]
                append(rec)  # type: ignore[arg-type]
                if frames is not None:
                    frames[txid] = buf[offset:stop_at]
            elif buf[start] in CONTROL_KINDS:
                decode_control(buf[start:stop_at])
                remaining += 1  # not a record: does not count against the limit
            else:
                record = _decode_at(buf, start, stop_at)
                append(record)
                if frames is not None:
                    frames[record.txid] = buf[offset:stop_at]
        except UnicodeDecodeError as exc:
            raise CorruptRecord(f"malformed record payload: {exc}", offset=offset) from None
        except CorruptRecord as exc:
            raise CorruptRecord(exc.message, offset=offset) from None
        offset = stop_at
    if offset < stop and remaining != 0:
        frame_length(buf, offset, stop)  # a partial header must at least start with the magic
    return records, offset


# The frame header and a publish's fixed fields, unpacked in one call (every kind starts with
# kind and txid; the other fields mean something for publishes only).
_HEAD_PUBLISH = struct.Struct("<III" + _PUBLISH.format.lstrip("<"))
HEAD_PUBLISH = _HEAD_PUBLISH
PUBLISH_FIXED_BYTES = _PUBLISH.size
KIND_PUBLISH = _KIND_PUBLISH
crc_value = _crc_value
# A frame's length field and the fields every record starts with (kind, txid, timestamp_us).
_LENGTH_PREFIX = struct.Struct("<IBQQ")
_RESTAMPED_FROM = HEADER_SIZE_BYTES + _PREFIX.size  # where a frame's bytes stay as they were


def restamp(frame: bytes, offset: int, length: int, txid: int, timestamp_us: int) -> bytes:
    """The checked frame at `offset` (payload `length` bytes) with its txid and timestamp
    replaced and its CRC computed again: what `encode` makes of the same record restamped,
    without decoding it (a replicated record appended under the receiver's txid)."""
    body = _LENGTH_PREFIX.pack(length, frame[offset + HEADER_SIZE_BYTES], txid, timestamp_us)
    body += frame[offset + _RESTAMPED_FROM : offset + HEADER_SIZE_BYTES + length]
    return _MAGIC_CRC.pack(MAGIC, _crc_value(body)) + body


def restamp_publishes(
    buf: bytes,
    offsets: list[int],
    heads: Sequence[tuple[int, ...]],
    indices: Iterable[int],
    first_txid: int,
    min_timestamp_us: int,
) -> tuple[list[bytes], list[int]]:
    """`restamp` of the checked publish frames `indices` (their `offsets` in `buf` and
    `heads` as `HEAD_PUBLISH` unpacks them), under txids from `first_txid` and timestamps
    raised to at least the one before: the frames and their timestamps. The receiver's append
    of a peer's batch: one loop, inlined.

    The CRC is computed again over the frame as restamped, not updated from the checked one
    (CRC32C is affine, so it could be: see docs/design/journal.md): one hardware CRC of a
    kilobyte costs less here than the Python steps the update takes."""
    pack_prefix, pack_magic_crc, crc = _LENGTH_PREFIX.pack, _MAGIC_CRC.pack, _crc_value
    kind, kept_from, header = _KIND_PUBLISH, _RESTAMPED_FROM, HEADER_SIZE_BYTES
    frames: list[bytes] = []
    add_frame = frames.append
    timestamps: list[int] = []
    add_timestamp = timestamps.append
    txid, last_timestamp_us = first_txid, min_timestamp_us
    for index in indices:
        head = heads[index]
        offset, length = offsets[index], head[2]
        timestamp_us = head[5]
        if timestamp_us < last_timestamp_us:
            timestamp_us = last_timestamp_us
        body = pack_prefix(length, kind, txid, timestamp_us)
        body += buf[offset + kept_from : offset + header + length]
        add_frame(pack_magic_crc(MAGIC, crc(body)) + body)
        add_timestamp(timestamp_us)
        last_timestamp_us = timestamp_us
        txid += 1
    return frames, timestamps


def decode_publishes(
    buf: bytes, offset: int, end: int, from_txid: int, upper_txid: int, limit: int,
    out: list[PublishRecord], max_bytes: int = 1 << 62,
) -> tuple[int, int, int]:  # fmt: skip
    """Append the publishes of txids from_txid..upper_txid among the complete frames from
    `offset`: at most `limit` of them, and none after the one whose data brings their total
    to `max_bytes`. Return (offset reached, next txid to read, max_bytes less their data).

    What a record cache needs from a range of the log: other records and those before
    from_txid are checked (magic, length, CRC) but never built. The offset reached stops before
    an incomplete frame, after the last publish allowed, or at the first frame past `upper_txid`;
    damage raises CorruptRecord whose `offset` is the damaged frame's offset in `buf`.

    One CRC call per frame over a copy of it: a google_crc32c call costs ~0.6 us whatever its
    length, more than copying a kilobyte again.
    """
    unpack_head = _HEAD_PUBLISH.unpack_from
    head_size = _HEAD_PUBLISH.size
    name_cache = _name_cache
    fixed = _PUBLISH.size
    next_txid = from_txid
    while end - offset >= HEADER_SIZE_BYTES and limit > 0 and max_bytes > 0:
        if end - offset >= head_size:
            magic, crc, length, kind, txid, ts, pub, seq, otx, exp, lt, loi, log, lc = unpack_head(
                buf, offset
            )
        else:  # a short frame at the end of buf, or an incomplete one
            magic, crc, length = HEADER.unpack_from(buf, offset)
            kind = txid = -1
        start = offset + HEADER_SIZE_BYTES
        if magic != MAGIC or length == 0 or length > MAX_PAYLOAD_BYTES:
            frame_length(buf, offset, end)  # raises with the precise reason
        stop_at = start + length
        if stop_at > end or txid > upper_txid:
            break
        if _crc_value(buf[offset + 8 : stop_at]) != crc:
            raise CorruptRecord("frame checksum mismatch", offset=offset)
        if length < _PREFIX.size:
            raise CorruptRecord("malformed record payload: too short", offset=offset)
        if txid < 0:
            kind, txid, ts = _PREFIX.unpack_from(buf, start)
            if txid > upper_txid:
                break
        if kind in CONTROL_KINDS:
            try:
                decode_control(buf[start:stop_at])
            except CorruptRecord as exc:
                raise CorruptRecord(exc.message, offset=offset) from None
            offset = stop_at
            continue
        if kind == _KIND_PUBLISH and txid >= from_txid:
            if length < fixed:
                raise CorruptRecord("malformed record payload: short publish", offset=offset)
            a = start + fixed
            b = a + lt
            c = b + loi
            d = c + log
            e = d + lc
            if e > stop_at:
                raise CorruptRecord("publish record strings overrun the payload", offset=offset)
            key = buf[a - 8 : d]
            names = name_cache.get(key)
            try:
                if names is None:
                    names = (buf[a:b].decode(), buf[b:c].decode(), buf[c:d].decode())
                    if len(name_cache) >= _NAME_CACHE_ENTRIES:
                        name_cache.clear()
                    name_cache[key] = names
                corr = buf[d:e].decode() if lc else ""
            except UnicodeDecodeError as exc:
                raise CorruptRecord(f"malformed record payload: {exc}", offset=offset) from None
            rec = _PublishSlots(
                txid, ts, names[0], buf[e:stop_at], pub, seq, names[1], names[2], otx, corr, exp
            )  # fmt: skip
            rec.__class__ = PublishRecord  # type: ignore[assignment]
            out.append(rec)  # type: ignore[arg-type]
            limit -= 1
            max_bytes -= stop_at - e
        offset = stop_at
        next_txid = txid + 1
    if offset < end and limit > 0 and max_bytes > 0 and end - offset < HEADER_SIZE_BYTES:
        frame_length(buf, offset, end)  # a partial header must at least start with the magic
    return offset, next_txid, max_bytes


def check_payload(payload: bytes) -> Record | Control:
    """Decode one payload whose CRC already matched: a record or a control frame."""
    if payload and payload[0] in CONTROL_KINDS:
        return decode_control(payload)
    return decode_payload(payload)


def find_next_frame(
    buf: bytes | memoryview, start: int, end: int, *, commit_only: bool = False
) -> int | None:
    """Offset of the first complete, valid frame (with `commit_only`, commit marker) that
    begins after `start`, or None."""
    view = memoryview(buf)
    chunk_size_bytes = 1 << 20
    pos = start + 1
    while pos < end:
        chunk_end = min(end, pos + chunk_size_bytes + len(_MAGIC_BYTES) - 1)
        hit = bytes(view[pos:chunk_end]).find(_MAGIC_BYTES)
        if hit < 0:
            if chunk_end >= end:
                return None
            pos = chunk_end - len(_MAGIC_BYTES) + 1
            continue
        pos += hit
        try:
            length = frame_length(view, pos, end)
            if length > 0:
                start = pos + HEADER_SIZE_BYTES
                found = check_payload(bytes(view[start : start + length]))
                if not commit_only or (isinstance(found, Control) and found.kind == COMMIT_KIND):
                    return pos
                pos = start + length  # a valid frame, not the one wanted: look after it
                continue
        except CorruptRecord:
            pass
        pos += 1
    return None
