"""Bulk compaction (Q3, Q16) against the per-entry rebuilds it replaced.

Two engines see the same random events; one compacts with `compaction.maybe_compact`, the other
with the reference below (one `valid_fresh` / `_still_needed` / `current_lease_slot` call per
entry, the table squeezed through the full mask). The thresholds are lowered so that every
structure is rebuilt often. After every step both engines must agree on the actions,
deliverable(), statistics, snapshot() and on the rebuilt structures themselves.
"""

from __future__ import annotations

import heapq
import random
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from itertools import compress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import (
    Acked,
    AckOption,
    ClientDisconnected,
    Deliver,
    ExpireReason,
    QueueEngine,
    QueuePolicy,
    RemovalReason,
    Unsubscribed,
    compaction,
    levels,
    table,
)
from amps.queue.columns import column_bytes, tail
from amps.queue.events import Event
from amps.queue.state import QueueState
from amps.queue.table import LIVE_MASK, MessageTable
from tests.unit.queue.helpers import bookmarks, published, subscribed

FILTERS = [None, lambda t: t % 2 == 0, lambda t: t % 3 != 0]


@dataclass(frozen=True)
class PublishOp:
    count: int


@dataclass(frozen=True)
class SubscribeOp:
    index: int
    filter_index: int


@dataclass(frozen=True)
class AckOp:
    index: int
    option: AckOption
    count: int


@dataclass(frozen=True)
class TickOp:
    ms: int


@dataclass(frozen=True)
class RemoveOp:
    share: int  # of 4: the chance that each txid so far is in the removal


@dataclass(frozen=True)
class LeaveOp:
    index: int
    unsubscribe: bool  # else the client disconnects


Op = PublishOp | SubscribeOp | AckOp | TickOp | RemoveOp | LeaveOp


def _reference_table_compact(rows: MessageTable) -> None:
    head = rows.head
    keep = column_bytes(rows.state, head).translate(LIVE_MASK)
    for name, typecode in (
        ("txid", "q"),
        ("timestamp_ms", "q"),
        ("state", "B"),
        ("flags", "B"),
        ("delivery_count", "H"),
        ("cancel_count", "H"),
        ("lease_sub", "i"),
        ("priority", "Q"),
        ("expire_at_ms", "q"),
    ):
        column = getattr(rows, name)
        if column is not None:
            kept = array(typecode, compress(tail(column, head), keep))
            setattr(rows, name, rows.columns(typecode, kept))
    rows.head = 0
    rows.removed_count = 0
    rows.base = rows.txid[0] if rows.txid else 0


def reference_compact(state: QueueState) -> None:
    """`maybe_compact` as it was: a Python call per entry."""
    if state.removals_since_check < compaction.MIN_GARBAGE:
        return
    state.removals_since_check = 0
    rows = state.table
    if rows.wants_compaction():
        expiry_txid = compaction._txid_at(state, state.expiry_slot)
        activation_txid = compaction._txid_at(state, state.activation_slot)
        _reference_table_compact(rows)
        state.expiry_slot = bisect_left(rows.txid, expiry_txid)
        state.activation_slot = bisect_left(rows.txid, activation_txid)
    keep_count = rows.live_count + len(state.at_most_once_sent)
    if state.bookmarks.entry_count > 2 * keep_count + compaction.MIN_GARBAGE:
        oldest = rows.oldest_live_slot()
        below = state.last_txid + 1 if oldest < 0 else rows.txid[oldest]
        if state.at_most_once_sent:
            below = min(below, min(state.at_most_once_sent))
        state.bookmarks.compact(lambda txid: compaction._still_needed(state, txid), below)
    for level in state.levels.values():
        level.maybe_compact(state.valid_fresh, state.valid_returned)
    if len(state.lease_heap) > 2 * state.leased_total + compaction.MIN_GARBAGE:
        state.lease_heap = [
            e for e in state.lease_heap if state.current_lease_slot(e[1], e[2]) >= 0
        ]
        heapq.heapify(state.lease_heap)


def _structures(engine: QueueEngine) -> object:
    state = engine._state
    rows = state.table
    fresh = {p: list(tail(lv.fresh, lv.head)) for p, lv in state.levels.items()}
    returned = {p: sorted(lv.returned) for p, lv in state.levels.items()}
    runs, unordered = state.bookmarks.export()
    marks = {p: (list(r.seqs), list(r.txids)) for p, r in runs.items()}
    return (
        list(tail(rows.txid, rows.head)),
        bytes(column_bytes(rows.state, rows.head)),
        state.expiry_slot - rows.head,
        state.activation_slot - rows.head,
        fresh,
        returned,
        marks,
        dict(unordered),
        state.bookmarks.entry_count,
        sorted(state.lease_heap),
    )


