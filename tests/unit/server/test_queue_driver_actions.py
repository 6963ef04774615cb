"""QueueDriver executes an engine step's actions in contract order (amps.server.queues):
removal records grouped per (action, reason) and appended before a later dead letter and
before the step's deliveries; deliveries after an at-most-once removal wait for durability;
one frame entry per delivery, with its lease deadline and count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amps.log.records import PublishRecord, QueueAction, QueueRecord
from amps.queue import (
    Action,
    Deliver,
    DeliverBarrier,
    ExpireReason,
    PublishDeadLetter,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
)
from amps.queue.policy import Semantics
from amps.server.host import InstanceStatistics
from amps.server.queues import QueueDriver
from amps.server.wire import delivery_entry

WALL_US = 1_763_870_000_000_000
NOW_MS = 50_000


class _Session:
    def __init__(self) -> None:
        self.entries: list[bytes] = []

    def send_entry(self, entry: bytes) -> None:
        self.entries.append(entry)

    def send_entries(self, entries: list[bytes]) -> None:
        self.entries.extend(entries)


class _Records:
    def __init__(self, records: dict[int, PublishRecord]) -> None:
        self.records = records

    def get(self, txid: int) -> PublishRecord | None:
        return self.records.get(txid)


class _Instance:
    """What QueueDriver._execute uses of an Instance, recording the order of effects."""

    def __init__(self, records: dict[int, PublishRecord]) -> None:
        self.records = _Records(records)
        self.statistics = InstanceStatistics()
        self.log: list[object] = []
        self.soon: list[bool] = []  # each appended record's commit urgency
        self.appended: list[QueueRecord] = []
        self.durable_callbacks: list[Callable[[], None]] = []

    def wall_us(self) -> int:
        return WALL_US

    def now_ms(self) -> int:
        return NOW_MS

    def append_record(self, record: QueueRecord, *, soon: bool = False) -> QueueRecord:
        self.log.append((record.action, record.reason, record.txids))
        self.appended.append(record)
        self.soon.append(soon)
        return record

    def when_durable(self, callback: Callable[[], None]) -> None:
        self.log.append("wait for durability")
        self.durable_callbacks.append(callback)


def _driver(
    records: dict[int, PublishRecord], semantics: Semantics = "at-least-once"
) -> tuple[QueueDriver, _Instance, _Session]:
    instance = _Instance(records)
    driver: Any = QueueDriver.__new__(QueueDriver)
    driver.name = "work"
    driver.instance = instance
    driver._topic = b"work"
    driver._encoders = {}
    session = _Session()
    driver.subscribers = {"c1/s1": (session, "s1")}
    driver.dead_letters = [lambda record, reasons: instance.log.append(("dead", record.txid))]
    driver.engine = QueueEngine(QueuePolicy(semantics=semantics))
    driver.delivered_us = {}
    driver.replica = None
    driver._deferred_logged = {}
    return driver, instance, session


def _record(txid: int) -> PublishRecord:
    return PublishRecord(txid, WALL_US - txid, "orders", b"m%d" % txid, 9, txid * 10,
                         correlation_id="c" if txid % 2 else "")  # fmt: skip


def _expected_entry(txid: int, lease_ms: int | None, count: int) -> bytes:
    return delivery_entry(
        topic="work", data=b"m%d" % txid, bookmark=f"9|{txid * 10}|", sub_ids=("s1",),
        txid=txid, timestamp_us=WALL_US - txid,
        lease_deadline_us=0 if lease_ms is None else WALL_US + (lease_ms - NOW_MS) * 1000,
        delivery_count=count, queue=True, correlation_id="c" if txid % 2 else "",
    )  # fmt: skip


def test_removals_are_grouped_and_written_before_dead_letters_and_deliveries() -> None:
    driver, instance, session = _driver({t: _record(t) for t in range(1, 10)})
    acked, expired = RemovalReason.ACKED, RemovalReason.EXPIRED
    actions: list[Action] = [
        RecordRemoval(1, acked),
        RecordRemoval(2, expired, ExpireReason.TIME_LIMIT),
        RecordRemoval(3, acked),
        PublishDeadLetter(2, ExpireReason.TIME_LIMIT),
        RecordRemoval(4, acked),
        RecordRemoval(5, expired, ExpireReason.FORCED_EXPIRE),
        Deliver("c1/s1", "c1", 6, 80_000, 1),
        Deliver("c1/s1", "c1", 7, 80_000, 1),
        Deliver("gone/s9", "gone", 8, 80_000, 1),
        Deliver("c1/s1", "c1", 9, None, 3),
    ]
    removed = driver._execute(actions, NOW_MS, False)
    assert removed == 5
    text = ExpireReason.TIME_LIMIT.reason_text()
    forced = ExpireReason.FORCED_EXPIRE.reason_text()
    assert instance.log == [
        (QueueAction.ACK, "", (1, 3)),
        (QueueAction.EXPIRED, text, (2,)),
        ("dead", 2),
        (QueueAction.ACK, "", (4,)),
        (QueueAction.EXPIRE, forced, (5,)),
    ]
    assert instance.soon == [True] * 4  # removal records ride the next commit (Q15)
    assert session.entries == [
        _expected_entry(6, 80_000, 1),
        _expected_entry(7, 80_000, 1),
        _expected_entry(9, None, 3),
    ]
    assert instance.statistics.delivered == 3
    assert instance.statistics.hops.deliveries_held_for_commit == 0


def test_deliveries_after_an_at_most_once_removal_wait_for_durability() -> None:
    driver, instance, session = _driver({t: _record(t) for t in range(1, 5)}, "at-most-once")
    actions: list[Action] = [
        Deliver("c1/s1", "c1", 1, None, 1),
        RecordRemoval(2, RemovalReason.SENT_AT_MOST_ONCE),
        Deliver("c1/s1", "c1", 2, None, 1),
        DeliverBarrier(3, (("c1", "c1/s1"), ("gone", "gone/s9"))),
    ]
    assert driver._execute(actions, NOW_MS, False) == 1
    assert instance.log == [
        (QueueAction.DELIVERED_AT_MOST_ONCE, "", (2,)),
        "wait for durability",
    ]
    assert session.entries == [_expected_entry(1, None, 1)]
    assert instance.statistics.hops.deliveries_held_for_commit == 2
    instance.durable_callbacks.pop()()
    assert session.entries == [
        _expected_entry(1, None, 1),
        _expected_entry(2, None, 1),
        _expected_entry(3, None, 1),
    ]
    # The send is the removal: its record names that time and one delivery; nothing is kept.
    sent = instance.appended[0]
    assert (sent.delivered_us, sent.deliveries) == ((WALL_US,), (1,))
    assert driver.delivered_us == {}


def test_a_removal_record_names_each_message_s_last_delivery_time_and_count() -> None:
    """The queue report splits waiting from processing time with these (issue 10)."""
    driver, instance, _session = _driver({t: _record(t) for t in range(1, 4)})
    delivered = [Deliver("c1/s1", "c1", 1, None, 1), Deliver("c1/s1", "c1", 2, None, 3)]
    driver._execute(delivered, NOW_MS, False)
    assert driver.delivered_us == {1: WALL_US, 2: WALL_US}
    removals: list[Action] = [
        RecordRemoval(2, RemovalReason.ACKED, delivery_count=3),
        RecordRemoval(3, RemovalReason.ACKED),  # acked before it was ever delivered
        RecordRemoval(1, RemovalReason.ACKED, delivery_count=1),
    ]
    driver._execute(removals, NOW_MS, False)
    [record] = instance.appended
    assert record.txids == (2, 3, 1)
    assert record.delivered_us == (WALL_US, 0, WALL_US)
    assert record.deliveries == (3, 0, 1)
    assert driver.delivered_us == {}


def test_recovery_writes_no_removal_records() -> None:
    driver, instance, _session = _driver({})
    actions: list[Action] = [RecordRemoval(1, RemovalReason.ACKED)]
    assert driver._execute(actions, NOW_MS, True) == 1
    assert instance.log == []


async def test_replayed_heads_build_the_queue_that_records_build() -> None:
    """Q16: recovery's heads (no record built) give the engine what whole records give it:
    the same messages, bookmarks, ages (a timestamp from the future counts as now) and
    expirations of their own."""
    records = [
        PublishRecord(t, WALL_US - 7_000 * t + (50_000 if t == 4 else 0), "orders", b"m",
                      9 + t % 2, t * 10, expiration_s=60 if t in (3, 8) else 0)
        for t in range(1, 13)
    ]  # fmt: skip
    heads = [
        (r.txid, r.timestamp_us, r.topic, r.publisher_id, r.seq, r.expiration_s) for r in records
    ]
    for batches in ((records[:6], records[6:]), (records[:2], records[2:])):
        by_records, _, _ = _driver({})
        by_heads, _, _ = _driver({})
        for driver in (by_records, by_heads):
            driver.filter = driver.priority = driver.barrier = None
            driver.engine = QueueEngine(QueuePolicy(expiration_ms=3_600_000))
            driver._timer = driver._timer_at_ms = None
        for batch in batches:
            by_records.publish_many(batch, NOW_MS, recovering=True)
            by_heads.publish_heads([heads[r.txid - 1] for r in batch], NOW_MS)
        by_records.stop()
        by_heads.stop()
        assert by_heads.engine.snapshot() == by_records.engine.snapshot()
        assert by_heads.engine.statistics(NOW_MS) == by_records.engine.statistics(NOW_MS)


def test_a_barriers_expiry_is_its_own_record_which_stays_on_this_instance() -> None:
    """R6 (issue 9): a barrier is released or expired by each instance that holds it, so its
    expiry is written as BARRIER_EXPIRED, which no destination takes; the ordinary expiries
    around it keep their one EXPIRED record, which replicates."""
    from dataclasses import replace

    from amps.config.model import DestinationConfig, ReplicationTransportConfig
    from replication.routing import Route

    driver, instance, _ = _driver({t: _record(t) for t in range(1, 5)})
    expired, limit = RemovalReason.EXPIRED, ExpireReason.TIME_LIMIT
    actions: list[Action] = [
        RecordRemoval(1, expired, limit),
        RecordRemoval(2, expired, limit, barrier=True),
        RecordRemoval(3, expired, limit),
    ]
    assert driver._execute(actions, NOW_MS, False) == 3
    text = limit.reason_text()
    assert sorted(instance.log) == [  # type: ignore[type-var]
        (QueueAction.EXPIRED, text, (1, 3)),
        (QueueAction.BARRIER_EXPIRED, text, (2,)),
    ]
    transport = ReplicationTransportConfig("amps-replication")
    route = Route("a", DestinationConfig("b", "b", "async", (transport,), pass_through=".*"))
    record = QueueRecord(9, 0, "work", QueueAction.EXPIRED, txids=(1,), origin_instance="a")
    assert route.wants(record)
    assert not route.wants(replace(record, action=QueueAction.BARRIER_EXPIRED))


async def test_a_grant_logged_before_its_message_keeps_the_recovery_point_before_it() -> None:
    """Q16, R5 (issue 9): a peer's grant can reach b, and be logged there, before the publish
    it names (it came by another path). While the message is queued, b's recovery point stays
    before the grant: without a usable snapshot b replays its log from there, and a replay
    from after the grant rebuilt the message as owned by its origin, not by the grantee."""
    from amps.log.bookmarks import Bookmark
    from amps.log.records import TransferRecord
    from replication.queue_replica import QueueReplica, ReplicaOptions

    def replicated() -> Any:
        driver, instance, _ = _driver({})
        instance.name = "b"  # type: ignore[attr-defined]
        driver.replica = QueueReplica("b", driver.engine, ReplicaOptions())
        driver._early_logged = {}
        driver.proxied_transfer = False
        driver._timer = driver._timer_at_ms = None
        driver.filter = driver.priority = driver.barrier = None
        return driver

    key = (9, 60)
    grant = TransferRecord(
        5, WALL_US, "work", Bookmark(*key), "a", "c", False, epoch=1, origin_instance="a"
    )
    publish = PublishRecord(6, WALL_US, "orders", b"m", *key, origin_instance="a")
    live = replicated()
    live.apply_replicated([grant])  # logged at txid 5, its message not here yet
    live.publish_many([publish], NOW_MS)
    assert live.replica.ownership.owner_of(key) == ("c", 1)
    low_water = live.low_water_txid()
    assert low_water < grant.txid

    replay = replicated()  # the fallback: the log replayed from the recovery point
    for record in (grant, publish):
        if record.txid > low_water:
            if isinstance(record, TransferRecord):
                replay.on_transfer(record, NOW_MS, recovering=True)
            else:
                replay.publish_many([record], NOW_MS, recovering=True)
    assert replay.replica.ownership.owner_of(key) == ("c", 1)

    acked = QueueRecord(7, WALL_US, "work", QueueAction.ACK, bookmarks=(Bookmark(*key),))
    live.apply_replicated([acked])  # gone: nothing holds the recovery point any more
    assert live.low_water_txid() == publish.txid
