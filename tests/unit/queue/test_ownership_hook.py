"""The engine's ownership seam (R2): messages owned elsewhere are kept, never delivered or
expired here, and move in and out with `OwnershipMoved`."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import (
    Acked,
    MessagePublished,
    OwnershipMoved,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    Unsubscribed,
)
from amps.queue import Action as EngineAction
from tests.unit.queue.helpers import PUBLISHER, delivered, subscribed


def elsewhere(txid: int, timestamp_ms: int = 0) -> MessagePublished:
    return MessagePublished(txid, PUBLISHER, txid, timestamp_ms, elsewhere=True)


def test_owned_elsewhere_is_kept_but_not_delivered_until_taken() -> None:
    engine = QueueEngine(QueuePolicy(max_per_subscription_backlog=5))
    engine.handle(subscribed("s", "c", 5), 0)
    assert delivered(engine.handle(elsewhere(1), 0)) == []
    assert not engine.owned_here(1)
    assert engine.owned_elsewhere_count() == 1
    assert engine.deliverable(10) == []
    engine.handle(MessagePublished(2, PUBLISHER, 2, 0), 0)
    assert engine.has_taker(1)
    actions = engine.handle(OwnershipMoved((PUBLISHER, 1), owned_here=True), 1)
    assert delivered(actions) == [("s", 1)]
    engine.check_invariants()


def test_only_the_owner_expires() -> None:
    engine = QueueEngine(QueuePolicy(expiration_ms=10))
    engine.handle(elsewhere(1), 0)
    assert engine.on_deadline(100) == []
    assert engine.txid_of((PUBLISHER, 1)) == 1
    actions = engine.handle(OwnershipMoved((PUBLISHER, 1), owned_here=True), 100)
    assert [type(a) for a in actions if isinstance(a, RecordRemoval)] == [RecordRemoval]
    assert engine.txid_of((PUBLISHER, 1)) is None
    engine.check_invariants()


def test_taken_while_the_log_is_replayed_is_expired_by_the_live_step_after() -> None:
    """Q16: a grant replayed to here for a message past its time removes nothing during the
    replay (a later record may ack it); the live step after the replay expires it."""
    engine = QueueEngine(QueuePolicy(expiration_ms=10))
    engine.handle(elsewhere(1), 0)
    engine.defer_deadlines(True)
    assert engine.handle(OwnershipMoved((PUBLISHER, 1), owned_here=True), 100) == []
    assert engine.txid_of((PUBLISHER, 1)) == 1
    engine.defer_deadlines(False)
    (removal,) = [a for a in engine.on_deadline(100) if isinstance(a, RecordRemoval)]
    assert removal.txid == 1
    assert engine.txid_of((PUBLISHER, 1)) is None
    engine.check_invariants()


def test_given_up_while_leased_stays_for_its_owner_when_the_lease_ends() -> None:
    engine = QueueEngine(QueuePolicy(max_deliveries=1))
    engine.handle(subscribed("s", "c"), 0)
    engine.handle(MessagePublished(1, PUBLISHER, 1, 0), 0)
    engine.handle(OwnershipMoved((PUBLISHER, 1), owned_here=False), 1)
    assert engine.held_here(1)  # still leased here
    actions = engine.handle(Unsubscribed("s", "c"), 2)
    assert actions == []  # no MaxDeliveries expiry: not the owner any more
    assert engine.txid_of((PUBLISHER, 1)) == 1
    engine.check_invariants()
    engine.handle(Acked("c", [(PUBLISHER, 1)]), 3)  # an ack still removes it
    assert engine.txid_of((PUBLISHER, 1)) is None
    engine.check_invariants()


def test_giving_up_an_inactive_message_activates_up_to_it() -> None:
    engine = QueueEngine(QueuePolicy(target_queue_depth=1))
    for txid in range(1, 5):
        engine.handle(MessagePublished(txid, PUBLISHER, txid, 0), 0)
    assert engine.statistics(0).inactive_count == 3
    engine.handle(OwnershipMoved((PUBLISHER, 3), owned_here=False), 1)
    stats = engine.statistics(1)
    assert (stats.depth, stats.inactive_count) == (3, 1)  # A4: 1 and 2 active, 3 moved away
    assert engine.owned_elsewhere_count() == 1
    engine.check_invariants()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_publishing_owned_elsewhere_in_bulk_equals_one_event_each(data: st.DataObject) -> None:
    """`publish_plain(..., elsewhere=True)` (a peer's copy of the owner's messages, R2)
    decides as one `MessagePublished(elsewhere=True)` each does, with or without a queue
    Expiration, as the messages move here and are delivered, acked and expired."""
    policy = QueuePolicy(
        max_per_subscription_backlog=3,
        expiration_ms=data.draw(st.sampled_from([None, 200])),
        lease_period_ms=100,
    )
    bulk, each = QueueEngine(policy), QueueEngine(policy)
    now_ms = 0
    txid = 0
    for engine in (bulk, each):
        engine.handle(subscribed("s", "c", 3), now_ms)
    for _ in range(data.draw(st.integers(1, 25))):
        kind = data.draw(st.sampled_from(["publish", "publish", "take", "ack", "tick"]))
        got: list[list[EngineAction]] = []
        if kind == "publish":
            first = txid + 1
            txid += data.draw(st.integers(1, 8))
            rows = range(first, txid + 1)
            stamp = now_ms - data.draw(st.sampled_from([0, 0, 250]))
            got.append(bulk.publish_plain(
                list(rows), [PUBLISHER] * len(rows), list(rows), [stamp] * len(rows), now_ms,
                elsewhere=True,
            ))  # fmt: skip
            got.append(each.handle_many([elsewhere(t, stamp) for t in rows], now_ms))
        elif kind == "take":
            moved = OwnershipMoved((PUBLISHER, data.draw(st.integers(1, txid + 1))), True)
            got = [engine.handle(moved, now_ms) for engine in (bulk, each)]
        elif kind == "ack":
            acked = Acked("c", [(PUBLISHER, data.draw(st.integers(1, txid + 1)))])
            got = [engine.handle(acked, now_ms) for engine in (bulk, each)]
        else:
            now_ms += data.draw(st.sampled_from([1, 120, 300]))
            got = [engine.on_deadline(now_ms) for engine in (bulk, each)]
        assert got[0] == got[1], kind
        bulk.check_invariants()
    assert bulk.snapshot() == each.snapshot()
    assert bulk.statistics(now_ms) == each.statistics(now_ms)


@settings(max_examples=100, deadline=None)
@given(
    published=st.lists(st.tuples(st.integers(1, 3), st.booleans()), max_size=40),
    acked=st.lists(st.integers(0, 50), max_size=30),
    asked=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 20)), max_size=30),
)
def test_txids_of_is_txid_of_of_each(
    published: list[tuple[int, bool]], acked: list[int], asked: list[tuple[int, int]]
) -> None:
    """The bulk look-up a replicated removal uses: each bookmark's txid while its message is
    in the queue, None once removed (compacted or not) or never there."""
    engine = QueueEngine(QueuePolicy())
    seqs = dict.fromkeys(range(1, 4), 0)
    for txid, (publisher, gap) in enumerate(published, start=1):
        seqs[publisher] += 1 + gap
        engine.handle(MessagePublished(txid, publisher, seqs[publisher], 0, elsewhere=gap), 0)
    keys = [(p, s) for p, s in asked]
    for pick in acked:  # peers' acks of some (or of none here: deferred)
        engine.handle(Acked("c", [keys[pick % len(keys)] if keys else (1, pick)]), 1)
    assert engine.txids_of(keys) == [engine.txid_of(key) for key in keys]
