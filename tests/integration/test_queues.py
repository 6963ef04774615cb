"""Queues against a real instance: leases, crashes, restarts, routing, dead letters (issue 4)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson
import pytest

from amps import errors
from amps.client import Client
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueAction, QueueRecord
from tests.harness.instance import InstanceProcess, config_xml, process_env
from tests.harness.streams import take

TIMEOUT_S = 30

# The queue work's expiries as dead letters on dead-letters (AMPS-REFERENCE §5.1).
DEAD_LETTERS = """
<Actions>
  <Action>
    <On><Module>amps-action-on-sow-expire-message</Module><Options><Topic>work</Topic><MessageType>json</MessageType></Options></On>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>dead-letters</Topic><MessageType>json</MessageType>
        <Data>{"reason":"{{AMPS_REASON}}","message":{{AMPS_DATA}}}</Data></Options></Do>
  </Action>
</Actions>
"""

WORK_QUEUE = (
    """
<SOW>
  <Queue>
    <Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic><MessageType>json</MessageType>
    <LeasePeriod>30s</LeasePeriod><MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>
  </Queue>
  <Queue>
    <Name>ORDERS_RISK</Name><UnderlyingTopic>^ORDERS(_RISK_DIRECT)?$</UnderlyingTopic>
    <DefaultPublishTarget>ORDERS_RISK_DIRECT</DefaultPublishTarget>
    <MessageType>json</MessageType><MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>
  </Queue>
  <Queue>
    <Name>ORDERS_ANALYTICS</Name><UnderlyingTopic>ORDERS</UnderlyingTopic>
    <MessageType>json</MessageType><MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>
  </Queue>
  <Queue>
    <Name>short</Name><UnderlyingTopic>short-topic</UnderlyingTopic><MessageType>json</MessageType>
    <LeasePeriod>1s</LeasePeriod>
  </Queue>
  <Queue>
    <Name>once</Name><UnderlyingTopic>once-topic</UnderlyingTopic><MessageType>json</MessageType>
    <Semantics>at-most-once</Semantics><MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>
  </Queue>
