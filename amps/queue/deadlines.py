"""Time-driven work (Q6 lease expiry, Q13 expiration, deferred-ack expiry) and its timer.

Expiration uses a sweep over rows in txid order: with one queue Expiration and increasing
timestamps, expiry times increase with txid, so one cursor suffices. A message whose expiry is
earlier than an older message's (its own shorter expiration) goes to a small heap instead.
Leased messages are skipped by both; their lease end checks the time (Q13).
"""

from __future__ import annotations

import heapq

from amps.queue.actions import NO_REASON, Action, ExpireReason, RemovalReason
from amps.queue.state import QueueState
from amps.queue.table import ELSEWHERE, LEASED, NO_EXPIRY, OUT_OF_ORDER_EXPIRY, REMOVED


def run_due(state: QueueState, now_ms: int, actions: list[Action]) -> None:
    """Do every piece of work whose time has come (cheap when nothing is due: every step)."""
    if state.deadlines_deferred:
        return
    period = state.policy.lease_period_ms
    heap = state.lease_heap
    if period is not None and heap and heap[0][0] + period <= now_ms:
        expire_leases(state, now_ms, actions)
    table = state.table
    sweeps = state.policy.expiration_ms is not None or table.expire_at_ms is not None
    if (sweeps and state.expiry_slot < len(table)) or state.expiry_heap:
        expire_messages(state, now_ms, actions)
    if state.deferred_heap and state.deferred_heap[0][0] <= now_ms:
        expire_deferred_acks(state, now_ms)


def expire_leases(state: QueueState, now_ms: int, actions: list[Action]) -> None:
    """Q6: a lease that ran out returns its message (or removes it, Q13)."""
    period = state.policy.lease_period_ms
    if period is None:
        return
    heap = state.lease_heap
    while heap and heap[0][0] + period <= now_ms:
        _, txid, count = heapq.heappop(heap)
        slot = state.current_lease_slot(txid, count)
        if slot >= 0:
            state.counters.expired_leases_total += 1
            state.break_lease(slot, now_ms, actions, NO_REASON)


def expire_messages(state: QueueState, now_ms: int, actions: list[Action]) -> None:
    """Q13: an unleased message past its expiration leaves the queue."""
    table = state.table
    while _expiry_front(state) < len(table):
        slot = state.expiry_slot
        if state.expire_at_ms(slot) > now_ms:
            break
        # Only its owner expires a message (R2); taking ownership checks the time again.
        if table.state[slot] != LEASED and not table.flags[slot] & ELSEWHERE:
            state.remove(slot, RemovalReason.EXPIRED, actions, ExpireReason.TIME_LIMIT)
        state.expiry_slot += 1
    heap = state.expiry_heap
    while heap and heap[0][0] <= now_ms:
        _, txid = heapq.heappop(heap)
        slot = table.slot_of(txid)
        if (
            slot >= 0
            and table.state[slot] not in (REMOVED, LEASED)
            and not table.flags[slot] & ELSEWHERE
        ):
            state.remove(slot, RemovalReason.EXPIRED, actions, ExpireReason.TIME_LIMIT)


def _expiry_front(state: QueueState) -> int:
    """Move the sweep past rows it never has to look at; return its position."""
    table = state.table
    slot = max(state.expiry_slot, table.head)
    if state.policy.expiration_ms is None and table.expire_at_ms is None:
        state.expiry_slot = len(table)
        return state.expiry_slot
    while slot < len(table) and (
        table.state[slot] == REMOVED
        or table.flags[slot] & OUT_OF_ORDER_EXPIRY
        or state.expire_at_ms(slot) == NO_EXPIRY
    ):
        slot += 1
    state.expiry_slot = slot
    return slot


def expire_deferred_acks(state: QueueState, now_ms: int) -> None:
    """Forget acks for messages that did not arrive within DeferredAckExpiration."""
    heap = state.deferred_heap
    while heap and heap[0][0] <= now_ms:
        expires_at_ms, publisher_id, seq = heapq.heappop(heap)
        if state.deferred.get((publisher_id, seq)) == expires_at_ms:
            del state.deferred[(publisher_id, seq)]


def next_deadline_ms(state: QueueState) -> int | None:
    """The earliest time at which `run_due` has work, or None."""
    best: int | None = None
    heap = state.lease_heap
    if heap:  # drop ended leases from the top (current_lease_slot, inlined: every step)
        table = state.table
        rows = table.txid
        row_state = table.state
        delivery_count = table.delivery_count
        base = table.base
        count = len(rows)
        while heap:
            _, txid, delivered = heap[0]
            slot = txid - base
            if not (0 <= slot < count and rows[slot] == txid):
                slot = table.slot_of(txid)
            if slot >= 0 and row_state[slot] == LEASED and delivery_count[slot] == delivered:
                break
            heapq.heappop(heap)
        period = state.policy.lease_period_ms
        if period is not None and heap:
            best = heap[0][0] + period
    if _expiry_front(state) < len(state.table):
        best = _earlier(best, state.expire_at_ms(state.expiry_slot))
    if state.expiry_heap:
        best = _earlier(best, state.expiry_heap[0][0])
    if state.deferred_heap:
        best = _earlier(best, state.deferred_heap[0][0])
    return best


def _earlier(best: int | None, deadline_ms: int) -> int:
    return deadline_ms if best is None or deadline_ms < best else best
