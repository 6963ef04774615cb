"""The whole-stretch paths of a replayed removal (Q16, issue 9): a replicated removal's hundreds
of acks are looked up and removed a slice of rows at a time when they lie close together, and
must give exactly what the look-up and removal of each one gives, whatever the stretch holds
(a missing or repeated message, one already removed, a leased or barrier row, gaps)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import (
    Acked,
    AckOption,
    ExpireReason,
    MessagePublished,
    QueueEngine,
    QueuePolicy,
    RemovalReason,
)
from amps.queue.bookmarks import BookmarkIndex
from amps.queue.events import Event, MessageRemoved
from amps.queue.table import BULK_ROWS
from tests.unit.queue.helpers import bookmarks, published, subscribed
from tests.unit.queue.test_recovered_removals import REASONS

PUBLISHERS = (3, 4, 5)


@st.composite
def stretches(draw: st.DrawFn, items: Sequence[object]) -> list[int]:
    """Indexes into `items`: a few runs of neighbours (every one, or every k-th), sometimes
    disturbed: one left out, one repeated, two swapped, one past the end."""
    picked: list[int] = []
    start = draw(st.integers(0, len(items) // 2))
    for _ in range(draw(st.integers(1, 3))):  # each after the last: as a record's acks
        size = draw(st.sampled_from([1, BULK_ROWS, 2 * BULK_ROWS, 3 * BULK_ROWS]))
        step = draw(st.sampled_from([1, 1, 1, 2, 5]))
        end = min(len(items), start + size * step)
        picked += range(start, end, step)
        start = end + draw(st.integers(0, 20))
    change = draw(st.sampled_from(["none", "none", "drop", "repeat", "swap", "beyond"]))
    if picked and change == "drop":
        del picked[draw(st.integers(0, len(picked) - 1))]
    elif picked and change == "repeat":
        picked.append(picked[draw(st.integers(0, len(picked) - 1))])
    elif len(picked) > 1 and change == "swap":
        at = draw(st.integers(0, len(picked) - 2))
        picked[at], picked[at + 1] = picked[at + 1], picked[at]
    elif change == "beyond":
        picked.append(len(items))
    return picked


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(PUBLISHERS), st.sampled_from([1, 1, 1, 2]), st.integers(0, 100)),
        min_size=80,
        max_size=300,
    ),
    st.integers(0, 400),
    st.data(),
)
def test_find_many_over_stretches_equals_find_of_each(
    published: list[tuple[int, int, int]], below: int, data: st.DataObject
) -> None:
    index = BookmarkIndex()
    seqs = dict.fromkeys(PUBLISHERS, 0)
    keys: list[tuple[int, int]] = []
    for txid, (publisher, step, late) in enumerate(published, start=1):
        seqs[publisher] += step
        seq = seqs[publisher] - (late == 0)  # sometimes out of order: the fallback dict
        index.add(publisher, seq, txid)
        keys.append((publisher, seq))
    if below % 4 == 1:
        index.compact(lambda txid: txid % 23 != 0, below)
    keys.sort()  # each publisher's keys together, seqs increasing: stretches of its run
    asked = [
        keys[i] if i < len(keys) else (PUBLISHERS[0], 10**6) for i in data.draw(stretches(keys))
    ]
    assert index.find_many(asked) == [index.find(p, s) for p, s in asked]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([1, 1, 1, 3]), st.booleans()), min_size=80, max_size=300),
    st.lists(st.integers(0, 300), max_size=40),
    st.data(),
)
def test_txids_of_over_stretches_equals_txid_of_each(
    published: list[tuple[int, bool]], gone: list[int], data: st.DataObject
) -> None:
    engine = QueueEngine(QueuePolicy())
    keys = [(PUBLISHERS[0], seq) for seq in range(1, len(published) + 1)]
    txid = 0
    events = []
    for (publisher_id, seq), (gap, elsewhere) in zip(keys, published, strict=True):
        txid += gap  # gaps: rows found by bisect
        events.append(MessagePublished(txid, publisher_id, seq, 0, elsewhere=elsewhere))
    engine.handle_many(events, 0)
    removed = [MessageRemoved(RemovalReason.ACKED, bookmark=keys[i]) for i in gone if i < len(keys)]
    engine.handle_many(removed, 1)
    asked = [
        keys[i] if i < len(keys) else (PUBLISHERS[0], 10**6) for i in data.draw(stretches(keys))
    ]
    assert engine.txids_of(asked) == [engine.txid_of(key) for key in asked]


@st.composite
def queues(draw: st.DrawFn) -> tuple[QueuePolicy, list[tuple[int, Event]]]:
    """A queue of a few hundred messages, most rows plain (fresh, owned elsewhere, beyond
    TargetQueueDepth), some not (delivered, leased, returned, barriers)."""
    extra = draw(st.sampled_from(["none", "none", "none", "priority", "barrier", "depth"]))
    policy = QueuePolicy(
        max_per_subscription_backlog=5,
        has_priority=extra == "priority",
        has_barrier=extra == "barrier",
        target_queue_depth=50 if extra == "depth" else None,
    )
    rows = draw(
        st.lists(
            st.tuples(st.sampled_from([1, 1, 1, 4]), st.integers(0, 9)), min_size=80, max_size=300
        )
    )
    events: list[tuple[int, Event]] = []
    txid = 0
    for gap, kind in rows:
        txid += gap
        event = published(
            txid, priority=kind % 3 if policy.has_priority else 0,
            barrier=policy.has_barrier and kind == 9,
        )  # fmt: skip
        if kind < 4 and not event.is_barrier:
            event = replace(event, elsewhere=True)  # a peer's copy (R2)
        events.append((0, event))
    if draw(st.integers(0, 3)) == 0:  # some delivered, leased or returned rows
        events.append((0, subscribed("a", "c1", 5)))
        events.append(
            (
                0,
                Acked(
                    "c1",
                    bookmarks(*draw(st.lists(st.integers(1, 40), max_size=3))),
                    AckOption.CANCEL,
                ),
            )
        )
    return policy, events


@settings(max_examples=100, deadline=None)
@given(queues(), st.data())
def test_remove_recovered_over_stretches_equals_one_event_per_txid(
    queue: tuple[QueuePolicy, list[tuple[int, Event]]], data: st.DataObject
) -> None:
    """As test_recovered_removals, with batches that are stretches of the queue's rows, so
    that the slice-at-a-time path runs, and falls back whenever one row is not plain."""
    policy, events = queue
    engines = [QueueEngine(policy), QueueEngine(policy)]
    for engine in engines:
        for at_ms, event in events:
            engine.handle(event, at_ms)
    txids = [e.txid for _, e in events if isinstance(e, MessagePublished)] or [1]
    for _ in range(data.draw(st.integers(1, 3))):
        batch = [txids[i] if i < len(txids) else txids[-1] + 1 for i in data.draw(stretches(txids))]
        reason, expire = data.draw(st.sampled_from(REASONS))
        removed = [MessageRemoved(reason=reason, txid=t, expire_reasons=expire) for t in batch]
        one_by_one = engines[0].handle_many(removed, 1)
        bulk = engines[1].remove_recovered(batch, reason, expire, 1)
        assert bulk == one_by_one
        for engine in engines:
            engine.check_invariants()
        a, b = engines
        assert a.deliverable(10_000) == b.deliverable(10_000)
        assert a.statistics(1) == b.statistics(1)
        assert a.low_water_txid() == b.low_water_txid()
        assert a.next_deadline_ms() == b.next_deadline_ms()
        assert a.snapshot() == b.snapshot()


def test_a_stretch_of_plain_rows_is_removed_a_slice_at_a_time() -> None:
    """The path the tests above compare is taken: a replayed stretch of acks of a peer's
    copies (R2) and of fresh messages leaves their rows REMOVED without one call per row."""
    engine = QueueEngine(QueuePolicy())
    for txid in range(1, 201):
        engine.handle(MessagePublished(txid, 3, txid, 0, elsewhere=txid % 2 == 0), 0)
    table = engine._state.table
    batch = list(range(21, 121))
    assert table.select_rows(batch, live=True) == (20, b"\x01" * 100)
    engine.remove_recovered(batch, RemovalReason.ACKED, ExpireReason.TIME_LIMIT, 0)
    engine.check_invariants()
    assert engine.statistics(0).depth == 100
    assert table.select_rows(batch, live=True) is None  # removed now
    assert engine.txids_of([(3, s) for s in range(121, 201)]) == list(range(121, 201))
