"""A peer's batch of log frames, checked as `codec.decode` checks them but not built into
records: the receiving side of replication appends the frames restamped and builds records only
for whoever wants them (live subscribers, queues, the record cache of a forwarding instance).
[core]

Building a record per publish cost the receiver about as much as decoding it, and most of a
catch-up is read by nobody while it happens. `scan` checks every frame (magic, length, CRC,
the publish's fields and strings) so that nothing built later can fail, and keeps per frame
only what appending needs: its offset and its fixed fields, as unpacked.

The sending side reads its journal the same way (`scan_log`): a link routes on the heads
(topic, origin) and ships the frames as read, in runs (`ReceivedFrames.runs`); it decoded
every record only to route it, which cost more than its epoch replay does per record.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import overload

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.codec import (
    HEADER_SIZE_BYTES,
    MAGIC,
    MAX_PAYLOAD_BYTES,
    PUBLISH_FIXED_BYTES,
    new_publish,
)
from amps.log.records import PublishRecord, Record

__all__ = [
    "ChosenFrames",
    "ReceivedFrames",
    "ReceivedRun",
    "one_publisher_run",
    "scan",
    "scan_log",
]

Head = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int]
"""A frame's header and a publish's fixed fields as unpacked: magic, crc, length, kind, txid,
timestamp_us, publisher_id, seq, origin_txid, expiration_s and the four string lengths."""

_KIND_PUBLISH = codec.KIND_PUBLISH
_LENGTH = itemgetter(2)
_PUBLISHER = itemgetter(6)
_SEQ = itemgetter(7)
_CORRELATION = itemgetter(13)
_NAME_CACHE_ENTRIES = 4096
_name_cache: dict[bytes, tuple[str, str, str]] = {}


class _BuiltOnDemand(Sequence[Record]):
    """A sequence of records built one at a time as asked (`_record`), equal to any sequence of
    the same records (a batch decoded, or built by hand)."""

    __slots__ = ()

    def _record(self, index: int) -> Record:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | Sequence[Record]:
        if isinstance(index, slice):
            return [self._record(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._record(index)

    def __iter__(self) -> Iterator[Record]:
        record = self._record
        for index in range(len(self)):
            yield record(index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]


class ReceivedFrames(_BuiltOnDemand):
    """The records of a received batch (`scan`) or of a read of the local journal (`scan_log`),
    in order, built on demand (`records[i]`).

    `offsets[i]` and `heads[i]` are frame i's offset in `data` and its fixed fields; `names[i]`
    its (topic, origin instance, origin group). `others` holds the records that are not
    publishes (queue and transfer records), decoded at once. `ends` maps each origin to (origin
    txid, txid) of its last record in the batch, and `increasing` says whether the txids
    strictly increase. `breaks` holds the indices of frames that do not follow the frame before
    them in `data` (a journal's control frames between them), in order, possibly repeated.
    """

    __slots__ = (
        "breaks",
        "correlation_ids",
        "data",
        "distinct_names",
        "ends",
        "heads",
        "increasing",
        "names",
        "offsets",
        "others",
    )

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offsets: list[int] = []
        self.heads: list[Head] = []
        self.names: list[tuple[str, str, str]] = []
        self.correlation_ids: dict[int, str] = {}
        self.others: dict[int, Record] = {}
        self.ends: dict[str, tuple[int, int]] = {}
        self.increasing = True
        self.distinct_names = 0  # how many distinct (topic, origin instance, origin group)
        self.breaks: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def _record(self, index: int) -> Record:
        other = self.others.get(index)
        if other is not None:
            return other
        head = self.heads[index]
        return self.publish(index, head[4], head[5])

    @property
    def only_publishes(self) -> bool:
        return not self.others

    @property
    def last_txid(self) -> int:
        """The txid of the last record (0 when empty)."""
        return self.heads[-1][4] if self.heads else 0

    def frame(self, index: int) -> bytes:
        """Frame `index`'s bytes as they are in `data`."""
        offset = self.offsets[index]
        return self.data[offset : offset + _size(self.heads[index])]

    def runs(self, count: int) -> list[memoryview]:
        """The first `count` frames' bytes, in order, as few views of `data` as they are
        contiguous: a journal's commit is one view (what a link ships as read, joined once)."""
        offsets, heads, view = self.offsets, self.heads, memoryview(self.data)
        out: list[memoryview] = []
        first = 0
        for index in sorted(set(self.breaks)):
            if first < index < count:
                out.append(view[offsets[first] : offsets[index - 1] + _size(heads[index - 1])])
                first = index
        if first < count:
            out.append(view[offsets[first] : offsets[count - 1] + _size(heads[count - 1])])
        return out

    def publish(self, index: int, txid: int, timestamp_us: int) -> PublishRecord:
        """Publish `index` as a record, under `txid` and `timestamp_us` (the receiver's own)."""
        head = self.heads[index]
        topic, origin_instance, origin_group = self.names[index]
        start = self.offsets[index] + HEADER_SIZE_BYTES
        strings = head[10] + head[11] + head[12] + head[13]
        return new_publish(
            txid, timestamp_us, topic,
            self.data[start + PUBLISH_FIXED_BYTES + strings : start + head[2]], head[6],
            head[7], origin_instance, origin_group, head[8],
            self.correlation_ids.get(index, ""), head[9],
        )  # fmt: skip

    def topic_totals(self, indices: Sequence[int]) -> dict[str, tuple[int, int]]:
        """Per topic, how many of the publishes `indices` and their data bytes."""
        heads, names = self.heads, self.names
        if len(indices) == len(heads) and self.distinct_names == 1 and not self.others:
            # The usual batch: one topic from one origin, every record new (no loop here).
            head = heads[0]
            fixed = PUBLISH_FIXED_BYTES + head[10] + head[11] + head[12]
            size = sum(map(_LENGTH, heads)) - sum(map(_CORRELATION, heads)) - fixed * len(heads)
            return {names[0][0]: (len(heads), size)}
        totals: dict[str, tuple[int, int]] = {}
        for index in indices:
            head = heads[index]
            size = head[2] - PUBLISH_FIXED_BYTES - head[10] - head[11] - head[12] - head[13]
            topic = names[index][0]
            count, size_bytes = totals.get(topic, (0, 0))
            totals[topic] = (count + 1, size_bytes + size)
        return totals


def one_publisher_run(heads: Sequence[tuple[int, ...]]) -> tuple[int, int, int] | None:
    """(publisher id, first seq, last seq) when the publishes `heads` are all of one publisher
    and each seq is the one before plus one (a catch-up's usual batch); else None. Checked in
    C loops: de-duplication then takes the run at once (`PublisherMarks.claim_run`) instead of
    a claim per record."""
    if not heads:
        return None
    publishers = list(map(_PUBLISHER, heads))
    if publishers.count(publishers[0]) != len(publishers):
        return None
    seqs = list(map(_SEQ, heads))
    first = seqs[0]
    if seqs != list(range(first, first + len(seqs))):
        return None
    return publishers[0], first, seqs[-1]


def _size(head: Head) -> int:
    """A frame's size in bytes, header included."""
    return HEADER_SIZE_BYTES + head[2]


def scan(data: bytes, start: int = 0, end: int | None = None) -> ReceivedFrames:
    """Check every frame of `data[start:end]` (record frames only, complete, nothing after the
    last) and return them, their offsets in `data`; damage raises CorruptRecord with the
    damaged frame's offset."""
    frames = ReceivedFrames(data)
    _scan(frames, start, len(data) if end is None else end, 0, -1, log=False)
    return frames


def scan_log(chunk: bytes, offset: int, from_txid: int, limit: int) -> tuple[ReceivedFrames, int]:
    """The record frames of a read of the local journal (`chunk`, from `offset`): at most
    `limit` from txid `from_txid` on, checked as `scan` checks a peer's batch. Control frames
    and earlier records are checked and passed over (`breaks` marks where); a frame cut short
    at the end of the chunk is left for the next read. The frames and the offset reached."""
    frames = ReceivedFrames(chunk)
    return frames, _scan(frames, offset, len(chunk), from_txid, limit, log=True)


def _scan(
    frames: ReceivedFrames, offset: int, end: int, from_txid: int, limit: int, *, log: bool
) -> int:
    """The loop of `scan` and `scan_log`; the offset reached. One pass, inlined: it runs for
    every record a link sends or receives."""
    data = frames.data
    offsets, heads, names_of, breaks = frames.offsets, frames.heads, frames.names, frames.breaks
    unpack_head = codec.HEAD_PUBLISH.unpack_from
    head_size = codec.HEAD_PUBLISH.size
    crc_value = codec.crc_value
    name_cache = _name_cache
    last_txid = 0
    increasing = True
    key = b""  # the string lengths and names of the last publish, and its names
    last_names: tuple[str, str, str] | None = None
    while offset < end and limit != 0:
        if end - offset >= head_size:
            head = unpack_head(data, offset)
            length = head[2]
            if head[0] != MAGIC or length == 0 or length > MAX_PAYLOAD_BYTES:
                codec.frame_length(data, offset, end)  # raises with the precise reason
            stop = offset + HEADER_SIZE_BYTES + length
            if stop > end:
                if log:
                    break  # the rest of it is in the next read
                raise CorruptRecord("a frame cut short at the end of the batch", offset=offset)
            if crc_value(data[offset + 8 : stop]) != head[1]:
                raise CorruptRecord("frame checksum mismatch", offset=offset)
        else:  # shorter than a publish's fixed fields: only another kind of record fits
            length = codec.frame_length(data, offset, end)  # checks magic, length and CRC
            if length < 0:
                if log:
                    break
                raise CorruptRecord("a frame cut short at the end of the batch", offset=offset)
            stop = offset + HEADER_SIZE_BYTES + length
            head = None
        start = offset + HEADER_SIZE_BYTES
        if head is None or head[3] != _KIND_PUBLISH or length < PUBLISH_FIXED_BYTES:
            record = _other(data, offset, start, stop, log)
            if record is None or record.txid < from_txid:
                breaks.append(len(offsets))  # the next frame does not follow the last one
                offset = stop
                continue
            if record.txid <= last_txid:
                increasing = False
            last_txid = record.txid
            frames.others[len(offsets)] = record
            offsets.append(offset)
            heads.append((MAGIC, 0, stop - start, data[start], record.txid, record.timestamp_us,
                          0, 0, record.origin_txid, 0, 0, 0, 0, 0))  # fmt: skip
            names_of.append(("", record.origin_instance, record.origin_group))
            offset = stop
            limit -= 1
            continue
        txid = head[4]
        if txid < from_txid:  # before the read's first txid (its index entry is earlier)
            breaks.append(len(offsets))
            offset = stop
            continue
        a = start + PUBLISH_FIXED_BYTES
        d = a + head[10] + head[11] + head[12]
        e = d + head[13]
        if e > stop:
            raise CorruptRecord("publish record strings overrun the payload", offset=offset)
        # Topic and origin repeat from record to record: decode each distinct one once. The
        # key starts at the string lengths: ("ab", "") and ("a", "b") must differ.
        if last_names is not None and data.startswith(key, a - 8):
            names = last_names  # the same as the publish before: no slice, no look-up
        else:
            key = data[a - 8 : d]
            cached = name_cache.get(key)
            if cached is None:
                cached = _names(data, a, head, offset)
                if len(name_cache) >= _NAME_CACHE_ENTRIES:
                    name_cache.clear()
                name_cache[key] = cached
            names = last_names = cached
        if head[13]:
            try:
                correlation_id = data[d:e].decode()
            except UnicodeDecodeError as exc:
                raise CorruptRecord(f"malformed record payload: {exc}", offset=offset) from None
            frames.correlation_ids[len(offsets)] = correlation_id
        if txid <= last_txid:
            increasing = False
        last_txid = txid
        offsets.append(offset)
        heads.append(head)
        names_of.append(names)
        offset = stop
        limit -= 1
    if log and offset < end and limit != 0 and end - offset < HEADER_SIZE_BYTES:
        codec.frame_length(data, offset, end)  # a partial header must at least start with magic
    frames.increasing = increasing
    distinct = set(names_of)
    frames.distinct_names = len(distinct)
    frames.ends = _ends(names_of, distinct, heads)
    return offset


def _ends(
    names: list[tuple[str, str, str]], distinct: set[tuple[str, str, str]], heads: list[Head]
) -> dict[str, tuple[int, int]]:
    """Each origin's (origin txid, txid) of its last record: found from the end for each
    distinct (topic, origin) (usually one per batch), not kept for every frame."""
    ends: dict[str, tuple[int, int]] = {}
    last_index: dict[str, int] = {}
    backwards = names[::-1]
    for key in distinct:
        index = len(names) - 1 - backwards.index(key)
        origin = key[1]
        if index > last_index.get(origin, -1):
            last_index[origin] = index
            ends[origin] = (heads[index][8], heads[index][4])
    return ends


def _names(data: bytes, a: int, head: Head, offset: int) -> tuple[str, str, str]:
    b = a + head[10]
    c = b + head[11]
    d = c + head[12]
    try:
        return data[a:b].decode(), data[b:c].decode(), data[c:d].decode()
    except UnicodeDecodeError as exc:
        raise CorruptRecord(f"malformed record payload: {exc}", offset=offset) from None


def _other(data: bytes, offset: int, start: int, stop: int, log: bool) -> Record | None:
    """A frame that is not a publish (a queue or transfer record), decoded now; None for a
    control frame of the journal (`log`), checked."""
    kind = data[start]
    if kind == _KIND_PUBLISH:
        raise CorruptRecord("malformed record payload: short publish", offset=offset)
    try:
        if kind in codec.CONTROL_KINDS:
            if not log:
                raise CorruptRecord("a control frame among a batch's records")
            codec.decode_control(data[start:stop])
            return None
        return codec.decode_payload(data[start:stop])
    except CorruptRecord as exc:
        raise CorruptRecord(exc.message, offset=offset) from None


class ReceivedRun:
    """Publishes of a `ReceivedFrames` appended to the local log (`Journal.append_received`):
    frame `indices[k]` under txid `first_txid + k` and timestamp `timestamps[k]`. The records
    are built only if someone asks (`records`)."""

    __slots__ = ("first_txid", "frames", "indices", "timestamps")

    def __init__(
        self, frames: ReceivedFrames, indices: Sequence[int], first_txid: int, timestamps: list[int]
    ) -> None:
        self.frames = frames
        self.indices = indices
        self.first_txid = first_txid
        self.timestamps = timestamps

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def last_txid(self) -> int:
        return self.first_txid + len(self.timestamps) - 1

    def last_records(self) -> list[PublishRecord]:
        """The last appended publish of each (topic, origin), in txid order: all that a
        reader of the latest positions needs, without building the rest."""
        names, indices, wanted = self.frames.names, self.indices, self.frames.distinct_names
        seen: set[tuple[str, str, str]] = set()
        found: list[int] = []
        for k in range(len(indices) - 1, -1, -1):
            key = names[indices[k]]
            if key not in seen:
                seen.add(key)
                found.append(k)
                if len(seen) == wanted:
                    break
        publish, first_txid = self.frames.publish, self.first_txid
        return [publish(indices[k], first_txid + k, self.timestamps[k]) for k in reversed(found)]

    def records(self) -> list[PublishRecord]:
        """The appended publishes as records, in txid order."""
        publish, txid = self.frames.publish, self.first_txid
        return [
            publish(index, txid + k, timestamp_us)
            for k, (index, timestamp_us) in enumerate(
                zip(self.indices, self.timestamps, strict=True)
            )
        ]


class ChosenFrames(_BuiltOnDemand):
    """Frames `indices` of a `ReceivedFrames` read from the local journal, some of them
    `replaced` by another record (by index): what a link sends of one read, shipped as the
    frames as read (`parts`) and built into records only if asked."""

    __slots__ = ("frames", "indices", "replaced")

    def __init__(
        self, frames: ReceivedFrames, indices: Sequence[int], replaced: dict[int, Record]
    ) -> None:
        self.frames = frames
        self.indices = indices
        self.replaced = replaced

    def __len__(self) -> int:
        return len(self.indices)

    def _record(self, index: int) -> Record:
        chosen = self.indices[index]
        replaced = self.replaced.get(chosen)
        return replaced if replaced is not None else self.frames._record(chosen)

    def parts(self) -> list[bytes | memoryview]:
        """The chosen records' frames, in order: views of the read, one per run of frames
        that follow each other there (a commit's, usually), and each replaced record encoded."""
        frames, indices, replaced = self.frames, self.indices, self.replaced
        if not replaced and type(indices) is range and indices.start == 0 and indices.step == 1:
            return list(frames.runs(len(indices)))
        offsets, heads, breaks = frames.offsets, frames.heads, set(frames.breaks)
        data = memoryview(frames.data)
        out: list[bytes | memoryview] = []
        start = end = -1  # the run of frames being gathered: data[start:end]
        previous = -2
        for index in indices:
            record = replaced.get(index)
            if record is not None:
                if start >= 0:
                    out.append(data[start:end])
                    start = -1
                out.append(codec.encode(record))
                previous = -2
                continue
            if start >= 0 and index == previous + 1 and index not in breaks:
                end = offsets[index] + _size(heads[index])
            else:
                if start >= 0:
                    out.append(data[start:end])
                start = offsets[index]
                end = start + _size(heads[index])
            previous = index
        if start >= 0:
            out.append(data[start:end])
        return out
