"""A replicated queue's snapshot (issue 9, Q16): restored and followed by the rest of the log,
it equals a replay of the whole log; its bytes round-trip; damage and mismatch are refused."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import (
    Acked,
    Deliver,
    ExpireReason,
    MessagePublished,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
    Subscribed,
)
from amps.queue.snapshot_codec import SnapshotFormatError
from replication import queue_replica, queue_snapshot
from replication.initial_owners import InitialOwners
from replication.ownership import (
    AppendOwnership,
    MessageKey,
    OwnershipRecord,
    OwnershipState,
    SendTransferRequest,
    TransferKind,
)
from replication.queue_replica import QueueReplica, ReplicaAction, ReplicaOptions

HERE = "a"
PEERS = ("b", "c")
NOW = 10_000

# Log entries as the server writes them: a publish (txid, bookmark, origin), a peer's removal
# by bookmark, this instance's removal by txid, a grant or claim (this instance's or a peer's).
Pub = tuple[str, int, int, int, str, bool]
PeerRemoval = tuple[str, MessageKey]
OwnRemoval = tuple[str, int]
Transfer = tuple[str, OwnershipRecord]
Entry = Pub | PeerRemoval | OwnRemoval | Transfer


@dataclass
class Live:
    """One instance's queue running live, writing its log."""

    replica: QueueReplica
    log: list[Entry] = field(default_factory=list)
    txid: int = 0
    seqs: dict[int, int] = field(default_factory=lambda: {1: 0, 2: 0})
    key_of: dict[int, MessageKey] = field(default_factory=dict)
    leased: list[MessageKey] = field(default_factory=list)
    barriers: set[MessageKey] = field(default_factory=set)
    now: int = NOW

    def perform(self, actions: list[ReplicaAction]) -> None:
        for action in actions:
            if isinstance(action, RecordRemoval):
                self.log.append(("own_removal", action.txid))
                key = self.key_of[action.txid]
                if key in self.leased:
                    self.leased.remove(key)
            elif isinstance(action, AppendOwnership):
                self.log.append(("transfer", action.record))
            elif isinstance(action, Deliver):
                self.leased.append(self.key_of[action.txid])

    def publish(self, publisher: int, origin: str, barrier: bool) -> None:
        self.txid += 1
        self.seqs[publisher] += 1
        key = (publisher, self.seqs[publisher])
        self.key_of[self.txid] = key
        if barrier:
            self.barriers.add(key)
        self.log.append(("pub", self.txid, *key, origin, barrier))
        message = MessagePublished(self.txid, *key, self.now - 5, 0, barrier)
        self.perform(self.replica.published([message], [origin], self.now))


def keys_of(live: Live) -> list[MessageKey]:
    return list(live.key_of.values())


def step(live: Live, op: tuple[int, int, int, int, int], policy: QueuePolicy) -> None:
    """One drawn operation on the live instance (each chooses among what exists)."""
    kind, a, b, c, d = op
    replica = live.replica
    keys = keys_of(live)
    if kind <= 2 or not keys:
        origin = (HERE, *PEERS)[a % 3]
        live.publish(1 + b % 2, origin, policy.has_barrier and c % 4 == 0)
    elif kind == 3:  # a peer's ack, maybe of a message not here yet (deferred)
        acked = [k for k in keys if k not in live.barriers]  # a barrier is released, not acked
        key = acked[a % len(acked)] if b % 4 and acked else (1 + c % 2, live.seqs[1 + c % 2] + 1)
        live.log.append(("peer_removal", key))
        live.perform(replica.removed_by_peer([key], live.now))
    elif kind == 4:  # a peer's grant or claim, maybe before its message
        key = keys[a % len(keys)] if b % 5 else (1 + c % 2, live.seqs[1 + c % 2] + 1)
        by = PEERS[c % 2]
        owner = (HERE, *PEERS)[d % 3]
        owner = by if b % 3 == 0 else owner
        record_kind = TransferKind.CLAIM if owner == by else TransferKind.GRANT
        record = OwnershipRecord(key, record_kind, by, owner, 1 + d % 3)
        live.log.append(("transfer", record))
        live.perform(replica.ownership_recorded(record, live.now))
    elif kind == 5:  # a peer asks this instance for a message
        key = keys[a % len(keys)]
        live.perform(replica.transfer_requested(key, PEERS[b % 2], live.now))
    elif kind == 6 and live.leased:  # the local consumer acks
        key = live.leased[a % len(live.leased)]
        live.perform(replica.acked(Acked("c", [key]), live.now))
    elif kind == 7:  # proxied transfer on (the peers unreachable) or off
        live.perform(replica.reachability_changed(PEERS, live.now))
        live.perform(replica.proxied_transfer_switched(a % 2 == 0, live.now))
    else:  # time passes: requests and waits run out
        live.now += 50 + a * 10
        live.perform(replica.on_deadline(live.now))


