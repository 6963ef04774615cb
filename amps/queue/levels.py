"""Available messages of one priority level, in delivery order (Q14, A2).

A level holds `fresh`, the txids of activated never-delivered messages in txid order (a head
index plus lazy deletion), and `returned`, a heap of txids that came back after a lease.
Entries are validated against the table when read, so removal and delivery never search.

Filtered subscriptions keep a cursor per level: every valid fresh entry before the cursor is
known not to match. Content never changes and an invalid fresh entry never becomes valid again,
so each fresh message is tested at most once per filtered subscription. The returned heap is
scanned whole for a filtered subscription; it only holds messages whose lease broke and that
nobody has taken since, which is small in practice (documented trade-off).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Callable

from amps.queue.columns import Column, ColumnFactory, memory_columns, tail

COMPACT_MIN_GARBAGE = 1024


class Level:
    """Fresh and returned messages of one priority."""

    __slots__ = (
        "columns",
        "cursors",
        "fresh",
        "fresh_live",
        "head",
        "priority",
        "returned",
        "returned_live",
    )

    def __init__(self, priority: int, columns: ColumnFactory = memory_columns) -> None:
        self.priority = priority
        self.columns = columns
        self.fresh: Column = columns("q")
        self.head = 0
        self.fresh_live = 0  # valid entries in fresh[head:]
        self.returned: list[int] = []
        self.returned_live = 0  # distinct valid messages in returned
        self.cursors: dict[int, int] = {}  # subscription index -> first txid not yet tested

    def push_fresh(self, txid: int) -> None:
        """Append a newly activated message (txids increase)."""
        assert not self.fresh or txid > self.fresh[-1]
        self.fresh.append(txid)
        self.fresh_live += 1

    def push_returned(self, txid: int) -> None:
        """A message came back after its lease broke."""
        heapq.heappush(self.returned, txid)
        self.returned_live += 1

    def peek_oldest(
        self, valid_fresh: Callable[[int], bool], valid_returned: Callable[[int], bool]
    ) -> int | None:
        """The oldest available message of this level, or None."""
        returned = self.returned
        while returned and not valid_returned(returned[0]):
            heapq.heappop(returned)
        fresh = self.fresh
        while self.head < len(fresh) and not valid_fresh(fresh[self.head]):
            self.head += 1
        best = fresh[self.head] if self.head < len(fresh) else None
        if returned and (best is None or returned[0] < best):
            best = returned[0]
        return best

    def peek_matching(
        self,
        sub_index: int,
        matches: Callable[[int], bool],
        valid_fresh: Callable[[int], bool],
        valid_returned: Callable[[int], bool],
        limit_txid: int,
    ) -> int | None:
        """The oldest available message below `limit_txid` that `matches`, or None."""
        best: int | None = None
        for txid in self.returned:
            better = txid < limit_txid and (best is None or txid < best)
            if better and valid_returned(txid) and matches(txid):
                best = txid
        fresh = self.fresh
        i = max(self.head, bisect_left(fresh, self.cursors.get(sub_index, 0), self.head))
        while i < len(fresh):
            txid = fresh[i]
            if txid >= limit_txid or (best is not None and txid > best):
                break
            if valid_fresh(txid) and matches(txid):
                best = txid
                break
            i += 1
        self.cursors[sub_index] = fresh[i] if i < len(fresh) else _after(fresh)
        return best

    def pop_returned(self, txid: int) -> None:
        """`txid` leaves the returned set (delivered or removed); heap entries go lazily."""
        self.returned_live -= 1
        while self.returned and self.returned[0] == txid:
            heapq.heappop(self.returned)

    def wants_fresh_compaction(self) -> bool:
        """True once the fresh list's garbage outnumbers its live entries (and is worth it).

        Garbage counts the entries before the head too: a queue whose messages are delivered
        as they come moves the head and leaves nothing after it, and its list must still not
        keep 8 bytes of every message that ever passed (issue 11: the soak's RSS slope).
        """
        garbage = len(self.fresh) - self.fresh_live
        return garbage > COMPACT_MIN_GARBAGE and garbage > self.fresh_live

    def maybe_compact(
        self, valid_fresh: Callable[[int], bool], valid_returned: Callable[[int], bool]
    ) -> None:
        """Squeeze garbage out once it outnumbers live entries (amortised O(1)).

        `valid_fresh` is called per fresh entry: pass a set's `__contains__` to keep it in C.
        """
        if self.wants_fresh_compaction():
            kept = array("q", filter(valid_fresh, tail(self.fresh, self.head)))
            self.fresh = self.columns("q", kept)
            self.head = 0
        if len(self.returned) > COMPACT_MIN_GARBAGE and len(self.returned) > 2 * self.returned_live:
            self.returned = sorted({t for t in self.returned if valid_returned(t)})

    def forget_cursor(self, sub_index: int) -> None:
        """The subscription ended or changed its filter."""
        self.cursors.pop(sub_index, None)


def _after(fresh: Column) -> int:
    return fresh[-1] + 1 if fresh else 0
