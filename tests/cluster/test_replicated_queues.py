"""Replicated queues across three real instances (issue 9: R2-R6). Every scenario ends with the
queue checker: lost, duplicated, delivered-while-leased-elsewhere and never-acked, all zero,
and the queue empty on every instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import urllib.request
from pathlib import Path

import orjson

from amps.client import Client
from amps.log.bookmarks import publisher_id_for
from amps.log.journal import Journal
from amps.log.records import TransferRecord
from amps.queue.snapshot_codec import SnapshotFormatError
from replication import queue_snapshot
from tests.cluster.checker import Delivery, QueueCount, check_queue
from tests.cluster.test_replication import publish
from tests.harness.cluster import Cluster, cluster, cluster_configs, full_mesh, wait_until
from tests.harness.instance import InstanceProcess
from tests.harness.streams import more_within, take

NAMES = ["a", "b", "c"]
COUNT = 100
CLEAN = QueueCount(0, 0, 0, 0)


def queue_xml(kind: str = "Queue", extra: str = "") -> str:
    return (
        f"<SOW><{kind}><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>"
        f"<MessageType>json</MessageType><MaxPerSubscriptionBacklog>20"
        f"</MaxPerSubscriptionBacklog>{extra}</{kind}></SOW>"
    )


def start(tmp_path: Path, clusters: list[Cluster], queue: str) -> Cluster:
    mesh = cluster(tmp_path, NAMES)
    clusters.append(mesh)
    return mesh.start(full_mesh(NAMES), dict.fromkeys(NAMES, queue))


def queue_stats(process: InstanceProcess) -> dict[str, object]:
    url = f"http://127.0.0.1:{process.admin_port}/amps/instance/queues.json"
    with urllib.request.urlopen(url, timeout=10) as response:
        (queue,) = orjson.loads(response.read())["queues"]
    return dict(queue)


def depth(process: InstanceProcess) -> int:
    value = queue_stats(process)["queue_depth"]
    assert isinstance(value, int), value
    return value


def grants(process: InstanceProcess) -> list[tuple[str, str]]:
    """(writer, new owner) of every grant or claim of `work` in the instance's journal."""
    journal = Journal.open(process.workdir / "journal", read_only=True)
    try:
        found: list[tuple[str, str]] = []
        position = journal.first_txid
        while records := journal.read(position, 10_000):
            found.extend(
                (r.from_instance, r.to_instance)
                for r in records
                if isinstance(r, TransferRecord) and r.queue == "work"
            )
            position = records[-1].txid + 1
        return found
    finally:
        journal.close_read_only()


class Consumers:
    """Queue consumers on some instances that ack what they get at once, recording it."""

    def __init__(self, mesh: Cluster) -> None:
        self.mesh = mesh
        self.deliveries: list[Delivery] = []
        self.barriers: dict[str, list[tuple[str, int]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._ready: list[asyncio.Event] = []

    async def start(self, *names: str, backlog: int = 10) -> None:
        for name in names:
            ready = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._consume(name, backlog, ready)))
            self._ready.append(ready)
        await asyncio.gather(*(r.wait() for r in self._ready))

    async def _consume(self, name: str, backlog: int, ready: asyncio.Event) -> None:
        async with Client(f"consumer-{name}") as client:
            await client.connect(self.mesh[name].address)
            subscription = await client.subscribe("work", max_backlog=backlog)
            ready.set()
            async for message in subscription:
                body = message.json()
                key = (str(body["p"]), int(body["n"]))
                if body.get("barrier"):
                    self.barriers.setdefault(name, []).append(key)
                    continue
                received = time.monotonic()
                await message.ack()
                await client.flush_acks()
                self.deliveries.append(Delivery(name, key, received, time.monotonic()))

    def delivered_on(self, name: str) -> int:
        return sum(1 for d in self.deliveries if d.instance == name)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def drained(mesh: Cluster, consumers: Consumers, expected: dict[str, int]) -> QueueCount:
    """Wait until every message was delivered and every queue is empty; the checker's count."""
    total = sum(expected.values())
    await wait_until(lambda: len(consumers.deliveries) >= total, 90)
    await wait_until(lambda: all(depth(mesh[n]) == 0 for n in NAMES), 60)
    left = sum([await asyncio.to_thread(depth, mesh[n]) for n in NAMES])
    await consumers.stop()
    return check_queue(consumers.deliveries, expected, left)


