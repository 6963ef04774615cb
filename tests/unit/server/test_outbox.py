"""Outbox frames: entries and replay chunks come out as ServerFrames, in order, within limits."""

from __future__ import annotations

import pytest

from amps.batching import FrameLimits
from amps.server import wire
from amps.server.outbox import (
    DRAIN_LOW_WATER_BYTES,
    DRAIN_LOW_WATER_MESSAGES,
    MAX_FRAME_MESSAGES,
    Outbox,
)
from amps.server.send_budget import ENTRY_OVERHEAD_BYTES, SLOW_CONSUMER_STATUS, SendBudget
from amps.v1 import client_pb2 as pb


def _chunk(first: int, count: int, size: int = 10) -> bytes:
    encoder = wire.DeliveryEncoder(b"t", ["s"])
    parts: list[bytes] = []
    total = 0
    for txid in range(first, first + count):
        total += encoder.encode_into(parts, b"d" * size, 7, txid, txid, 1_700_000_000_000_000, b"")
    chunk = b"".join(parts)
    assert total == len(chunk)
    return chunk


async def _drain(outbox: Outbox) -> list[pb.ServerFrame]:
    outbox.close()
    return [pb.ServerFrame.FromString(frame) async for frame in outbox.frames()]


async def test_chunks_and_entries_keep_their_order() -> None:
    outbox = Outbox()
    beat = wire.message_entry(pb.ServerMessage(heartbeat=pb.Heartbeat(options="beat")))
    outbox.put(beat)
    outbox.put_chunk(_chunk(1, 300), 300)
    outbox.put_many([wire.delivery_entry(txid=301), wire.delivery_entry(txid=302)])
    outbox.put_chunk(_chunk(303, MAX_FRAME_MESSAGES), MAX_FRAME_MESSAGES)
    outbox.put(beat)
    assert len(outbox) == 1 + 300 + 2 + MAX_FRAME_MESSAGES + 1
    frames = await _drain(outbox)
    assert all(len(frame.messages) <= MAX_FRAME_MESSAGES for frame in frames)
    messages = [m for frame in frames for m in frame.messages]
    kinds = [m.WhichOneof("body") for m in messages]
    assert kinds[0] == kinds[-1] == "heartbeat"
    txids = [m.delivery.txid for m in messages[1:-1]]
    assert txids == list(range(1, 303 + MAX_FRAME_MESSAGES))
    assert outbox.sent_messages == len(messages)
    delivery = messages[1].delivery
    assert (delivery.topic, list(delivery.sub_ids), delivery.bookmark) == ("t", ["s"], "7|1|")


async def test_entries_after_chunks_are_batched_again() -> None:
    outbox = Outbox()
    outbox.put_chunk(_chunk(1, 10), 10)
    outbox.put_many([wire.delivery_entry(txid=11 + i) for i in range(MAX_FRAME_MESSAGES + 5)])
    frames = await _drain(outbox)
    assert [len(f.messages) for f in frames] == [MAX_FRAME_MESSAGES, 15]


async def test_frames_split_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    import amps.server.outbox as outbox_module

    limits = FrameLimits(MAX_FRAME_MESSAGES, 10_000)
    monkeypatch.setattr(outbox_module, "FRAME_LIMITS", limits)
    outbox = Outbox()
    outbox.put_many([wire.delivery_entry(data=b"y" * 4_000, txid=i + 1) for i in range(3)])
    outbox.put_chunk(_chunk(4, 2, 4_000), 2)
    outbox.put(wire.delivery_entry(data=b"y" * 4_000, txid=6))
    sizes = [len(f.messages) for f in await _drain(outbox)]
    assert sizes == [2, 1, 2, 1]


