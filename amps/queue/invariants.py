"""Expensive cross-checks of the engine's state, run after every step in tests (TigerStyle)."""

from __future__ import annotations

from amps.queue.columns import column_bytes, tail
from amps.queue.state import QueueState
from amps.queue.table import AVAILABLE, BARRIER, ELSEWHERE, IN_RETURNED, INACTIVE, LEASED, REMOVED


def check_invariants(state: QueueState) -> None:
    """Assert that every count, index and cross-reference agrees with the rows."""
    _check_rows(state)
    _check_subscriptions(state)
    _check_levels(state)
    _check_counters(state)


def _check_rows(state: QueueState) -> None:
    table = state.table
    counts = {AVAILABLE: 0, LEASED: 0, REMOVED: 0, INACTIVE: 0}
    elsewhere = 0
    barriers = []
    for slot in range(len(table)):
        row_state = table.state[slot]
        if table.flags[slot] & ELSEWHERE:
            assert row_state in (AVAILABLE, LEASED)
            assert not table.flags[slot] & (BARRIER | IN_RETURNED)
            elsewhere += 1
        else:
            counts[row_state] += 1
        assert slot >= table.head or row_state == REMOVED
        if row_state == LEASED:
            assert table.lease_sub[slot] >= 0
        else:
            assert table.lease_sub[slot] == -1
        if table.flags[slot] & IN_RETURNED:
            assert row_state == AVAILABLE  # delivered before, or taken over by a transfer
        if table.flags[slot] & BARRIER and row_state != REMOVED:
            barriers.append(table.txid[slot])
        if slot > 0:
            assert table.txid[slot - 1] < table.txid[slot]
    assert counts[REMOVED] == table.removed_count
    assert counts[AVAILABLE] + counts[LEASED] == state.active_count
    assert counts[INACTIVE] == state.inactive_count
    assert elsewhere == state.elsewhere_count
    assert barriers == list(state.barriers)
    target = state.policy.target_queue_depth
    if target is not None and state.inactive_count:
        # A transfer of an inactive message activates up to it (A4), so more may be active.
        assert state.active_count >= target
        states = column_bytes(table.state)
        first_inactive = states.find(INACTIVE)
        assert state.activation_slot <= first_inactive
        for slot in range(first_inactive, len(table)):
            ok = table.state[slot] in (INACTIVE, REMOVED) or table.flags[slot] & ELSEWHERE
            assert ok, "inactive rows are the tail (rows owned elsewhere aside)"


def _check_subscriptions(state: QueueState) -> None:
    table = state.table
    holders: dict[int, int] = {}
    assert len(state.order) == len(state.by_key)
    for sub in state.order:
        assert state.subs[sub.index] is sub
        assert state.by_key[(sub.client_id, sub.sub_id)] is sub
        for txid in sub.leased:
            assert txid not in holders, "a message is leased to two subscriptions"
            holders[txid] = sub.index
    assert sum(len(s.leased) for s in state.order) == state.leased_total
    for txid, index in state.at_most_once_sent.items():
        assert holders.get(txid) == index
        assert state.policy.at_most_once
    for slot in range(table.head, len(table)):
        if table.state[slot] == LEASED:
            assert holders.get(table.txid[slot]) == table.lease_sub[slot]
    for txid, position in state.returned_from.items():
        slot = table.slot_of(txid)
        assert slot >= 0, "returned_from outlives its message"
        assert table.flags[slot] & IN_RETURNED, "returned_from outlives its return"
        assert 0 <= position < state.next_position
    leased_rows = sum(1 for s in table.state if s == LEASED)  # owned here or not
    assert leased_rows + len(state.at_most_once_sent) == state.leased_total


def _check_levels(state: QueueState) -> None:
    table = state.table
    assert state.level_order == sorted(state.levels, reverse=True)
    fresh_live = dict.fromkeys(state.levels, 0)
    returned_live = dict.fromkeys(state.levels, 0)
    for slot in range(table.head, len(table)):
        if table.state[slot] != AVAILABLE or table.flags[slot] & ELSEWHERE:
            continue
        priority = 0 if table.priority is None else table.priority[slot]
        if table.flags[slot] & IN_RETURNED:
            returned_live[priority] += 1
        else:
            assert table.delivery_count[slot] == 0
            fresh_live[priority] += 1
    for priority, level in state.levels.items():
        assert level.fresh_live == fresh_live[priority]
        assert level.returned_live == returned_live[priority]
        listed = [t for t in tail(level.fresh, level.head) if state.valid_fresh(t)]
        assert len(listed) == level.fresh_live
        assert len({t for t in level.returned if state.valid_returned(t)}) == level.returned_live


def _check_counters(state: QueueState) -> None:
    c = state.counters
    left = c.acked_total + c.expired_total + c.sent_at_most_once_total
    left += c.barrier_delivered_total
    live = state.active_count + state.inactive_count + state.elsewhere_count
    assert c.entered_total == left + live
    assert state.table.live_count == live
