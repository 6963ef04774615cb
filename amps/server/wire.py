"""Hand-written protobuf encoding of what the server sends most: deliveries, and frames.

A `ServerFrame` is `repeated ServerMessage messages = 1`, so its encoding is the concatenation
of one *entry* per message: `0x0A | varint(len(m)) | m`, where `m` is an encoded ServerMessage.
The Outbox queues entries (bytes) and a frame is `b"".join(entries)`: no protobuf object per
message and no second copy by `ServerFrame(messages=...)`.

`delivery_entry` encodes `ServerMessage(delivery=Delivery(...))` directly, byte-for-byte what
`SerializeToString` produces (fields in number order, proto3 defaults left out; an empty
repeated string is still written). `tests/unit/server/test_wire.py` checks the equality.
Rarer messages (acks, group markers, heartbeats) go through `entry(message.SerializeToString())`.
"""

from __future__ import annotations

from amps.v1 import client_pb2 as pb

__all__ = [
    "DeliveryEncoder",
    "QueueDeliveryEncoder",
    "delivery_body",
    "delivery_entry",
    "encoder_for",
    "entry",
    "message_entry",
    "persisted_ack_entry",
    "string_field",
    "sub_ids_field",
    "varint",
]

# Field keys (field number << 3 | wire type): 0 = varint, 2 = length-delimited.
_FRAME_MESSAGE = b"\x0a"  # ServerFrame.messages = 1
_DELIVERY = b"\x12"  # ServerMessage.delivery = 2
_TOPIC = b"\x0a"
_DATA = b"\x12"
_BOOKMARK = b"\x1a"
_SUB_ID = b"\x22"
_TXID = b"\x28"
_TIMESTAMP = b"\x30"
_LEASE = b"\x38"
_COUNT = b"\x40"
_QUEUE_TRUE = b"\x48\x01"
_CORRELATION = b"\x52"
_QUERY_ID = b"\x5a"
_ORIGIN_INSTANCE = b"\x62"
_ORIGIN_TXID = b"\x68"


def _table(prefix: bytes, high_bit: int) -> list[bytes]:
    """prefix + (v & 0x7F | 0x80, v >> 7 | high_bit) for every v < 2**14, as slices of one
    buffer filled by strided copies: the three tables import in ~7 ms less than with a bytes()
    call per entry (measured: the module's import 20 -> 14 ms)."""
    width = len(prefix) + 2
    raw = bytearray(width << 14)
    for i, byte in enumerate(prefix):
        raw[i::width] = bytes((byte,)) * (1 << 14)
    raw[width - 2 :: width] = bytes(range(0x80, 0x100)) * 128
    raw[width - 1 :: width] = b"".join(bytes((h | high_bit,)) * 128 for h in range(128))
    buf = bytes(raw)
    return [buf[i : i + width] for i in range(0, width << 14, width)]


# varint(v) for v < 2**14 (one or two bytes), and the two-byte "more follows" form of the low
# 14 bits of a larger value: a varint is then a few table look-ups instead of a loop per byte.
_SMALL = [bytes((v,)) for v in range(0x80)] + _table(b"", 0)[0x80:]
_MORE = _table(b"", 0x80)
_M14 = 0x3FFF