def fresh(policy: QueuePolicy, options: ReplicaOptions) -> QueueReplica:
    return QueueReplica(HERE, QueueEngine(policy), options)


def replay(replica: QueueReplica, entries: list[Entry], now_ms: int) -> None:
    """What the server's recovery does with the log (actions not performed: they are logged)."""
    engine = replica.engine
    engine.defer_deadlines(True)
    for entry in entries:
        if entry[0] == "pub":
            _, txid, publisher, seq, origin, barrier = entry  # type: ignore[misc]
            message = MessagePublished(txid, publisher, seq, NOW - 5, 0, barrier)
            replica.published([message], [origin], now_ms)
        elif entry[0] == "peer_removal":
            replica.removed_by_peer([entry[1]], now_ms)  # type: ignore[list-item]
        elif entry[0] == "own_removal":
            txid = entry[1]
            reason, expire = RemovalReason.ACKED, ExpireReason.TIME_LIMIT
            replica.removed_recovered([txid], reason, expire, now_ms)  # type: ignore[list-item]
        else:
            replica.ownership_recorded(entry[1], now_ms)  # type: ignore[arg-type]
    engine.defer_deadlines(False)


state = queue_snapshot.recovered_view


policies = st.sampled_from(
    [QueuePolicy(), QueuePolicy(target_queue_depth=2), QueuePolicy(has_barrier=True)]
)
kinds = st.sampled_from([("Queue", None), ("GroupLocalQueue", "b")])
ops = st.lists(
    st.tuples(*(st.integers(0, 9) for _ in range(5))), min_size=1, max_size=60
)  # fmt: skip


def run_live(
    policy: QueuePolicy, options: ReplicaOptions, drawn: list[tuple[int, int, int, int, int]]
) -> tuple[Live, int, queue_snapshot.ReplicaSnapshot]:
    """The live instance runs the operations, taking one snapshot at the cut (after `cut`
    operations); returns it with the log position it stands for."""
    live = Live(fresh(policy, options))
    live.perform(live.replica.handle(Subscribed("s", "c", 2), live.now))
    cut = drawn[0][1] * len(drawn) // 10
    snap = None
    position = 0
    for index, op in enumerate(drawn):
        if index == cut:
            snap, position = take(live), len(live.log)
        step(live, op, policy)
    if snap is None:
        snap, position = take(live), len(live.log)
    return live, position, snap


def take(live: Live) -> queue_snapshot.ReplicaSnapshot:
    return queue_snapshot.take(
        live.replica, reflects_txid=live.txid, taken_mono_ms=live.now, taken_wall_us=0,
        deferred_logged={}, marks={"b": 7},
    )  # fmt: skip


@settings(max_examples=250, deadline=None)
@given(policy=policies, kind=kinds, drawn=ops)
def test_snapshot_then_the_rest_of_the_log_equals_replaying_the_whole_log(
    policy: QueuePolicy, kind: tuple[str, str | None], drawn: list[tuple[int, int, int, int, int]]
) -> None:
    options = ReplicaOptions(kind=kind[0], initial_owner=kind[1])  # type: ignore[arg-type]
    live, position, snap = run_live(policy, options, drawn)
    log = live.log
    decoded = queue_snapshot.decode(queue_snapshot.encode(snap))
    assert decoded == snap
    now = live.now + 1_000
    # The round trip: restoring the snapshot equals replaying the log up to its position.
    restored = queue_snapshot.restore(decoded, HERE, policy, options, 0, now)
    upto = fresh(policy, options)
    replay(upto, log[:position], now)
    assert state(restored) == state(upto)
    # Restore equals replay: the snapshot and the rest of the log, or the whole log.
    replay(restored, log[position:], now)
    whole = fresh(policy, options)
    replay(whole, log, now)
    assert state(restored) == state(whole)
    # A snapshot of the restored queue (its initial owners restored, then extended by the
    # replay) restores the same queue again.
    again = queue_snapshot.decode(queue_snapshot.encode(take(Live(restored, txid=live.txid))))
    assert state(queue_snapshot.restore(again, HERE, policy, options, 0, now)) == state(whole)


