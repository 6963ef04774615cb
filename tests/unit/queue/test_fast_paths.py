"""The engine's batch API and fast paths behave exactly like the plain ones (issue 4)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import (
    Acked,
    Action,
    Deliver,
    MessagePublished,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
)
from amps.queue.bookmarks import BookmarkIndex
from amps.queue.delivery import _pick
from amps.queue.fairness import pick_proportional, pick_round_robin
from amps.queue.state import QueueState
from amps.queue.subscriptions import Subscription
from amps.queue.table import MessageTable
from tests.unit.queue.helpers import bookmarks, delivered, published, subscribed


def test_fast_constructors_keep_the_dataclass_contract() -> None:
    """Events and actions still take positional or keyword fields, defaults, and stay frozen."""
    by_position = Deliver("s", "c", 7, None, 2)
    by_keyword = Deliver(
        sub_id="s", client_id="c", txid=7, lease_deadline_ms=None, delivery_count=2
    )
    assert by_position == by_keyword
    assert hash(by_position) == hash(by_keyword)
    assert RecordRemoval(3, RemovalReason.ACKED).expire_reasons == 0
    assert MessagePublished(1, 2, 3, 4).expiration_ms is None
    assert dataclasses.replace(by_position, txid=8).txid == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_position.txid = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        Deliver("s", "c", 7)  # type: ignore[call-arg]
    assert (
        repr(Acked("c", [(1, 2)]))
        == "Acked(client_id='c', bookmarks=[(1, 2)], option=<AckOption.NONE: 'none'>)"
    )


def test_handle_many_of_publishes_equals_one_handle_each() -> None:
    """A run of publishes gives the same actions in one step as one step each (Q9 fairness)."""
    for fairness in ("fast", "proportional", "round-robin"):
        policy = QueuePolicy(fairness=fairness, max_per_subscription_backlog=3)  # type: ignore[arg-type]
        one, many = QueueEngine(policy), QueueEngine(policy)
        for engine in (one, many):
            engine.handle(subscribed("a", "c1", 3), 0)
            engine.handle(subscribed("b", "c2", 2, lambda t: t % 2 == 0), 0)
        expected: list[Action] = []
        for txid in range(1, 12):
            expected.extend(one.handle(published(txid), 0))
        assert many.handle_many([published(t) for t in range(1, 12)], 0) == expected
        many.check_invariants()


def test_handle_many_of_acks_refills_every_freed_backlog() -> None:
    """Q8: backlog freed by several acks in one step is all used by one pump pass."""
    engine = QueueEngine(QueuePolicy(max_per_subscription_backlog=2))
    engine.handle_many([published(t) for t in range(1, 9)], 0)
    engine.handle(subscribed("a", "c1", 2), 0)
    engine.handle(subscribed("b", "c2", 2), 0)
    actions = engine.handle_many([Acked("c1", bookmarks(1, 2)), Acked("c2", bookmarks(3, 4))], 1)
    removed = [a.txid for a in actions if isinstance(a, RecordRemoval)]
    assert removed == [1, 2, 3, 4]
    assert sorted(t for _, t in delivered(actions)) == [5, 6, 7, 8]
    assert actions.index(next(a for a in actions if isinstance(a, Deliver))) == 4
    engine.check_invariants()


def test_handle_many_of_nothing_is_a_step_without_events() -> None:
    engine = QueueEngine(QueuePolicy(lease_period_ms=10))
    engine.handle(subscribed("a", "c1"), 0)
    engine.handle(published(1), 0)
    assert delivered(engine.handle_many([], 10)) == [("a", 1)]  # the lease ran out: redelivered


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_pick_agrees_with_the_pure_fairness_functions(data: st.DataObject) -> None:
    """Q9: the pump's pick is `fairness.py` applied to the candidates."""
    state = QueueState(QueuePolicy())
    candidates = []
    for position in range(data.draw(st.integers(1, 6))):
        backlog = data.draw(st.integers(1, 5))
        sub = Subscription(position, position * 2, f"s{position}", "c", backlog, None)
        sub.leased.update(
            range(position * 100, position * 100 + data.draw(st.integers(0, backlog - 1)))
        )
        candidates.append(sub)
    leased = [len(s.leased) for s in candidates]
    backlogs = [s.backlog for s in candidates]
    assert (
        _pick(state, candidates, "proportional") is candidates[pick_proportional(leased, backlogs)]
    )
    assert _pick(state, candidates, "fast") is candidates[0]
    last = data.draw(st.integers(-1, 12))
    state.round_robin_last = last
    positions = [s.position for s in candidates]
    expected = candidates[pick_round_robin(positions, last)]
    assert _pick(state, candidates, "round-robin") is expected
    assert state.round_robin_last == expected.position


def test_slot_of_with_gaps_and_after_compaction() -> None:
    """The dense shortcut never answers for a txid the table does not hold."""
    rng = random.Random(4)
    table = MessageTable(has_priority=False)
    txids = sorted(rng.sample(range(1, 5000), 2000))
    dense = list(range(6000, 6100))
    for txid in txids + dense:
        table.append(txid, 0, 0, 0, 0)
    for slot in range(len(table)):
        if rng.random() < 0.6:
            table.mark_removed(slot)
    expected = {txid: slot for slot, txid in enumerate(table.txid) if slot >= table.head}
    for txid in range(6200):
        assert table.slot_of(txid) == expected.get(txid, -1)
    table.compact()
    expected = {txid: slot for slot, txid in enumerate(table.txid)}
    for txid in range(6200):
        assert table.slot_of(txid) == expected.get(txid, -1)


def test_bookmark_find_with_gaps_and_compaction_below_a_txid() -> None:
    index = BookmarkIndex()
    seqs = [1, 2, 3, 5, 8, 13, 21]
    for txid, seq in enumerate(seqs, start=100):
        index.add(9, seq, txid)
    index.add(9, 4, 200)  # out of order: the fallback dict
    for txid, seq in enumerate(seqs, start=100):
        assert index.find(9, seq) == txid
    assert index.find(9, 4) == 200
    assert index.find(9, 6) is None
    assert index.find(8, 1) is None
    index.compact(lambda txid: txid != 105, below=103)
    assert [index.find(9, s) for s in seqs] == [None, None, None, 103, 104, None, 106]
    assert index.find(9, 4) == 200
    assert index.entry_count == 4
