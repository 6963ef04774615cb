"""Behaviour of the queue engine, one SPEC number per test (driven with explicit now_ms)."""

from __future__ import annotations

import pytest

from amps.queue import (
    Acked,
    AckedByFilter,
    AckOption,
    ClientDisconnected,
    Deliver,
    ExpireReason,
    MessageRemoved,
    PublishDeadLetter,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
    Unsubscribed,
)
from tests.unit.queue.helpers import bookmarks, delivered, publish_all, published, subscribed


def engine_with(**policy: object) -> QueueEngine:
    return QueueEngine(QueuePolicy(**policy))  # type: ignore[arg-type]


def test_lease_deadline_is_now_plus_lease_period() -> None:
    """Q6: the delivery carries the lease deadline; an expired lease returns the message."""
    engine = engine_with(lease_period_ms=30_000)
    engine.handle(subscribed("s1", "c1"), 0)
    [action] = engine.handle(published(1), 5)
    assert action == Deliver("s1", "c1", 1, 30_005, 1)
    assert engine.next_deadline_ms() == 30_005
    assert engine.on_deadline(30_004) == []
    assert delivered(engine.on_deadline(30_005)) == [("s1", 1)]
    assert engine.statistics(30_005).expired_leases_total == 1


def test_unset_lease_period_never_expires() -> None:
    """Q6: without LeasePeriod a lease has no deadline."""
    engine = engine_with()
    engine.handle(subscribed("s1", "c1"), 0)
    [action] = engine.handle(published(1), 0)
    assert isinstance(action, Deliver)
    assert action.lease_deadline_ms is None
    assert engine.next_deadline_ms() is None


def test_disconnect_breaks_every_lease_of_the_client_at_once() -> None:
    """Q6: the lease holder disconnects; its messages go to another subscriber at once."""
    engine = engine_with(max_per_subscription_backlog=5)
    engine.handle(subscribed("a", "c1", 2), 0)
    engine.handle(subscribed("b", "c1", 2), 0)
    publish_all(engine, range(1, 5))
    engine.handle(subscribed("z", "c2", 5), 0)
    actions = engine.handle(ClientDisconnected("c1"), 1)
    assert delivered(actions) == [("z", 1), ("z", 2), ("z", 3), ("z", 4)]
    assert all(a.delivery_count == 2 for a in actions if isinstance(a, Deliver))


def test_unsubscribe_returns_leased_messages() -> None:
    """Q6: unsubscribing breaks the subscription's leases."""
    engine = engine_with()
    engine.handle(subscribed("s1", "c1"), 0)
    publish_all(engine, range(1, 2))
    engine.handle(Unsubscribed("s1", "c1"), 0)
    assert engine.deliverable(10) == [1]


def test_at_most_once_removes_on_send_and_ack_frees_backlog() -> None:
    """Q7: removal is recorded before the delivery; cancel/expire have no effect."""
    engine = engine_with(semantics="at-most-once")
    engine.handle(subscribed("s1", "c1"), 0)
    actions = publish_all(engine, range(1, 3))
    assert actions[0] == RecordRemoval(1, RemovalReason.SENT_AT_MOST_ONCE)
    assert isinstance(actions[1], Deliver)
    assert engine.statistics(0).depth == 1
    assert engine.handle(Acked("c1", bookmarks(1), AckOption.EXPIRE), 0)[-1].txid == 2  # type: ignore[attr-defined]
    stats = engine.statistics(0)
    assert (stats.expired_total, stats.sent_at_most_once_total) == (0, 2)


def test_effective_backlog_is_the_smaller_and_defaults_to_one() -> None:
    """Q8: min(max_backlog, or 1 when absent; MaxPerSubscriptionBacklog)."""
    engine = engine_with(max_per_subscription_backlog=3)
    engine.handle(subscribed("one", "c1"), 0)
    engine.handle(subscribed("capped", "c2", 10), 0)
    actions = publish_all(engine, range(1, 10))
    subs = [s for s, _ in delivered(actions)]
    assert subs.count("one") == 1
    assert subs.count("capped") == 3


