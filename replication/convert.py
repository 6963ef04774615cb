"""Link frames <-> protobuf: the only replication module that imports generated code. [io]

Records cross as the transaction log's own framed bytes (amps/log/codec.py), so a batch costs
one protobuf message and one CRC-checked decode, not one message per record. A publish whose
frame the sender's journal still keeps (`Journal.frames`) crosses as that frame, not encoded
again: byte for byte what encoding its record would give; records read from the journal as
frames (`ChosenFrames`) cross as read, a commit's frames in one piece. `encode_batch` writes a
batch's LinkFrame bytes itself, the records joined once straight into them: building the
protobuf copied them into upb and serialising it copied them out again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.kept_frames import KeptFrames
from amps.log.received import ChosenFrames, scan
from amps.log.records import PublishRecord, Record
from amps.v1 import replication_pb2 as pb
from replication.frames import (
    ACK_AT_ONCE,
    Ack,
    AckPolicy,
    Batch,
    Digest,
    Frame,
    Heartbeat,
    Hello,
    OriginPosition,
    QueueDigest,
    Refusal,
    TopicDigest,
    TransferRequest,
)

_TXID = attrgetter("txid")


class BadFrame(ValueError):
    """A frame from a peer that does not decode; the link is closed with this text."""


def to_pb(frame: Frame, *kept: Mapping[int, bytes]) -> pb.LinkFrame:
    """The protobuf LinkFrame of one frame; `kept`: frames of the local journal by txid."""
    if isinstance(frame, Batch):
        message = pb.LinkFrame()
        # Set in place: LinkFrame(batch=pb.Batch(...)) copies the batch's bytes again, ~2.7 ms
        # per MiB with upb, where the records themselves cost ~0.2 ms.
        batch = message.batch
        batch.SetInParent()  # a batch even when every field is at its default
        batch.batch_id = frame.batch_id
        batch.through_txid = frame.through_txid
        batch.records = b"".join(_record_parts(frame, kept))
        batch.record_count = len(frame.records)
        return message
    if isinstance(frame, Ack):
        return pb.LinkFrame(ack=pb.LinkAck(through_txid=frame.through_txid))
    if isinstance(frame, Heartbeat):
        return pb.LinkFrame(
            heartbeat=pb.LinkHeartbeat(
                heard=[pb.Heard(instance=i, age_ms=age) for i, age in frame.heard],
                heads=_positions_to_pb(frame.heads),
                acked_through_txid=frame.acked_through_txid,
                ack_policy=_policy_to_pb(frame.ack_policy),
            )
        )
    if isinstance(frame, Refusal):
        return pb.LinkFrame(refusal=pb.Refusal(code=frame.code, message=frame.message))
    if isinstance(frame, TransferRequest):
        return pb.LinkFrame(
            transfer_request=pb.TransferRequest(
                queue=frame.queue,
                publisher_ids=[p for p, _ in frame.keys],
                seqs=[s for _, s in frame.keys],
                requester=frame.requester,
                owner=frame.owner,
                hops_left=frame.hops_left,
                request_id=frame.request_id,
            )
        )
    digest = frame.digest
    return pb.LinkFrame(
        hello=pb.Hello(
            protocol_version=frame.protocol_version,
            instance=frame.instance,
            group=frame.group,
            expected_peer=frame.expected_peer,
            expected_group=frame.expected_group,
            digest=pb.Digest(
                sends=digest.sends,
                sync=digest.sync,
                topics=[
                    pb.TopicDigest(name=t.name, message_type=t.message_type, filter=t.filter)
                    for t in digest.topics
                ],
                queues=[_queue_to_pb(q) for q in digest.queues],
            ),
            positions=_positions_to_pb(frame.positions),
            ack_policy=_policy_to_pb(frame.ack_policy),
        )
    )


def _policy_to_pb(policy: AckPolicy) -> pb.AckPolicy | None:
    if policy == ACK_AT_ONCE:
        return None  # unset: what an older peer sends, and reads as at once
    return pb.AckPolicy(
        interval_ms=policy.interval_ms,
        window_batches=policy.window_batches,
        window_bytes=policy.window_bytes,
    )


def _policy_from_pb(policy: pb.AckPolicy) -> AckPolicy:
    if not policy.interval_ms:
        return ACK_AT_ONCE
    return AckPolicy(policy.interval_ms, policy.window_batches, policy.window_bytes)


def _queue_to_pb(queue: QueueDigest) -> pb.QueueDigest:
    return pb.QueueDigest(
        name=queue.name,
        kind=queue.kind,
        message_type=queue.message_type,
        underlying_topic=queue.underlying_topic,
        filter=queue.filter,
        initial_owner=queue.initial_owner,
        holders=[pb.QueueHolder(instance=i, group=g) for i, g in queue.holders],
    )


def _queue_from_pb(queue: pb.QueueDigest) -> QueueDigest:
    return QueueDigest(
        name=queue.name,
        kind=queue.kind,
        message_type=queue.message_type,
        underlying_topic=queue.underlying_topic,
        filter=queue.filter,
        initial_owner=queue.initial_owner,
        holders=tuple((h.instance, h.group) for h in queue.holders),
    )


def _record_parts(
    batch: Batch, kept: tuple[Mapping[int, bytes], ...]
) -> Sequence[bytes | memoryview]:
    """The batch's record frames, in order, in as few pieces as they come."""
    records = batch.records
    if type(records) is ChosenFrames:
        return records.parts()
    if kept and records and set(map(type, records)) == {PublishRecord}:
        # The live path's batch: publishes of consecutive txids whose frames the journal
        # still keeps, a slice of its commits' lists rather than a look-up per record.
        txids = list(map(_TXID, records))
        first, count = txids[0], len(txids)
        if txids[-1] - first == count - 1 and txids == list(range(first, first + count)):
            for frames in kept:
                if type(frames) is KeptFrames and (parts := frames.span(first, count)):
                    return parts
    return [_framed(record, kept) for record in records]


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(message: type[pb.LinkFrame | pb.Batch], field: str, length_delimited: bool) -> bytes:
    return _varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | length_delimited * 2)