@st.composite
def steps(draw: st.DrawFn) -> tuple[QueuePolicy, list[Op]]:
    extra = draw(st.sampled_from(["none", "priority", "barrier", "depth"]))
    semantics = draw(st.sampled_from(["at-least-once", "at-most-once"]))
    policy = QueuePolicy(
        semantics=semantics,  # type: ignore[arg-type]
        lease_period_ms=draw(st.sampled_from([None, 100, 1000])),
        expiration_ms=draw(st.sampled_from([None, 500])),
        max_per_subscription_backlog=draw(st.sampled_from([3, 50, 500])),
        max_cancels=draw(st.integers(0, 2)),
        max_deliveries=draw(st.integers(0, 3)),
        has_priority=extra == "priority",
        has_barrier=extra == "barrier",
        target_queue_depth=draw(st.sampled_from([5, 60])) if extra == "depth" else None,
    )
    ops: st.SearchStrategy[Op] = st.one_of(
        st.builds(PublishOp, st.integers(1, 80)),
        st.builds(SubscribeOp, st.integers(0, 5), st.integers(0, len(FILTERS) - 1)),
        st.builds(AckOp, st.integers(0, 5), st.sampled_from(list(AckOption)), st.integers(1, 40)),
        st.builds(AckOp, st.integers(0, 5), st.just(AckOption.NONE), st.integers(1, 300)),
        st.builds(TickOp, st.sampled_from([10, 120, 600])),
        st.builds(RemoveOp, st.integers(0, 3)),
        st.builds(LeaveOp, st.integers(0, 5), st.booleans()),
    )
    return policy, draw(st.lists(ops, min_size=5, max_size=40))


@settings(max_examples=200, deadline=None)
@given(steps(), st.randoms(use_true_random=False))
def test_bulk_compaction_equals_per_entry_compaction(
    scenario: tuple[QueuePolicy, list[Op]], rnd: random.Random
) -> None:
    _check(*scenario, rnd)


def _check(policy: QueuePolicy, ops: list[Op], rnd: random.Random) -> None:
    bulk, ref = QueueEngine(policy), QueueEngine(policy)
    original = compaction.maybe_compact

    def dispatch(state: QueueState) -> None:
        (reference_compact if state is ref._state else original)(state)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compaction, "maybe_compact", dispatch)
        patch.setattr(compaction, "MIN_GARBAGE", 2)
        patch.setattr(levels, "COMPACT_MIN_GARBAGE", 1)
        patch.setattr(table, "COMPACT_MIN_HOLES", 1)
        _run(policy, ops, rnd, bulk, ref)


def _run(
    policy: QueuePolicy,
    ops: list[Op],
    rnd: random.Random,
    bulk: QueueEngine,
    ref: QueueEngine,
) -> None:
    now_ms = 0
    next_txid = 1
    for op in ops:
        events: list[Event] = []
        removal: list[int] | None = None
        match op:
            case PublishOp(count):
                for _ in range(count):
                    next_txid += rnd.choice([1, 1, 1, 2, 5])  # gaps: the bisect paths
                    priority = rnd.randint(0, 2) if policy.has_priority else 0
                    barrier = policy.has_barrier and rnd.randint(0, 9) == 0
                    own = rnd.choice([None, None, 50, 1000])
                    events.append(
                        published(
                            next_txid, now_ms, priority=priority, barrier=barrier, expiration_ms=own
                        )
                    )
            case SubscribeOp(index, filter_index):
                matches = FILTERS[filter_index]
                events.append(subscribed(f"s{index % 2}", f"c{index % 3}", None, matches))
            case AckOp(index, option, count):
                picked = rnd.sample(range(1, next_txid + 2), min(next_txid + 1, count))
                events.append(Acked(f"c{index % 3}", bookmarks(*picked), option))
            case TickOp(ms):
                now_ms += ms
            case RemoveOp(share):
                if policy.at_most_once:
                    continue  # replaying a removal of a sent message under a live subscription
                    # breaks the backlog count with either path (see test_recovered_removals)
                removal = [t for t in range(1, next_txid + 2) if rnd.randint(0, 3) < share]
            case LeaveOp(index, unsubscribe):
                if unsubscribe:
                    events.append(Unsubscribed(f"s{index % 2}", f"c{index % 3}"))
                else:
                    events.append(ClientDisconnected(f"c{index % 3}"))
        results = []
        for engine in (bulk, ref):
            if removal is not None:
                reason = RemovalReason.ACKED
                out = engine.remove_recovered(removal, reason, ExpireReason.TIME_LIMIT, now_ms)
            elif events:
                out = engine.handle_many(events, now_ms)
            else:
                out = engine.on_deadline(now_ms)
            results.append(out)
            engine.check_invariants()
        assert results[0] == results[1]
        assert _structures(bulk) == _structures(ref)
        assert bulk.deliverable(10_000) == ref.deliverable(10_000)
        assert bulk.statistics(now_ms) == ref.statistics(now_ms)
        assert bulk.snapshot() == ref.snapshot()


