"""`QueueEngine.remove_recovered` against one `MessageRemoved` per txid (Q16 replay)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import (
    Acked,
    AckOption,
    Deliver,
    ExpireReason,
    MessagePublished,
    PublishDeadLetter,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
    Unsubscribed,
)
from amps.queue.events import Event, MessageRemoved, OwnershipMoved
from tests.unit.queue.helpers import PUBLISHER, bookmarks, published, subscribed

REASONS = [
    (RemovalReason.ACKED, ExpireReason.TIME_LIMIT),
    (RemovalReason.EXPIRED, ExpireReason.TIME_LIMIT),
    (RemovalReason.EXPIRED, ExpireReason.FORCED_EXPIRE),
    (RemovalReason.SENT_AT_MOST_ONCE, ExpireReason.TIME_LIMIT),
    (RemovalReason.BARRIER_DELIVERED, ExpireReason.TIME_LIMIT),
]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[QueuePolicy, list[tuple[int, Event]], int]:
    extra = draw(st.sampled_from(["none", "priority", "barrier", "depth"]))
    semantics = draw(st.sampled_from(["at-least-once", "at-most-once"]))
    policy = QueuePolicy(
        semantics=semantics,  # type: ignore[arg-type]
        lease_period_ms=draw(st.sampled_from([None, 100])),
        expiration_ms=draw(st.sampled_from([None, 500])),
        max_per_subscription_backlog=3,
        max_deliveries=draw(st.integers(0, 2)),
        has_priority=extra == "priority",
        has_barrier=extra == "barrier",
        target_queue_depth=draw(st.sampled_from([2, 40])) if extra == "depth" else None,
    )
    count = draw(st.sampled_from([5, 30, 1500]))
    elsewhere = draw(st.booleans())  # a replicated queue: some messages owned elsewhere
    events: list[tuple[int, Event]] = []
    now_ms = 0
    last_txid = 0
    for txid in range(1, count + 1):
        if draw(st.integers(0, 9)) == 0:
            txid += count  # leave gaps in the txids (the bisect path)
        if txid <= last_txid:
            continue
        last_txid = txid
        priority = draw(st.integers(0, 2)) if policy.has_priority else 0
        barrier = policy.has_barrier and draw(st.integers(0, 7)) == 0
        event = published(txid, now_ms, priority=priority, barrier=barrier)
        if elsewhere and not barrier and draw(st.integers(0, 2)) == 0:
            event = replace(event, elsewhere=True)  # a peer's copy, owned by another (R2)
        events.append((now_ms, event))
    # Leases, returned and delivered rows; at-most-once: sent messages whose subscription is
    # still there (replication replays removals with live subscriptions, Q7).
    if draw(st.booleans()):
        events.append((now_ms, subscribed("a", "c1", 3)))
        events.append((now_ms, subscribed("b", "c2", 2)))
        now_ms += draw(st.sampled_from([0, 50, 150]))
        events.append((now_ms, Acked("c1", bookmarks(1, 2, 3), AckOption.CANCEL)))
        if draw(st.booleans()):
            events.append((now_ms, Unsubscribed("b", "c2")))
    if elsewhere:  # granted away, leased here or not (R5), and one granted back
        # A barrier is never owned elsewhere or moved (R6): the replica sends no such move.
        barriers = {e.txid for _, e in events if isinstance(e, MessagePublished) and e.is_barrier}
        moved = [t for t in draw(st.lists(st.integers(1, 8), max_size=4)) if t not in barriers]
        events += [(now_ms, OwnershipMoved((PUBLISHER, t), owned_here=False)) for t in moved]
        events.append((now_ms, OwnershipMoved((PUBLISHER, 2), owned_here=True)))
    now_ms += draw(st.sampled_from([0, 10, 600]))
    return policy, events, now_ms


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.data())
def test_remove_recovered_equals_one_event_per_txid(
    scenario: tuple[QueuePolicy, list[tuple[int, Event]], int], data: st.DataObject
) -> None:
    policy, events, now_ms = scenario
    engines = [QueueEngine(policy), QueueEngine(policy)]
    for engine in engines:
        for at_ms, event in events:
            engine.handle(event, at_ms)
    top = max(e.txid for _, e in events if isinstance(e, MessagePublished)) + 3
    batches = data.draw(
        st.lists(st.lists(st.integers(0, top), max_size=top), min_size=1, max_size=3)
    )
    if data.draw(st.booleans()):
        batches = [sorted(set(b)) for b in batches]
    for txids in batches:
        reason, expire = data.draw(st.sampled_from(REASONS))
        removed = [MessageRemoved(reason=reason, txid=t, expire_reasons=expire) for t in txids]
        one_by_one = engines[0].handle_many(removed, now_ms)
        bulk = engines[1].remove_recovered(txids, reason, expire, now_ms)
        assert bulk == one_by_one
        for engine in engines:
            engine.check_invariants()
        a, b = engines
        assert a.deliverable(10_000) == b.deliverable(10_000)
        assert a.statistics(now_ms) == b.statistics(now_ms)
        assert a.low_water_txid() == b.low_water_txid()
        assert a.next_deadline_ms() == b.next_deadline_ms()
        assert a.snapshot() == b.snapshot()


@pytest.mark.parametrize("bulk", [True, False])
@pytest.mark.parametrize(
    ("reason", "expire"),
    [
        (RemovalReason.SENT_AT_MOST_ONCE, ExpireReason.TIME_LIMIT),
        (RemovalReason.ACKED, ExpireReason.TIME_LIMIT),
    ],
)
def test_replayed_removal_of_a_sent_at_most_once_message_frees_its_backlog(
    bulk: bool, reason: RemovalReason, expire: ExpireReason
) -> None:
    """Q7, Q16: a replayed removal (recovery or replication) of a message sent at-most-once
    while its subscription is still there frees that subscription's backlog, as its ack would,
    so the next message goes out and every count stays exact."""
    engine = QueueEngine(QueuePolicy(semantics="at-most-once"))
    engine.handle(subscribed("a", "c1", 1), 0)
    sent = engine.handle_many([published(1), published(2)], 0)
    assert [a.txid for a in sent if isinstance(a, Deliver)] == [1]
    if bulk:
        actions = engine.remove_recovered([1], reason, expire, 1)
    else:
        actions = engine.handle(MessageRemoved(reason=reason, txid=1, expire_reasons=expire), 1)
    engine.check_invariants()
    assert [a.txid for a in actions if isinstance(a, Deliver)] == [2]
    assert engine.statistics(1).leased_count == 1
    # The client's own ack of message 1 now finds nothing to free (no double release).
    engine.handle(Acked("c1", bookmarks(1)), 2)
    engine.check_invariants()
    assert engine.statistics(2).leased_count == 1


@pytest.mark.parametrize("plain", [True, False])
def test_deferred_deadlines_let_the_log_remove_first(plain: bool) -> None:
    """Q13, Q16: replayed after their expiration, with deadlines deferred, message 1's logged
    ack removes it silently; one `on_deadline` after the replay expires message 2 with its
    record and dead letter."""
    engine = QueueEngine(QueuePolicy(expiration_ms=500))
    engine.defer_deadlines(True)
    now_ms = 10_000
    if plain:
        replayed = engine.publish_plain([1, 2], [PUBLISHER, PUBLISHER], [1, 2], [0, 0], now_ms)
    else:
        replayed = engine.handle_many([published(1), published(2)], now_ms)
    replayed += engine.remove_recovered([1], RemovalReason.ACKED, ExpireReason(0), now_ms)
    engine.defer_deadlines(False)
    assert replayed == []
    assert engine.on_deadline(now_ms) == [
        RecordRemoval(2, RemovalReason.EXPIRED, ExpireReason.TIME_LIMIT, 0),
        PublishDeadLetter(2, ExpireReason.TIME_LIMIT),
    ]
    assert engine.next_deadline_ms() is None
