"""Publish, persisted acks and bookmark replay against a real instance (L1, L2, L3, L7)."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import orjson
import pytest

from amps import errors
from amps.client import Client
from tests.harness.instance import InstanceProcess, config_xml
from tests.harness.streams import take

TIMEOUT_S = 30


async def test_publish_then_replay_from_epoch_in_order(instance: InstanceProcess) -> None:
    """L1/L7: every persisted message replays from epoch, in publish order, with bookmarks."""
    async with Client("pub-epoch") as client:
        await client.connect(instance.address)
        for i in range(1, 1001):
            await client.publish("orders", orjson.dumps({"id": i}))
        await client.flush(timeout_s=TIMEOUT_S)
        sub = await client.subscribe("orders", bookmark="epoch")
        messages = await take(sub, 1000)
    ids = [m.json()["id"] for m in messages]
    assert ids == list(range(1, 1001))
    bookmarks = [m.bookmark for m in messages]
    assert len(set(bookmarks)) == 1000
    assert all(b.endswith("|") and b.count("|") == 2 for b in bookmarks)


async def test_replay_from_a_bookmark_in_the_middle(instance: InstanceProcess) -> None:
    """L7: replay starts right after the named message."""
    async with Client("pub-mid") as client:
        await client.connect(instance.address)
        for i in range(1, 101):
            await client.publish("mid", orjson.dumps({"id": i}))
        await client.flush(timeout_s=TIMEOUT_S)
        first = await take(await client.subscribe("mid", bookmark="epoch"), 100)
        middle = first[49].bookmark
        rest = await take(await client.subscribe("mid", bookmark=middle), 50)
    assert [m.json()["id"] for m in rest] == list(range(51, 101))


async def test_replay_from_a_timestamp(instance: InstanceProcess) -> None:
    """L7: a UTC timestamp bookmark starts at the first message logged at or after it."""
    async with Client("pub-ts") as client:
        await client.connect(instance.address)
        for i in range(1, 11):
            await client.publish("ts", orjson.dumps({"id": i}))
        await client.flush(timeout_s=TIMEOUT_S)
        await asyncio.sleep(1.1)  # timestamps have one-second resolution in the bookmark form
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        await asyncio.sleep(1.1)
        for i in range(11, 21):
            await client.publish("ts", orjson.dumps({"id": i}))
        await client.flush(timeout_s=TIMEOUT_S)
        later = await take(await client.subscribe("ts", bookmark=stamp), 10)
    assert [m.json()["id"] for m in later] == list(range(11, 21))


async def test_now_bookmark_and_live_regex_subscription(instance: InstanceProcess) -> None:
    """L7: `now` (0|1|) replays nothing old; a regex topic receives matching topics live."""
    async with Client("sub-live") as subscriber, Client("pub-live") as publisher:
        await publisher.connect(instance.address)
        await subscriber.connect(instance.address)
        await publisher.publish("live.a", b'{"old":true}')
        await publisher.flush(timeout_s=TIMEOUT_S)
        from_now = await subscriber.subscribe("live.a", bookmark="0|1|")
        regex = await subscriber.subscribe("live\\..*")
        await publisher.publish("live.a", b'{"n":1}')
        await publisher.publish("live.b", b'{"n":2}')
        await publisher.publish("other", b'{"n":3}')
        await publisher.flush(timeout_s=TIMEOUT_S)
        now_messages = await take(from_now, 1)
        regex_messages = await take(regex, 2)
    assert now_messages[0].json() == {"n": 1}
    assert sorted(m.topic for m in regex_messages) == ["live.a", "live.b"]


async def test_replay_hands_over_to_live_without_gaps(instance: InstanceProcess) -> None:
    """L7: publishes racing a replay arrive exactly once, in order."""
    async with Client("race-pub") as publisher, Client("race-sub") as subscriber:
        await publisher.connect(instance.address)
        await subscriber.connect(instance.address)
        for i in range(1, 2001):
            await publisher.publish("race", orjson.dumps({"id": i}))
        sub = await subscriber.subscribe("race", bookmark="epoch")
        for i in range(2001, 4001):
            await publisher.publish("race", orjson.dumps({"id": i}))
        await publisher.flush(timeout_s=TIMEOUT_S)
        messages = await take(sub, 4000)
    assert [m.json()["id"] for m in messages] == list(range(1, 4001))


async def test_duplicate_sequence_numbers_are_discarded_and_acked(
    instance: InstanceProcess,
) -> None:
    """L4: a publish with a seq at or below the high-water mark is dropped but acknowledged."""
    import grpc

    from amps.v1 import client_pb2 as pb
    from amps.v1 import client_pb2_grpc

    def publish(seq: int, ident: int) -> pb.Command:
        data = orjson.dumps({"id": ident})
        return pb.Command(ack_type="persisted", publish=pb.Publish(topic="dup", data=data, seq=seq))

    frames = [
        pb.ClientFrame(
            commands=[
                pb.Command(cmd_id="l", ack_type="processed", logon=pb.Logon(client_name="dup"))
            ]
        ),
        pb.ClientFrame(commands=[publish(10, 1), publish(10, 2), publish(5, 3), publish(11, 4)]),
    ]
    persisted: list[int] = []
    async with grpc.aio.insecure_channel(instance.address) as channel:
        stub = client_pb2_grpc.AmpsStub(channel)  # type: ignore[no-untyped-call]  # generated untyped
        call = stub.Connect(iter(frames))

        async def read() -> None:
            async for frame in call:
                for message in frame.messages:
                    if message.ack.ack_type == "persisted":
                        assert message.ack.status == "success"
                        persisted.append(message.ack.seq)
                        if message.ack.seq == 11:
                            return

        await asyncio.wait_for(read(), TIMEOUT_S)
        call.cancel()
    assert persisted[-1] == 11
    async with Client("dup-reader") as client:
        await client.connect(instance.address)
        sub = await client.subscribe("dup", bookmark="epoch")
        messages = await take(sub, 2)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(sub.__anext__(), 0.5)
    assert [m.json()["id"] for m in messages] == [1, 4]


async def test_unrecorded_topic_is_live_only(tmp_path: Path) -> None:
    """A topic the TransactionLog does not record reaches live subscribers and is acked, but
    cannot be replayed (a bookmark subscription says why)."""
    topics = "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"
    instance = InstanceProcess(tmp_path / "amps", config_xml(topics=topics)).start()
    try:
        async with Client("unrec") as client:
            await client.connect(instance.address)
            live = await client.subscribe("chat")
            await client.publish("chat", b'{"hello":1}')
            await client.publish("orders", b'{"id":1}')
            await client.flush(timeout_s=TIMEOUT_S)
            [message] = await take(live, 1)
            with pytest.raises(errors.InvalidTopic):
                await client.subscribe("chat", bookmark="epoch")
            replayed = await take(await client.subscribe("orders", bookmark="epoch"), 1)
    finally:
        instance.kill()
    assert message.json() == {"hello": 1}
    assert replayed[0].json() == {"id": 1}


async def test_after_txid_starts_a_replay_at_a_log_position(instance: InstanceProcess) -> None:
    """The completed ack names the txid a replay went through; `after_txid=N` resumes after N:
    the exact positions the Spark source keeps as offsets (issue 10, L7)."""
    async with Client("positions") as client:
        await client.connect(instance.address)
        for i in range(20):
            await client.publish("positions", b'{"i":%d}' % i)
        await client.flush(10)
        whole = await client.subscribe("positions", bookmark="0")
        everything = await take(whole, 20)
        await whole.wait_completed(10)
        assert whole.replayed_txid >= everything[-1].txid
        middle = everything[9].txid
        rest = await client.subscribe("positions", bookmark="0", options=f"after_txid={middle}")
        assert [m.txid for m in await take(rest, 10)] == [m.txid for m in everything[10:]]
        with pytest.raises(errors.InvalidOptions, match="after_txid=N"):
            await client.subscribe("positions", bookmark="0", options="after_txid=x")


async def test_origin_options_name_each_origins_position(instance: InstanceProcess) -> None:
    """`origin`: replayed deliveries carry their origin and origin txid, the completed ack each
    origin's position; `positions_only` delivers nothing; `only_origin=NAME` keeps that origin's
    publishes (what the Spark source reads a cluster by, issue 10, R3)."""
    async with Client("origins") as client:
        await client.connect(instance.address)
        for i in range(5):
            await client.publish("origins", b'{"i":%d}' % i)
        await client.flush(10)
        sub = await client.subscribe("origins", bookmark="0", options="origin")
        replayed = await take(sub, 5)
        await sub.wait_completed(10)
        assert {m.origin_instance for m in replayed} == {"amps-test"}
        assert [m.origin_txid for m in replayed] == [m.txid for m in replayed]  # its own log
        assert sub.origins["amps-test"] >= replayed[-1].origin_txid
        plain = await client.subscribe("origins", bookmark="0")
        assert {(m.origin_instance, m.origin_txid) for m in await take(plain, 5)} == {("", 0)}

        probe = await client.subscribe("origins", bookmark="0", options="positions_only")
        await probe.wait_completed(10)
        assert probe.origins == sub.origins
        assert await probe.get(0) is None
        other = await client.subscribe("origins", bookmark="0", options="only_origin=elsewhere")
        await other.wait_completed(10)
        assert await other.get(0) is None
        mine = await client.subscribe("origins", bookmark="0", options="only_origin=amps-test")
        assert [m.txid for m in await take(mine, 5)] == [m.txid for m in replayed]
        await mine.wait_completed(10)

        # Live deliveries name their origin too (a stream across a cluster needs them).
        await client.publish("origins", b'{"i":5}')
        live = (await take(sub, 1))[0]
        assert (live.origin_instance, live.origin_txid) == ("amps-test", live.txid)
        assert live.txid > replayed[-1].txid
        assert [(m.origin_instance, m.txid) for m in await take(mine, 1)] == [
            ("amps-test", live.txid)
        ]
        assert [(m.origin_instance, m.origin_txid) for m in await take(plain, 1)] == [("", 0)]
        # One delivery per session names every matching sub_id: `other` would hold it by now.
        assert await other.get(0) is None  # only_origin holds live as in the replay
        with pytest.raises(errors.InvalidOptions, match="bookmark"):
            await client.subscribe("origins", options="positions_only")


async def _positions(client: Client, topic: str, bookmark: str = "0") -> dict[str, int]:
    probe = await client.subscribe(topic, bookmark=bookmark, options="positions_only")
    await probe.wait_completed(10)
    return probe.origins


async def test_positions_only_is_answered_from_memory_also_after_a_restart(
    instance: InstanceProcess,
) -> None:
    """`positions_only` names what a replay from the same start would find (issue 10): per
    origin, its last publish of the matching topics at or after the start; after a restart the
    log before it is read once, by the first probe, and merged with what came since."""
    async with Client("positions-a") as client:
        await client.connect(instance.address)
        for topic in ("pos-a", "pos-a", "pos-b", "pos-a"):
            await client.publish(topic, b"{}")
        await client.flush(10)
        scan = await client.subscribe("pos-.*", bookmark="0", options="origin")
        replayed = await take(scan, 4)
        await scan.wait_completed(10)
        last_b = replayed[2]
        assert await _positions(client, "pos-.*") == scan.origins == {"amps-test": 4}
        assert await _positions(client, "pos-b") == {"amps-test": last_b.txid}
        assert await _positions(client, "pos-b", last_b.bookmark) == {}  # none after it
        assert await _positions(client, "pos-a", last_b.bookmark) == {"amps-test": 4}
    await asyncio.to_thread(instance.restart)
    async with Client("positions-b") as client:
        await client.connect(instance.address)
        # Dispatched before the first probe reads the log: the older position must not win.
        await client.publish("pos-a", b"{}")
        await client.flush(10)
        assert await _positions(client, "pos-a") == {"amps-test": 5}
        assert await _positions(client, "pos-b") == {"amps-test": last_b.txid}
        assert await _positions(client, "pos-b", last_b.bookmark) == {}
        assert await _positions(client, "pos-.*", last_b.bookmark) == {"amps-test": 5}
