"""The engine's batch API and fast paths behave exactly like the plain ones (issue 4)."""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Iterator, Sequence
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import (
    Acked,
    AckOption,
    Action,
    Bookmark,
    Deliver,
    MessagePublished,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
    acks,
    delivery,
)
from amps.queue.bookmarks import BookmarkIndex
from amps.queue.delivery import _pick
from amps.queue.fairness import pick_proportional, pick_round_robin, search_order
from amps.queue.state import QueueState
from amps.queue.subscriptions import Subscription
from amps.queue.table import REMOVED, MessageTable
from tests.unit.queue.helpers import PUBLISHER, bookmarks, delivered, published, subscribed


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
        policy = QueuePolicy(fairness=fairness, max_per_subscription_backlog=3)
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


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_pick_agrees_with_the_pure_fairness_functions(data: st.DataObject) -> None:
    """Q9: the pump's pick is `fairness.py` applied to the candidates in search order (Q6:
    from after the last holder for a returned message)."""
    state = QueueState(QueuePolicy())
    candidates = []
    for position in range(data.draw(st.integers(1, 6))):
        backlog = data.draw(st.integers(1, 5))
        sub = Subscription(position, position * 2, f"s{position}", "c", backlog, None)
        sub.leased.update(
            range(position * 100, position * 100 + data.draw(st.integers(0, backlog - 1)))
        )
        candidates.append(sub)
    returned_from = data.draw(st.none() | st.integers(0, 12))
    order = search_order([s.position for s in candidates], returned_from)
    searched = [candidates[i] for i in order]
    leased = [len(s.leased) for s in searched]
    backlogs = [s.backlog for s in searched]
    expected = searched[pick_proportional(leased, backlogs)]
    assert _pick(state, candidates, "proportional", returned_from) is expected
    assert _pick(state, candidates, "fast", returned_from) is searched[0]
    last = data.draw(st.integers(-1, 12))
    state.round_robin_last = last
    if returned_from is None:
        expected = candidates[pick_round_robin([s.position for s in candidates], last)]
    else:
        expected = searched[0]  # the next in turn after the last holder
    assert _pick(state, candidates, "round-robin", returned_from) is expected
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


def test_bookmark_find_many_and_add_many_equal_one_call_each() -> None:
    """The bulk look-up and insert give what `find` and `add` give one at a time."""
    rng = random.Random(7)
    one, bulk = BookmarkIndex(), BookmarkIndex()
    txid = 0
    for _ in range(40):
        size = rng.randint(1, 30)
        publishers = [rng.choice([3, 3, 3, 4, 5]) for _ in range(size)]
        if rng.random() < 0.5:
            publishers = [publishers[0]] * size  # the usual batch: one publisher
        seqs = [txid + 1 + i + rng.choice([0, 0, 0, 5, -3]) for i in range(size)]
        txids = list(range(txid + 1, txid + 1 + size))
        txid += size
        for publisher_id, seq, t in zip(publishers, seqs, txids, strict=True):
            one.add(publisher_id, seq, t)
        bulk.add_many(publishers, seqs, txids)
        if rng.random() < 0.2:
            keep = {t for t in range(txid + 1) if rng.random() < 0.5}.__contains__
            below = rng.randint(0, txid)
            one.compact(keep, below)
            bulk.compact(keep, below)
        assert one.items() == bulk.items()
        assert list(one.export()[0]) == list(bulk.export()[0])  # runs in the same order
    assert one.entry_count == bulk.entry_count
    marks = [(rng.choice([3, 4, 5, 6]), rng.randint(-2, txid + 10)) for _ in range(3000)]
    assert bulk.find_many(marks) == [one.find(p, s) for p, s in marks]
    assert [bulk.seen(p, s) for p, s in marks] == [one.seen(p, s) for p, s in marks]


def test_append_available_equals_append_each() -> None:
    """Bulk rows: same columns and the same dense guess as one `append` each."""
    one, bulk = MessageTable(has_priority=False), MessageTable(has_priority=False)
    batches = [[0, 1, 2], [3, 4], [10, 11, 12], [13], [20, 22, 23], [24, 25]]
    for batch in batches:
        for txid in batch:
            one.append(txid, txid * 10, 0, 0, 0)
        assert bulk.append_available(batch, [t * 10 for t in batch]) == len(one) - len(batch)
        assert bulk.base == one.base
    for name in ("txid", "timestamp_ms", "state", "flags", "delivery_count", "lease_sub"):
        assert list(getattr(bulk, name)) == list(getattr(one, name))
    for txid in range(30):
        assert bulk.slot_of(txid) == one.slot_of(txid)


def _ack_each(
    state: QueueState, marks: Sequence[Bookmark], now_ms: int, actions: list[Action]
) -> None:
    """The plain sublet ack without its bulk path: one look-up and one `remove` each."""
    for publisher_id, seq in marks:
        txid = state.bookmarks.find(publisher_id, seq)
        slot = -1 if txid is None else state.table.slot_of(txid)
        if slot < 0 or state.table.state[slot] == REMOVED:
            if txid is None and not state.bookmarks.seen(publisher_id, seq):
                state.defer_ack(publisher_id, seq, now_ms)
            continue
        state.remove(slot, RemovalReason.ACKED, actions)


def _publish_events(
    engine: QueueEngine,
    txids: list[int],
    publisher_ids: list[int],
    seqs: list[int],
    timestamps_ms: list[int],
    now_ms: int,
) -> list[Action]:
    """`QueueEngine.publish_plain` as it is specified: `handle_many` of the events."""
    rows = zip(txids, publisher_ids, seqs, timestamps_ms, strict=True)
    return engine.handle_many([MessagePublished(*row) for row in rows], now_ms)