def test_a_snapshot_stores_only_the_messages_a_record_moved() -> None:
    """Rule 5: most messages keep their initial owner at epoch 0 and cost nothing one by
    one; a grant or claim moves one, and the snapshot stores that one."""
    options = ReplicaOptions()
    live = Live(fresh(QueuePolicy(), options))
    for origin in ("a", "a", "b", "b", "a", "c"):
        live.publish(1, origin, False)
    snap = take(live)
    assert snap.ownership.live == 6
    assert len(snap.ownership.states) == 0
    assert (list(snap.initial_starts), snap.initial_owners) == ([1, 3, 5, 6], ("a", "b", "a", "c"))
    moved = live.key_of[3]
    live.perform(live.replica.ownership_recorded(
        OwnershipRecord(moved, TransferKind.GRANT, "b", "a", 1), live.now))  # fmt: skip
    live.perform(live.replica.removed_by_peer([live.key_of[1], live.key_of[2]], live.now))
    snap = take(live)
    assert (snap.ownership.live, len(snap.ownership.states)) == (4, 1)
    assert (snap.ownership.publisher_ids[0], snap.ownership.seqs[0]) == moved
    # The runs before the oldest message held are forgotten.
    assert (list(snap.initial_starts), snap.initial_owners) == ([3, 5, 6], ("b", "a", "c"))
    restored = queue_snapshot.restore(snap, HERE, QueuePolicy(), options, 0, NOW)
    assert restored.owned_here(moved)
    assert restored.state_of(live.key_of[4]) is OwnershipState.OWNED_ELSEWHERE
    assert state(restored) == state(live.replica)


def test_initial_owners_runs() -> None:
    """Runs of (first txid, owner) place every message; one out of order spoils them (a
    snapshot then stores none, and a restart replays the log)."""
    runs = InitialOwners()
    for txid, owner in ((1, "a"), (2, "a"), (4, "b"), (7, "b"), (9, "a")):
        runs.note(txid, owner)
    assert (list(runs.starts), runs.owners) == ([1, 4, 9], ["a", "b", "a"])
    assert runs.runs_over([2, 4, 7, 9, 12]) == [(1, "a"), (2, "b"), (2, "a")]
    assert runs.runs_over([7, 12]) == [(1, "b"), (1, "a")]
    runs.prune(7)
    assert (list(runs.starts), runs.owners) == ([4, 9], ["b", "a"])
    with pytest.raises(ValueError, match="do not cover"):
        runs.runs_over([2, 7])
    runs.note(8, "c")
    assert runs.disordered
    with pytest.raises(ValueError, match="do not cover"):
        runs.runs_over([7])


def test_restored_queue_still_grants_acks_and_takes_transfers() -> None:
    """After a restore the first-request rule, acks and transfers in work as before."""
    options = ReplicaOptions()
    policy = QueuePolicy(max_per_subscription_backlog=10)
    live = Live(fresh(policy, options))
    for origin in ("a", "a", "b", "b"):
        live.publish(1, origin, False)
    mine, also_mine, theirs, other = keys_of(live)
    snap = queue_snapshot.decode(queue_snapshot.encode(take(live)))
    replica = queue_snapshot.restore(snap, HERE, policy, options, 0, NOW)
    assert replica.owned_here(mine)
    assert not replica.owned_here(theirs)
    assert replica.state_of(theirs) is OwnershipState.OWNED_ELSEWHERE
    # R5: the first request is granted, the second is silence.
    granted = replica.transfer_requested(mine, "b", NOW)
    assert [type(a) for a in granted if isinstance(a, AppendOwnership)] == [AppendOwnership]
    assert not [a for a in replica.transfer_requested(mine, "c", NOW) if a]
    # A grant from b moves `theirs` here; the subscriber gets it and the owned one.
    replica.ownership_recorded(OwnershipRecord(theirs, TransferKind.GRANT, "b", "a", 1), NOW)
    delivered = replica.handle(Subscribed("s", "c", 10), NOW)
    txids = {a.txid for a in delivered if isinstance(a, Deliver)}
    assert {live.key_of[t] for t in txids} == {also_mine, theirs}
    # A peer's ack removes a message owned elsewhere; a local ack removes a delivered one.
    replica.removed_by_peer([other], NOW)
    assert replica.state_of(other) is OwnershipState.REMOVED
    removed = replica.acked(Acked("c", [also_mine]), NOW)
    assert [a for a in removed if isinstance(a, RecordRemoval)]
    replica.check_invariants()


