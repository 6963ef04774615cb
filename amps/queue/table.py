"""Compact per-message columns indexed by slot: no Python object per queued message (Q3).

Slots follow txid order, so `slot_of(txid)` is a bisect; for the newest run of consecutive
txids (since the last gap or compaction) it is one subtraction, checked against the row. Removed
messages leave holes that `compact()` squeezes out once they outnumber the live ones
(amortised O(1) per removal).
Slots change on compaction: hold txids across events, slots only within one step.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress

from amps.queue.bulk import stretch_mask
from amps.queue.columns import (
    Column,
    ColumnFactory,
    as_array,
    column_bytes,
    extend,
    memory_columns,
    tail,
)

AVAILABLE = 0
LEASED = 1
REMOVED = 2
INACTIVE = 3  # beyond TargetQueueDepth (A4)

# Flag bits.
BARRIER = 1
IN_RETURNED = 2  # the message is in its level's returned heap (it went back after a lease)
OUT_OF_ORDER_EXPIRY = 4  # its expiry is tracked by the engine's expiry heap, not the sweep
# Owned by another instance (R2): kept for acks and barriers, never delivered, expired or
# counted in the TargetQueueDepth window here; in no level list. Never INACTIVE, never a
# barrier. A LEASED row gets it when ownership moved away during its lease (R7's duplicate).
ELSEWHERE = 8

NO_EXPIRY = (1 << 63) - 1
COUNT_MAX = 65_535
COMPACT_MIN_HOLES = 1024

# state byte -> 1 when the row is live (not REMOVED), for compress()
LIVE_MASK = bytes(0 if b == REMOVED else 1 for b in range(256))

BULK_ROWS = 16
"""Fewer txids than this are looked up one at a time (`select_rows` would not pay off)."""
_SPAN_SLACK = 4  # `select_rows` scans at most this many slots per txid (plus BULK_ROWS * 16)


class MessageTable:
    """Parallel columns; one row per message still tracked (REMOVED rows until compaction)."""

    def __init__(self, *, has_priority: bool, columns: ColumnFactory = memory_columns) -> None:
        self.columns = columns
        self.txid = columns("q")
        self.timestamp_ms = columns("q")
        self.state = columns("B")
        self.flags = columns("B")
        self.delivery_count = columns("H")
        self.cancel_count = columns("H")
        self.lease_sub = columns("i")  # subscription index while LEASED, else -1
        self.priority: Column | None = columns("Q") if has_priority else None
        # Allocated on the first message with its own expiration; else derived from the policy.
        self.expire_at_ms: Column | None = None
        self.head = 0  # every slot before head is REMOVED
        self.removed_count = 0  # REMOVED rows still present
        # slot_of tries `txid - base` before bisecting: base keeps the newest run of
        # consecutive txids (where deliveries and acks look) one subtraction away.
        self.base = 0

    def __len__(self) -> int:
        return len(self.txid)

    @property
    def live_count(self) -> int:
        """Rows not REMOVED."""
        return len(self.txid) - self.removed_count

    def append(self, txid: int, timestamp_ms: int, priority: int, flags: int, state: int) -> int:
        """Add a row for a new, newest message; return its slot."""
        assert not self.txid or txid > self.txid[-1], "txids must increase"
        slot = len(self.txid)
        if txid - self.base != slot:  # a gap in the txids (or a compaction): re-aim the guess
            self.base = txid - slot
        self.txid.append(txid)
        self.timestamp_ms.append(timestamp_ms)
        self.state.append(state)
        self.flags.append(flags)
        self.delivery_count.append(0)
        self.cancel_count.append(0)
        self.lease_sub.append(-1)
        if self.priority is not None:
            self.priority.append(priority)
        if self.expire_at_ms is not None:
            self.expire_at_ms.append(NO_EXPIRY)
        return slot

    def append_available(self, txids: list[int], timestamps_ms: list[int], flags: int = 0) -> int:
        """`append` of each new, newest AVAILABLE message with `flags`, without priority or
        expiry column, in bulk; return the first slot."""
        assert self.priority is None
        assert self.expire_at_ms is None
        assert txids
        assert not self.txid or txids[0] > self.txid[-1], "txids must increase"
        first = len(self.txid)
        count = len(txids)
        last = first + count - 1
        if txids[-1] - self.base != last:  # as `append` leaves it: the newest row's guess
            self.base = txids[-1] - last
        extend(self.txid, txids)
        extend(self.timestamp_ms, timestamps_ms)
        zeros = bytes(count)
        extend(self.state, zeros)  # AVAILABLE
        extend(self.flags, bytes((flags,)) * count if flags else zeros)
        extend(self.delivery_count, zeros)
        extend(self.cancel_count, zeros)
        extend(self.lease_sub, array("i", [-1]) * count)
        return first

    def ensure_expiry_column(self, derived: int | None) -> Column:
        """Create the per-message expiry column, filled from the queue Expiration (or none)."""
        if self.expire_at_ms is None:
            if derived is None:
                initial = array("q", [NO_EXPIRY]) * len(self.txid)
            else:
                initial = array("q", map(derived.__add__, self.timestamp_ms))
            self.expire_at_ms = self.columns("q", initial)
        return self.expire_at_ms

    def slot_of(self, txid: int) -> int:
        """The slot of `txid`, or -1 when the table has no row for it."""
        txids = self.txid
        head = self.head
        slot = txid - self.base
        if head <= slot < len(txids) and txids[slot] == txid:
            return slot  # dense txids: no search
        if head >= len(txids) or txid < txids[head] or txid > txids[-1]:
            return -1  # before the oldest live row (long gone) or never added
        slot = bisect_left(txids, txid, head)
        if slot < len(txids) and txids[slot] == txid:
            return slot
        return -1

    def select_rows(self, txids: Sequence[int], *, live: bool) -> tuple[int, bytes] | None:
        """(first slot, mask) of distinct `txids` that all have rows (none REMOVED, if `live`),
        found in one pass in C over the slots from the lowest to the highest of them: `mask[i]`
        is 1 for slot `first + i` when its txid is one of them. None when they are too few,
        repeat one, spread over many more slots than they are, lack a row, or the columns are
        not in memory: the caller looks each up (a replicated removal's hundreds of acks are
        mostly a few runs of neighbouring rows, Q16)."""
        rows = self.txid
        count = len(txids)
        if (
            count < BULK_ROWS
            or not isinstance(rows, array)
            or not isinstance(self.state, bytearray)
        ):
            return None
        first = self.slot_of(min(txids))
        last = self.slot_of(max(txids))
        if first < 0 or last < 0 or last - first >= _SPAN_SLACK * count + BULK_ROWS * 16:
            return None
        mask = stretch_mask(rows, first, last, txids)
        if mask is None:
            return None
        states = self.state[first : last + 1]
        if len(mask) != count:
            states = bytearray(compress(states, mask))
        if live and REMOVED in states:
            return None
        return first, mask

    def mark_removed(self, slot: int) -> None:
        """Turn a row into a hole and move the head past leading holes."""
        assert self.state[slot] != REMOVED
        self.state[slot] = REMOVED
        self.lease_sub[slot] = -1
        self.removed_count += 1
        while self.head < len(self.state) and self.state[self.head] == REMOVED:
            self.head += 1

    def oldest_live_slot(self) -> int:
        """The slot of the oldest message not removed, or -1."""
        return self.head if self.head < len(self.state) else -1

    def wants_compaction(self) -> bool:
        """True once holes outnumber live rows (and are worth a pass)."""
        return self.removed_count >= COMPACT_MIN_HOLES and self.removed_count > self.live_count

    def compact(self) -> None:
        """Drop every REMOVED row; O(rows). Slots of live rows change."""
        head = self.head
        # None: no holes after the head, so every column's tail is kept whole (one copy)
        keep = None if self.removed_count == head else column_bytes(self.state, head)
        keep = None if keep is None else keep.translate(LIVE_MASK)
        pick = self._pick
        self.txid = pick(self.txid, "q", head, keep)
        self.timestamp_ms = pick(self.timestamp_ms, "q", head, keep)
        self.state = pick(self.state, "B", head, keep)
        self.flags = pick(self.flags, "B", head, keep)
        self.delivery_count = pick(self.delivery_count, "H", head, keep)
        self.cancel_count = pick(self.cancel_count, "H", head, keep)
        self.lease_sub = pick(self.lease_sub, "i", head, keep)
        if self.priority is not None:
            self.priority = pick(self.priority, "Q", head, keep)
        if self.expire_at_ms is not None:
            self.expire_at_ms = pick(self.expire_at_ms, "q", head, keep)
        self.head = 0
        self.removed_count = 0
        self.base = self.txid[-1] - (len(self.txid) - 1) if self.txid else 0

    def _pick(self, column: Column, typecode: str, head: int, keep: bytes | None) -> Column:
        """The rows of `column` from `head` whose `keep` byte is set (all if None), as a new
        column."""
        if keep is None:
            return self.columns(typecode, as_array(column, typecode, head))
        return self.columns(typecode, array(typecode, compress(tail(column, head), keep)))

    def nbytes(self) -> int:
        """Bytes held by the columns (items in use, for the memory benchmark)."""
        per_row = 8 + 8 + 1 + 1 + 2 + 2 + 4
        per_row += 8 if self.priority is not None else 0
        per_row += 8 if self.expire_at_ms is not None else 0
        return per_row * len(self.txid)
