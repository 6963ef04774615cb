"""Hypothesis state machine: the engine against a simple reference model (STYLE §4.7 ex. 8).

The model follows only the actions: which messages exist, which are leased and to whom, which
left. After every step the engine's own `check_invariants()` runs, and the model checks Q5
(no message leased to two subscriptions), Q8 (leased <= backlog), one state per message, the
statistics identity, and the pump invariant (no deliverable message a subscription with room
matches is left waiting).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from amps.queue import (
    Acked,
    AckedByFilter,
    AckOption,
    Action,
    ClientDisconnected,
    Deliver,
    DeliverBarrier,
    QueueEngine,
    QueuePolicy,
    RecordRemoval,
    RemovalReason,
    Unsubscribed,
)
from tests.unit.queue.helpers import bookmarks, published, subscribed

FILTERS = {
    "all": None,
    "even": lambda t: t % 2 == 0,
    "odd": lambda t: t % 2 == 1,
}
CLIENTS = ["c1", "c2", "c3"]
SUBS = ["a", "b"]


class QueueMachine(RuleBasedStateMachine):
    """Drives one engine with random events and checks it after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.engine = QueueEngine(QueuePolicy())
        self.now_ms = 0
        self.next_txid = 1
        self.live: set[int] = set()  # in the queue (model)
        self.holder: dict[int, tuple[str, str]] = {}  # txid -> (client, sub) leasing it
        self.backlogs: dict[tuple[str, str], int] = {}
        self.filters: dict[tuple[str, str], str] = {}
        self.shrunk: set[tuple[str, str]] = set()
        self.counts: dict[int, int] = {}  # txid -> last delivery count seen
        self.breaking = False  # the current step may break leases (cancel, tick, disconnect)

    @initialize(
        semantics=st.sampled_from(["at-least-once", "at-most-once"]),
        lease_period_ms=st.sampled_from([None, 100, 1_000]),
        expiration_ms=st.sampled_from([None, 500, 5_000]),
        max_backlog=st.sampled_from([None, 2, 5]),
        max_cancels=st.integers(0, 2),
        max_deliveries=st.integers(0, 3),
        fairness=st.sampled_from([None, "fast", "proportional"]),
        leasing=st.sampled_from(["strict", "sublet"]),
        extra=st.sampled_from(["none", "priority", "barrier", "depth"]),
    )
    def setup(
        self,
        semantics: str,
        lease_period_ms: int | None,
        expiration_ms: int | None,
        max_backlog: int | None,
        max_cancels: int,
        max_deliveries: int,
        fairness: str | None,
        leasing: str,
        extra: str,
    ) -> None:
        if semantics == "at-most-once":
            fairness = None
        policy = QueuePolicy(
            semantics=semantics,  # type: ignore[arg-type]
            lease_period_ms=lease_period_ms,
            expiration_ms=expiration_ms,
            max_backlog=max_backlog,
            max_per_subscription_backlog=3,
            max_cancels=max_cancels,
            max_deliveries=max_deliveries,
            fairness=fairness,  # type: ignore[arg-type]
            leasing=leasing,  # type: ignore[arg-type]
            has_priority=extra == "priority",
            has_barrier=extra == "barrier",
            target_queue_depth=3 if extra == "depth" else None,
        )
        self.engine = QueueEngine(policy)

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, RecordRemoval):
                assert action.txid in self.live, "a message left twice"
                self.live.discard(action.txid)
                if action.reason is not RemovalReason.SENT_AT_MOST_ONCE:
                    assert action.txid not in self.holder or action.reason in (
                        RemovalReason.ACKED,
                        RemovalReason.EXPIRED,
                    )
                self.holder.pop(action.txid, None)
            elif isinstance(action, Deliver):
                key = (action.client_id, action.sub_id)
                if action.txid in self.holder:
                    # Only a broken lease lets a held message go out again, with a higher count.
                    assert self.breaking, "leased to two subscriptions (Q5)"
                assert action.delivery_count > self.counts.get(action.txid, 0)
                self.counts[action.txid] = action.delivery_count
                if not self.engine.policy.at_most_once:
                    assert action.txid in self.live
                    self.holder[action.txid] = key
            elif isinstance(action, DeliverBarrier):
                assert action.txid not in self.live

    def _handle(self, event: object, *, breaking: bool = False) -> None:
        self.breaking = breaking
        self._apply(self.engine.handle(event, self.now_ms))  # type: ignore[arg-type]
        self.breaking = False

    @rule(
        priority=st.integers(0, 3),
        barrier=st.booleans(),
        expiration_ms=st.sampled_from([None, None, 50, 300]),
    )
    def publish(self, priority: int, barrier: bool, expiration_ms: int | None) -> None:
        policy = self.engine.policy
        txid = self.next_txid
        self.next_txid += 1
        self.live.add(txid)
        event = published(
            txid,
            self.now_ms,
            priority=priority if policy.has_priority else 0,
            barrier=barrier and policy.has_barrier,
            expiration_ms=expiration_ms,
        )
        self._handle(event)

    @rule(
        client=st.sampled_from(CLIENTS),
        sub=st.sampled_from(SUBS),
        backlog=st.sampled_from([None, 0, 1, 2, 5]),
        name=st.sampled_from(list(FILTERS)),
    )
    def subscribe(self, client: str, sub: str, backlog: int | None, name: str) -> None:
        key = (client, sub)
        granted = min(1 if backlog is None else backlog, 3)
        if key in self.backlogs and granted < self.backlogs[key]:
            self.shrunk.add(key)  # a replace may leave it holding more than its new backlog
        self.backlogs[key] = granted
        self.filters[key] = name
        self._handle(subscribed(sub, client, backlog, FILTERS[name]))

    @rule(client=st.sampled_from(CLIENTS), sub=st.sampled_from(SUBS))
    def unsubscribe(self, client: str, sub: str) -> None:
        self._forget([(client, sub)])
        self._handle(Unsubscribed(sub, client), breaking=True)

    @rule(client=st.sampled_from(CLIENTS))
    def disconnect(self, client: str) -> None:
        self._forget([k for k in self.backlogs if k[0] == client])
        self._handle(ClientDisconnected(client), breaking=True)

    def _forget(self, keys: list[tuple[str, str]]) -> None:
        for key in keys:
            self.backlogs.pop(key, None)
            self.filters.pop(key, None)
            self.shrunk.discard(key)
            for txid in [t for t, h in self.holder.items() if h == key]:
                del self.holder[txid]

    @rule(
        client=st.sampled_from(CLIENTS),
        offsets=st.lists(st.integers(0, 6), min_size=1, max_size=3),
        option=st.sampled_from(list(AckOption)),
    )
    def ack(self, client: str, offsets: list[int], option: AckOption) -> None:
        txids = [max(1, self.next_txid - 1 - o) for o in offsets]
        before = dict(self.holder)
        self._handle(Acked(client, bookmarks(*txids), option), breaking=True)
        if option is AckOption.CANCEL:
            for txid in txids:
                if txid in before and self.holder.get(txid) == before[txid]:
                    self._sync_holder(txid)

    def _sync_holder(self, txid: int) -> None:
        """A cancel may return a message without redelivering it; ask the engine."""
        if txid not in self.engine.deliverable(10_000):
            return
        self.holder.pop(txid, None)

    @rule(client=st.sampled_from(CLIENTS), name=st.sampled_from(["even", "odd"]))
    def ack_by_filter(self, client: str, name: str) -> None:
        matches = FILTERS[name]
        assert matches is not None
        self._handle(AckedByFilter(client, matches))

    @rule(step_ms=st.sampled_from([1, 50, 100, 1_000]))
    def tick(self, step_ms: int) -> None:
        self.now_ms += step_ms
        before = set(self.holder)
        self.breaking = True
        self._apply(self.engine.on_deadline(self.now_ms))
        self.breaking = False
        for txid in before:
            self._sync_holder(txid)

    @invariant()
    def engine_invariants_hold(self) -> None:
        self.engine.check_invariants()

    @invariant()
    def model_agrees(self) -> None:
        stats = self.engine.statistics(self.now_ms)
        assert stats.depth + stats.inactive_count == len(self.live)
        left = stats.acked_total + stats.expired_total + stats.sent_at_most_once_total
        left += stats.barrier_delivered_total
        assert stats.entered_total == left + stats.depth + stats.inactive_count
        sow = set(self.engine.deliverable(10_000))
        assert sow <= self.live
        assert not sow & set(self.holder), "a leased message is listed as deliverable"

    @invariant()
    def backlogs_respected(self) -> None:
        if self.engine.policy.at_most_once:
            return
        for key, backlog in self.backlogs.items():
            if key in self.shrunk:
                continue
            held = sum(1 for h in self.holder.values() if h == key)
            assert held <= backlog, "leased <= backlog (Q8)"

    @invariant()
    def nothing_waits_for_a_subscription_with_room(self) -> None:
        policy = self.engine.policy
        stats = self.engine.statistics(self.now_ms)
        if policy.max_backlog is not None and stats.leased_count >= policy.max_backlog:
            return
        if self.engine.next_deadline_ms() is not None:
            due = self.engine.next_deadline_ms()
            if due is not None and due <= self.now_ms:
                return
        sow = self.engine.deliverable(10_000)
        for key, name in self.filters.items():
            room = self.backlogs[key] - sum(1 for h in self.holder.values() if h == key)
            if room <= 0 or policy.at_most_once:
                continue
            matches = FILTERS[name]
            waiting = [t for t in sow if matches is None or matches(t)]
            assert not waiting, f"{key} has room but {waiting} wait"


QueueMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("AMPS_QUEUE_EXAMPLES", "80")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueMachine = QueueMachine.TestCase
