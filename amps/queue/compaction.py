"""Keeping memory proportional to the queued messages (Q3): squeeze out removed rows.

Every structure deletes lazily and is rebuilt once its garbage outnumbers its live entries,
so each removal costs amortised O(1) (O(log n) for the bookmark index).

Rebuilds run in bulk, with no Python call per entry: the rows to keep are read off the
table's columns as byte masks (`bytes.translate`), collected into a set of txids once per
pass, and the fresh lists and bookmark runs are filtered through the set's C `__contains__`
(`filter` / `map` + `compress`). The sets hold exactly the txids that `QueueState.valid_fresh`
and `_still_needed` accept, so the results are those of calling them per entry.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable
from itertools import compress

from amps.queue.columns import as_array, column_bytes, tail
from amps.queue.state import QueueState
from amps.queue.table import AVAILABLE, ELSEWHERE, IN_RETURNED, LIVE_MASK, REMOVED

# state byte -> 1 when AVAILABLE; flags byte -> 1 when neither IN_RETURNED nor ELSEWHERE.
_AVAILABLE_MASK = bytes(1 if b == AVAILABLE else 0 for b in range(256))
_NOT_RETURNED_MASK = bytes(0 if b & (IN_RETURNED | ELSEWHERE) else 1 for b in range(256))
_NONZERO_MASK = bytes(0 if b == 0 else 1 for b in range(256))

MIN_GARBAGE = 1024
DEFERRED_CHECK = 1 << 20  # removals between checks while a replay defers them (Q16)


def maybe_compact(state: QueueState) -> None:
    """Run whichever rebuilds are due; checked once per MIN_GARBAGE removals."""
    every = DEFERRED_CHECK if state.compaction_deferred else MIN_GARBAGE
    if state.removals_since_check < every:
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
        state.bookmarks.compact(_needed_txids(state).__contains__, below)
    valid_fresh: Callable[[int], bool] = state.valid_fresh
    if any(level.wants_fresh_compaction() for level in state.levels.values()):
        valid_fresh = _fresh_txids(state).__contains__
    for level in state.levels.values():
        level.maybe_compact(valid_fresh, state.valid_returned)
    if len(state.lease_heap) > 2 * state.leased_total + MIN_GARBAGE:
        state.lease_heap = [
            e for e in state.lease_heap if state.current_lease_slot(e[1], e[2]) >= 0
        ]
        heapq.heapify(state.lease_heap)


def _txid_at(state: QueueState, slot: int) -> int:
    table = state.table
    return table.txid[slot] if slot < len(table) else state.last_txid + 1


def _still_needed(state: QueueState, txid: int) -> bool:
    """Live rows keep their bookmark; so do sent at-most-once messages awaiting their ack.

    The per-entry definition; compaction uses `_needed_txids`, the same set in bulk.
    """
    if txid in state.at_most_once_sent:
        return True
    slot = state.table.slot_of(txid)
    return slot >= 0 and state.table.state[slot] != REMOVED


def _needed_txids(state: QueueState) -> set[int]:
    """Every txid `_still_needed` accepts: the live rows' and the sent at-most-once ones."""
    table = state.table
    head = table.head
    if table.removed_count == head:  # no holes after the head (e.g. just compacted)
        needed = set(tail(table.txid, head))
    else:
        keep = column_bytes(table.state, head).translate(LIVE_MASK)
        needed = set(compress(tail(table.txid, head), keep))
    needed.update(state.at_most_once_sent)
    return needed


def _fresh_txids(state: QueueState) -> set[int]:
    """Every txid `QueueState.valid_fresh` accepts: AVAILABLE, never delivered, not returned,
    owned here (R2)."""
    table = state.table
    head = table.head
    count = len(table) - head
    if not count:
        return set()
    available = int.from_bytes(column_bytes(table.state, head).translate(_AVAILABLE_MASK))
    fresh = int.from_bytes(column_bytes(table.flags, head).translate(_NOT_RETURNED_MASK))
    # delivery_count == 0: both bytes of the 16-bit count are zero
    counts = as_array(table.delivery_count, "H", head).tobytes()
    delivered = int.from_bytes(counts[0::2].translate(_NONZERO_MASK)) | int.from_bytes(
        counts[1::2].translate(_NONZERO_MASK)
    )
    keep = (available & fresh & ~delivered).to_bytes(count)
    return set(compress(tail(table.txid, head), keep))
