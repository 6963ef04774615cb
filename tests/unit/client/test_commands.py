"""Client wire encoding: hand-built publish entries and frames parse like the protobuf objects."""

from __future__ import annotations

import pytest

from amps.client import commands, connection
from amps.client.connection import Connection
from amps.client.policy import AckBatch, StoredPublish
from amps.v1 import client_pb2


@pytest.mark.parametrize("topic", ["orders", "", "tópico/ü" * 40])
@pytest.mark.parametrize("size", [0, 1, 127, 128, 1024, 20_000, 300_000])
@pytest.mark.parametrize("seq", [0, 1, 127, 128, 16_383, 16_384, 2**21, 2**40, 2**64 - 1])
def test_publish_head_plus_data_parses_as_the_publish_command(
    topic: str, size: int, seq: int
) -> None:
    data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    frame = client_pb2.ClientFrame.FromString(commands.publish_head(topic, size, seq) + data)
    assert list(frame.commands) == [commands.publish_command(StoredPublish(seq, topic, data))]


def test_varint_matches_protobuf() -> None:
    for value in [*range(0, 20_000, 7), 2**21 - 1, 2**21, 2**28, 2**35 + 5, 2**64 - 1]:
        encoded = client_pb2.Publish(seq=value).SerializeToString()
        assert encoded == (b"\x18" + commands.varint(value) if value else b"")


async def test_queued_commands_become_frames_in_order_within_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "MAX_FRAME_BYTES", 10_000)
    conn = Connection(
        "127.0.0.1:1",
        flush_interval_s=0.001,
        max_frame_commands=5,
        on_messages=lambda messages: None,
        on_lost=lambda conn, error: None,
    )
    expected = []
    for seq in range(1, 13):
        conn.send_publish("t", b"d" * seq, seq)
        expected.append(commands.publish_command(StoredPublish(seq, "t", b"d" * seq)))
    flush = commands.flush_command("9")
    assert conn.send(flush) == 13
    expected.append(flush)
    frames = [client_pb2.ClientFrame.FromString(f) for f in conn._take_frames()]
    assert [len(f.commands) for f in frames] == [5, 5, 3]
    assert [c for f in frames for c in f.commands] == expected
    assert conn._take_frames() == []
    for seq in range(13, 18):  # ~4,064-byte publishes: a third would pass the 10,000-byte bound
        conn.send_publish("t", b"x" * 4000, seq)
    assert [len(client_pb2.ClientFrame.FromString(f).commands) for f in conn._take_frames()] == [
        2,
        2,
        1,
    ]


@pytest.mark.parametrize("topic", ["work", "", "tópico/ü" * 40])
@pytest.mark.parametrize("count", [1, 2, 300])
@pytest.mark.parametrize("options", ["", "cancel", "expire"])
@pytest.mark.parametrize("cmd_id", ["", "17"])
def test_queue_ack_entry_parses_as_the_queue_ack_command(
    topic: str, count: int, options: str, cmd_id: str
) -> None:
    batch = AckBatch(topic, tuple(f"{7094790850998930143 + i}|{i}|" for i in range(count)))
    entry = commands.queue_ack_entry(topic, batch.bookmark_list, options, cmd_id)
    assert entry == commands.frame_entry(commands.queue_ack_command(batch, options, cmd_id))
    (command,) = client_pb2.ClientFrame.FromString(entry).commands
    assert command == commands.queue_ack_command(batch, options, cmd_id)
    assert command.ack_type == ("processed" if cmd_id else "")
