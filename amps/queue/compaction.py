"""Keeping memory proportional to the queued messages (Q3): squeeze out removed rows.

Every structure deletes lazily and is rebuilt once its garbage outnumbers its live entries,
so each removal costs amortised O(1) (O(log n) for the bookmark index).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left

from amps.queue.state import QueueState
from amps.queue.table import REMOVED

MIN_GARBAGE = 1024


def maybe_compact(state: QueueState) -> None:
    """Run whichever rebuilds are due; checked once per MIN_GARBAGE removals."""
    if state.removals_since_check < MIN_GARBAGE:
        return
    state.removals_since_check = 0
    table = state.table
    if table.wants_compaction():
        expiry_txid = _txid_at(state, state.expiry_slot)
        activation_txid = _txid_at(state, state.activation_slot)
        table.compact()
        state.expiry_slot = bisect_left(table.txid, expiry_txid)
        state.activation_slot = bisect_left(table.txid, activation_txid)
    keep_count = table.live_count + len(state.at_most_once_sent)
    if state.bookmarks.entry_count > 2 * keep_count + MIN_GARBAGE:
        oldest = table.oldest_live_slot()
        below = state.last_txid + 1 if oldest < 0 else table.txid[oldest]
        if state.at_most_once_sent:
            below = min(below, min(state.at_most_once_sent))
        state.bookmarks.compact(lambda txid: _still_needed(state, txid), below)
    for level in state.levels.values():
        level.maybe_compact(state.valid_fresh, state.valid_returned)
    if len(state.lease_heap) > 2 * state.leased_total + MIN_GARBAGE:
        state.lease_heap = [
            e for e in state.lease_heap if state.current_lease_slot(e[1], e[2]) >= 0
        ]
        heapq.heapify(state.lease_heap)


def _txid_at(state: QueueState, slot: int) -> int:
    table = state.table
    return table.txid[slot] if slot < len(table) else state.last_txid + 1


def _still_needed(state: QueueState, txid: int) -> bool:
    """Live rows keep their bookmark; so do sent at-most-once messages awaiting their ack."""
    if txid in state.at_most_once_sent:
        return True
    slot = state.table.slot_of(txid)
    return slot >= 0 and state.table.state[slot] != REMOVED
