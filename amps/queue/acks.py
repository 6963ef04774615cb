"""Acknowledgements (Q7, Q10–Q12): by bookmark list or by filter, with `Leasing` rules.

`strict`: a client may ack only messages leased to it or not leased; an ack for a message
leased to another client has no effect. `sublet` (the default): anyone may ack anything.
`cancel` returns the message as if its lease ran out and counts a cancel; the seed text
(001, "if the count is greater than the configured MaxCancels") decides when it expires
instead: on the cancel that makes the count exceed MaxCancels. (The reference table's
"the Nth cancel" wording is one earlier; the seed stands, SPEC preamble.)
"""

from __future__ import annotations

from collections.abc import Sequence

from amps.queue.actions import NO_REASON, Action, ExpireReason, RecordRemoval, RemovalReason
from amps.queue.events import Acked, AckedByFilter, AckOption, Bookmark
from amps.queue.state import QueueState
from amps.queue.table import (
    AVAILABLE,
    BARRIER,
    COUNT_MAX,
    ELSEWHERE,
    INACTIVE,
    LEASED,
    REMOVED,
)


def on_acked(state: QueueState, event: Acked, now_ms: int, actions: list[Action]) -> None:
    """Q10: apply the ack to each bookmark in turn; unknown future bookmarks are deferred.

    A plain ack under `sublet` leasing always removes the row, so it skips `ack_slot`'s
    checks (the hot path: one lookup and one removal per bookmark).
    """
    option = event.option
    plain = option is AckOption.NONE and state.policy.leasing == "sublet"
    if plain and not state.at_most_once_sent:
        _ack_plain(state, event.bookmarks, now_ms, actions)
        return
    find = state.bookmarks.find
    table = state.table
    at_most_once_sent = state.at_most_once_sent
    for publisher_id, seq in event.bookmarks:
        txid = find(publisher_id, seq)
        if txid is not None and at_most_once_sent and txid in at_most_once_sent:
            _free_at_most_once(state, txid, event.client_id)
            continue
        slot = -1 if txid is None else table.slot_of(txid)
        if slot < 0 or table.state[slot] == REMOVED:
            unseen = not state.bookmarks.seen(publisher_id, seq)
            if txid is None and unseen and option is AckOption.NONE:
                state.defer_ack(publisher_id, seq, now_ms)
            continue
        if plain:
            state.remove(slot, RemovalReason.ACKED, actions)
        else:
            ack_slot(state, slot, event.client_id, option, now_ms, actions)


def _ack_plain(
    state: QueueState, bookmarks: Sequence[Bookmark], now_ms: int, actions: list[Action]
) -> None:
    """`on_acked` for a plain ack under `sublet` with no at-most-once message awaiting its ack.

    Every found row is removed; a leased one (the usual case) is removed inline, and the
    counts and the table head are fixed up once at the end (as `QueueState.remove` each).
    """
    index = state.bookmarks
    table = state.table
    rows = table.txid
    row_state = table.state
    flags = table.flags
    lease_sub = table.lease_sub
    delivery_count = table.delivery_count
    base = table.base
    count = len(rows)
    subs = state.subs
    append = actions.append
    acked = RemovalReason.ACKED
    removed = 0
    for bookmark, txid in zip(bookmarks, index.find_many(bookmarks), strict=True):
        if txid is None:
            publisher_id, seq = bookmark
            if not index.seen(publisher_id, seq):
                state.defer_ack(publisher_id, seq, now_ms)
            continue
        slot = txid - base
        if not (0 <= slot < count and rows[slot] == txid):
            slot = table.slot_of(txid)
            if slot < 0:
                continue
        kind = row_state[slot]
        if kind == LEASED and not flags[slot] & (BARRIER | ELSEWHERE):
            sub = subs[lease_sub[slot]]
            assert sub is not None
            sub.leased.remove(txid)
            row_state[slot] = REMOVED  # table.mark_removed(), the head moves once below
            lease_sub[slot] = -1
            append(RecordRemoval(txid, acked, NO_REASON, delivery_count[slot]))
            removed += 1
        elif kind != REMOVED:
            state.remove(slot, acked, actions)
    if removed:
        table.removed_count += removed
        head = table.head
        while head < count and row_state[head] == REMOVED:
            head += 1
        table.head = head
        state.leased_total -= removed
        state.active_count -= removed
        state.removals_since_check += removed
        state.counters.acked_total += removed


def on_acked_by_filter(
    state: QueueState, event: AckedByFilter, now_ms: int, actions: list[Action]
) -> None:
    """Q10, A4: ack every active message the filter matches, leased or not (never inactive)."""
    for txid in sorted(state.at_most_once_sent):
        if event.matches(txid):
            _free_at_most_once(state, txid, event.client_id)
    table = state.table
    for slot in range(table.head, len(table)):
        if table.state[slot] in (AVAILABLE, LEASED) and event.matches(table.txid[slot]):
            ack_slot(state, slot, event.client_id, event.option, now_ms, actions)


def ack_slot(
    state: QueueState,
    slot: int,
    client_id: str,
    option: AckOption,
    now_ms: int,
    actions: list[Action],
) -> None:
    """One message, one ack: remove it, cancel its lease (Q11) or expire it (Q12)."""
    table = state.table
    row_state = table.state[slot]
    at_most_once = state.policy.at_most_once
    if row_state == LEASED:
        holder = state.subs[table.lease_sub[slot]]
        assert holder is not None
        if state.policy.leasing == "strict" and holder.client_id != client_id:
            return
    else:
        assert row_state in (AVAILABLE, INACTIVE)
    if option is AckOption.NONE:
        state.remove(slot, RemovalReason.ACKED, actions)
    elif at_most_once:
        return  # Q7: cancel and expire have no effect
    elif option is AckOption.EXPIRE:
        state.remove(slot, RemovalReason.EXPIRED, actions, ExpireReason.FORCED_EXPIRE)
    elif row_state == LEASED:
        _cancel(state, slot, now_ms, actions)


def _cancel(state: QueueState, slot: int, now_ms: int, actions: list[Action]) -> None:
    """Q11: back to the queue as if the lease ran out, unless the cancels exceed MaxCancels."""
    table = state.table
    count = min(table.cancel_count[slot] + 1, COUNT_MAX)
    table.cancel_count[slot] = count
    state.counters.cancelled_total += 1
    max_cancels = state.policy.max_cancels
    reasons = NO_REASON
    if max_cancels and count > max_cancels:
        reasons = ExpireReason.MAX_CANCELS
    state.break_lease(slot, now_ms, actions, reasons)


def _free_at_most_once(state: QueueState, txid: int, client_id: str) -> None:
    """Q7: the ack of a sent at-most-once message only frees the subscription's backlog."""
    sub = state.subs[state.at_most_once_sent[txid]]
    assert sub is not None
    if state.policy.leasing == "strict" and sub.client_id != client_id:
        return
    state.release_sent(txid)
