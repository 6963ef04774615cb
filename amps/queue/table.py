"""Compact per-message columns indexed by slot: no Python object per queued message (Q3).

Slots follow txid order, so `slot_of(txid)` is a bisect; when the queue sees every txid (no
gaps since the last compaction) it is one subtraction, checked against the row. Removed
messages leave holes that `compact()` squeezes out once they outnumber the live ones
(amortised O(1) per removal).
Slots change on compaction: hold txids across events, slots only within one step.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

AVAILABLE = 0
LEASED = 1
REMOVED = 2
INACTIVE = 3  # beyond TargetQueueDepth (A4)

# Flag bits.
BARRIER = 1
IN_RETURNED = 2  # the message is in its level's returned heap (it went back after a lease)
OUT_OF_ORDER_EXPIRY = 4  # its expiry is tracked by the engine's expiry heap, not the sweep

NO_EXPIRY = (1 << 63) - 1
COUNT_MAX = 65_535
COMPACT_MIN_HOLES = 1024


class MessageTable:
    """Parallel columns; one row per message still tracked (REMOVED rows until compaction)."""

    def __init__(self, *, has_priority: bool) -> None:
        self.txid = array("q")
        self.timestamp_ms = array("q")
        self.state = bytearray()
        self.flags = bytearray()
        self.delivery_count = array("H")
        self.cancel_count = array("H")
        self.lease_sub = array("i")  # subscription index while LEASED, else -1
        self.priority: array[int] | None = array("Q") if has_priority else None
        # Allocated on the first message with its own expiration; else derived from the policy.
        self.expire_at_ms: array[int] | None = None
        self.head = 0  # every slot before head is REMOVED
        self.removed_count = 0  # REMOVED rows still present
        self.base = 0  # txid of slot 0: slot_of tries `txid - base` before bisecting

    def __len__(self) -> int:
        return len(self.txid)

    @property
    def live_count(self) -> int:
        """Rows not REMOVED."""
        return len(self.txid) - self.removed_count

    def append(self, txid: int, timestamp_ms: int, priority: int, flags: int, state: int) -> int:
        """Add a row for a new, newest message; return its slot."""
        assert not self.txid or txid > self.txid[-1], "txids must increase"
        if not self.txid:
            self.base = txid
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
        return len(self.txid) - 1

    def ensure_expiry_column(self, derived: int | None) -> array[int]:
        """Create the per-message expiry column, filled from the queue Expiration (or none)."""
        if self.expire_at_ms is None:
            column = array("q", [NO_EXPIRY]) * len(self.txid)
            if derived is not None:
                for slot, stamp in enumerate(self.timestamp_ms):
                    column[slot] = stamp + derived
            self.expire_at_ms = column
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
        keep = [slot for slot in range(self.head, len(self.state)) if self.state[slot] != REMOVED]
        self.txid = _pick(self.txid, keep)
        self.timestamp_ms = _pick(self.timestamp_ms, keep)
        self.state = bytearray(self.state[slot] for slot in keep)
        self.flags = bytearray(self.flags[slot] for slot in keep)
        self.delivery_count = _pick(self.delivery_count, keep)
        self.cancel_count = _pick(self.cancel_count, keep)
        self.lease_sub = _pick(self.lease_sub, keep)
        if self.priority is not None:
            self.priority = _pick(self.priority, keep)
        if self.expire_at_ms is not None:
            self.expire_at_ms = _pick(self.expire_at_ms, keep)
        self.head = 0
        self.removed_count = 0
        self.base = self.txid[0] if self.txid else 0

    def nbytes(self) -> int:
        """Bytes held by the columns (allocated items, for the memory benchmark)."""
        columns: list[array[int]] = [
            self.txid,
            self.timestamp_ms,
            self.delivery_count,
            self.cancel_count,
            self.lease_sub,
        ]
        if self.priority is not None:
            columns.append(self.priority)
        if self.expire_at_ms is not None:
            columns.append(self.expire_at_ms)
        return sum(c.itemsize * len(c) for c in columns) + len(self.state) + len(self.flags)


def _pick(column: array[int], slots: list[int]) -> array[int]:
    return array(column.typecode, [column[slot] for slot in slots])