@pytest.mark.parametrize("semantics", ["at-least-once", "at-most-once"])
@pytest.mark.parametrize("extra", ["none", "priority"])
def test_bulk_compaction_out_of_order_acks(semantics: str, extra: str) -> None:
    """Many leases, acked out of order, some cancelled: every structure is rebuilt."""
    policy = QueuePolicy(
        semantics=semantics,  # type: ignore[arg-type]
        lease_period_ms=1_000,
        max_per_subscription_backlog=500,
        has_priority=extra == "priority",
    )
    ops: list[Op] = [PublishOp(80), SubscribeOp(0, 1), SubscribeOp(1, 0)]
    for round_ in range(12):
        ops += [PublishOp(60), AckOp(round_ % 3, AckOption.NONE, 200)]
        ops += [AckOp(1, AckOption.NONE, 300 + 5000 * (round_ % 2)), TickOp(10)]
        ops += [AckOp(0, AckOption.CANCEL, 20)]
        if semantics == "at-least-once" and round_ % 4 == 3:
            ops.append(RemoveOp(2))
    ops += [LeaveOp(0, True), TickOp(600), PublishOp(40), LeaveOp(1, False)]
    _check(policy, ops, random.Random(7))


def test_deferred_compaction_during_recovery_ends_where_checks_per_removal_end() -> None:
    """Q16: a replay with compaction deferred decides the same, holds its garbage until the
    end (or a million removals), then squeezes it out as the per-1024 checks would have."""
    rng = random.Random(5)
    engines = [QueueEngine(QueuePolicy()), QueueEngine(QueuePolicy())]
    engines[1].defer_compaction(True)
    txid = 0
    for _ in range(30):
        batch = list(range(txid + 1, txid + 1 + rng.randint(1, 400)))
        txid = batch[-1]
        gone = [t for t in range(1, txid + 1) if rng.random() < 0.4]
        results = [
            (
                engine.publish_plain(batch, [7] * len(batch), batch, [0] * len(batch), 0),
                engine.remove_recovered(gone, RemovalReason.ACKED, ExpireReason(0), 0),
            )
            for engine in engines
        ]
        assert results[0] == results[1]
    held = engines[1]._state.table
    assert held.removed_count > 2 * held.live_count  # nothing squeezed out while deferred
    engines[1].defer_compaction(False)
    for engine in engines:
        engine.check_invariants()
    assert engines[1].snapshot() == engines[0].snapshot()
    assert engines[1].statistics(0) == engines[0].statistics(0)
    assert engines[1].deliverable(10_000) == engines[0].deliverable(10_000)
    assert held.removed_count <= held.live_count  # squeezed out at the end


def test_memory_stays_bounded_by_live_messages_at_depth_zero() -> None:
    """Q3, issue 11: a queue consumed as fast as it is fed keeps nothing per message that
    passed: every per-message structure stays within a bound set by the live messages."""
    engine = QueueEngine(QueuePolicy(max_per_subscription_backlog=100))
    engine.handle(subscribed("s", "c", 100), 0)
    state = engine._state
    txid = 0
    for _ in range(400):
        batch = list(range(txid + 1, txid + 51))
        txid = batch[-1]
        actions = engine.publish_plain(batch, [7] * 50, batch, [0] * 50, 0)
        acked = [(7, a.txid) for a in actions if isinstance(a, Deliver)]
        engine.handle(Acked("c", acked), 0)
    assert txid == 20_000
    assert engine.statistics(0).depth == 0
    bound = 2 * compaction.MIN_GARBAGE + 100
    assert len(state.level0.fresh) <= bound
    assert len(state.table) <= bound
    assert state.bookmarks.entry_count <= bound
    assert len(state.lease_heap) <= bound