async def test_consumers_only_on_a_non_owner_get_everything_by_transfer(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """R4, R5: a publishes (a owns), only c consumes: every message moves by a transfer."""
    mesh = start(tmp_path, clusters, queue_xml())
    consumers = Consumers(mesh)
    await consumers.start("c")
    await publish(mesh["a"], "pub-a", COUNT)
    assert await drained(mesh, consumers, {"pub-a": COUNT}) == CLEAN
    assert consumers.delivered_on("c") == COUNT
    # Each one granted by its owner, logged there and replicated to every holder (R5).
    for name in NAMES:
        assert grants(mesh[name]) == [("a", "c")] * COUNT, name


async def test_the_owner_serves_its_own_consumers_first(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """R3: with a consumer on the owner that can always take more, a non-owner's consumer
    gets nothing; publishes on two instances go to each one's own consumer."""
    mesh = start(tmp_path, clusters, queue_xml())
    consumers = Consumers(mesh)
    await consumers.start("a", "b", "c", backlog=20)
    await asyncio.gather(publish(mesh["a"], "pub-a", COUNT), publish(mesh["b"], "pub-b", COUNT))
    assert await drained(mesh, consumers, {"pub-a": COUNT, "pub-b": COUNT}) == CLEAN
    by_instance = {(d.instance, d.message[0]) for d in consumers.deliveries}
    assert by_instance <= {("a", "pub-a"), ("b", "pub-b"), ("c", "pub-a"), ("c", "pub-b")}
    assert consumers.delivered_on("a") + consumers.delivered_on("b") > COUNT


async def test_group_local_queue_is_owned_by_its_initial_owner(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """R2: a GroupLocalQueue's messages are owned by InitialOwner wherever published."""
    mesh = start(tmp_path, clusters, queue_xml("GroupLocalQueue", "<InitialOwner>b</InitialOwner>"))
    consumers = Consumers(mesh)
    await consumers.start("b", backlog=20)
    await asyncio.gather(publish(mesh["a"], "pub-a", COUNT), publish(mesh["c"], "pub-c", COUNT))
    assert await drained(mesh, consumers, {"pub-a": COUNT, "pub-c": COUNT}) == CLEAN
    assert consumers.delivered_on("b") == 2 * COUNT
    assert grants(mesh["b"]) == []  # nothing had to move


async def test_local_queue_delivers_a_copy_on_every_instance(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """R2: a LocalQueue is not replicated (its underlying topic is): each instance delivers
    its own copy and acks stay where they are made."""
    mesh = start(tmp_path, clusters, queue_xml("LocalQueue"))
    consumers = Consumers(mesh)
    await consumers.start("a", "c")
    await publish(mesh["a"], "pub-a", COUNT)
    await wait_until(lambda: len(consumers.deliveries) >= 2 * COUNT, 90)
    await wait_until(lambda: depth(mesh["a"]) == 0 and depth(mesh["c"]) == 0, 60)
    assert await asyncio.to_thread(depth, mesh["b"]) == COUNT  # nobody consumes on b
    await consumers.stop()
    for name in ("a", "c"):
        mine = [d for d in consumers.deliveries if d.instance == name]
        assert check_queue(mine, {"pub-a": COUNT}) == CLEAN, name


async def test_barriers_release_on_each_instance(tmp_path: Path, clusters: list[Cluster]) -> None:
    """R6: a barrier is delivered by every instance that holds it once every earlier message
    there is acknowledged, whoever owned them."""
    barrier = "<BarrierExpression>/barrier = 1</BarrierExpression>"
    mesh = start(tmp_path, clusters, queue_xml(extra=barrier))
    consumers = Consumers(mesh)
    await consumers.start("a", "b")
    async with Client("pub-a") as client:
        await client.connect(mesh["a"].address)
        for n in range(1, 11):
            await client.publish("orders", orjson.dumps({"p": "pub-a", "n": n}))
        await client.publish("orders", orjson.dumps({"p": "pub-a", "n": 11, "barrier": 1}))
        await client.flush(timeout_s=60)
    await wait_until(lambda: len(consumers.barriers) == 2, 60)
    assert consumers.barriers == {"a": [("pub-a", 11)], "b": [("pub-a", 11)]}
    assert check_queue(consumers.deliveries, {"pub-a": 10}) == CLEAN
    await consumers.stop()


async def test_a_restarted_owner_rebuilds_ownership_from_its_log(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """Recovery (R5, Q16): the owner, SIGKILLed after granting messages away and restarted,
    replays its grants with the queue: it never delivers what another instance holds, and the
    acks made there still remove the messages everywhere."""
    mesh = start(tmp_path, clusters, queue_xml())
    async with Client("holder") as holder:
        await holder.connect(mesh["c"].address)
        on_c = await holder.subscribe("work", max_backlog=10)
        await publish(mesh["a"], "pub-a", 10)
        held = await take(on_c, 10, 60)  # all ten moved to c by transfer, leased there
        await asyncio.to_thread(mesh["a"].restart, kill=True)
        async with Client("owner-consumer") as other:
            await other.connect(mesh["a"].address)
            on_a = await other.subscribe("work", max_backlog=10)
            assert await more_within(on_a, 2.0) == []  # granted away before the crash
            for message in held:
                await message.ack()
            await holder.flush_acks()
            await wait_until(lambda: all(depth(mesh[n]) == 0 for n in NAMES), 60)
            assert await more_within(on_a, 0.5) == []
    assert sorted(grants(mesh["a"])) == [("a", "c")] * 10


def snapshot_is_current(process: InstanceProcess) -> bool:
    """queues.db holds a sound snapshot of `work` at the journal's last txid (nothing to
    replay after it)."""
    path = process.workdir / "journal" / "queues.db"
    if not path.exists():
        return False
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        query = "SELECT snapshot_txid, snapshot FROM queue_state WHERE queue = 'work'"
        row = db.execute(query).fetchone()
    if row is None or row[1] is None:
        return False
    try:
        queue_snapshot.decode(row[1])
    except SnapshotFormatError:
        return False
    journal = Journal.open(process.workdir / "journal", read_only=True)
    try:
        return int(row[0]) >= journal.last_txid
    finally:
        journal.close_read_only()


def damage_snapshot(process: InstanceProcess) -> None:
    """Flip one byte in the middle of the stored snapshot of `work` (the instance is down)."""
    with contextlib.closing(sqlite3.connect(process.workdir / "journal" / "queues.db")) as db:
        (data,) = db.execute("SELECT snapshot FROM queue_state WHERE queue = 'work'").fetchone()
        middle = len(data) // 2
        damaged = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
        db.execute("UPDATE queue_state SET snapshot = ? WHERE queue = 'work'", (damaged,))
        db.commit()


def ownership_view(process: InstanceProcess) -> tuple[object, ...]:
    stats = queue_stats(process)
    return stats["queue_depth"], stats["owned"], stats["owned_elsewhere_count"]


async def test_a_killed_instance_restores_its_queue_and_ownership_from_its_snapshot(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """Recovery from a snapshot (issue 9, Q16): a, holding messages of two origins, some
    granted away to c and one acked on b, is SIGKILLed once its snapshot is current and
    restarted: it replays no log record, holds the same messages with the same owners, never
    delivers what c holds, asks b for b's messages by transfer again, and acks still remove
    messages everywhere."""
    mesh = start(tmp_path, clusters, queue_xml())
    async with Client("holder") as holder, Client("acker") as acker:
        await holder.connect(mesh["c"].address)
        on_c = await holder.subscribe("work", max_backlog=4)
        await publish(mesh["a"], "pub-a", 10)
        await publish(mesh["b"], "pub-b", 10)
        held = await take(on_c, 4, 60)  # moved to c by transfer, leased there
        held_keys = {(m.json()["p"], m.json()["n"]) for m in held}
        free_b = next(n for n in range(10, 0, -1) if ("pub-b", n) not in held_keys)
        await acker.connect(mesh["b"].address)
        await acker.sow_delete("work", bookmark=f"{publisher_id_for('pub-b')}|{free_b}|")
        await wait_until(lambda: all(depth(mesh[n]) == 19 for n in NAMES), 60)
        before = ownership_view(mesh["a"])
        # A damaged snapshot is not trusted: the log is replayed instead, to the same state.
        await wait_until(lambda: snapshot_is_current(mesh["a"]), 60)
        mesh["a"].kill()
        damage_snapshot(mesh["a"])
        await asyncio.to_thread(mesh["a"].restart)
        output = "".join(mesh["a"].output)
        assert "snapshot not used (replicated queue snapshot is damaged" in output, output
        assert ownership_view(mesh["a"]) == before
        # The next snapshot is restored: nothing is replayed.
        await wait_until(lambda: snapshot_is_current(mesh["a"]), 60)
        await asyncio.to_thread(mesh["a"].restart, kill=True)
        output = "".join(mesh["a"].output)
        assert "queues recovered from 0 log records" in output, output
        assert "snapshot not used" not in output
        # Staged (Rule 7 of replication/queue_replica.py): indexed after the ready line.
        await asyncio.to_thread(mesh["a"].wait_for_output, "queues indexed after the start")
        assert ownership_view(mesh["a"]) == before
        async with Client("owner-consumer") as consumer:
            await consumer.connect(mesh["a"].address)
            on_a = await consumer.subscribe("work", max_backlog=30)
            # a's own messages at once; b's by transfer (R4); never what c holds (R5).
            got = await take(on_a, 19 - len(held), 60)
            keys = {(m.json()["p"], m.json()["n"]) for m in got}
            published = {(p, n) for p in ("pub-a", "pub-b") for n in range(1, 11)}
            assert keys == published - held_keys - {("pub-b", free_b)}
            assert len(got) == len(keys)  # each once
            for message in [*got, *held]:
                await message.ack()
            await consumer.flush_acks()
            await holder.flush_acks()
            await wait_until(lambda: all(depth(mesh[n]) == 0 for n in NAMES), 60)
            assert await more_within(on_a, 0.5) == []


DEAD_LETTERS = (
    "<Actions><Action><On><Module>amps-action-on-sow-expire-message</Module><Options>"
    "<Topic>work</Topic><MessageType>json</MessageType></Options></On>"
    "<Do><Module>amps-action-do-publish-message</Module><Options><Topic>dead-letters</Topic>"
    "<MessageType>json</MessageType><Data>{{AMPS_DATA}}</Data></Options></Do></Action></Actions>"
)


async def test_only_the_owner_expires_and_the_dead_letter_is_written_once(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """R2, Q13: nobody consumes; the owner alone expires the messages, writes one dead letter
    each (replicated like any publish) and its removals empty the queue everywhere."""
    mesh = start(tmp_path, clusters, queue_xml(extra="<Expiration>1s</Expiration>") + DEAD_LETTERS)
    await publish(mesh["a"], "pub-a", 10)
    await wait_until(lambda: all(depth(mesh[n]) == 0 for n in NAMES), 60)
    for name in NAMES:
        async with Client(f"dead-reader-{name}") as reader:
            await reader.connect(mesh[name].address)
            replay = await reader.subscribe("dead-letters", bookmark="epoch")
            letters = await take(replay, 10, 60)
            assert sorted(int(m.json()["n"]) for m in letters) == list(range(1, 11)), name
            assert await more_within(replay, 1.0) == [], name  # not once per instance


async def test_an_ack_waiting_for_its_message_survives_a_restart(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """The deferred acks (DeferredAckExpiration): an ack made on b for a message b has not
    received yet is written to b's log, so it still removes the message when it arrives after
    b restarted, on b and on its owner a."""
    pair = cluster(tmp_path, ["a", "b"])
    clusters.append(pair)
    configs = cluster_configs(
        pair.names, full_mesh(pair.names), pair.replication_ports, dict.fromkeys("ab", queue_xml())
    )
    pair.instances["b"] = InstanceProcess(tmp_path / "b", configs["b"]).start()
    async with Client("failed-over") as consumer:
        await consumer.connect(pair["b"].address)
        await consumer.sow_delete("work", bookmark=f"{publisher_id_for('pub-a')}|1|")
    await asyncio.to_thread(pair["b"].restart)  # a clean stop: its recovery point is stored
    pair.instances["a"] = InstanceProcess(tmp_path / "a", configs["a"]).start()
    await publish(pair["a"], "pub-a", 2)

    def only_the_second_left() -> bool:
        on_b = queue_stats(pair["b"])
        removed_on_b = int(on_b["acked_count"]) == 1  # type: ignore[call-overload]
        return removed_on_b and int(on_b["queue_depth"]) == 1 and depth(pair["a"]) == 1  # type: ignore[call-overload]

    await wait_until(only_the_second_left, 60)


async def test_a_failover_republish_is_owned_by_the_lower_origin_across_kills(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """Issue 9 (L4, R2, R5): b logged a publish and died before a had it; the publisher failed
    over to a and republished it, which a logged as its own. Restarted, b holds its copy
    (origin b) and a its own (origin a): both would own it at epoch 0 and deliver it. Each
    discards the other's copy as a duplicate, and b, whose origin name is higher, writes an
    ORIGIN record naming a and stops owning it; SIGKILLed and restarted again, b still does.
    With consumers on both, one delivery in the cluster (by a, or by b after a granted it)."""
    pair = cluster(tmp_path, ["a", "b"])
    clusters.append(pair)
    configs = cluster_configs(
        pair.names, full_mesh(pair.names), pair.replication_ports, dict.fromkeys("ab", queue_xml())
    )
    a = pair.instances["a"] = InstanceProcess(tmp_path / "a", configs["a"])
    b = pair.instances["b"] = InstanceProcess(tmp_path / "b", configs["b"]).start()
    body = orjson.dumps({"p": "pub", "n": 1})
    async with Client("pub", reconnect=False) as publisher:
        await publisher.connect(b.address)
        await publisher.publish("orders", body, seq=1)  # a is down: never persisted-acked
        await wait_until(lambda: depth(b) == 1, 30)
        await asyncio.to_thread(b.kill)
    await asyncio.to_thread(a.start)
    async with Client("pub", reconnect=False) as publisher:  # its failover: the same seq on a
        await publisher.connect(a.address)
        await publisher.publish("orders", body, seq=1)
        await wait_until(lambda: depth(a) == 1, 30)  # not persisted-acked: b is a sync peer
    await asyncio.to_thread(b.restart, kill=True)

    def settled() -> bool:
        on_a, on_b = queue_stats(a), queue_stats(b)
        views = [(s["queue_depth"], s["owned"], s["owned_elsewhere_count"]) for s in (on_a, on_b)]
        return views == [(1, 1, 0), (1, 0, 1)]

    await wait_until(settled, 30)  # without the ORIGIN record b owns it too, for ever
    assert grants(b) == [("a", "a")]
    await asyncio.to_thread(b.restart, kill=True)  # rebuilt from b's snapshot or log
    await wait_until(settled, 30)
    consumers = Consumers(pair)
    await consumers.start("a", "b")
    await wait_until(lambda: len(consumers.deliveries) == 1, 30)
    await wait_until(lambda: depth(a) == depth(b) == 0, 30)
    await consumers.stop()
    assert check_queue(consumers.deliveries, {"pub": 1}) == CLEAN