_LINK_BATCH = _tag(pb.LinkFrame, "batch", True)
_BATCH_ID = _tag(pb.Batch, "batch_id", False)
_THROUGH_TXID = _tag(pb.Batch, "through_txid", False)
_RECORD_COUNT = _tag(pb.Batch, "record_count", False)
_RECORDS = _tag(pb.Batch, "records", True)


def encode_batch(batch: Batch, *kept: Mapping[int, bytes]) -> bytes:
    """The serialised LinkFrame of `to_pb(batch, *kept)` (the same message once parsed),
    written directly: the record frames are copied once, into these bytes. The records field
    comes last so that the frames follow one head."""
    parts = _record_parts(batch, kept)
    size = sum(map(len, parts))
    fields = b"".join((
        _BATCH_ID, _varint(batch.batch_id), _THROUGH_TXID, _varint(batch.through_txid),
        _RECORD_COUNT, _varint(len(batch.records)), _RECORDS, _varint(size),
    ))  # fmt: skip
    return b"".join([_LINK_BATCH, _varint(len(fields) + size), fields, *parts])


def _framed(record: Record, kept: tuple[Mapping[int, bytes], ...]) -> bytes:
    # Only a publish is sent as logged; the link rewrites queue records (bookmarks for txids).
    if type(record) is PublishRecord:
        for frames in kept:
            frame = frames.get(record.txid)
            if frame is not None:
                return frame
    return codec.encode(record)


@dataclass(frozen=True, slots=True)
class WireBatch:
    """A LinkFrame carrying a batch, read from its bytes by `decode_link_frame`: its records
    are `data[start:end]`, checked in place (a batch is about 1 MiB: no copy of it)."""

    batch_id: int
    through_txid: int
    data: bytes
    start: int
    end: int
    record_count: int

    @property
    def records(self) -> bytes:
        """The records field's bytes."""
        return self.data[self.start : self.end]


_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]  # IndexError at the end: not the usual layout
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift >= 70:
            raise ValueError("a varint longer than ten bytes")


def decode_link_frame(data: bytes) -> pb.LinkFrame | WireBatch:
    """The streams' deserializer: a batch laid out as `encode_batch` or protobuf lays it out is
    read from the bytes, its records sliced once (protobuf copied them into upb, and reading
    the field copied them out again); anything else is parsed by protobuf, which also says why
    bytes do not parse."""
    try:
        if data[:1] == _LINK_BATCH:
            batch = _read_batch(data)
            if batch is not None:
                return batch
    except (IndexError, ValueError):
        pass
    return pb.LinkFrame.FromString(data)