def test_queue_wide_max_backlog_limits_all_subscriptions() -> None:
    """Q8: MaxBacklog caps leased messages for the whole queue."""
    engine = engine_with(max_backlog=2, max_per_subscription_backlog=5)
    engine.handle(subscribed("a", "c1", 5), 0)
    engine.handle(subscribed("b", "c2", 5), 0)
    assert len(delivered(publish_all(engine, range(1, 6)))) == 2
    assert len(delivered(engine.handle(Acked("c1", bookmarks(1, 2)), 0))) == 2


def test_round_robin_takes_turns() -> None:
    """Q9: round-robin gives the next subscription in turn with room."""
    engine = engine_with(fairness="round-robin", max_per_subscription_backlog=9)
    for name in ("a", "b", "c"):
        engine.handle(subscribed(name, name, 9), 0)
    subs = [s for s, _ in delivered(publish_all(engine, range(1, 7)))]
    assert subs == ["a", "b", "c", "a", "b", "c"]


def test_fast_takes_the_first_with_room() -> None:
    """Q9: fast gives the first subscription found with room."""
    engine = engine_with(fairness="fast", max_per_subscription_backlog=9)
    engine.handle(subscribed("a", "a", 2), 0)
    engine.handle(subscribed("b", "b", 9), 0)
    subs = [s for s, _ in delivered(publish_all(engine, range(1, 5)))]
    assert subs == ["a", "a", "b", "b"]


@pytest.mark.parametrize("fairness", ["proportional", "fast", "round-robin"])
def test_expired_lease_goes_to_another_subscription_with_equal_room(fairness: str) -> None:
    """Q6, Q9 (issue 11): a consumer that never acks does not get its expired message back
    while an idle one with the same room waits; the returned message rotates between them."""
    engine = engine_with(fairness=fairness, lease_period_ms=2_000)
    engine.handle(subscribed("a", "ca"), 0)
    engine.handle(subscribed("b", "cb"), 0)
    assert delivered(engine.handle(published(1), 0)) == [("a", 1)]
    assert delivered(engine.on_deadline(2_000)) == [("b", 1)]
    assert delivered(engine.on_deadline(4_000)) == [("a", 1)]  # b failed it too: ties rotate
    assert delivered(engine.on_deadline(6_000)) == [("b", 1)]
    engine.check_invariants()


@pytest.mark.parametrize("fairness", ["proportional", "fast", "round-robin"])
def test_cancelled_message_searches_from_after_its_last_holder(fairness: str) -> None:
    """Q9, Q11: a cancelled message goes to the next subscription after the one that held it,
    wrapping around, among those with room."""
    engine = engine_with(fairness=fairness, max_per_subscription_backlog=5)
    for name in ("a", "b", "c"):
        engine.handle(subscribed(name, f"c{name}"), 0)
    assert delivered(publish_all(engine, range(1, 3))) == [("a", 1), ("b", 2)]
    assert delivered(engine.handle(Acked("cb", bookmarks(2), AckOption.CANCEL), 1)) == [("c", 2)]
    # From after c, wrapping around: a is full, so b (the holder before c) gets it back.
    assert delivered(engine.handle(Acked("cc", bookmarks(2), AckOption.CANCEL), 2)) == [("b", 2)]
    engine.check_invariants()


def test_returned_message_still_prefers_strictly_more_room() -> None:
    """Q9 proportional: the last holder comes last in the search but wins on a smaller ratio."""
    engine = engine_with(lease_period_ms=100, max_per_subscription_backlog=4)
    engine.handle(subscribed("a", "ca", 4), 0)
    engine.handle(subscribed("b", "cb", 4), 0)
    assert delivered(engine.handle(published(1), 0)) == [("a", 1)]
    assert delivered(engine.handle(published(2), 50)) == [("b", 2)]
    assert delivered(engine.on_deadline(100)) == [("a", 1)]  # a 0 of 4 against b 1 of 4
    engine.check_invariants()