</SOW>
"""
    + DEAD_LETTERS
)


@pytest.fixture
def queue_instance(tmp_path: Path):  # type: ignore[no-untyped-def]
    process = InstanceProcess(tmp_path / "amps", config_xml(extra=WORK_QUEUE)).start()
    try:
        yield process
    finally:
        process.kill()


async def publish_ids(client: Client, topic: str, ids: range) -> None:
    for i in ids:
        await client.publish(topic, orjson.dumps({"id": i}))
    await client.flush(timeout_s=TIMEOUT_S)


async def test_each_message_goes_to_one_consumer_once(queue_instance: InstanceProcess) -> None:
    """Q5, Q8, Q10: two consumers with backlog share the queue; acked messages never return."""
    async with Client("q-pub") as pub, Client("q-c1") as c1, Client("q-c2") as c2:
        for client in (pub, c1, c2):
            await client.connect(queue_instance.address)
        s1 = await c1.subscribe("work", max_backlog=5)
        s2 = await c2.subscribe("work", max_backlog=5)
        assert s1.granted_max_backlog == 5
        await publish_ids(pub, "orders", range(1, 201))
        seen: list[int] = []

        async def consume(subscription: object) -> None:
            async for message in subscription:  # type: ignore[attr-defined]
                seen.append(message.json()["id"])
                assert message.lease_deadline_us > 0
                assert message.delivery_count == 1
                await message.ack()
                if len(seen) >= 200:
                    return

        tasks = [asyncio.create_task(consume(s)) for s in (s1, s2)]
        done, pending = await asyncio.wait(tasks, timeout=TIMEOUT_S, return_when="FIRST_COMPLETED")
        for task in pending:
            task.cancel()
        assert done
        await c1.flush_acks()
        await c2.flush_acks()
    assert sorted(seen) == list(range(1, 201))
    async with Client("q-check") as check:
        await check.connect(queue_instance.address)
        assert await check.sow("work") == []


async def test_leases_of_a_killed_consumer_return_at_once(queue_instance: InstanceProcess) -> None:
    """Q6: a consumer SIGKILLed while holding leases; its messages go to another consumer
    long before the 30 s lease period ends."""
    async with Client("kill-pub") as pub:
        await pub.connect(queue_instance.address)
        await publish_ids(pub, "orders", range(1, 11))
    consumer = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "amps", "subscribe", "--server", queue_instance.address,
        "--topic", "work", "--max-backlog", "10",
        stdout=asyncio.subprocess.PIPE, env=process_env(), stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert consumer.stdout is not None
        lines = [await asyncio.wait_for(consumer.stdout.readline(), TIMEOUT_S) for _ in range(10)]
        assert sorted(orjson.loads(line)["data"]["id"] for line in lines) == list(range(1, 11))
    finally:
        consumer.kill()  # SIGKILL while it holds ten leases
        await consumer.wait()
    async with Client("kill-heir") as heir:
        await heir.connect(queue_instance.address)
        started = asyncio.get_running_loop().time()
        messages = await take(await heir.subscribe("work", max_backlog=10), 10, timeout_s=10)
        elapsed = asyncio.get_running_loop().time() - started
        for message in messages:
            await message.ack()
        await heir.flush_acks()
    assert sorted(m.json()["id"] for m in messages) == list(range(1, 11))
    assert all(m.delivery_count == 2 for m in messages)
    assert elapsed < 10


def acked_removals(directory: Path, queue: str) -> list[tuple[int, ...]]:
    """The txids of each ACK QueueRecord of `queue` in a journal (read-only, live-safe)."""
    log = Journal.open(directory, read_only=True)
    found: list[tuple[int, ...]] = []
    try:
        txid = log.first_txid
        while batch := log.read(txid, 1000):
            txid = batch[-1].txid + 1
            found.extend(
                tuple(sorted(record.txids))
                for record in batch
                if isinstance(record, QueueRecord)
                and record.queue == queue
                and record.action == QueueAction.ACK
            )
    finally:
        log.close_read_only()
    return found


async def test_restart_keeps_unacked_and_forgets_acked(tmp_path: Path) -> None:
    """Q15, Q16: after a SIGKILL, acked messages never come back; leased and unleased ones do."""
    instance = InstanceProcess(tmp_path / "amps", config_xml(extra=WORK_QUEUE)).start()
    try:
        async with Client("rs-pub") as pub, Client("rs-con") as con:
            await pub.connect(instance.address)
            await con.connect(instance.address)
            await publish_ids(pub, "orders", range(1, 31))
            messages = await take(await con.subscribe("work", max_backlog=20), 20)
            acked = sorted(m.json()["id"] for m in messages[:10])
            for message in messages[:10]:
                await message.ack()
            await con.flush_acks()
            # The acks are durable once a flush after them completes.
            await con.flush(timeout_s=TIMEOUT_S)
        # Each sow_delete is one engine step: one removal record naming all its bookmarks (the
        # client batches acks by 20 // 3 = 6 here, and flush_acks sends the other four).
        removals = acked_removals(instance.workdir / "journal", "work")
        txids = sorted(m.txid for m in messages[:10])
        assert removals == [tuple(txids[:6]), tuple(txids[6:])]
        await asyncio.to_thread(instance.restart, kill=True)
        async with Client("rs-after") as after:
            await after.connect(instance.address)
            remaining = await take(await after.subscribe("work", max_backlog=100), 20)
            ids = sorted(m.json()["id"] for m in remaining)
            with pytest.raises(TimeoutError):
                await take(await after.subscribe("work", sub_id="x"), 1, timeout_s=0.5)
    finally:
        instance.kill()
    assert set(ids).isdisjoint(acked)
    assert ids == sorted(set(range(1, 31)) - set(acked))


async def test_restart_from_snapshot_then_replay_after_it(tmp_path: Path) -> None:
    """Q16 beyond AMPS: a clean stop stores a snapshot; after a later SIGKILL the queue restores
    it and replays only the log after it. Nothing acked returns, nothing unacked is lost."""
    instance = InstanceProcess(tmp_path / "amps", config_xml(extra=WORK_QUEUE)).start()
    acked: set[int] = set()
    try:
        async with Client("snap-pub") as pub, Client("snap-con") as con:
            await pub.connect(instance.address)
            await con.connect(instance.address)
            await publish_ids(pub, "orders", range(1, 31))
            for message in await take(await con.subscribe("work", max_backlog=10), 10):
                acked.add(message.json()["id"])
                await message.ack()
            await con.flush_acks()
            await con.flush(timeout_s=TIMEOUT_S)
        await asyncio.to_thread(instance.restart)  # SIGTERM: final checkpoint with a snapshot
        assert (instance.workdir / "journal" / "queues.db").exists()
        # The snapshot covers the acks too: a clean restart replays nothing at all.
        assert any("recovered from 0 log records" in line for line in instance.output)
        async with Client("snap-pub2") as pub, Client("snap-con2") as con:
            await pub.connect(instance.address)
            await con.connect(instance.address)
            await publish_ids(pub, "orders", range(31, 36))
            for message in await take(await con.subscribe("work", max_backlog=5), 5):
                acked.add(message.json()["id"])
                await message.ack()
            await con.flush_acks()
            await con.flush(timeout_s=TIMEOUT_S)
        await asyncio.to_thread(instance.restart, kill=True)
        async with Client("snap-after") as after:
            await after.connect(instance.address)
            remaining = await take(await after.subscribe("work", max_backlog=100), 20)
            ids = sorted(m.json()["id"] for m in remaining)
    finally:
        instance.kill()
    assert len(acked) == 15
    assert ids == sorted(set(range(1, 36)) - acked)


PRIORITY_QUEUE = """
<SOW>
  <Queue>
    <Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic><MessageType>json</MessageType>
    <MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>
  </Queue>
  <Queue>
    <Name>urgent</Name><UnderlyingTopic>orders</UnderlyingTopic><MessageType>json</MessageType>
    <Priority>/id</Priority><MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>
  </Queue>