def test_damaged_or_foreign_snapshots_are_refused() -> None:
    options = ReplicaOptions()
    live = Live(fresh(QueuePolicy(), options))
    for origin in ("a", "b", "c"):
        live.publish(2, origin, False)
    data = queue_snapshot.encode(take(live))
    assert queue_snapshot.is_replica_snapshot(data)
    for damaged in (data[:-3], data[:10], data[:40] + bytes([data[40] ^ 1]) + data[41:]):
        with pytest.raises(SnapshotFormatError):
            queue_snapshot.decode(damaged)
    snap = queue_snapshot.decode(data)
    with pytest.raises(ValueError, match="taken on instance 'a'"):
        queue_snapshot.restore(snap, "b", QueuePolicy(), options, 0, NOW)
    glq = ReplicaOptions(kind="GroupLocalQueue", initial_owner="b")
    with pytest.raises(ValueError, match="GroupLocalQueue"):
        queue_snapshot.restore(snap, HERE, QueuePolicy(), glq, 0, NOW)
    # Ownership that does not describe the queue's messages is refused, not half restored:
    # initial owners that make the engine's messages owned elsewhere owned here, a live count
    # that is not the queue's, runs that do not cover its messages, a moved message owned
    # here that names another owner, or one the queue does not hold.
    own = snap.ownership
    all_here = replace(snap, initial_owners=("a",) * len(snap.initial_owners))
    one_short = replace(snap, ownership=replace(own, live=own.live - 1))
    uncovered = replace(snap, initial_starts=array("q", [9]), initial_owners=("a",))
    here_but_b = replace(
        own, names=("a", "b", "c"), states=b"\0", owners=array("H", [1]),
        publisher_ids=array("Q", [2]), seqs=array("Q", [2]), epochs=array("q", [1]),
    )  # fmt: skip
    unknown = replace(here_but_b, seqs=array("Q", [7]), states=b"\1")
    for lying in (all_here, one_short, uncovered, replace(snap, ownership=here_but_b),
                  replace(snap, ownership=unknown)):  # fmt: skip
        with pytest.raises(ValueError, match=r"ownership snapshot|initial owners"):
            queue_snapshot.restore(lying, HERE, QueuePolicy(), options, 0, NOW)
    # A snapshot of the older format (one row per message) is refused: the log is replayed.
    older = b"ARQ1" + data[4:]
    assert queue_snapshot.is_replica_snapshot(older)
    with pytest.raises(SnapshotFormatError, match="older format"):
        queue_snapshot.decode(older)


def _finish(replica: QueueReplica, now_ms: int) -> list[ReplicaAction]:
    out: list[ReplicaAction] = []
    while replica.restoring:
        out += replica.restore_step(now_ms)
    return out


def _requested(actions: list[ReplicaAction]) -> set[MessageKey]:
    return {a.key for a in actions if isinstance(a, SendTransferRequest)}


@settings(max_examples=150, deadline=None)
@given(
    policy=policies, kind=kinds, drawn=ops, size=st.integers(1, 4), before=st.integers(0, 5)
)  # fmt: skip
def test_a_staged_restore_serves_from_the_engine_and_ends_as_an_indexed_one(
    policy: QueuePolicy,
    kind: tuple[str, str | None],
    drawn: list[tuple[int, int, int, int, int]],
    size: int,
    before: int,
) -> None:
    """Rule 7: a subscriber served after a few bounded steps (or none) gets exactly what it
    gets once every message is indexed: only messages owned here and not removed; the
    transfer requests wait for the last step, which asks for what the indexed one asks for;
    then the two are the same queue."""
    options = ReplicaOptions(kind=kind[0], initial_owner=kind[1])  # type: ignore[arg-type]
    live, _, snap = run_live(policy, options, drawn)
    decoded = queue_snapshot.decode(queue_snapshot.encode(snap))
    later = live.now + 600_000  # past every transfer-latency estimate: waiting ones are asked
    saved = queue_replica.RESTORE_STEP_MESSAGES
    queue_replica.RESTORE_STEP_MESSAGES = size
    try:
        indexed = queue_snapshot.restore(decoded, HERE, policy, options, 0, live.now)
        _finish(indexed, later)
        counts = indexed.statistics()
        first = indexed.handle(Subscribed("t", "d", 3), later)
        staged = queue_snapshot.restore(decoded, HERE, policy, options, 0, live.now)
        for _ in range(before):
            assert not _requested(staged.restore_step(later))
        assert staged.statistics() == counts
        served = staged.handle(Subscribed("t", "d", 3), later)
        assert not _requested(served) or not staged.restoring
        served += _finish(staged, later)
    finally:
        queue_replica.RESTORE_STEP_MESSAGES = saved
    delivered = [a.txid for a in served if isinstance(a, Deliver)]
    assert delivered == [a.txid for a in first if isinstance(a, Deliver)]
    for txid in delivered:
        assert indexed.owned_here(live.key_of[txid]) or live.key_of[txid] in live.barriers
    assert _requested(served) == _requested(first)
    assert state(staged) == state(indexed)