async def test_replay_pacing_counts_messages_in_chunks() -> None:
    outbox = Outbox()
    outbox.put_chunk(_chunk(1, 400), 400)
    assert outbox._drained.is_set()
    for i in range(DRAIN_LOW_WATER_MESSAGES // 400):
        outbox.put_chunk(_chunk(401 + 400 * i, 400), 400)
    assert not outbox._drained.is_set()
    frames = outbox.frames()
    await anext(frames)
    assert outbox._drained.is_set()
    outbox.close()
    assert len([frame async for frame in frames]) == DRAIN_LOW_WATER_MESSAGES // 400


async def test_a_client_past_its_byte_share_is_disconnected_with_the_reason() -> None:
    """Issue 11: live traffic is never paused; past ClientMaxCapacity of MessageMemoryLimit the
    stream ends with a readable reason, the bytes are given back and the server is told."""
    budget = SendBudget(100_000, 10)  # 10_000 bytes per client
    box = Outbox(budget, "'slow' (test)")
    cut: list[bool] = []
    box.on_cut = lambda: cut.append(True)
    entry = b"x" * (1_000 - ENTRY_OVERHEAD_BYTES)
    for _ in range(10):
        box.put(entry)
    assert not box.closed
    assert box.queued_bytes == budget.queued_bytes == 10_000
    box.put(entry)
    assert box.closed
    assert cut == [True]
    assert len(box) == box.queued_bytes == budget.queued_bytes == 0
    assert box.close_reason is not None
    assert box.close_reason[0] == SLOW_CONSUMER_STATUS
    assert box.close_reason[1].startswith("slow consumer: 11000 bytes waiting to be sent")
    assert "ClientMaxCapacity" in box.close_reason[1]
    assert budget.statistics().client_disconnects == 1
    assert [frame async for frame in box.frames()] == []
    box.put(entry)  # later deliveries to a cut connection are dropped, not counted
    assert budget.queued_bytes == 0


async def test_over_the_instance_limit_the_largest_client_is_disconnected() -> None:
    """Issue 11: MessageMemoryLimit across all clients; the one holding the most is cut, even
    when another client's put crossed the limit, and only that one."""
    budget = SendBudget(10_000, 80)  # 8_000 per client
    big, small = Outbox(budget, "big"), Outbox(budget, "small")
    entry = b"x" * (1_000 - ENTRY_OVERHEAD_BYTES)
    for _ in range(6):
        big.put(entry)
    for _ in range(4):
        small.put(entry)
    assert budget.queued_bytes == 10_000
    assert not big.closed
    small.put(entry)
    assert big.closed
    assert not small.closed
    assert big.close_reason is not None
    assert "MessageMemoryLimit" in big.close_reason[1]
    assert budget.queued_bytes == small.queued_bytes == 5_000
    stats = budget.statistics()
    assert (stats.instance_disconnects, stats.client_disconnects) == (1, 0)
    assert stats.largest_client_bytes == 5_000


async def test_bytes_are_given_back_as_frames_leave_and_when_the_connection_ends() -> None:
    """The bytes gauge counts what is queued and not yet handed to gRPC, chunks included."""
    budget = SendBudget(1 << 30)
    box = Outbox(budget)
    box.put_many([wire.delivery_entry(txid=i + 1) for i in range(MAX_FRAME_MESSAGES + 3)])
    box.put_chunk(_chunk(1, 10), 10)
    assert budget.queued_bytes == box.queued_bytes > 0
    frames = box.frames()
    await anext(frames)
    assert 0 < box.queued_bytes == budget.queued_bytes
    await anext(frames)
    assert box.queued_bytes == budget.queued_bytes == 0
    box.put(wire.delivery_entry(txid=99))
    box.release()
    assert budget.queued_bytes == 0
    assert budget.largest() is None


async def test_replay_pacing_counts_bytes_too() -> None:
    """A replay of large messages waits on bytes long before the message count matters."""
    box = Outbox()
    box.put_chunk(_chunk(1, 2, DRAIN_LOW_WATER_BYTES // 2), 2)
    assert not box.drained
    await anext(box.frames())
    assert box.drained


async def test_a_frame_leaves_at_once_and_what_comes_during_its_write_rides_the_next() -> None:
    outbox = Outbox()
    frames = outbox.frames()
    outbox.put(wire.delivery_entry(txid=1))
    first = pb.ServerFrame.FromString(await anext(frames))
    # The generator is suspended at its yield: gRPC is writing `first`.
    outbox.put(wire.delivery_entry(txid=2))
    outbox.put_many([wire.delivery_entry(txid=3), wire.delivery_entry(txid=4)])
    second = pb.ServerFrame.FromString(await anext(frames))
    assert [m.delivery.txid for m in first.messages] == [1]
    assert [m.delivery.txid for m in second.messages] == [2, 3, 4]
    hops = outbox.hops
    assert (hops.frames_idle, hops.frames_coalesced) == (1, 1)
    assert hops.outbox_wait.count == 2
    assert hops.frame_write.count == 1  # the second write has not completed yet
    outbox.close()
    assert [f async for f in frames] == []
    assert hops.frame_write.count == 2
