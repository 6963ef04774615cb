"""QueueEngine: decides which subscription gets which message of one queue. No I/O, no clock.

Shape (STYLE §4.2): `handle(event, now_ms)` and `on_deadline(now_ms)` return actions in
contract order (see `amps.queue.actions`); `next_deadline_ms()` says when to call again.
Each step first does any time-driven work already due, then applies the event, then runs the
delivery pump (`amps.queue.delivery`), so a late timer never lets a stale lease or an expired
message slip through. Module map: `state` (data and shared transitions), `delivery` (pump,
fairness, barriers), `deadlines` (timers), `acks` (Q10–Q12), `recovery` (replay, snapshots).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import compress, islice
from operator import attrgetter, le, lt
from typing import Any, cast

from amps.queue import acks, compaction, deadlines, delivery, queries, recovery
from amps.queue.actions import NO_REASON, Action, ExpireReason, RemovalReason
from amps.queue.columns import ColumnFactory, memory_columns
from amps.queue.events import (
    Acked,
    AckedByFilter,
    ClientDisconnected,
    Event,
    MessagePublished,
    MessageRemoved,
    OwnershipMoved,
    Subscribed,
    Unsubscribed,
)
from amps.queue.invariants import check_invariants
from amps.queue.policy import QueuePolicy
from amps.queue.state import QueueState
from amps.queue.statistics import QueueStatistics
from amps.queue.subscriptions import Subscription, effective_backlog
from amps.queue.table import AVAILABLE, ELSEWHERE, LEASED, NO_EXPIRY, REMOVED

_priority = attrgetter("priority")


class QueueEngine:
    """The sans-IO engine of one queue on one instance."""

    def __init__(self, policy: QueuePolicy, *, columns: ColumnFactory | None = None) -> None:
        """`columns` (else `policy.columns`, else memory) stores the per-message structures."""
        self._state = QueueState(policy, columns or policy.columns or memory_columns)
        state = self._state
        self._handlers: dict[type, Callable[[Any, int, list[Action]], None]] = {
            MessagePublished: self._on_message_published,
            Subscribed: self._on_subscribed,
            Unsubscribed: self._on_unsubscribed,
            ClientDisconnected: self._on_client_disconnected,
            Acked: lambda e, now_ms, actions: acks.on_acked(state, e, now_ms, actions),
            AckedByFilter: lambda e, now_ms, a: acks.on_acked_by_filter(state, e, now_ms, a),
            MessageRemoved: lambda e, now_ms, a: recovery.on_message_removed(state, e, now_ms, a),
            OwnershipMoved: self._on_ownership_moved,
        }

    @property
    def policy(self) -> QueuePolicy:
        """The policy this engine obeys."""
        return self._state.policy

    def handle(self, event: Event, now_ms: int) -> list[Action]:
        """Apply one event; return what the adapter must do, in order (see Action)."""
        actions: list[Action] = []
        state = self._state
        deadlines.run_due(state, now_ms, actions)
        handler = self._handlers.get(type(event))
        if handler is None:
            self._dispatch(event, now_ms, actions)
        else:
            handler(event, now_ms, actions)
        delivery.settle(state, now_ms, actions)
        compaction.maybe_compact(state)
        return actions

    def handle_many(self, events: Iterable[Event], now_ms: int) -> list[Action]:
        """Apply several events at one time as one step; return the actions, in order.

        The same as `handle` for each event in turn, except that the delivery pump and the
        compaction checks run once, after the last event (time-driven work is still done
        before each event). The invariants hold after the batch; deliveries may be spread
        differently than with one `handle` per event (e.g. backlog freed by several acks is
        shared out at once), but never violate Q5–Q9. For a run of `MessagePublished` the
        actions are the same as one `handle` each. The adapter's batch: the publishes made
        durable by one group commit, or the acks read from one client frame.
        """
        actions: list[Action] = []
        state = self._state
        deadlines.run_due(state, now_ms, actions)
        plain = state.accepts_plain_inserts()
        run: list[MessagePublished] = []  # plain publishes not inserted yet
        for index, event in enumerate(events):
            if (
                plain
                and type(event) is MessagePublished
                and event.expiration_ms is None
                and not event.is_barrier
                and not event.elsewhere
            ):
                # Inserted in bulk below when none of them is due to expire yet: then the
                # time-driven passes between them would find nothing.
                if index and not run:
                    deadlines.run_due(state, now_ms, actions)
                run.append(event)
                continue
            if run:
                self._insert_plain(run, now_ms, actions)
                run = []
            if index:
                deadlines.run_due(state, now_ms, actions)
            self._dispatch(event, now_ms, actions)
            plain = state.accepts_plain_inserts()
        if run:
            self._insert_plain(run, now_ms, actions)
        delivery.settle(state, now_ms, actions)
        compaction.maybe_compact(state)
        return actions

    def publish_plain(
        self,
        txids: list[int],
        publisher_ids: list[int],
        seqs: list[int],
        timestamps_ms: list[int],
        now_ms: int,
        *,
        elsewhere: bool = False,
    ) -> list[Action]:
        """`handle_many` of one `MessagePublished(txid, publisher_id, seq, timestamp_ms)` per
        row (no priority, barrier or expiration of its own), without building the events: the
        adapter's path for durable publishes and for replay at recovery (Q16). `elsewhere`:
        every row is owned by another instance (R2; `MessagePublished.elsewhere`)."""
        state = self._state
        if not state.accepts_plain_inserts():
            rows = zip(txids, publisher_ids, seqs, timestamps_ms, strict=True)
            return self.handle_many(
                [MessagePublished(*row, 0, False, None, elsewhere) for row in rows], now_ms
            )
        actions: list[Action] = []
        deadlines.run_due(state, now_ms, actions)
        if txids:
            self._insert_plain_columns(
                txids, publisher_ids, seqs, timestamps_ms, now_ms, actions, elsewhere=elsewhere
            )
        delivery.settle(state, now_ms, actions)
        compaction.maybe_compact(state)
        return actions

    def _insert_plain(
        self, events: list[MessagePublished], now_ms: int, actions: list[Action]
    ) -> None:
        """`_on_message_published` of each event (time-driven work before each but the first,
        which the caller did), in bulk when it makes no difference."""
        assert not any(map(_priority, events))
        self._insert_plain_columns(
            [e.txid for e in events], [e.publisher_id for e in events],
            [e.seq for e in events], [e.timestamp_ms for e in events], now_ms, actions,
        )  # fmt: skip

    def _insert_plain_columns(
        self,
        txids: list[int],
        publisher_ids: list[int],
        seqs: list[int],
        stamps: list[int],
        now_ms: int,
        actions: list[Action],
        *,
        elsewhere: bool = False,
    ) -> None:
        """`_insert_plain` of the messages given as columns (at least one), all owned
        elsewhere with `elsewhere`."""
        state = self._state
        given = (txids, publisher_ids, seqs, stamps)
        if txids[0] <= state.last_txid or not all(map(lt, txids, islice(txids, 1, None))):
            keep = bytearray(len(txids))  # replays and re-offers are idempotent
            last = state.last_txid
            for i, txid in enumerate(txids):
                if txid > last:
                    keep[i] = 1
                    last = txid
            if not any(keep):
                return
            txids, publisher_ids, seqs, stamps = (
                list(compress(column, keep)) for column in (txids, publisher_ids, seqs, stamps)
            )
        expiration_ms = state.policy.expiration_ms
        if expiration_ms is not None and not (
            stamps[0] + expiration_ms > now_ms  # none due: the sweep would take it at once
            and stamps[0] + expiration_ms >= state.expiry_max_seen_ms  # in expiry order
            and all(map(le, stamps, islice(stamps, 1, None)))
        ):
            # One event each, replays too: time-driven work runs between them all.
            for index, row in enumerate(zip(*given, strict=True)):
                if index:
                    deadlines.run_due(state, now_ms, actions)
                event = MessagePublished(*row, 0, False, None, elsewhere)
                self._on_message_published(event, now_ms, actions)
            return
        state.insert_plain_many(txids, publisher_ids, seqs, stamps, elsewhere=elsewhere)

    def remove_recovered(
        self,
        txids: Iterable[int],
        reason: RemovalReason,
        expire_reasons: ExpireReason,
        now_ms: int,
    ) -> list[Action]:
        """Recovery (Q16): the log says these messages already left; return the actions.

        The same as `handle_many` of one `MessageRemoved(reason, txid, expire_reasons)` per
        txid (same rows, counts, statistics and actions), in one pass: time-driven work once
        (no time passes between the events, so later passes would find nothing due), then
        the rows, then the pump and the compaction checks once.
        """
        actions: list[Action] = []
        state = self._state
        deadlines.run_due(state, now_ms, actions)
        recovery.remove_recovered(state, txids, reason, expire_reasons, actions)
        delivery.settle(state, now_ms, actions)
        compaction.maybe_compact(state)
        return actions

    def _dispatch(self, event: Event, now_ms: int, actions: list[Action]) -> None:
        handler = self._handlers.get(type(event))
        if handler is None:  # a subclass of an event type
            handler = next(h for t, h in self._handlers.items() if isinstance(event, t))
        handler(event, now_ms, actions)

    def defer_compaction(self, defer: bool) -> None:
        """While replaying a log (Q16), look for garbage to squeeze out once per ~1M removals
        instead of per 1024: a replay that removes most of a large queue rebuilds its columns
        a few times instead of at every halving, and no fresh list is rescanned per record.
        Turning it off runs the check at once."""
        state = self._state
        state.compaction_deferred = defer
        if not defer:
            compaction.maybe_compact(state)

    def defer_deadlines(self, defer: bool) -> None:
        """While replaying a log (Q16), do no time-driven work: a message whose expiration
        passed while the instance was down must not leave before the log's later records
        (its ack, its owner's expiry) are read. After, one `on_deadline` does what is due."""
        self._state.deadlines_deferred = defer

    def on_deadline(self, now_ms: int) -> list[Action]:
        """Expire leases, messages and deferred acks whose time has come (aioquic)."""
        actions: list[Action] = []
        deadlines.run_due(self._state, now_ms, actions)
        delivery.settle(self._state, now_ms, actions)
        compaction.maybe_compact(self._state)
        return actions

    def next_deadline_ms(self) -> int | None:
        """Earliest time at which `on_deadline` has work, or None (may be early, never late)."""
        return deadlines.next_deadline_ms(self._state)

    # -- handlers ------------------------------------------------------------------------

    def _on_message_published(
        self, event: MessagePublished, now_ms: int, actions: list[Action]
    ) -> None:
        state = self._state
        if event.txid <= state.last_txid:
            return  # already seen: replays and re-offers are idempotent
        assert event.is_barrier <= state.policy.has_barrier
        assert state.policy.has_priority or event.priority == 0
        own = event.expiration_ms
        base = own if own is not None else state.policy.expiration_ms
        expire_at_ms = NO_EXPIRY if base is None else event.timestamp_ms + base
        slot = state.insert(
            event.txid,
            event.publisher_id,
            event.seq,
            event.timestamp_ms,
            event.priority,
            event.is_barrier,
            expire_at_ms,
            own_expiry=own is not None,
            elsewhere=event.elsewhere,
        )
        deferred = state.deferred
        if deferred and deferred.pop((event.publisher_id, event.seq), None) is not None:
            state.remove(slot, RemovalReason.ACKED, actions)

    def _on_ownership_moved(
        self, event: OwnershipMoved, now_ms: int, actions: list[Action]
    ) -> None:
        state = self._state
        txid = state.bookmarks.find(*event.bookmark)
        slot = -1 if txid is None else state.table.slot_of(txid)
        if slot < 0:
            return
        table = state.table
        if table.state[slot] == REMOVED or table.flags[slot] & ELSEWHERE != (
            ELSEWHERE if event.owned_here else 0
        ):
            return  # gone, or already where the event says
        if not event.owned_here:
            state.give_up_ownership(slot)
            return
        state.take_ownership(slot)
        # While the log is replayed no time-driven work is done (Q16): a later record may ack
        # it; the live step after the replay expires it, with its record and dead letter.
        if (
            table.state[slot] == AVAILABLE
            and not state.deadlines_deferred
            and state.expire_at_ms(slot) <= now_ms
        ):
            state.remove(slot, RemovalReason.EXPIRED, actions, ExpireReason.TIME_LIMIT)

    def _on_subscribed(self, event: Subscribed, now_ms: int, actions: list[Action]) -> None:
        state = self._state
        backlog = effective_backlog(event.max_backlog, state.policy.max_per_subscription_backlog)
        sub = state.by_key.get((event.client_id, event.sub_id))
        if sub is not None:
            # Replace: atomic, keeps leases, may leave it holding more than its new backlog.
            sub.backlog = backlog
            if sub.matches is not event.matches:
                sub.matches = event.matches
                for level in state.levels.values():
                    level.forget_cursor(sub.index)
            return
        index = state.free_sub_indexes.pop() if state.free_sub_indexes else len(state.subs)
        sub = Subscription(
            index, state.next_position, event.sub_id, event.client_id, backlog, event.matches
        )
        state.next_position += 1
        if index == len(state.subs):
            state.subs.append(sub)
        else:
            state.subs[index] = sub
        state.order.append(sub)
        state.by_key[(event.client_id, event.sub_id)] = sub

    def _on_unsubscribed(self, event: Unsubscribed, now_ms: int, actions: list[Action]) -> None:
        sub = self._state.by_key.get((event.client_id, event.sub_id))
        if sub is not None:
            self._drop_subscription(sub, now_ms, actions)

    def _on_client_disconnected(
        self, event: ClientDisconnected, now_ms: int, actions: list[Action]
    ) -> None:
        for sub in [s for s in self._state.order if s.client_id == event.client_id]:
            self._drop_subscription(sub, now_ms, actions)

    def _drop_subscription(self, sub: Subscription, now_ms: int, actions: list[Action]) -> None:
        """Break its leases at once (Q6), forget its at-most-once backlog, then unregister."""
        state = self._state
        table = state.table
        for txid in sorted(sub.leased):
            if state.at_most_once_sent.pop(txid, None) is not None:
                sub.leased.discard(txid)
                state.leased_total -= 1
                continue
            slot = table.slot_of(txid)
            assert slot >= 0
            assert table.state[slot] == LEASED
            state.break_lease(slot, now_ms, actions, NO_REASON)
        assert not sub.leased
        for level in state.levels.values():
            level.forget_cursor(sub.index)
        state.order.remove(sub)
        del state.by_key[(sub.client_id, sub.sub_id)]
        state.subs[sub.index] = None
        state.free_sub_indexes.append(sub.index)

    # -- queries -------------------------------------------------------------------------

    def owned_here(self, txid: int) -> bool:
        """Replication hook: only messages owned by this instance are delivered (R2)."""
        return self._state.owned_here(txid)

    def txid_of(self, bookmark: tuple[int, int]) -> int | None:
        """The txid of a message still in the queue, by bookmark, or None."""
        state = self._state
        txid = state.bookmarks.find(*bookmark)
        if txid is None:
            return None
        slot = state.table.slot_of(txid)
        return None if slot < 0 or state.table.state[slot] == REMOVED else txid

    def txids_of(self, bookmarks: Sequence[tuple[int, int]]) -> list[int | None]:
        """`txid_of` of each bookmark, in order (a replicated removal's hundreds at once)."""
        table = self._state.table
        found = self._state.bookmarks.find_many(bookmarks)
        # All indexed and live (the usual): checked in one pass over their rows.
        if None not in found and table.select_rows(cast("list[int]", found), live=True):
            return found
        # `slot_of` inlined for the dense rows (most): a call per message is a third of it.
        rows, row_state, base, head = table.txid, table.state, table.base, table.head
        count = len(rows)
        for at, txid in enumerate(found):
            if txid is None:
                continue
            slot = txid - base
            if not (head <= slot < count and rows[slot] == txid):
                slot = table.slot_of(txid)
            if slot < 0 or row_state[slot] == REMOVED:
                found[at] = None
        return found

    def deferred_ack_count(self) -> int:
        """How many acks wait for their message (DeferredAckExpiration)."""
        return len(self._state.deferred)

    def is_deferred(self, bookmark: tuple[int, int]) -> bool:
        """True while an ack for this message waits for it (DeferredAckExpiration)."""
        return bookmark in self._state.deferred

    def is_barrier(self, txid: int) -> bool:
        """True if the message (still in the queue) is a barrier message (A3)."""
        return txid in self._state.barriers

    def held_here(self, txid: int) -> bool:
        """R5's refusal test for a message owned here: it is leased here, or a local
        subscription with backlog room matches it and it is deliverable now (active, not held
        behind a barrier); the owner then keeps it for that subscriber."""
        state = self._state
        table = state.table
        slot = table.slot_of(txid)
        if slot < 0:
            return False
        row_state = table.state[slot]
        if row_state == LEASED:
            return True
        if row_state != AVAILABLE or txid >= state.limit_txid() or not state.queue_has_room():
            return False
        return any(sub.has_room and sub.wants(txid) for sub in state.order)

    def has_taker(self, txid: int) -> bool:
        """R4's local condition for a message owned elsewhere: a subscription here has backlog
        room and matches it, and the queue-wide MaxBacklog has room."""
        state = self._state
        if not state.queue_has_room():
            return False
        return any(sub.has_room and sub.wants(txid) for sub in state.order)

    def free_backlog(self) -> int:
        """How many more messages the subscriptions here could take now (Q8): the sum of
        their backlog room, within the queue-wide MaxBacklog."""
        state = self._state
        room = sum(max(0, sub.backlog - len(sub.leased)) for sub in state.order)
        limit = state.policy.max_backlog
        return room if limit is None else max(0, min(room, limit - state.leased_total))

    def owned_elsewhere_count(self) -> int:
        """Messages in the queue here that another instance owns (R2)."""
        return self._state.elsewhere_count

    def deliverable(self, limit: int) -> list[int]:
        """Q19: txids of active, unleased messages a `sow` returns, in delivery order."""
        return queries.deliverable(self._state, limit)

    def low_water_txid(self) -> int:
        """The newest txid at or before which every message of this queue has left (Q16)."""
        state = self._state
        slot = state.table.oldest_live_slot()
        return state.last_txid if slot < 0 else state.table.txid[slot] - 1

    def snapshot(self) -> recovery.QueueSnapshot:
        """Compact export of the queue's messages and deferred acks (restart without replay)."""
        return recovery.snapshot(self._state)

    @classmethod
    def restore(
        cls,
        policy: QueuePolicy,
        snapshot: recovery.QueueSnapshot,
        shift_ms: int = 0,
        *,
        columns: ColumnFactory | None = None,
    ) -> QueueEngine:
        """Rebuild from a snapshot; `shift_ms` moves stored times into the new time base."""
        engine = cls(policy, columns=columns)
        recovery.restore(engine._state, snapshot, shift_ms)
        return engine

    def statistics(self, now_ms: int) -> QueueStatistics:
        """Frozen snapshot of counters and gauges (AMPS-REFERENCE §5.3)."""
        return queries.statistics(self._state, now_ms)

    def check_invariants(self) -> None:
        """Expensive cross-checks of every count and index; for tests and simulation."""
        check_invariants(self._state)