def _read_batch(data: bytes) -> WireBatch | None:
    """The batch of a LinkFrame made of its `batch` field alone, with only the Batch fields of
    their declared types; None for any other layout (protobuf reads it then)."""
    size, position = _read_varint(data, len(_LINK_BATCH))
    if position + size != len(data):
        return None
    values = {_BATCH_ID: 0, _THROUGH_TXID: 0, _RECORD_COUNT: 0}
    start = end = 0
    while position < len(data):
        tag = data[position : position + 1]
        if tag == _RECORDS:
            length, position = _read_varint(data, position + 1)
            if position + length > len(data):
                return None
            # Given twice, the last one counts (as protobuf reads it).
            start, end = position, position + length
            position += length
        elif tag in values:
            values[tag], position = _read_varint(data, position + 1)
        else:
            return None
    if max(values[_BATCH_ID], values[_THROUGH_TXID]) > _U64_MAX or values[_RECORD_COUNT] > _U32_MAX:
        return None
    return WireBatch(
        values[_BATCH_ID], values[_THROUGH_TXID], data, start, end, values[_RECORD_COUNT]
    )


def from_pb(message: pb.LinkFrame | WireBatch) -> Frame:
    """The frame a protobuf LinkFrame (or a batch read from one) carries; BadFrame when it
    carries nothing usable."""
    if type(message) is WireBatch:
        return _batch(
            message.batch_id, message.through_txid, message.data, message.record_count,
            message.start, message.end,
        )  # fmt: skip
    assert isinstance(message, pb.LinkFrame)
    kind = message.WhichOneof("body")
    if kind == "batch":
        batch = message.batch
        # Each read of the field copies the bytes out of upb: read it once.
        return _batch(batch.batch_id, batch.through_txid, batch.records, batch.record_count)
    if kind == "ack":
        return Ack(message.ack.through_txid)
    if kind == "heartbeat":
        heartbeat = message.heartbeat
        return Heartbeat(
            tuple((h.instance, h.age_ms) for h in heartbeat.heard),
            _positions_from_pb(heartbeat.heads),
            heartbeat.acked_through_txid,
            _policy_from_pb(heartbeat.ack_policy),
        )
    if kind == "refusal":
        return Refusal(message.refusal.code, message.refusal.message)
    if kind == "transfer_request":
        request = message.transfer_request
        if not request.queue or not request.requester or not request.owner:
            raise BadFrame("a transfer request without queue, requester or owner")
        publisher_ids, seqs = list(request.publisher_ids), list(request.seqs)
        if len(publisher_ids) != len(seqs):
            raise BadFrame("a transfer request whose bookmarks do not pair up")
        return TransferRequest(
            request.queue,
            tuple(zip(publisher_ids, seqs, strict=True)),
            request.requester,
            request.owner,
            request.hops_left,
            request.request_id,
        )
    if kind == "hello":
        hello = message.hello
        digest = hello.digest
        return Hello(
            protocol_version=hello.protocol_version,
            instance=hello.instance,
            group=hello.group,
            expected_peer=hello.expected_peer,
            expected_group=hello.expected_group,
            digest=Digest(
                sends=digest.sends,
                topics=tuple(TopicDigest(t.name, t.message_type, t.filter) for t in digest.topics),
                sync=digest.sync,
                queues=tuple(_queue_from_pb(q) for q in digest.queues),
            ),
            positions=_positions_from_pb(hello.positions),
            ack_policy=_policy_from_pb(hello.ack_policy),
        )
    raise BadFrame("an empty LinkFrame")


def _batch(
    batch_id: int, through_txid: int, data: bytes, record_count: int, start: int = 0,
    end: int | None = None,
) -> Batch:  # fmt: skip
    try:
        records = scan(data, start, end)  # checked, not built: the receiver appends the frames
    except CorruptRecord as exc:
        raise BadFrame(f"a batch with a damaged record: {exc.message}") from None
    if len(records) != record_count:
        raise BadFrame("a batch whose records do not match its record_count")
    return Batch(batch_id, through_txid, records)


def _positions_to_pb(positions: Iterable[OriginPosition]) -> list[pb.OriginPosition]:
    return [
        pb.OriginPosition(origin=p.origin, origin_txid=p.origin_txid, upstream_txid=p.upstream_txid)
        for p in positions
    ]


def _positions_from_pb(positions: Iterable[pb.OriginPosition]) -> tuple[OriginPosition, ...]:
    return tuple(OriginPosition(p.origin, p.origin_txid, p.upstream_txid) for p in positions)