def test_disconnected_holder_messages_search_from_after_it() -> None:
    """Q6: messages of a gone subscription go to the one after it in subscription order."""
    engine = engine_with(max_per_subscription_backlog=5)
    for name in ("a", "b", "c"):
        engine.handle(subscribed(name, f"c{name}", 5), 0)
    publish_all(engine, range(1, 4))  # a 1, b 2, c 3 (proportional, first found on ties)
    assert delivered(engine.handle(ClientDisconnected("cb"), 1)) == [("c", 2)]
    engine.check_invariants()


def test_strict_leasing_ignores_acks_for_messages_leased_to_others() -> None:
    """Q10: strict: a client acks only messages leased to it or unleased."""
    engine = engine_with(leasing="strict")
    engine.handle(subscribed("s1", "c1"), 0)
    publish_all(engine, range(1, 3))
    assert engine.handle(Acked("c2", bookmarks(1)), 0) == []
    assert engine.handle(Acked("c2", bookmarks(2)), 0) == [RecordRemoval(2, RemovalReason.ACKED)]
    # The removal says how many times its message was delivered: 2 never was, 1 once.
    acked = RemovalReason.ACKED
    removal = engine.handle(Acked("c1", bookmarks(1)), 0)[0]
    assert removal == RecordRemoval(1, acked, delivery_count=1)


def test_sublet_leasing_lets_anyone_ack() -> None:
    """Q10: sublet (default): any client may ack a leased message."""
    engine = engine_with()
    engine.handle(subscribed("s1", "c1"), 0)
    publish_all(engine, range(1, 2))
    assert engine.handle(Acked("c2", bookmarks(1)), 0) == [
        RecordRemoval(1, RemovalReason.ACKED, delivery_count=1)
    ]


def test_filter_ack_removes_matching_messages_leased_or_not() -> None:
    """Q10: a filter ack acknowledges every matching active message."""
    engine = engine_with()
    engine.handle(subscribed("s1", "c1"), 0)
    publish_all(engine, range(1, 5))
    actions = engine.handle(AckedByFilter("c9", lambda t: t % 2 == 1), 0)
    removed = [a.txid for a in actions if isinstance(a, RecordRemoval)]
    assert removed == [1, 3]
    assert delivered(actions) == [("s1", 2)]


def test_cancel_expires_when_count_exceeds_max_cancels() -> None:
    """Q11: cancels up to MaxCancels return the message; the one past it expires it."""
    engine = engine_with(max_cancels=2)
    engine.handle(subscribed("s1", "c1"), 0)
    publish_all(engine, range(1, 2))
    cancel = Acked("c1", bookmarks(1), AckOption.CANCEL)
    assert delivered(engine.handle(cancel, 0)) == [("s1", 1)]
    assert delivered(engine.handle(cancel, 0)) == [("s1", 1)]
    actions = engine.handle(cancel, 0)
    assert actions == [
        RecordRemoval(1, RemovalReason.EXPIRED, ExpireReason.MAX_CANCELS, delivery_count=3),
        PublishDeadLetter(1, ExpireReason.MAX_CANCELS),
    ]
    assert engine.statistics(0).cancelled_total == 3


def test_expire_option_expires_at_once() -> None:
    """Q12: ack option expire removes the message and runs the on-expire actions."""
    engine = engine_with()
    engine.handle(subscribed("s1", "c1"), 0)
    publish_all(engine, range(1, 2))
    actions = engine.handle(Acked("c1", bookmarks(1), AckOption.EXPIRE), 0)
    assert PublishDeadLetter(1, ExpireReason.FORCED_EXPIRE) in actions
    assert engine.statistics(0).expired_forced_total == 1


