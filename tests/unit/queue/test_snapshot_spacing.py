"""When a queue's next snapshot is due (amps/queue/snapshot_spacing.py, issue 9): time, the
replay bound and the loop budget, with a manual clock; the counts from a real engine and a
replicated queue's (messages owned elsewhere, a peer's acks)."""

from __future__ import annotations

from amps.queue import Acked, MessagePublished, QueueEngine, QueuePolicy
from amps.queue.snapshot_spacing import QueueChanges, SnapshotSpacing
from replication.queue_replica import QueueReplica, ReplicaOptions

from .helpers import bookmarks, publish_all, subscribed

NOW_MS = 1_000


def spacing() -> SnapshotSpacing:
    return SnapshotSpacing(interval_s=5.0, spread=50.0, replay_bound=1_000, budget=10.0)


def counts(entered: int, live: int) -> QueueChanges:
    return QueueChanges(entered_total=entered, live=live)


def test_the_first_snapshot_is_due_at_once_then_every_interval() -> None:
    rule = spacing()
    assert not rule.taken_any
    assert rule.due(0.0, lambda: counts(0, 0))
    assert rule.taken(0.0, 0.01, counts(0, 0)) == 5.0
    assert rule.taken_any
    assert not rule.due(4.9, lambda: counts(10, 10))
    assert rule.due(5.0, lambda: counts(10, 10))


def test_a_costly_snapshot_spaces_the_next_by_its_spread() -> None:
    rule = spacing()
    assert rule.taken(0.0, 0.3, counts(0, 500_000)) == 15.0
    assert not rule.due(14.9, lambda: counts(0, 500_000))
    assert rule.due(15.0, lambda: counts(0, 500_000))


def test_the_replay_bound_makes_it_due_sooner() -> None:
    rule = spacing()
    rule.taken(0.0, 0.01, counts(5_000, 3_000))
    # 400 published, 599 of the 3,400 held then or since removed: 999 in or out.
    assert rule.changed_since(counts(5_400, 2_801)) == 999
    assert not rule.due(1.0, lambda: counts(5_400, 2_801))
    assert rule.changed_since(counts(5_400, 2_800)) == 1_000
    assert rule.due(1.0, lambda: counts(5_400, 2_800))
    assert rule.by_replay_bound(1.0)
    assert not rule.by_replay_bound(5.0)


def test_acks_alone_reach_the_bound() -> None:
    rule = spacing()
    rule.taken(0.0, 0.01, counts(10_000, 10_000))
    assert not rule.due(0.5, lambda: counts(10_000, 9_001))
    assert rule.due(0.5, lambda: counts(10_000, 9_000))


def test_the_budget_holds_the_replay_bound_back() -> None:
    rule = spacing()
    rule.taken(0.0, 0.3, counts(0, 500_000))  # at most 10 % of the loop: not before 3 s
    far_past_the_bound = counts(0, 400_000)
    assert not rule.due(2.9, lambda: far_past_the_bound)
    assert rule.due(3.0, lambda: far_past_the_bound)


def test_the_counts_are_asked_for_only_when_the_bound_decides() -> None:
    rule = spacing()
    asked: list[int] = []

    def changes() -> QueueChanges:
        asked.append(1)
        return counts(0, 0)

    assert rule.due(0.0, changes)  # none taken yet: due by time
    rule.taken(0.0, 0.3, counts(0, 0))
    assert not rule.due(1.0, changes)  # within the budget
    assert not asked
    assert not rule.due(4.0, changes)
    assert len(asked) == 1


def test_an_attempt_not_stored_counts_against_the_budget_only() -> None:
    rule = spacing()
    rule.taken(0.0, 0.01, counts(0, 0))
    assert rule.due(5.0, lambda: counts(0, 0))
    rule.attempted(5.0, 0.2)  # its position was not ready: nothing stored
    assert not rule.due(6.9, lambda: counts(0, 0))
    assert rule.due(7.0, lambda: counts(0, 0))  # still due by time, once the budget allows


def test_a_counter_that_went_back_leaves_only_the_time_rule() -> None:
    rule = spacing()
    rule.taken(0.0, 0.01, counts(5_000, 5_000))
    assert rule.changed_since(counts(10, 0)) is None
    assert not rule.due(1.0, lambda: counts(10, 0))
    assert rule.due(5.0, lambda: counts(10, 0))


def test_an_engines_counts_give_the_messages_in_and_out() -> None:
    engine = QueueEngine(QueuePolicy())
    rule = spacing()
    publish_all(engine, range(1, 101), NOW_MS)
    rule.taken(0.0, 0.01, QueueChanges.of(engine.statistics(NOW_MS)))
    publish_all(engine, range(101, 131), NOW_MS)
    engine.handle(subscribed("s", "c", max_backlog=1_000), NOW_MS)
    engine.handle(Acked("c", bookmarks(*range(1, 21))), NOW_MS)
    engine.handle(Acked("c", bookmarks(*range(101, 106))), NOW_MS)
    assert rule.changed_since(QueueChanges.of(engine.statistics(NOW_MS))) == 30 + 25


def test_a_replicated_queues_counts_include_messages_owned_elsewhere() -> None:
    replica = QueueReplica("a", QueueEngine(QueuePolicy()), ReplicaOptions())
    rule = spacing()

    def changes() -> QueueChanges:
        return QueueChanges.of(replica.engine.statistics(NOW_MS))

    rule.taken(0.0, 0.01, changes())
    messages = [MessagePublished(t, 1 + t % 2, t, NOW_MS) for t in range(1, 41)]
    replica.published(messages, ["a" if t % 2 else "b" for t in range(1, 41)], NOW_MS)
    assert replica.engine.owned_elsewhere_count() == 20
    # b's acks of ten messages it owns, replicated here.
    replica.removed_by_peer([(1, t) for t in range(2, 21, 2)], NOW_MS)
    assert rule.changed_since(changes()) == 40 + 10
