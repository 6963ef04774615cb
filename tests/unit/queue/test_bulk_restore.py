"""Bulk snapshot/restore (Q16) equals inserting every message one by one."""

from __future__ import annotations

import heapq
import random
import struct
from array import array
from dataclasses import replace
from itertools import compress

from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import Acked, MessagePublished, QueueEngine, QueuePolicy, QueueSnapshot
from amps.queue.bulk import _CHUNK_WORDS, add_constant, or_bytes, select, sorted_members
from amps.queue.recovery import HINT_EXPIRY_DERIVED, HINT_SEQS_IN_ORDER
from amps.queue.snapshot_codec import decode_snapshot, encode_snapshot
from amps.queue.state import QueueState
from amps.queue.table import NO_EXPIRY, REMOVED


def reference_restore(policy: QueuePolicy, snap: QueueSnapshot, shift_ms: int) -> QueueEngine:
    """The former restore: one `insert` per message."""
    engine = QueueEngine(policy)
    state: QueueState = engine._state
    base = policy.expiration_ms
    uniform = all(
        at == (NO_EXPIRY if base is None else stamp + base)
        for stamp, at in zip(snap.timestamps_ms, snap.expire_at_ms, strict=True)
    )
    bookmark_of = snap.bookmark_of()
    elsewhere = snap.elsewhere_flags or bytes(len(snap.txids))
    for i, txid in enumerate(snap.txids):
        at = snap.expire_at_ms[i]
        state.insert(
            txid, *bookmark_of[txid], snap.timestamps_ms[i] + shift_ms,
            snap.priorities[i], bool(snap.barrier_flags[i]),
            at if at == NO_EXPIRY else at + shift_ms, own_expiry=not uniform,
            elsewhere=bool(elsewhere[i]),
        )  # fmt: skip
    state.last_txid = max(state.last_txid, snap.high_water_txid)
    for publisher_id, seq, expires_at_ms in snap.deferred_acks:
        state.deferred[(publisher_id, seq)] = expires_at_ms + shift_ms
        heapq.heappush(state.deferred_heap, (expires_at_ms + shift_ms, publisher_id, seq))
    return engine


def fingerprint(engine: QueueEngine) -> tuple[object, ...]:
    state = engine._state
    table = state.table
    levels = {
        p: (list(level.fresh)[level.head :], level.fresh_live) for p, level in state.levels.items()
    }
    return (
        list(table.txid), list(table.timestamp_ms), bytes(table.state), bytes(table.flags),
        list(table.delivery_count), list(table.lease_sub), table.base,
        None if table.priority is None else list(table.priority),
        None if table.expire_at_ms is None else list(table.expire_at_ms),
        state.bookmarks.items(), state.bookmarks.entry_count, levels, state.level_order,
        list(state.barriers), state.active_count, state.inactive_count, state.elsewhere_count,
        state.activation_slot,
        state.expiry_max_seen_ms, sorted(state.expiry_heap), sorted(state.deferred_heap),
        state.last_txid, state.counters.entered_total, engine.deliverable(10_000),
    )  # fmt: skip


policies = st.sampled_from(
    [
        QueuePolicy(),
        QueuePolicy(expiration_ms=5_000),
        QueuePolicy(has_priority=True),
        QueuePolicy(has_barrier=True, expiration_ms=100),
        QueuePolicy(target_queue_depth=3),
    ]
)
message = st.tuples(
    st.integers(1, 3),  # publisher
    st.integers(0, 3),  # seq step (0: a repeated seq, out of order)
    st.integers(-50, 200),  # timestamp step (negative: out of order)
    st.integers(0, 2),  # priority
    st.booleans(),  # barrier
    st.one_of(st.none(), st.integers(1, 500)),  # own expiration
    st.booleans(),  # acked
)


def live_bookmarks(engine: QueueEngine) -> dict[int, tuple[int, int]]:
    """txid -> bookmark of every live message, read off the engine's index one by one."""
    table = engine._state.table
    live = {table.txid[slot] for slot in range(len(table)) if table.state[slot] != REMOVED}
    return {t: (p, s) for t, p, s in engine._state.bookmarks.items() if t in live}