</SOW>
"""


@pytest.mark.parametrize("with_priority", [False, True])
async def test_replay_without_a_snapshot_rebuilds_every_queue(
    tmp_path: Path, with_priority: bool
) -> None:
    """Q16: killed with queues.db gone, each queue replays the whole log: queues without
    expressions from the publishes' heads, a Priority queue from whole records, and the
    acks of one queue never touch the other."""
    extra = PRIORITY_QUEUE if with_priority else WORK_QUEUE
    instance = InstanceProcess(tmp_path / "amps", config_xml(extra=extra)).start()
    try:
        async with Client("rp-pub") as pub, Client("rp-con") as con:
            await pub.connect(instance.address)
            await con.connect(instance.address)
            await publish_ids(pub, "orders", range(1, 41))
            for message in await take(await con.subscribe("work", max_backlog=15), 15):
                await message.ack()
            await con.flush_acks()
            await con.flush(timeout_s=TIMEOUT_S)
        instance.kill()
        for path in (instance.workdir / "journal").glob("queues.db*"):
            path.unlink()
        await asyncio.to_thread(instance.restart)
        async with Client("rp-after") as after:
            await after.connect(instance.address)
            work = [m.json()["id"] for m in await after.sow("work")]
            urgent = [m.json()["id"] for m in await after.sow("urgent")] if with_priority else []
    finally:
        instance.kill()
    assert sorted(work) == list(range(16, 41))
    if with_priority:
        assert urgent == list(range(40, 0, -1))  # highest /id first (A2)


async def test_publish_to_queue_name_routes_to_default_publish_target(
    queue_instance: InstanceProcess,
) -> None:
    """A1: a publish to ORDERS reaches both queues; one to ORDERS_RISK only the risk queue."""
    async with Client("a1") as client:
        await client.connect(queue_instance.address)
        await client.publish("ORDERS", b'{"id":1}')
        await client.publish("ORDERS_RISK", b'{"id":2}')
        await client.flush(timeout_s=TIMEOUT_S)
        risk = sorted(m.json()["id"] for m in await client.sow("ORDERS_RISK"))
        analytics = sorted(m.json()["id"] for m in await client.sow("ORDERS_ANALYTICS"))
        direct = await take(await client.subscribe("ORDERS_RISK_DIRECT", bookmark="0"), 1)
    assert risk == [1, 2]
    assert analytics == [1]
    assert direct[0].json() == {"id": 2}


async def test_expire_publishes_a_dead_letter_with_the_reason(
    queue_instance: InstanceProcess,
) -> None:
    """Q12, §5.1: an ack with `expire` removes the message and runs the on-expire action."""
    async with Client("dl") as client:
        await client.connect(queue_instance.address)
        dead = await client.subscribe("dead-letters")
        await client.publish("orders", b'{"id":42}')
        await client.flush(timeout_s=TIMEOUT_S)
        [message] = await take(await client.subscribe("work"), 1)
        await message.ack(expire=True)
        [letter] = await take(dead, 1)
        assert await client.sow("work") == []
    assert letter.json() == {"reason": "forced_expire", "message": {"id": 42}}


async def test_cancel_returns_the_message(queue_instance: InstanceProcess) -> None:
    """Q11: cancel returns the message to the queue at once with its delivery count."""
    async with Client("cancel") as client:
        await client.connect(queue_instance.address)
        await client.publish("orders", b'{"id":7}')
        await client.flush(timeout_s=TIMEOUT_S)
        subscription = await client.subscribe("work")
        [first] = await take(subscription, 1)
        await first.ack(cancel=True)
        [second] = await take(subscription, 1)
        await second.ack()
    assert second.bookmark == first.bookmark
    assert second.delivery_count == 2


async def test_expired_message_goes_to_an_idle_consumer(queue_instance: InstanceProcess) -> None:
    """Q6, Q9 (issue 11): a consumer that stays connected but never acks does not get its
    expired message back while a second, idle consumer with the same room waits."""
    async with Client("lazy") as lazy, Client("idle") as idle, Client("short-pub") as pub:
        for client in (lazy, idle, pub):
            await client.connect(queue_instance.address)
        lazy_subscription = await lazy.subscribe("short")
        idle_subscription = await idle.subscribe("short")
        await publish_ids(pub, "short-topic", range(1, 2))
        [first] = await take(lazy_subscription, 1)  # both idle: the first found
        [second] = await take(idle_subscription, 1, timeout_s=15)  # after the 1 s lease
        await second.ack()
        await idle.flush_acks()
    assert second.bookmark == first.bookmark
    assert second.delivery_count == 2


async def test_at_most_once_message_leaves_when_sent(queue_instance: InstanceProcess) -> None:
    """Q7: at-most-once: sent once, gone from the queue, not redelivered after a disconnect."""
    async with Client("amo-pub") as pub:
        await pub.connect(queue_instance.address)
        await publish_ids(pub, "once-topic", range(1, 4))
    async with Client("amo-1") as first:
        await first.connect(queue_instance.address)
        got = await take(await first.subscribe("once", max_backlog=10), 3)
    async with Client("amo-2") as second:
        await second.connect(queue_instance.address)
        assert await second.sow("once") == []
    assert sorted(m.json()["id"] for m in got) == [1, 2, 3]


async def test_queue_errors_are_precise_and_change_nothing(queue_instance: InstanceProcess) -> None:
    """Bad filter, unknown bookmark, ack on a non-queue topic, bad ack options."""
    async with Client("q-err") as client:
        await client.connect(queue_instance.address)
        await client.publish("orders", b'{"id":1}')
        await client.flush(timeout_s=TIMEOUT_S)
        with pytest.raises(errors.FilterSyntaxError):
            await client.subscribe("work", filter="/qty >")
        with pytest.raises(errors.UnknownBookmark):
            await client.sow_delete("work", bookmark="123|456|")
        with pytest.raises(errors.InvalidBookmark):
            await client.sow_delete("work", bookmark="garbage")
        with pytest.raises(errors.NotAQueue):
            await client.sow_delete("orders", bookmark="123|1|")
        assert len(await client.sow("work")) == 1


def test_bad_queue_config_is_refused(tmp_path: Path) -> None:
    bad = config_xml(
        extra="<SOW><Queue><Name>q</Name><UnderlyingTopic>^a|b$</UnderlyingTopic>"
        "<MessageType>json</MessageType></Queue></SOW>"
    )
    code, output = InstanceProcess(tmp_path / "amps", bad).run_to_exit()
    assert code == 78, output
    assert "DefaultPublishTarget" in output


EXPIRING_QUEUE = (
    """
