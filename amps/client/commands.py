"""Builders for the protobuf commands the client sends (the only place that shapes them)."""

from __future__ import annotations

from amps.client.policy import AckBatch, StoredPublish
from amps.v1 import client_pb2

CLIENT_VERSION = "amps-python/0.1"


def logon_command(cmd_id: str, client_name: str, user: str, password: str) -> client_pb2.Command:
    """The first command of every stream; answered with the persisted sequence number."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed",
        logon=client_pb2.Logon(
            client_name=client_name, user_id=user, password=password, version=CLIENT_VERSION
        ),
    )


def publish_command(entry: StoredPublish) -> client_pb2.Command:
    """A publish that requests a (conflated) persisted ack (L2, L3)."""
    return client_pb2.Command(
        ack_type="persisted",
        publish=client_pb2.Publish(topic=entry.topic, data=entry.data, seq=entry.seq),
    )


# --- Frames on the wire --------------------------------------------------------------------------
#
# A serialized ClientFrame is its commands one after the other, each as field 1 (length
# delimited). The connection writes frames it joined itself, so a command is serialized once when
# queued, and a publish (the hot path) is never a protobuf object at all: `publish_head` writes the
# bytes `publish_command(entry).SerializeToString()` would start with, and the data follows as is.

_FRAME_COMMAND_TAG = b"\x0a"  # ClientFrame.commands = 1
_PERSISTED_PUBLISH = b"\x12\x09persisted\x5a"  # Command.ack_type = 2, then Command.publish = 11
_SEQ_TAG = b"\x18"  # Publish.seq = 3
_DATA_TAG = b"\x12"  # Publish.data = 2
_ONE_BYTE_VARINTS = [bytes((n,)) for n in range(128)]
_HEAD_CACHE_ENTRIES = 1024
# (topic, data length, seq varint length) -> (head up to the seq value, seq to data).
_heads: dict[tuple[str, int, int], tuple[bytes, bytes]] = {}


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x20_0000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frame_entry(command: client_pb2.Command) -> bytes:
    """One command as it appears inside a serialized ClientFrame."""
    body = command.SerializeToString()
    return b"".join((_FRAME_COMMAND_TAG, varint(len(body)), body))


def publish_head(topic: str, size: int, seq: int) -> bytes:
    """The frame entry of a persisted-ack publish of `size` data bytes, up to the data itself.

    `publish_head(t, len(d), s) + d` parses to `publish_command(StoredPublish(s, t, d))`. The seq
    field is written before the data (protobuf accepts fields in any order), so the data, the
    only large part, is the entry's tail and is never copied into a command of its own.
    """
    return b"".join(publish_head_parts(topic, size, seq))


def publish_head_parts(topic: str, size: int, seq: int) -> tuple[bytes, bytes, bytes]:
    """`publish_head` in three pieces (cached, the seq value, cached) that a frame joins."""
    # varint(seq), inlined for the usual sizes (0 is left out, as protobuf does)
    if seq < 0x80:
        seq_bytes = _ONE_BYTE_VARINTS[seq] if seq else b""
    elif seq < 0x4000:
        seq_bytes = bytes((seq & 0x7F | 0x80, seq >> 7))
    elif seq < 0x20_0000:
        seq_bytes = bytes((seq & 0x7F | 0x80, (seq >> 7) & 0x7F | 0x80, seq >> 14))
    else:
        seq_bytes = varint(seq)
    key = (topic, size, len(seq_bytes))
    parts = _heads.get(key)
    if parts is None:
        parts = _publish_head_parts(topic, size, len(seq_bytes))
        if len(_heads) >= _HEAD_CACHE_ENTRIES:
            _heads.clear()
        _heads[key] = parts
    return parts[0], seq_bytes, parts[1]


def _publish_head_parts(topic: str, size: int, seq_length: int) -> tuple[bytes, bytes]:
    """(everything before the seq value, everything after it up to the data) for `key`."""
    encoded = topic.encode()
    topic_field = b"\x0a" + varint(len(encoded)) + encoded if encoded else b""
    seq_tag = _SEQ_TAG if seq_length else b""
    data_head = _DATA_TAG + varint(size) if size else b""
    publish_length = len(topic_field) + len(seq_tag) + seq_length + len(data_head) + size
    command_length = len(_PERSISTED_PUBLISH) + len(varint(publish_length)) + publish_length
    before = b"".join((_FRAME_COMMAND_TAG, varint(command_length), _PERSISTED_PUBLISH,
                       varint(publish_length), topic_field, seq_tag))  # fmt: skip
    return before, data_head


def subscribe_command(
    cmd_id: str,
    *,
    sub_id: str,
    topic: str,
    filter: str,
    bookmark: str | None,
    options: str,
    max_backlog: int | None,
) -> client_pb2.Command:
    """A subscribe requesting a processed ack (which carries the granted max_backlog)."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed",
        subscribe=client_pb2.Subscribe(
            topic=topic,
            sub_id=sub_id,
            filter=filter,
            bookmark=bookmark or "",
            options=options,
            max_backlog=max_backlog or 0,
            has_max_backlog=max_backlog is not None,
        ),
    )