def engine_from(
    policy: QueuePolicy, messages: list[tuple[int, int, int, int, bool, int | None, bool]]
) -> QueueEngine:
    """An engine fed the drawn messages, some acked, with one deferred ack."""
    engine = QueueEngine(policy)
    seqs = {1: 10, 2: 10, 3: 10}
    stamp = 1_000
    acks = []
    for txid, (publisher, step, tick, priority, barrier, own, acked) in enumerate(messages, 1):
        seqs[publisher] += step
        stamp += tick
        engine.handle(
            MessagePublished(
                txid, publisher, seqs[publisher], stamp,
                priority if policy.has_priority else 0,
                barrier and policy.has_barrier, own,
            ),
            0,
        )  # fmt: skip
        if acked:
            acks.append((publisher, seqs[publisher]))
    engine.handle(Acked("c", acks), 0)
    engine.handle(Acked("c", [(2, 10_000)]), 0)  # a deferred ack
    return engine


@settings(max_examples=300, deadline=None)
@given(policy=policies, messages=st.lists(message, max_size=40), shift=st.integers(-999, 999))
def test_bulk_restore_equals_one_insert_per_message(
    policy: QueuePolicy, messages: list[tuple[int, int, int, int, bool, int | None, bool]],
    shift: int,
) -> None:  # fmt: skip
    engine = engine_from(policy, messages)
    snap = engine.snapshot()
    assert snap.bookmark_of() == live_bookmarks(engine)
    for candidate in (
        snap,
        replace(snap, hints=0),
        decode_snapshot(encode_snapshot(snap, 0, 0))[0],
    ):
        restored = QueueEngine.restore(policy, candidate, shift)
        restored.check_invariants()
        assert fingerprint(restored) == fingerprint(reference_restore(policy, candidate, shift))
        assert restored.snapshot().txids == snap.txids


@settings(max_examples=200, deadline=None)
@given(
    policy=policies,
    messages=st.lists(message, max_size=40),
    marks=st.lists(st.booleans(), max_size=40),
    shift=st.integers(-999, 999),
)
def test_restore_with_messages_owned_elsewhere_equals_one_insert_per_message(
    policy: QueuePolicy,
    messages: list[tuple[int, int, int, int, bool, int | None, bool]],
    marks: list[bool],
    shift: int,
) -> None:
    """R2: rows another instance owns are kept apart (in no level, outside the
    TargetQueueDepth window), and a snapshot of the restored engine marks them again."""
    snap = engine_from(policy, messages).snapshot()
    count = len(snap.txids)
    marks = (marks + [False] * count)[:count]
    flags = bytes(m and not b for m, b in zip(marks, snap.barrier_flags, strict=True))
    snap = replace(snap, elsewhere_flags=flags if 1 in flags else b"")
    restored = QueueEngine.restore(policy, snap, shift)
    restored.check_invariants()
    assert fingerprint(restored) == fingerprint(reference_restore(policy, snap, shift))
    assert restored.owned_elsewhere_count() == flags.count(1)
    assert restored.snapshot().elsewhere_flags == snap.elsewhere_flags


def encode_aqs2(snap: QueueSnapshot) -> bytes:
    """The AQS2 layout (bookmarks as two columns in txid order), as the previous version
    wrote it; little-endian machine assumed, as on every machine the tests run on."""
    bookmark_of = snap.bookmark_of()
    publishers = array("Q", (bookmark_of[t][0] for t in snap.txids))
    seqs = array("Q", (bookmark_of[t][1] for t in snap.txids))
    return b"".join([
        struct.pack("<4sqqqI", b"AQS2", snap.high_water_txid, 1, 2, len(snap.txids)),
        struct.pack("<I", snap.hints | HINT_SEQS_IN_ORDER * (not snap.unordered_bookmarks)),
        snap.txids.tobytes(), publishers.tobytes(), seqs.tobytes(),
        snap.timestamps_ms.tobytes(), snap.priorities.tobytes(), snap.barrier_flags,
        snap.expire_at_ms.tobytes(), struct.pack("<I", len(snap.deferred_acks)),
        *(struct.pack("<QQq", *item) for item in snap.deferred_acks),
    ])  # fmt: skip


def test_an_older_snapshot_without_hints_still_decodes() -> None:
    engine = QueueEngine(QueuePolicy(expiration_ms=1000))
    for txid in range(1, 6):
        engine.handle(MessagePublished(txid, 7, txid, txid), 0)
    snap = engine.snapshot()
    assert snap.hints & HINT_EXPIRY_DERIVED
    data = bytearray(encode_aqs2(snap))
    data[0:4] = b"AQS1"
    del data[32:36]  # the hints word, right after the 32-byte header
    decoded, mono, wall = decode_snapshot(bytes(data))
    assert (mono, wall) == (1, 2)
    assert decoded == replace(snap, hints=0)