<SOW>
  <Queue>
    <Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic><MessageType>json</MessageType>
    <Expiration>2s</Expiration><MaxPerSubscriptionBacklog>1</MaxPerSubscriptionBacklog>
  </Queue>
</SOW>
"""
    + DEAD_LETTERS
)


def queue_log(directory: Path, queue: str, topic: str) -> list[tuple[object, ...]]:
    """A journal as ("publish", txid, id) per publish on `topic`, ("dead letter", id) per
    publish on dead-letters and (action, txids) per QueueRecord of `queue` (read-only)."""
    log = Journal.open(directory, read_only=True)
    found: list[tuple[object, ...]] = []
    try:
        txid = log.first_txid
        while batch := log.read(txid, 1000):
            txid = batch[-1].txid + 1
            for record in batch:
                if isinstance(record, PublishRecord) and record.topic == topic:
                    found.append(("publish", record.txid, orjson.loads(record.data)["id"]))
                elif isinstance(record, PublishRecord) and record.topic == "dead-letters":
                    found.append(("dead letter", orjson.loads(record.data)["message"]["id"]))
                elif isinstance(record, QueueRecord) and record.queue == queue:
                    found.append((record.action, tuple(sorted(record.txids))))
    finally:
        log.close_read_only()
    return found


async def test_expired_while_down_is_recorded_and_dead_lettered_after_restart(
    tmp_path: Path,
) -> None:
    """Q13, Q16, §5.1: a message whose Expiration passed while the instance was down leaves at
    restart with its removal record and dead letter; one acked before the crash stays acked
    (replay runs no deadline before the log's own removals are read)."""
    instance = InstanceProcess(tmp_path / "amps", config_xml(extra=EXPIRING_QUEUE)).start()
    journal = instance.workdir / "journal"
    try:
        async with Client("ew-pub") as pub, Client("ew-con") as con:
            await pub.connect(instance.address)
            await con.connect(instance.address)
            await publish_ids(pub, "orders", range(1, 3))
            [acked] = await take(await con.subscribe("work", max_backlog=1), 1)
            await acked.ack()
            await con.flush_acks()
            await con.flush(timeout_s=TIMEOUT_S)
        instance.kill()
        before = queue_log(journal, "work", "orders")
        [(_, acked_txid, acked_id), (_, waiting_txid, waiting_id), removal] = before
        assert acked.json() == {"id": acked_id}
        assert removal == (QueueAction.ACK, (acked_txid,)), "it expired before the kill"
        for path in journal.glob("queues.db*"):
            path.unlink()  # replay the whole log, as after a crash with no checkpoint
        await asyncio.sleep(2.5)  # past the waiting message's Expiration, while down
        await asyncio.to_thread(instance.restart)
        async with Client("ew-after") as after:
            await after.connect(instance.address)
            [letter] = await take(await after.subscribe("dead-letters", bookmark="0"), 1)
            left = await after.sow("work")
        after_restart = queue_log(journal, "work", "orders")
        # Once logged, an expiry is replayed silently: a second restart writes nothing again.
        await asyncio.to_thread(instance.restart, kill=True)
        async with Client("ew-again") as again:
            await again.connect(instance.address)
            await publish_ids(again, "marker", range(1))  # durable: all before it is too
    finally:
        instance.kill()
    assert letter.json() == {"reason": "time_limit", "message": {"id": waiting_id}}
    assert left == []
    expired = [(QueueAction.EXPIRED, (waiting_txid,)), ("dead letter", waiting_id)]
    assert after_restart == [*before, *expired]
    assert queue_log(journal, "work", "orders") == after_restart