@contextlib.contextmanager
def _without_fast_paths() -> Iterator[None]:
    """Engines built and driven inside take the general paths (the reference behaviour)."""
    with (
        mock.patch.object(delivery, "_pump_fresh", return_value=0),
        mock.patch.object(acks, "_ack_plain", _ack_each),
        mock.patch.object(QueueState, "accepts_plain_inserts", return_value=False),
        mock.patch.object(QueueEngine, "publish_plain", _publish_events),
    ):
        yield


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_fast_paths_equal_the_general_paths(data: st.DataObject) -> None:
    """Bulk publishes (events or columns), the fresh-list pump and the plain ack decide exactly
    as the general code does (Q6-Q10, Q13, Q14), step by step, in the shapes they take and the
    ones next to them (expiration, queue MaxBacklog, deferred acks, replays, gaps, returned
    messages, a second publisher)."""
    semantics = data.draw(st.sampled_from(["at-least-once", "at-most-once"]))
    fairness = data.draw(st.sampled_from([None, "fast", "round-robin"]))
    policy = QueuePolicy(
        semantics=semantics,  # type: ignore[arg-type]
        lease_period_ms=data.draw(st.sampled_from([None, 100])),
        expiration_ms=data.draw(st.sampled_from([None, 300])),
        max_backlog=data.draw(st.sampled_from([None, 4])),
        max_per_subscription_backlog=5,
        fairness=None if semantics == "at-most-once" else fairness,  # type: ignore[arg-type]
        leasing=data.draw(st.sampled_from(["sublet", "strict"])),
    )
    names = data.draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True))
    steps: list[tuple[str, object, int]] = [
        ("one", subscribed(name, f"c{name}", data.draw(st.integers(1, 5))), 0) for name in names
    ]
    now_ms = 0
    next_txid = 0
    for _ in range(data.draw(st.integers(1, 30))):
        kind = data.draw(st.sampled_from(["publish", "publish", "sub", "ack", "acks", "tick"]))
        if kind == "publish":
            size = data.draw(st.integers(1, 12))
            events = []
            for _ in range(size):
                next_txid += data.draw(st.sampled_from([1, 1, 1, 3]))
                own = data.draw(st.sampled_from([None, None, None, None, 50]))
                txid = next_txid - data.draw(st.sampled_from([0, 0, 0, 0, 1, 2]))  # a replay
                stamp = now_ms - data.draw(st.sampled_from([0, 0, 400]))
                # A second publisher now and then (a replicated queue has one per origin).
                publisher = PUBLISHER + data.draw(st.sampled_from([0, 0, 0, 1]))
                events.append(MessagePublished(txid, publisher, txid, stamp, expiration_ms=own))
            plain = all(e.expiration_ms is None for e in events) and data.draw(st.booleans())
            steps.append(("plain" if plain else "many", events, now_ms))
        elif kind == "sub":
            name = data.draw(st.sampled_from(["a", "b", "c"]))
            backlog = data.draw(st.integers(1, 5))
            steps.append(("one", subscribed(name, f"c{name}", backlog), now_ms))
        elif kind in ("ack", "acks"):
            acked = []
            for _ in range(1 + (kind == "acks")):
                client = data.draw(st.sampled_from(["ca", "cb", "cc"]))
                marks = data.draw(st.lists(st.integers(0, next_txid + 3), max_size=8))
                option = data.draw(st.sampled_from([AckOption.NONE] * 3 + [AckOption.CANCEL]))
                acked.append(Acked(client, bookmarks(*marks), option))
            steps.append(("many", acked, now_ms))
        else:
            now_ms += data.draw(st.sampled_from([1, 60, 150]))
            steps.append(("tick", None, now_ms))
    with _without_fast_paths():
        reference = QueueEngine(policy)
        expected = [_run_step(reference, step) for step in steps]
        reference.check_invariants()
    engine = QueueEngine(policy)
    for step, want in zip(steps, expected, strict=True):
        assert _run_step(engine, step) == want, step
        engine.check_invariants()
    assert engine.statistics(now_ms) == reference.statistics(now_ms)
    assert engine.snapshot() == reference.snapshot()
    assert engine.next_deadline_ms() == reference.next_deadline_ms()


def _run_step(engine: QueueEngine, step: tuple[str, object, int]) -> list[Action]:
    kind, payload, now_ms = step
    if kind == "plain":
        events: list[MessagePublished] = payload  # type: ignore[assignment]
        return engine.publish_plain(
            [e.txid for e in events], [e.publisher_id for e in events],
            [e.seq for e in events], [e.timestamp_ms for e in events], now_ms,
        )  # fmt: skip
    if kind == "many":
        return engine.handle_many(payload, now_ms)  # type: ignore[arg-type]
    if kind == "one":
        return engine.handle(payload, now_ms)  # type: ignore[arg-type]
    return engine.on_deadline(now_ms)


def test_round_robin_turn_after_a_run_to_one_subscription() -> None:
    """Q9: a run of deliveries to the only subscription with room still moves the turn."""
    policy = QueuePolicy(fairness="round-robin", max_per_subscription_backlog=3)
    steps: list[tuple[str, object, int]] = [
        ("one", subscribed("a", "ca", 1), 0),
        ("one", subscribed("b", "cb", 3), 0),
        ("many", [published(t) for t in range(1, 5)], 0),
        ("many", [Acked("ca", bookmarks(1)), Acked("cb", bookmarks(2))], 0),
        ("many", [published(5)], 0),
    ]
    with _without_fast_paths():
        reference = QueueEngine(policy)
        expected = [_run_step(reference, step) for step in steps]
    engine = QueueEngine(policy)
    assert [_run_step(engine, step) for step in steps] == expected
    assert delivered(expected[-1]) == [("a", 5)]