def _varint_slow(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: ten bytes, two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Base-128 varint of an unsigned value; a negative one as protobuf encodes int64."""
    if 0 <= value < 1 << 14:
        return _SMALL[value]
    if 0 < value < 1 << 28:
        return _MORE[value & _M14] + _SMALL[value >> 14]
    if 0 < value < 1 << 42:
        return _MORE[value & _M14] + _MORE[(value >> 14) & _M14] + _SMALL[value >> 28]
    if 0 < value < 1 << 56:  # microsecond timestamps
        return (
            _MORE[value & _M14]
            + _MORE[(value >> 14) & _M14]
            + _MORE[(value >> 28) & _M14]
            + _SMALL[value >> 42]
        )
    return _varint_slow(value)


def string_field(key: bytes, value: bytes) -> bytes:
    """One length-delimited field; empty for an empty value (the proto3 default)."""
    if not value:
        return b""
    return key + varint(len(value)) + value


def sub_ids_field(sub_ids: list[str] | tuple[str, ...]) -> bytes:
    """Delivery.sub_ids (field 4, repeated: empty strings are written too)."""
    parts = []
    for sub_id in sub_ids:
        raw = sub_id.encode()
        parts.append(_SUB_ID + varint(len(raw)) + raw)
    return b"".join(parts)


def entry(message: bytes) -> bytes:
    """A frame entry for an encoded ServerMessage."""
    return _FRAME_MESSAGE + varint(len(message)) + message


def message_entry(message: pb.ServerMessage) -> bytes:
    """A frame entry for any ServerMessage (acks, group markers, heartbeats)."""
    return entry(message.SerializeToString())


# Ack.ack_type = 2 "persisted", Ack.status = 3 "success", then Ack.seq = 5 (a varint).
_PERSISTED_SUCCESS = b"\x12\x09persisted\x1a\x07success"
_ACK = b"\x0a"  # ServerMessage.ack = 1
_SEQ = b"\x28"


def persisted_ack_entry(seq: int) -> bytes:
    """The frame entry of `ServerMessage(ack=Ack(ack_type="persisted", status="success",
    seq=seq))`, encoded directly: one per publisher per commit, in series with its ack."""
    ack = _PERSISTED_SUCCESS + _SEQ + varint(seq) if seq else _PERSISTED_SUCCESS
    message = _ACK + _SMALL[len(ack)] + ack  # at most 31 bytes: a one-byte length
    return _FRAME_MESSAGE + _SMALL[len(message)] + message


def delivery_body(
    *,
    topic: str = "",
    data: bytes = b"",
    bookmark: str = "",
    sub_ids: list[str] | tuple[str, ...] = (),
    txid: int = 0,
    timestamp_us: int = 0,
    lease_deadline_us: int = 0,
    delivery_count: int = 0,
    queue: bool = False,
    correlation_id: str = "",
    query_id: str = "",
    origin_instance: str = "",
    origin_txid: int = 0,
) -> bytes:
    """The encoding of a Delivery (every field; the general, slower form)."""
    return b"".join(
        (
            string_field(_TOPIC, topic.encode()),
            string_field(_DATA, data),
            string_field(_BOOKMARK, bookmark.encode()),
            sub_ids_field(sub_ids),
            _TXID + varint(txid) if txid else b"",
            _TIMESTAMP + varint(timestamp_us) if timestamp_us else b"",
            _LEASE + varint(lease_deadline_us) if lease_deadline_us else b"",
            _COUNT + varint(delivery_count) if delivery_count else b"",
            _QUEUE_TRUE if queue else b"",
            string_field(_CORRELATION, correlation_id.encode()),
            string_field(_QUERY_ID, query_id.encode()),
            string_field(_ORIGIN_INSTANCE, origin_instance.encode()),
            _ORIGIN_TXID + varint(origin_txid) if origin_txid else b"",
        )
    )


def delivery_entry(**fields: object) -> bytes:
    """A frame entry for ServerMessage(delivery=Delivery(**fields))."""
    body = delivery_body(**fields)  # type: ignore[arg-type]
    message = _DELIVERY + varint(len(body)) + body
    return entry(message)


# Per-length field keys: b"\x12" + varint(n) (data) and b"\x1a" + varint(n) (bookmark).
_DATA_KEYS = [b""] + [_DATA + v for v in _SMALL[1:0x80]] + _table(_DATA, 0)[0x80:]
_BOOKMARK_KEYS = [_BOOKMARK + v for v in _SMALL[:256]]


class DeliveryEncoder:
    """Frame entries for deliveries of one topic to one set of sub_ids (replay, fan-out).

    The topic and sub_ids fields are encoded once; per message only the bookmark, data, txid,
    timestamp and correlation id are. Bookmarks are `publisher_id|seq|` as the record's own
    `bookmark_of`; the publisher part is cached. The entry is one join of small pieces whose
    length is added up as they are chosen: the data is copied once.
    """

    __slots__ = ("_publishers", "_size", "_subs", "_topic")

    def __init__(self, topic: bytes, sub_ids: list[str] | tuple[str, ...]) -> None:
        # Fields go in number order: topic (1), data (2), bookmark (3), sub_ids (4), txid (5),
        # timestamp_us (6), correlation_id (10).
        self._topic = string_field(_TOPIC, topic)
        self._subs = sub_ids_field(sub_ids)
        self._size = len(self._topic) + len(self._subs)
        self._publishers: dict[int, bytes] = {}

    def encode(
        self, data: bytes, publisher_id: int, seq: int, txid: int, timestamp_us: int,
        correlation_id: bytes,
    ) -> bytes:  # fmt: skip
        """One frame entry: ServerMessage(delivery=Delivery(topic, data, bookmark, ...))."""
        parts: list[bytes] = []
        self.encode_into(parts, data, publisher_id, seq, txid, timestamp_us, correlation_id)
        return b"".join(parts)

    def encode_into(
        self, parts: list[bytes], data: bytes, publisher_id: int, seq: int, txid: int,
        timestamp_us: int, correlation_id: bytes, origin: bytes = b"", origin_txid: int = 0,
    ) -> int:  # fmt: skip
        """Append the pieces of one frame entry to `parts`; returns the entry's size in bytes.

        Joining the pieces of many entries at once (replay) copies each message's data once.
        `origin` and `origin_txid` (fields 12 and 13) are written for subscriptions that ask.
        """
        prefix = self._publishers.get(publisher_id)
        if prefix is None:
            prefix = self._publishers[publisher_id] = b"%d|" % publisher_id
        seq_part = b"%d|" % seq
        n = len(data)
        bm = len(prefix) + len(seq_part)
        data_key = _DATA_KEYS[n] if n < 16384 else _DATA + varint(n)
        bm_key = _BOOKMARK_KEYS[bm] if bm < 256 else _BOOKMARK + varint(bm)
        size = self._size + len(data_key) + n + len(bm_key) + bm
        if txid:
            txid_key = _TXID
            txid_value = _SMALL[txid] if txid < 16384 else varint(txid)
            size += 1 + len(txid_value)
        else:
            txid_key = txid_value = b""
        if 1 << 42 <= timestamp_us < 1 << 56:  # microseconds since 1970: the usual case
            high = _SMALL[timestamp_us >> 42]
            tail: tuple[bytes, ...] = (
                _TIMESTAMP,
                _MORE[timestamp_us & _M14],
                _MORE[(timestamp_us >> 14) & _M14],
                _MORE[(timestamp_us >> 28) & _M14],
                high,
            )
            size += 7 + len(high)
        elif timestamp_us:
            ts_value = varint(timestamp_us)
            tail = (_TIMESTAMP, ts_value)
            size += 1 + len(ts_value)
        else:
            tail = ()
        if correlation_id:
            corr_size = varint(len(correlation_id))
            tail += (_CORRELATION, corr_size, correlation_id)
            size += 1 + len(corr_size) + len(correlation_id)
        if origin:
            origin_size = varint(len(origin))
            tail += (_ORIGIN_INSTANCE, origin_size, origin)
            size += 1 + len(origin_size) + len(origin)
        if origin_txid:
            origin_value = varint(origin_txid)
            tail += (_ORIGIN_TXID, origin_value)
            size += 1 + len(origin_value)
        message_header = _DELIVERY + (_SMALL[size] if size < 16384 else varint(size))
        size += len(message_header)
        entry_header = _FRAME_MESSAGE + (_SMALL[size] if size < 16384 else varint(size))
        parts += (
            entry_header, message_header, self._topic, data_key, data, bm_key, prefix, seq_part,
            self._subs, txid_key, txid_value,
        )  # fmt: skip
        parts += tail
        return size + len(entry_header)


# Per-encoder cache bounds (a queue has one encoder per subscription, up to 4,096): a few KB
# each. Heads repeat while message sizes do; bookmark heads while publishers do.
_QUEUE_HEADS_MAX = 64
_QUEUE_BOOKMARKS_MAX = 256


class QueueDeliveryEncoder:
    """Frame entries for queue deliveries of one queue to one sub_id.

    Same bytes as `delivery_entry(topic=queue, sub_ids=(sub_id,), queue=True, ...)` with the
    lease deadline and delivery count (fields 7, 8, 9). Per message, only what changes from one
    message to the next is encoded; the rest is cached:

    - the topic and sub_id fields, once;
    - the bookmark field's key, length and publisher part, per (publisher, digits of seq);
    - the lease and count fields of the last deadline and count (one engine step leases many
      messages until the same deadline, nearly all for the first time);
    - txid and timestamp: a varint of v >= 2**14 is the two bytes of v's low 14 bits followed
      by varint(v >> 14), which changes every 16,384 txids or microseconds;
    - the two headers and the data field's key, per (message size, data size).

    The entry is one join of the pieces: the data is copied once, no piece is concatenated.
    """

    __slots__ = (
        "_bookmarks", "_count", "_count_field", "_heads", "_lease", "_lease_field", "_size",
        "_subs_txid", "_topic", "_ts_high", "_ts_key", "_ts_size", "_txid_high", "_txid_key",
        "_txid_size",
    )  # fmt: skip

    def __init__(self, topic: bytes, sub_id: str) -> None:
        self._topic = string_field(_TOPIC, topic)
        # Fields in number order: topic (1), data (2), bookmark (3), sub_ids (4), txid (5),
        # timestamp_us (6), lease (7), count (8), queue (9), correlation_id (10). The txid key
        # is kept after the sub_ids field, and dropped again for a txid of 0 (never a publish).
        self._subs_txid = sub_ids_field((sub_id,)) + _TXID
        self._bookmarks: dict[int, bytes] = {}
        self._heads: dict[int, bytes] = {}
        self._lease = 0
        self._lease_field = b""
        self._count = 0
        self._count_field = _QUEUE_TRUE  # count field (none for 0) + the queue flag
        # The cached fields' sizes with the topic's and the sub_id's (the sizes of the others
        # are added per message).
        self._size = len(self._topic) + len(self._subs_txid) + len(_QUEUE_TRUE)
        self._txid_key = self._ts_key = -1
        self._txid_high = self._ts_high = b""
        self._txid_size = self._ts_size = 0  # the fields' sizes but the txid key's

    def encode(
        self, data: bytes, publisher_id: int, seq: int, txid: int, timestamp_us: int,
        lease_deadline_us: int, delivery_count: int, correlation_id: bytes,
    ) -> bytes:  # fmt: skip
        """One frame entry: ServerMessage(delivery=Delivery(..., queue=True))."""
        seq_part = b"%d|" % seq
        # The bookmark field up to its seq part: key, length, publisher part.
        key = publisher_id << 5 | len(seq_part)
        bookmark = self._bookmarks.get(key)
        if bookmark is None:
            if len(self._bookmarks) >= _QUEUE_BOOKMARKS_MAX:
                self._bookmarks.clear()
            prefix = b"%d|" % publisher_id
            length = len(prefix) + len(seq_part)
            bookmark = self._bookmarks[key] = _BOOKMARK + varint(length) + prefix
        if lease_deadline_us != self._lease or delivery_count != self._count:
            self._size -= len(self._lease_field) + len(self._count_field)
            self._lease = lease_deadline_us
            self._lease_field = _LEASE + varint(lease_deadline_us) if lease_deadline_us else b""
            self._count = delivery_count
            self._count_field = (
                _COUNT + varint(delivery_count) + _QUEUE_TRUE if delivery_count else _QUEUE_TRUE
            )
            self._size += len(self._lease_field) + len(self._count_field)
        n = len(data)
        size = self._size + n + len(bookmark) + len(seq_part)
        subs_txid = self._subs_txid
        if txid >= 16384:
            high = txid >> 14
            if high != self._txid_key:
                self._txid_key = high
                self._txid_high = varint(high)
                self._txid_size = 2 + len(self._txid_high)
            txid_low = _MORE[txid & _M14]
            txid_high = self._txid_high
            size += self._txid_size
        elif txid:
            txid_low = _SMALL[txid]
            txid_high = b""
            size += len(txid_low)
        else:
            subs_txid = subs_txid[:-1]
            txid_low = txid_high = b""
            size -= 1
        if timestamp_us >= 16384:
            high = timestamp_us >> 14
            if high != self._ts_key:
                self._ts_key = high
                self._ts_high = varint(high)
                self._ts_size = 3 + len(self._ts_high)
            ts_key = _TIMESTAMP
            ts_low = _MORE[timestamp_us & _M14]
            ts_high = self._ts_high
            size += self._ts_size
        elif timestamp_us:
            ts_key = _TIMESTAMP
            ts_low = varint(timestamp_us)  # small, or negative: ten bytes
            ts_high = b""
            size += 1 + len(ts_low)
        else:
            ts_key = ts_low = ts_high = b""
        if correlation_id:
            corr = _CORRELATION + varint(len(correlation_id)) + correlation_id
            size += len(corr)
        else:
            corr = b""
        # The headers, the topic field and the data field's key (its size) before the data.
        head_key = size << 27 | n  # n < 2**26 (MAX_PAYLOAD_BYTES)
        head = self._heads.get(head_key)
        if head is None:
            if len(self._heads) >= _QUEUE_HEADS_MAX:
                self._heads.clear()
            data_key = _DATA + varint(n) if n else b""
            size += len(data_key)
            message = _DELIVERY + varint(size)
            head = self._heads[head_key] = (
                _FRAME_MESSAGE + varint(size + len(message)) + message + self._topic + data_key
            )
        return b"".join(
            (
                head, data, bookmark, seq_part, subs_txid, txid_low, txid_high, ts_key, ts_low,
                ts_high, self._lease_field, self._count_field, corr,
            )
        )  # fmt: skip


_ENCODERS_MAX = 4096
_encoders: dict[tuple[str, tuple[str, ...]], DeliveryEncoder] = {}


def encoder_for(topic: str, sub_ids: list[str] | tuple[str, ...]) -> DeliveryEncoder:
    """A shared DeliveryEncoder for (topic, sub_ids): live fan-out and queue deliveries."""
    key = (topic, tuple(sub_ids))
    encoder = _encoders.get(key)
    if encoder is None:
        if len(_encoders) >= _ENCODERS_MAX:
            _encoders.clear()
        encoder = _encoders[key] = DeliveryEncoder(topic.encode(), key[1])
    return encoder