def unsubscribe_command(cmd_id: str, sub_id: str) -> client_pb2.Command:
    """Stop one subscription (or a comma list, or `all`)."""
    return client_pb2.Command(
        cmd_id=cmd_id, ack_type="processed", unsubscribe=client_pb2.Unsubscribe(sub_id=sub_id)
    )


def queue_ack_command(batch: AckBatch, options: str = "", cmd_id: str = "") -> client_pb2.Command:
    """A queue acknowledgement (Q10): a sow_delete naming bookmarks; with a `cmd_id` it asks for
    the processed ack that confirms it (kept and sent again after a failover until then)."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed" if cmd_id else "",
        sow_delete=client_pb2.SowDelete(
            topic=batch.topic, bookmark=batch.bookmark_list, options=options
        ),
    )


_CMD_ID_TAG = b"\x0a"  # Command.cmd_id = 1
_PROCESSED = b"\x12\x09processed"  # Command.ack_type = 2
_SOW_DELETE_TAG = b"\x72"  # Command.sow_delete = 14
_TOPIC_TAG = b"\x0a"  # SowDelete.topic = 1
_BOOKMARK_TAG = b"\x12"  # SowDelete.bookmark = 2
_OPTIONS_TAG = b"\x22"  # SowDelete.options = 4


def queue_ack_entry(topic: str, bookmarks: str, options: str = "", cmd_id: str = "") -> bytes:
    """`frame_entry(queue_ack_command(AckBatch(topic, bookmarks.split(",")), options, cmd_id))`,
    built without a protobuf object (one per ack batch)."""
    parts = [_string_field(_TOPIC_TAG, topic), _string_field(_BOOKMARK_TAG, bookmarks)]
    if options:
        parts.append(_string_field(_OPTIONS_TAG, options))
    body = b"".join(parts)
    head = _string_field(_CMD_ID_TAG, cmd_id) + _PROCESSED if cmd_id else b""
    command = b"".join((head, _SOW_DELETE_TAG, varint(len(body)), body))
    return b"".join((_FRAME_COMMAND_TAG, varint(len(command)), command))


def _string_field(tag: bytes, value: str) -> bytes:
    encoded = value.encode()
    return b"".join((tag, varint(len(encoded)), encoded)) if encoded else b""


def sow_delete_command(
    cmd_id: str, topic: str, *, bookmark: str, filter: str, options: str
) -> client_pb2.Command:
    """A sow_delete whose processed ack reports `records_deleted`."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed",
        sow_delete=client_pb2.SowDelete(
            topic=topic, bookmark=bookmark, filter=filter, options=options
        ),
    )


def sow_command(cmd_id: str, topic: str, filter: str) -> client_pb2.Command:
    """A sow query; its results carry `query_id` = `cmd_id`."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed",
        sow=client_pb2.Sow(topic=topic, filter=filter, query_id=cmd_id),
    )


def flush_command(cmd_id: str) -> client_pb2.Command:
    """Ask the instance to send outstanding acks; its processed ack is a round trip."""
    return client_pb2.Command(cmd_id=cmd_id, ack_type="processed", flush=client_pb2.Flush())


def heartbeat_command(options: str) -> client_pb2.Command:
    """`start,<seconds>` asks the instance for heartbeats; `beat` tells it we are alive."""
    return client_pb2.Command(heartbeat=client_pb2.Heartbeat(options=options))
