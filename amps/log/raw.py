"""Raw reads of publish records for bookmark replay: fields as bytes, no record objects. [io]

`Journal.read` decodes every record into a `PublishRecord` (strings decoded, an object per
record). A replay only needs a few fields of each publish, and sends the topic, correlation id
and data on as bytes, so `RawReader.read` returns plain tuples of them instead. Frames are
checked exactly as `codec.decode` checks them (magic, length, CRC32C); damage raises
`CorruptRecord` naming the segment and offset, as `SegmentReader` does.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from typing import TYPE_CHECKING

import google_crc32c

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.reader import SegmentFiles, ends_before, located
from amps.log.records import RecordKind

if TYPE_CHECKING:
    from amps.log.journal import Journal
    from amps.log.reader import Segment

__all__ = ["RawPublish", "RawReader"]

# (txid, timestamp_us, publisher_id, seq, expiration_s, topic, correlation_id, data,
#  origin_instance, origin_txid)
RawPublish = tuple[int, int, int, int, int, bytes, bytes, bytes, bytes, int]

# The frame header followed by the fixed part of a publish payload, unpacked in one call. The
# publish layout is codec's (a unit test checks that raw reads agree with Journal.read).
_PUBLISH = codec._PUBLISH  # shared on purpose, not copied
_HEAD = struct.Struct("<" + codec.HEADER.format.lstrip("<") + _PUBLISH.format.lstrip("<"))
_HEADER_SIZE = codec.HEADER_SIZE_BYTES
_MAGIC = codec.MAGIC
_MAX_PAYLOAD = codec.MAX_PAYLOAD_BYTES
_KIND_PUBLISH = int(RecordKind.PUBLISH)
_OTHER_KINDS = frozenset(int(k) for k in RecordKind if k != RecordKind.PUBLISH)
_crc = google_crc32c.value
_crc_extend = google_crc32c.extend

MIN_READ_BYTES = 256 * 1024
MAX_OPEN_FILES = 4


class RawReader:
    """Reads one journal's durable publishes; owns its own read-only descriptors (close it)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.next_txid = 0  # the txid after the last record read (where the next read starts)
        self._files = SegmentFiles(journal.segment_path, MAX_OPEN_FILES)
        self._file = self._files.file

    def close(self) -> None:
        self._files.close()

    def read(
        self, from_txid: int, upper_txid: int, max_records: int
    ) -> tuple[list[RawPublish], int]:
        """The publishes among the durable records from_txid..upper_txid (at most max_records
        records looked at), and the txid after the last record looked at.

        Records of other kinds are skipped. The returned txid equals `from_txid` when nothing
        was readable (nothing durable there).
        """
        journal = self.journal
        from_txid = max(from_txid, journal.first_txid)
        upper_txid = min(upper_txid, journal.durable_txid, from_txid + max_records - 1)
        out: list[RawPublish] = []
        segments = journal.segments()
        firsts = [s.first_txid for s in segments]
        i = max(0, bisect_right(firsts, from_txid) - 1)
        txid = from_txid
        while txid <= upper_txid and i < len(segments):
            segment = segments[i]
            if txid > segment.last_txid:
                i += 1
                continue
            txid = self._read_segment(segment, txid, min(upper_txid, segment.last_txid), out)
        self.next_txid = txid
        return out, txid

    def _read_segment(self, segment: Segment, from_txid: int, last_txid: int,
                      out: list[RawPublish]) -> int:  # fmt: skip
        """Append the publishes from_txid..last_txid of one segment; the txid after them."""
        j = bisect_right(segment.index_txids, from_txid) - 1
        assert j >= 0, (segment.first_txid, from_txid)
        offset = segment.index_offsets[j]
        average = segment.size_bytes // max(1, segment.record_count)
        size = max(MIN_READ_BYTES, (last_txid - segment.index_txids[j] + 2) * average)
        pread = self._file(segment.first_txid).pread
        txid = from_txid
        while txid <= last_txid:
            chunk = pread(size, offset)
            try:
                consumed, txid = _scan(chunk, txid, last_txid, out)
            except CorruptRecord as exc:
                raise located(exc, segment.first_txid, offset) from None
            if consumed == 0:
                if len(chunk) < size:
                    raise ends_before(segment.first_txid, last_txid, offset)
                size *= 2  # one frame longer than the read
                continue
            offset += consumed
        return txid


def _scan(buf: bytes, from_txid: int, last_txid: int, out: list[RawPublish]) -> tuple[int, int]:
    """Decode the complete frames of `buf` up to last_txid, keeping publishes from from_txid on.

    Returns (bytes consumed, the txid after the last record decoded, or from_txid if none).
    """
    end = len(buf)
    offset = 0
    seen = from_txid - 1
    append = out.append
    head_size = _HEAD.size
    publish_size = _PUBLISH.size
    unpack_head = _HEAD.unpack_from
    crc_of = _crc
    crc_extend = _crc_extend
    while seen < last_txid and end - offset >= _HEADER_SIZE:
        if end - offset >= head_size:
            # Every kind starts with kind and txid; the other fields mean something for publishes.
            magic, crc, length, kind, txid, ts, pub, seq, otx, exp, lt, loi, log, lc = unpack_head(
                buf, offset
            )
        else:  # only a short record (or an incomplete frame) fits here
            magic, crc, length = codec.HEADER.unpack_from(buf, offset)
            kind = txid = otx = loi = -1
        if magic != _MAGIC or length == 0 or length > _MAX_PAYLOAD:
            codec.frame_length(buf, offset, end)  # raises with the precise reason
        start = offset + _HEADER_SIZE
        stop = start + length
        if stop > end:
            break
        if kind == _KIND_PUBLISH and length >= publish_size:
            # The hot path. The CRC covers the length field and the payload: checked over the
            # head and the data slices, so the data is copied once.
            a = start + publish_size
            b = a + lt
            d = b + loi + log
            e = d + lc
            if e > stop:
                raise CorruptRecord("publish record strings overrun the payload", offset=offset)
            head = buf[offset + 8 : e]
            data = buf[e:stop]
            if crc_extend(crc_of(head), data) != crc:
                raise CorruptRecord("frame checksum mismatch", offset=offset)
            offset = stop
            seen = txid
            if txid >= from_txid:
                origin = buf[b : b + loi]
                append(
                    (txid, ts, pub, seq, exp, buf[a:b], buf[d:e] if lc else b"", data, origin, otx)
                )
            continue
        if crc_of(buf[offset + 8 : stop]) != crc:
            raise CorruptRecord("frame checksum mismatch", offset=offset)
        # Other kinds are skipped (every kind starts with kind and txid); a control frame, or a
        # short, malformed or unknown record, is decoded the ordinary way (codec checks it).
        if kind in _OTHER_KINDS:
            seen = txid
        else:  # a control frame (no txid), or a record to check the ordinary way
            decoded = codec.decode(buf, offset, stop)[0]
            if decoded:
                seen = decoded[0].txid
        offset = stop
    if offset == 0:
        return 0, from_txid
    return offset, max(seen + 1, from_txid)
