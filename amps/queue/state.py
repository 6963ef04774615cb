"""The engine's data and the transitions every handler shares (remove, lease, return).

Rules:
1. Every message row is in exactly one state: AVAILABLE, LEASED, INACTIVE or REMOVED.
2. Only `remove()` makes a row REMOVED, and it counts the removal under one reason.
3. A message is "fresh" while it was never delivered; after a lease breaks it lives in its
   level's returned heap (IN_RETURNED). `leave_available()` keeps both counts exact.
   A message that became owned here by a transfer (R5) joins the returned heap too.
4. Slots are valid only within one step; anything kept across steps is a txid.
5. A row owned by another instance (ELSEWHERE, R2) is in no level list and counts in
   `elsewhere_count`, not in `active_count` or `inactive_count`.
"""

from __future__ import annotations

import heapq
from collections import deque

from amps.queue.actions import (
    NO_REASON,
    Action,
    ExpireReason,
    PublishDeadLetter,
    RecordRemoval,
    RemovalReason,
)
from amps.queue.bookmarks import BookmarkIndex
from amps.queue.columns import ColumnFactory, extend, memory_columns
from amps.queue.levels import Level
from amps.queue.policy import QueuePolicy
from amps.queue.statistics import Counters
from amps.queue.subscriptions import Subscription
from amps.queue.table import (
    AVAILABLE,
    BARRIER,
    ELSEWHERE,
    IN_RETURNED,
    INACTIVE,
    LEASED,
    NO_EXPIRY,
    OUT_OF_ORDER_EXPIRY,
    REMOVED,
    MessageTable,
)

NO_LIMIT = (1 << 63) - 1