@settings(max_examples=150, deadline=None)
@given(policy=policies, messages=st.lists(message, max_size=40), shift=st.integers(-999, 999))
def test_an_aqs2_snapshot_restores_as_its_aqs3_equivalent(
    policy: QueuePolicy, messages: list[tuple[int, int, int, int, bool, int | None, bool]],
    shift: int,
) -> None:  # fmt: skip
    """Q16: a snapshot written by the previous version (bookmarks in txid order) restores to
    the same engine as today's (bookmarks as runs per publisher)."""
    snap = engine_from(policy, messages).snapshot()
    old, _, _ = decode_snapshot(encode_aqs2(snap))
    assert old.bookmark_of() == snap.bookmark_of()
    assert fingerprint(QueueEngine.restore(policy, old, shift)) == fingerprint(
        QueueEngine.restore(policy, snap, shift)
    )


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(-(2**61), 2**61)),
    constant=st.integers(-(2**61), 2**61),
)
def test_add_constant_adds_to_every_word(values: list[int], constant: int) -> None:
    assert list(add_constant(array("q", values), constant)) == [v + constant for v in values]


@settings(max_examples=20, deadline=None)
@given(
    count=st.integers(1, 3 * _CHUNK_WORDS + 7),
    constant=st.integers(-(2**61), 2**61),
)
def test_add_constant_over_many_chunks(count: int, constant: int) -> None:
    """The column is added a chunk at a time: every chunk, and the short last one, alike."""
    values = array("q", range(-count, 2 * count, 3))
    assert list(add_constant(values, constant)) == [v + constant for v in values]


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255))))
def test_or_bytes_ors_every_byte(pairs: list[tuple[int, int]]) -> None:
    first, second = bytes(a for a, _ in pairs), bytes(b for _, b in pairs)
    assert or_bytes(first, second) == bytes(a | b for a, b in pairs)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 3)), max_size=400),
    runs=st.integers(1, 40),
)
def test_select_is_compress(rows: list[tuple[int, int]], runs: int) -> None:
    """Whatever the runs: long ones (sliced), or short ones past the budget (compressed)."""
    values = array("q", [v for v, _ in rows])
    mask = bytes(m * (i // runs % 2) for i, (_, m) in enumerate(rows))
    assert list(select(values, mask)) == list(compress(values, mask))
    assert select(values, mask).typecode == "q"


def test_many_publishers_with_compacted_and_uncompacted_garbage() -> None:
    """Q16: bookmark runs of several publishers cut to the live messages, before and after
    the table and the index compact, restore to an engine that finds every bookmark."""
    rng = random.Random(11)
    engine = QueueEngine(QueuePolicy())
    seqs = dict.fromkeys(range(1, 6), 0)
    txid = 0
    for _ in range(40):
        batch = []
        for _ in range(rng.randint(1, 300)):
            txid += 1
            publisher = rng.choice([1, 1, 2, 3, 4, 5])
            seqs[publisher] += rng.choice([1, 1, 2])
            batch.append(MessagePublished(txid, publisher, seqs[publisher], 0))
        engine.handle_many(batch, 0)
        live = live_bookmarks(engine)
        engine.handle(Acked("c", [b for b in live.values() if rng.random() < 0.6]), 0)
        snap = engine.snapshot()
        assert snap.bookmark_of() == live_bookmarks(engine)
        restored = QueueEngine.restore(QueuePolicy(), snap, 0)
        restored.check_invariants()
        assert fingerprint(restored) == fingerprint(reference_restore(QueuePolicy(), snap, 0))


@settings(max_examples=200, deadline=None)
@given(
    st.sets(st.integers(-5, 400), max_size=120),
    st.sets(st.integers(-5, 400), max_size=120),
)
def test_sorted_members_marks_exactly_the_values_among_the_members(
    values: set[int], members: set[int]
) -> None:
    """A snapshot's look-up of each bookmark run in the live txids (both increasing)."""
    wanted = array("q", sorted(values))
    found = array("q", sorted(members))
    assert sorted_members(wanted, found) == bytes(v in members for v in wanted)