def _six_from_two_origins() -> tuple[Live, queue_snapshot.ReplicaSnapshot]:
    live = Live(fresh(QueuePolicy(), ReplicaOptions()))
    for origin in ("a", "b", "a", "b", "b", "a"):
        live.publish(1 + live.txid % 2, origin, False)
    return live, queue_snapshot.decode(queue_snapshot.encode(take(live)))


def test_an_ack_in_the_log_for_a_message_not_indexed_yet_leaves_at_once() -> None:
    """Rule 7: a restart replays a peer's ack and its own of messages the staged index has not
    reached: they leave the engine at once (never delivered), the index stays staged and takes
    them after its last message, ending as an instance that indexed everything first."""
    options = ReplicaOptions()
    live, snap = _six_from_two_origins()
    theirs, mine = live.key_of[4], live.key_of[6]  # owned by b and by a, not indexed yet
    reason, expire = RemovalReason.ACKED, ExpireReason.TIME_LIMIT
    saved = queue_replica.RESTORE_STEP_MESSAGES
    queue_replica.RESTORE_STEP_MESSAGES = 2
    try:
        indexed = queue_snapshot.restore(snap, HERE, QueuePolicy(), options, 0, NOW)
        _finish(indexed, NOW)
        indexed.removed_by_peer([theirs], NOW)
        indexed.removed_recovered([6], reason, expire, NOW)
        first = indexed.handle(Subscribed("t", "d", 10), NOW)
        staged = queue_snapshot.restore(snap, HERE, QueuePolicy(), options, 0, NOW)
        staged.restore_step(NOW)
        staged.removed_by_peer([theirs], NOW)
        staged.removed_recovered([6], reason, expire, NOW)
        assert staged.restoring  # nothing needed the index
        assert staged.engine.txid_of(theirs) is None
        assert staged.engine.txid_of(mine) is None
        served = staged.handle(Subscribed("t", "d", 10), NOW)
        assert staged.restoring
        _finish(staged, NOW)
    finally:
        queue_replica.RESTORE_STEP_MESSAGES = saved
    delivered = [a.txid for a in served if isinstance(a, Deliver)]
    assert delivered
    assert 6 not in delivered
    assert delivered == [a.txid for a in first if isinstance(a, Deliver)]
    assert staged.state_of(theirs) is OwnershipState.REMOVED
    assert staged.state_of(mine) is OwnershipState.REMOVED
    assert state(staged) == state(indexed)


def test_an_ack_for_a_message_not_in_the_queue_finishes_a_staged_restore_first() -> None:
    """Rule 7: a peer's ack naming a message the queue does not hold (early, or gone) depends
    on what the index has yet to learn: the index is finished, then the ack applies."""
    options = ReplicaOptions()
    live, snap = _six_from_two_origins()
    early = (2, 99)
    saved = queue_replica.RESTORE_STEP_MESSAGES
    queue_replica.RESTORE_STEP_MESSAGES = 2
    try:
        staged = queue_snapshot.restore(snap, HERE, QueuePolicy(), options, 0, NOW)
        staged.restore_step(NOW)
        staged.removed_by_peer([live.key_of[2]], NOW)  # staged
        assert staged.restoring
        staged.removed_by_peer([live.key_of[2], early], NOW)  # one gone already, one early
        assert not staged.restoring
        indexed = queue_snapshot.restore(snap, HERE, QueuePolicy(), options, 0, NOW)
        _finish(indexed, NOW)
        indexed.removed_by_peer([live.key_of[2]], NOW)
        indexed.removed_by_peer([live.key_of[2], early], NOW)
    finally:
        queue_replica.RESTORE_STEP_MESSAGES = saved
    assert staged.engine.is_deferred(early)
    assert state(staged) == state(indexed)