def test_unleased_message_past_expiration_leaves() -> None:
    """Q13: an unleased message older than Expiration leaves the queue."""
    engine = engine_with(expiration_ms=1_000)
    engine.handle(published(1, 0), 0)
    engine.handle(published(2, 500), 500)
    assert engine.next_deadline_ms() == 1_000
    actions = engine.on_deadline(1_000)
    assert actions[0] == RecordRemoval(1, RemovalReason.EXPIRED, ExpireReason.TIME_LIMIT)
    assert engine.deliverable(10) == [2]


def test_leased_message_past_expiration_is_removed_when_its_lease_ends() -> None:
    """Q13: a lease that runs out after Expiration removes instead of returning."""
    engine = engine_with(expiration_ms=1_000, lease_period_ms=2_000)
    engine.handle(subscribed("s1", "c1"), 0)
    engine.handle(published(1, 0), 0)
    assert engine.on_deadline(1_000) == []  # leased: not expired yet
    actions = engine.on_deadline(2_000)
    expired = RemovalReason.EXPIRED
    assert actions[0] == RecordRemoval(1, expired, ExpireReason.TIME_LIMIT, delivery_count=1)


def test_message_expiration_overrides_queue_expiration() -> None:
    """Q13: a message's own expiration (shorter, out of order) is honoured."""
    engine = engine_with(expiration_ms=10_000)
    engine.handle(published(1, 0), 0)
    engine.handle(published(2, 0, expiration_ms=100), 0)
    assert engine.next_deadline_ms() == 100
    assert [a.txid for a in engine.on_deadline(100) if isinstance(a, RecordRemoval)] == [2]
    engine.check_invariants()


def test_oldest_matching_message_goes_first() -> None:
    """Q14: a subscription gets the oldest message its filter matches."""
    engine = engine_with(max_per_subscription_backlog=5)
    publish_all(engine, range(1, 7))
    actions = engine.handle(subscribed("even", "c1", 2, lambda t: t % 2 == 0), 0)
    assert delivered(actions) == [("even", 2), ("even", 4)]
    actions = engine.handle(subscribed("all", "c2", 5), 0)
    assert delivered(actions) == [("all", 1), ("all", 3), ("all", 5), ("all", 6)]


def test_priority_highest_first_then_oldest() -> None:
    """A2, Q14: descending priority, oldest first within a priority."""
    engine = engine_with(has_priority=True, max_per_subscription_backlog=9)
    for txid, priority in [(1, 0), (2, 5), (3, 9), (4, 5), (5, 0)]:
        engine.handle(published(txid, priority=priority), 0)
    assert engine.deliverable(9) == [3, 2, 4, 1, 5]
    actions = engine.handle(subscribed("s1", "c1", 9), 0)
    assert [t for _, t in delivered(actions)] == [3, 2, 4, 1, 5]


def test_priority_with_filter_picks_highest_matching() -> None:
    """A2: a filtered subscription gets the highest-priority message it matches."""
    engine = engine_with(has_priority=True, max_per_subscription_backlog=9)
    for txid, priority in [(1, 1), (2, 9), (3, 5)]:
        engine.handle(published(txid, priority=priority), 0)
    actions = engine.handle(subscribed("odd", "c1", 1, lambda t: t % 2 == 1), 0)
    assert delivered(actions) == [("odd", 3)]


def test_barrier_without_subscribers_waits() -> None:
    """A3: a barrier released to nobody would vanish; it waits for a subscription (our choice)."""
    engine = engine_with(has_barrier=True)
    assert engine.handle(published(1, barrier=True), 0) == []
    actions = engine.handle(subscribed("s1", "c1", 0), 0)
    assert [type(a).__name__ for a in actions] == ["RecordRemoval", "DeliverBarrier"]


def test_deferred_ack_removes_the_message_when_it_arrives() -> None:
    """A4: an ack for a message not yet published is remembered (DeferredAckExpiration)."""
    engine = engine_with(deferred_ack_expiration_ms=1_000)
    assert engine.handle(Acked("c1", bookmarks(2)), 0) == []
    assert engine.statistics(0).deferred_ack_count == 1
    actions = engine.handle(published(2), 10)
    assert actions == [RecordRemoval(2, RemovalReason.ACKED)]
    engine.handle(Acked("c1", bookmarks(3)), 10)
    engine.on_deadline(1_010)
    assert engine.statistics(1_010).deferred_ack_count == 0