class QueueState:
    """Data of one queue engine plus the shared low-level transitions."""

    def __init__(self, policy: QueuePolicy, columns: ColumnFactory = memory_columns) -> None:
        self.policy = policy
        self.columns = columns  # where per-message structures live (Q17)
        self.table = MessageTable(has_priority=policy.has_priority, columns=columns)
        self.bookmarks = BookmarkIndex(columns)
        self.level0 = Level(0, columns)
        self.levels: dict[int, Level] = {0: self.level0}
        self.level_order: list[int] = [0]  # priorities, highest first
        self.subs: list[Subscription | None] = []
        self.free_sub_indexes: list[int] = []
        self.order: list[Subscription] = []  # subscription order ("first found", Q9)
        self.by_key: dict[tuple[str, str], Subscription] = {}
        self.next_position = 0
        self.round_robin_last = -1
        # txid -> position of the subscription that last held it, while it is returned: the
        # search for its next holder starts after that one (Q6: "available to another").
        self.returned_from: dict[int, int] = {}
        self.leased_total = 0  # sum of len(sub.leased)
        self.at_most_once_sent: dict[int, int] = {}  # txid -> sub index, until acked (Q7)
        self.lease_heap: list[tuple[int, int, int]] = []  # (lease start ms, txid, delivery)
        self.barriers: deque[int] = deque()  # pending barrier txids, oldest first (A3)
        self.active_count = 0  # AVAILABLE + LEASED rows owned here
        self.inactive_count = 0
        self.elsewhere_count = 0  # live rows owned by another instance (ELSEWHERE)
        self.activation_slot = 0  # first slot that may be INACTIVE (A4)
        self.expiry_slot = 0  # in-order expiry sweep position
        self.expiry_max_seen_ms = -NO_LIMIT
        self.expiry_heap: list[tuple[int, int]] = []  # out-of-order (expire_at_ms, txid)
        self.deferred: dict[tuple[int, int], int] = {}  # bookmark -> expires_at_ms
        self.deferred_heap: list[tuple[int, int, int]] = []
        self.last_txid = -1
        self.counters = Counters()
        self.removals_since_check = 0  # compaction is considered every so many removals
        self.compaction_deferred = False  # while replaying: considered far less often
        self.deadlines_deferred = False  # while replaying: no time-driven work (Q16)

    # -- queries -------------------------------------------------------------------------

    def owned_here(self, txid: int) -> bool:
        """Replication hook (R2): only messages owned here are delivered.

        A message that becomes owned here joins its level's returned heap (`take_ownership`),
        because delivery cursors skip messages that were not owned.
        """
        slot = self.table.slot_of(txid)
        return slot >= 0 and not self.table.flags[slot] & ELSEWHERE

    def level_of(self, slot: int) -> Level:
        """The priority level of a row."""
        priority = self.table.priority
        return self.level0 if priority is None else self.levels[priority[slot]]

    def expire_at_ms(self, slot: int) -> int:
        """When the row's message expires (Q13), NO_EXPIRY if never."""
        column = self.table.expire_at_ms
        if column is not None:
            return column[slot]
        if self.policy.expiration_ms is None:
            return NO_EXPIRY
        return self.table.timestamp_ms[slot] + self.policy.expiration_ms

    def limit_txid(self) -> int:
        """Messages at or after the first pending barrier are held (A3)."""
        return self.barriers[0] if self.barriers else NO_LIMIT

    def valid_fresh(self, txid: int) -> bool:
        """True if a fresh-list entry is still an available, never delivered message."""
        table = self.table
        slot = table.slot_of(txid)
        return (
            slot >= 0
            and table.state[slot] == AVAILABLE
            and table.delivery_count[slot] == 0
            and not table.flags[slot] & (IN_RETURNED | ELSEWHERE)
        )

    def valid_returned(self, txid: int) -> bool:
        """True if a returned-heap entry is still available."""
        table = self.table
        slot = table.slot_of(txid)
        return (
            slot >= 0
            and table.state[slot] == AVAILABLE
            and table.flags[slot] & (IN_RETURNED | ELSEWHERE) == IN_RETURNED
        )

    def current_lease_slot(self, txid: int, delivery_count: int) -> int:
        """The slot if a lease-heap entry still names the message's current lease, else -1."""
        table = self.table
        slot = table.slot_of(txid)
        if (
            slot >= 0
            and table.state[slot] == LEASED
            and table.delivery_count[slot] == delivery_count
        ):
            return slot
        return -1

    def queue_has_room(self) -> bool:
        """The queue-wide MaxBacklog is not reached (Q8)."""
        limit = self.policy.max_backlog
        return limit is None or self.leased_total < limit

    # -- transitions ---------------------------------------------------------------------

    def level_for(self, priority: int) -> Level:
        """The level of a priority, created on first use (A2)."""
        level = self.levels.get(priority)
        if level is None:
            level = self.levels[priority] = Level(priority, self.columns)
            self.level_order.append(priority)
            self.level_order.sort(reverse=True)
        return level

    def activate(self, slot: int) -> None:
        """Make a row deliverable: it joins its level's fresh list."""
        table = self.table
        assert table.state[slot] in (AVAILABLE, INACTIVE)
        if table.state[slot] == INACTIVE:
            self.inactive_count -= 1
        table.state[slot] = AVAILABLE
        self.active_count += 1
        self.level_of(slot).push_fresh(table.txid[slot])

    def give_up_ownership(self, slot: int) -> None:
        """R5: the message is owned elsewhere now; an inactive one is reached first (A4: the
        rows up to it are activated), a leased one keeps its lease until it ends."""
        table = self.table
        row_state = table.state[slot]
        assert row_state != REMOVED
        assert not table.flags[slot] & (ELSEWHERE | BARRIER)
        if row_state == INACTIVE:
            while self.activation_slot <= slot:
                if table.state[self.activation_slot] == INACTIVE:
                    self.activate(self.activation_slot)
                self.activation_slot += 1
            row_state = AVAILABLE
        if row_state == AVAILABLE:
            self.leave_available(slot)
        self.active_count -= 1
        self.elsewhere_count += 1
        table.flags[slot] |= ELSEWHERE

    def take_ownership(self, slot: int) -> None:
        """R5, R7: the message is owned here now; an available one joins its level's returned
        heap (its txid is older than the fresh list's tail), so it goes out in Q14 order."""
        table = self.table
        flags = table.flags[slot]
        assert flags & ELSEWHERE
        table.flags[slot] = flags & ~ELSEWHERE
        self.elsewhere_count -= 1
        self.active_count += 1
        if table.state[slot] == AVAILABLE:
            table.flags[slot] |= IN_RETURNED
            self.level_of(slot).push_returned(table.txid[slot])

    def leave_available(self, slot: int) -> None:
        """An AVAILABLE row is about to be delivered or removed: fix the level counts."""
        table = self.table
        assert table.state[slot] == AVAILABLE
        flags = table.flags[slot]
        assert not flags & ELSEWHERE
        level = self.level_of(slot)
        if flags & IN_RETURNED:
            table.flags[slot] = flags & ~IN_RETURNED
            txid = table.txid[slot]
            level.pop_returned(txid)
            self.returned_from.pop(txid, None)
        elif table.delivery_count[slot] == 0:
            level.fresh_live -= 1
            fresh = level.fresh
            if level.head < len(fresh) and fresh[level.head] == table.txid[slot]:
                level.head += 1  # the usual case: the head leaves; spare the next peek a check

    def release_lease(self, slot: int) -> None:
        """Free the backlog a LEASED row takes in its subscription."""
        table = self.table
        assert table.state[slot] == LEASED
        sub = self.subs[table.lease_sub[slot]]
        assert sub is not None
        sub.leased.remove(table.txid[slot])
        self.leased_total -= 1
        table.lease_sub[slot] = -1

    def remove(
        self,
        slot: int,
        reason: RemovalReason,
        actions: list[Action],
        expire_reasons: ExpireReason = NO_REASON,
        *,
        record: bool = True,
    ) -> None:
        """The message leaves the queue; count it and emit its record (and dead letter)."""
        table = self.table
        state = table.state[slot]
        txid = table.txid[slot]
        if table.flags[slot] & ELSEWHERE:
            self.elsewhere_count -= 1
            table.flags[slot] &= ~ELSEWHERE
            if state == LEASED:
                self.release_lease(slot)
        elif state == LEASED:
            sub = self.subs[table.lease_sub[slot]]
            assert sub is not None
            sub.leased.remove(txid)  # release_lease, inlined (hot: every ack)
            self.leased_total -= 1
            self.active_count -= 1
        elif state == AVAILABLE:
            self.leave_available(slot)
            self.active_count -= 1
        else:
            assert state == INACTIVE
            self.inactive_count -= 1
        barrier = bool(table.flags[slot] & BARRIER)
        if barrier:
            self.barriers.remove(txid)
        table.mark_removed(slot)
        self.removals_since_check += 1
        if reason is RemovalReason.ACKED:
            self.counters.acked_total += 1
        else:
            self._count_removal(reason, expire_reasons)
        if record:
            count = table.delivery_count[slot]
            actions.append(RecordRemoval(txid, reason, expire_reasons, count, barrier))
            if reason is RemovalReason.EXPIRED:
                actions.append(PublishDeadLetter(txid, expire_reasons))

    def _count_removal(
        self, reason: RemovalReason, expire_reasons: ExpireReason, count: int = 1
    ) -> None:
        counters = self.counters
        if reason is RemovalReason.ACKED:
            counters.acked_total += count
        elif reason is RemovalReason.EXPIRED:
            counters.expired_by_reason[expire_reasons.primary()] += count
        elif reason is RemovalReason.SENT_AT_MOST_ONCE:
            counters.sent_at_most_once_total += count
        else:
            counters.barrier_delivered_total += count

    def break_lease(
        self, slot: int, now_ms: int, actions: list[Action], reasons: ExpireReason
    ) -> None:
        """A lease ended without an ack: return the message, or expire it past a limit (Q13)."""
        table = self.table
        assert table.state[slot] == LEASED
        if table.flags[slot] & ELSEWHERE:
            # Owned elsewhere since it was leased (R7's documented duplicate): it stays for its
            # owner, who alone may expire it (never for a reason of this instance's own).
            self.removals_since_check += 1
            self.release_lease(slot)
            table.state[slot] = AVAILABLE
            return
        if self.expire_at_ms(slot) <= now_ms:
            reasons |= ExpireReason.TIME_LIMIT
        max_deliveries = self.policy.max_deliveries
        if max_deliveries and table.delivery_count[slot] >= max_deliveries:
            reasons |= ExpireReason.MAX_DELIVERIES
        if reasons:
            self.remove(slot, RemovalReason.EXPIRED, actions, reasons)
            return
        self.removals_since_check += 1  # a broken lease leaves garbage in the lease heap
        holder = self.subs[table.lease_sub[slot]]
        assert holder is not None
        self.returned_from[table.txid[slot]] = holder.position
        self.release_lease(slot)
        table.state[slot] = AVAILABLE
        table.flags[slot] |= IN_RETURNED
        self.level_of(slot).push_returned(table.txid[slot])

    def release_sent(self, txid: int) -> None:
        """Q7: a message sent at-most-once stops holding its subscription's backlog."""
        index = self.at_most_once_sent.pop(txid, None)
        if index is not None:
            sub = self.subs[index]
            assert sub is not None
            sub.leased.remove(txid)
            self.leased_total -= 1

    def defer_ack(self, publisher_id: int, seq: int, now_ms: int) -> None:
        """Remember an ack for a message not yet in the queue (DeferredAckExpiration)."""
        expires_at_ms = now_ms + self.policy.deferred_ack_expiration_ms
        self.deferred[(publisher_id, seq)] = expires_at_ms
        heapq.heappush(self.deferred_heap, (expires_at_ms, publisher_id, seq))

    def insert(
        self,
        txid: int,
        publisher_id: int,
        seq: int,
        timestamp_ms: int,
        priority: int,
        is_barrier: bool,
        expire_at_ms: int,
        *,
        own_expiry: bool,
        elsewhere: bool = False,
    ) -> int:
        """Add the newest message: active, or inactive beyond TargetQueueDepth (A4), or
        owned by another instance (`elsewhere`, R2: kept, never delivered here)."""
        assert txid > self.last_txid
        assert not (elsewhere and is_barrier)
        self.last_txid = txid
        self.counters.entered_total += 1
        policy = self.policy
        target = policy.target_queue_depth
        beyond = target is not None and (self.active_count >= target or self.inactive_count > 0)
        table = self.table
        if policy.has_priority:
            self.level_for(priority)
        if elsewhere:
            slot = table.append(txid, timestamp_ms, priority, ELSEWHERE, AVAILABLE)
            self.bookmarks.add(publisher_id, seq, txid)
            if own_expiry or expire_at_ms != NO_EXPIRY or table.expire_at_ms is not None:
                self._track_expiry(slot, expire_at_ms, own_expiry=own_expiry)
            self.elsewhere_count += 1
            return slot
        flags = BARRIER if is_barrier else 0
        slot = table.append(txid, timestamp_ms, priority, flags, INACTIVE if beyond else AVAILABLE)
        self.bookmarks.add(publisher_id, seq, txid)
        if own_expiry or expire_at_ms != NO_EXPIRY or table.expire_at_ms is not None:
            self._track_expiry(slot, expire_at_ms, own_expiry=own_expiry)
        if is_barrier:
            self.barriers.append(txid)
        if beyond:
            self.inactive_count += 1
        else:  # activate(), inlined: the row joins its level's fresh list
            self.active_count += 1
            level = self.level0 if table.priority is None else self.levels[priority]
            fresh = level.fresh
            assert not fresh or txid > fresh[-1]
            fresh.append(txid)  # level.push_fresh(), inlined
            level.fresh_live += 1
            self.activation_slot = slot + 1
        return slot

    def accepts_plain_inserts(self) -> bool:
        """True when `insert_plain_many` may stand for `insert` (see there)."""
        policy = self.policy
        table = self.table
        return (
            table.priority is None
            and table.expire_at_ms is None
            and policy.target_queue_depth is None
            and not self.deferred
        )

    def insert_plain_many(
        self,
        txids: list[int],
        publisher_ids: list[int],
        seqs: list[int],
        timestamps_ms: list[int],
        *,
        elsewhere: bool = False,
    ) -> None:
        """`insert` of each message in turn, in bulk, when `accepts_plain_inserts()`.

        For messages without priority, barrier or expiration of their own, with increasing
        txids and, under a queue Expiration, expiring in order: no priority, TargetQueueDepth
        or per-message expiry column, and no deferred ack waiting, so every message becomes
        AVAILABLE at the end of the fresh list and nothing else changes; with `elsewhere`
        (all owned by another instance) AVAILABLE and ELSEWHERE, in no list at all.
        """
        assert self.accepts_plain_inserts()
        assert txids[0] > self.last_txid
        expiration_ms = self.policy.expiration_ms
        if expiration_ms is not None:  # _track_expiry, for messages in expiry order
            assert timestamps_ms[0] + expiration_ms >= self.expiry_max_seen_ms
            self.expiry_max_seen_ms = timestamps_ms[-1] + expiration_ms
        count = len(txids)
        self.last_txid = txids[-1]
        self.counters.entered_total += count
        slot = self.table.append_available(txids, timestamps_ms, ELSEWHERE if elsewhere else 0)
        self.bookmarks.add_many(publisher_ids, seqs, txids)
        if elsewhere:
            self.elsewhere_count += count
            return
        self.active_count += count
        level = self.level0
        assert not level.fresh or txids[0] > level.fresh[-1]
        extend(level.fresh, txids)
        level.fresh_live += count
        self.activation_slot = slot + count

    def _track_expiry(self, slot: int, expire_at_ms: int, *, own_expiry: bool) -> None:
        table = self.table
        if own_expiry and table.expire_at_ms is None:
            table.ensure_expiry_column(self.policy.expiration_ms)
        if table.expire_at_ms is not None:
            table.expire_at_ms[slot] = expire_at_ms
        if expire_at_ms == NO_EXPIRY:
            return
        if expire_at_ms < self.expiry_max_seen_ms:
            table.flags[slot] |= OUT_OF_ORDER_EXPIRY
            heapq.heappush(self.expiry_heap, (expire_at_ms, table.txid[slot]))
        else:
            self.expiry_max_seen_ms = expire_at_ms