def test_a_barrier_released_in_the_log_after_a_snapshot_of_barriers_only() -> None:
    """Rule 7 (seed 149 of the cluster simulation): with no message tracked the index's one
    step still maps the barriers' bookmarks, and a removal of one replayed meanwhile waits
    for it, so the restore remembers the barrier's key removed, as one indexed first."""
    policy = QueuePolicy(has_barrier=True)
    live = Live(fresh(policy, ReplicaOptions()))
    live.publish(1, "b", True)
    snap = queue_snapshot.decode(queue_snapshot.encode(take(live)))
    reason, expire = RemovalReason.BARRIER_DELIVERED, ExpireReason.TIME_LIMIT
    staged = queue_snapshot.restore(snap, HERE, policy, ReplicaOptions(), 0, NOW)
    staged.removed_recovered([1], reason, expire, NOW)
    assert staged.restoring
    _finish(staged, NOW)
    indexed = queue_snapshot.restore(snap, HERE, policy, ReplicaOptions(), 0, NOW)
    _finish(indexed, NOW)
    indexed.removed_recovered([1], reason, expire, NOW)
    assert staged.state_of(live.key_of[1]) is OwnershipState.REMOVED
    assert state(staged) == state(indexed)


@settings(max_examples=200, deadline=None)
@given(
    policy=policies, kind=kinds, drawn=ops, size=st.integers(1, 4),
    steps=st.lists(st.integers(0, 3), max_size=40), subscribe=st.booleans(),
    acks=st.lists(st.tuples(st.booleans(), st.integers(0, 99)), max_size=12),
)  # fmt: skip
def test_removals_replayed_during_a_staged_restore_end_as_replayed_after_indexing(
    policy: QueuePolicy,
    kind: tuple[str, str | None],
    drawn: list[tuple[int, int, int, int, int]],
    size: int,
    steps: list[int],
    subscribe: bool,
    acks: list[tuple[bool, int]],
) -> None:
    """Rule 7's fast path against its slow one: the log after a snapshot replayed into a
    staged restore (removals to the engine at once and to the index later, index steps
    between them) and into one indexed first give the same queue, and a subscriber that
    comes before the index is whole gets what it gets from the indexed one."""
    options = ReplicaOptions(kind=kind[0], initial_owner=kind[1])  # type: ignore[arg-type]
    live, position, snap = run_live(policy, options, drawn)
    # More removals after the log's own: this instance's and a peer's, of any message
    # published (live, gone already, or a barrier), as a consumer here or there acked them.
    txids = sorted(live.key_of)
    tail: list[Entry] = [*live.log[position:]]
    for own, pick in acks:
        txid = txids[pick % len(txids)]
        tail.append(("own_removal", txid) if own else ("peer_removal", live.key_of[txid]))
    now = live.now + 1_000
    saved = queue_replica.RESTORE_STEP_MESSAGES
    queue_replica.RESTORE_STEP_MESSAGES = size
    try:
        slow = queue_snapshot.restore(snap, HERE, policy, options, 0, now)
        _finish(slow, now)
        replay(slow, tail, now)
        fast = queue_snapshot.restore(snap, HERE, policy, options, 0, now)
        for at, entry in enumerate(tail):
            replay(fast, [entry], now)
            for _ in range(steps[at] if at < len(steps) else 0):
                fast.restore_step(now)
        if subscribe:
            first = slow.handle(Subscribed("t", "d", 3), now)
            served = fast.handle(Subscribed("t", "d", 3), now)
            delivered = [a.txid for a in served if isinstance(a, Deliver)]
            assert delivered == [a.txid for a in first if isinstance(a, Deliver)]
        _finish(fast, now)
    finally:
        queue_replica.RESTORE_STEP_MESSAGES = saved
    assert state(fast) == state(slow)
    assert fast.ownership.snapshot() == slow.ownership.snapshot()
    if not subscribe:  # (a subscriber's requests go out at different steps)
        assert fast.ownership.statistics() == slow.ownership.statistics()


def test_a_snapshot_that_remembers_a_live_message_removed_is_refused_before_serving() -> None:
    options = ReplicaOptions()
    live = Live(fresh(QueuePolicy(), options))
    for origin in ("a", "b", "a"):
        live.publish(1, origin, False)
    snap = take(live)
    lying = replace(snap, ownership=replace(snap.ownership, removed=(live.key_of[2],)))
    with pytest.raises(ValueError, match="holds a removed message"):
        queue_snapshot.restore(lying, HERE, QueuePolicy(), options, 0, NOW)