def test_duplicate_ack_for_a_gone_message_is_not_deferred() -> None:
    """Q10: acking an already removed message does nothing."""
    engine = engine_with()
    engine.handle(published(1), 0)
    engine.handle(Acked("c1", bookmarks(1)), 0)
    assert engine.handle(Acked("c1", bookmarks(1)), 0) == []
    assert engine.statistics(0).deferred_ack_count == 0


def test_sow_returns_available_active_messages_without_leasing() -> None:
    """Q19: the sow of a queue lists deliverable messages; nothing is leased."""
    engine = engine_with()
    engine.handle(subscribed("s1", "c1"), 0)
    publish_all(engine, range(1, 4))
    assert engine.deliverable(10) == [2, 3]
    assert engine.deliverable(1) == [2]
    assert engine.statistics(0).leased_count == 1


def test_replay_then_removals_rebuilds_state() -> None:
    """Q16: publishes replayed in txid order, then removals from the log, rebuild the queue."""
    engine = engine_with()
    publish_all(engine, range(1, 6))
    engine.handle(MessageRemoved(RemovalReason.ACKED, txid=1), 0)
    engine.handle(MessageRemoved(RemovalReason.ACKED, bookmark=(1, 3)), 0)
    engine.handle(MessageRemoved(RemovalReason.EXPIRED, txid=2), 0)
    assert engine.deliverable(10) == [4, 5]
    assert engine.low_water_txid() == 3
    stats = engine.statistics(0)
    assert (stats.acked_total, stats.expired_total, stats.depth) == (2, 1, 2)


def test_snapshot_restore_round_trip() -> None:
    """Q16: a compact snapshot restores the queue without replaying the log."""
    engine = engine_with(expiration_ms=60_000)
    publish_all(engine, range(1, 8), now_ms=100)
    engine.handle(Acked("c1", bookmarks(2, 5)), 100)
    engine.handle(Acked("c1", bookmarks(9)), 100)  # deferred
    snap = engine.snapshot()
    restored = QueueEngine.restore(engine.policy, snap, shift_ms=1_000)
    restored.check_invariants()
    assert restored.deliverable(10) == engine.deliverable(10) == [1, 3, 4, 6, 7]
    assert restored.handle(published(7), 0) == []  # at or below the high-water mark: ignored
    assert restored.handle(published(9, 2_000), 2_000) == [RecordRemoval(9, RemovalReason.ACKED)]
    assert restored.next_deadline_ms() == 61_100


@pytest.mark.parametrize(
    "policy",
    [
        {"semantics": "at-most-once", "fairness": "proportional"},
        {"target_queue_depth": 10, "has_priority": True},
        {"target_queue_depth": 10, "has_barrier": True},
        {"has_priority": True, "has_barrier": True},
        {"lease_period_ms": 0},
        {"max_cancels": 70_000},
    ],
)
def test_policy_rejects_invalid_combinations(policy: dict[str, object]) -> None:
    """A4, Q9: impossible combinations raise ValueError with a sentence."""
    with pytest.raises(ValueError, match=r"\."):
        QueuePolicy(**policy)  # type: ignore[arg-type]


def test_filter_that_matches_nothing_tests_each_message_once() -> None:
    """Q14 scan bound: a filtered subscription tests each fresh message at most once."""
    calls: list[int] = []

    def never(txid: int) -> bool:
        calls.append(txid)
        return False

    engine = engine_with(max_per_subscription_backlog=2)
    engine.handle(subscribed("none", "c1", 2, never), 0)
    engine.handle(subscribed("all", "c2", 2), 0)
    for txid in range(1, 200):
        engine.handle(published(txid), 0)
        engine.handle(Acked("c2", bookmarks(txid)), 0)
    assert len(calls) <= 2 * 199
    assert sorted(set(calls)) == list(range(1, 200))
