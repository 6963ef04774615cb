"""A link's writer queue (replication.link.WriterQueue): acks superseded by later ones queued
behind them, and the count of batches with the writer that lets the sender coalesce under load
(issue 8, L2: send now, coalesce under load)."""

from __future__ import annotations

import asyncio

from amps.v1 import replication_pb2 as pb
from replication.link import OutgoingFrame, WriterQueue


def ack(through: int) -> OutgoingFrame:
    return OutgoingFrame(pb.LinkFrame(ack=pb.LinkAck(through_txid=through)), ack=True)


def batch(through: int) -> OutgoingFrame:
    return OutgoingFrame(pb.LinkFrame(), through=through)


async def drain(outgoing: WriterQueue, count: int) -> list[OutgoingFrame | None]:
    taken = []
    for _ in range(count):
        item = await asyncio.wait_for(outgoing.take(), 5)
        if item is not None:
            outgoing.written(item)
        taken.append(item)
    return taken


async def test_a_run_of_acks_leaves_as_its_latest_and_other_frames_keep_their_order() -> None:
    outgoing = WriterQueue()
    for item in (ack(3), ack(7), batch(10), ack(9), ack(12), None):
        outgoing.put(item)
    assert await drain(outgoing, 4) == [ack(7), batch(10), ack(12), None]


async def test_batches_count_what_is_queued_or_being_written() -> None:
    outgoing = WriterQueue()
    outgoing.put(batch(5))
    outgoing.put(ack(2))
    assert outgoing.batches == 1
    first = await outgoing.take()
    assert first == batch(5)
    assert outgoing.batches == 1  # being written
    assert first is not None
    outgoing.written(first)
    assert outgoing.batches == 0
    assert await outgoing.take() == ack(2)


async def test_take_waits_for_a_frame() -> None:
    outgoing = WriterQueue()
    waiting = asyncio.ensure_future(outgoing.take())
    await asyncio.sleep(0)
    assert not waiting.done()
    outgoing.put(batch(1))
    assert await asyncio.wait_for(waiting, 5) == batch(1)
