"""Publisher sequence high-water marks and gaps for duplicate detection (L4, L5). [core]

A (publisher, seq) is a duplicate when it is at or below the publisher's high-water mark and not
one of the publisher's gaps. A gap is a sequence number skipped below the mark that this log
does not hold: replication can bring a later number before an earlier one (a publisher that
failed over in a chain, i2 -> i0 -> i1, so the two reach i1 from different origins), and the
earlier one must still be taken when it arrives, by replication or by the client's republish.

Gaps are bounded: per publisher the `GAP_LIMIT` highest are kept. Past that the lowest are
forgotten and a forgotten sequence number is a duplicate again, as under a plain high-water
mark. `forgotten_gaps` counts the gaps dropped that way; the numbers of a single jump of more
than GAP_LIMIT below the ones kept are never gaps, and not counted (a deliberate jump: the Spark
sink numbers each stream batch from (b + 1) * 2**32, and a publisher first seen far along).
A mark raised without gaps (`raise_mark`: the marks of removed segments, a segment summary's
range) says every number below it is or was held.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator

__all__ = ["GAP_LIMIT", "PublisherMarks"]

# Per publisher: 8 bytes each, so at most 8 KiB per publisher with gaps. A chained failover
# leaves as many gaps as the publisher had in flight; an instance that takes only some topics
# of a publisher keeps the latest numbers of the others as gaps, and forgets the older ones.
GAP_LIMIT = 1_024


class PublisherMarks:
    """Highest sequence number seen, and the gaps below it, per publisher id; sequence numbers
    start at 1."""

    __slots__ = ("_gaps", "_marks", "forgotten_gaps")

    def __init__(self, marks: Iterable[tuple[int, int]] = ()) -> None:
        self._marks: dict[int, int] = {}
        self._gaps: dict[int, array[int]] = {}  # ascending, never empty, all below the mark
        self.forgotten_gaps = 0  # gaps dropped past GAP_LIMIT (duplicates again)
        for publisher_id, seq in marks:
            self.raise_mark(publisher_id, seq)

    def is_duplicate(self, publisher_id: int, seq: int) -> bool:
        """L4: at or below the highest seen, and not a gap, is a duplicate."""
        if seq > self._marks.get(publisher_id, 0):
            return False
        gaps = self._gaps.get(publisher_id)
        return gaps is None or not _contains(gaps, seq)

    def claim(self, publisher_id: int, seq: int) -> bool:
        """`is_duplicate` then `advance` in one look-up: False for a duplicate (L4), else the
        mark moves to `seq` (or `seq` stops being a gap) and True."""
        marks = self._marks
        high = marks.get(publisher_id, 0)
        if seq > high:
            marks[publisher_id] = seq
            if seq != high + 1:
                self._skipped(publisher_id, high, seq)
            return True
        gaps = self._gaps.get(publisher_id)
        if gaps is None:
            return False
        index = bisect_left(gaps, seq)
        if index == len(gaps) or gaps[index] != seq:
            return False
        del gaps[index]
        if not gaps:
            del self._gaps[publisher_id]
        return True

    def claim_run(self, publisher_id: int, first_seq: int, last_seq: int) -> bool:
        """`claim` of first_seq, first_seq + 1, ..., last_seq in order, at once, when all are
        above the mark (all new): the mark moves to last_seq, the numbers skipped below
        first_seq become gaps, and True. False, with nothing changed, when some may be held:
        the caller claims them one by one."""
        marks = self._marks
        high = marks.get(publisher_id, 0)
        if first_seq <= high:
            return False
        marks[publisher_id] = last_seq
        if first_seq != high + 1:
            self._skipped(publisher_id, high, first_seq)
        return True

    def advance_run(self, publisher_id: int, first_seq: int, last_seq: int) -> None:
        """`advance` of first_seq..last_seq in order (a batch of one publisher's numbers),
        with a step per number only where some of them are gaps or the run straddles the
        mark."""
        if self.claim_run(publisher_id, first_seq, last_seq):
            return
        if last_seq <= self._marks.get(publisher_id, 0) and publisher_id not in self._gaps:
            return  # every one held already (claimed by the publishing core): nothing moves
        claim = self.claim
        for seq in range(first_seq, last_seq + 1):
            claim(publisher_id, seq)

    def advance(self, publisher_id: int, seq: int) -> None:
        """Record that `seq` from `publisher_id` is in the log: the mark moves up (the numbers
        skipped become gaps) or `seq` stops being a gap; never moves a mark back."""
        self.claim(publisher_id, seq)

    def raise_mark(self, publisher_id: int, seq: int) -> None:
        """Raise the mark to `seq` without gaps: every number below it is or was held."""
        if seq > self._marks.get(publisher_id, 0):
            self._marks[publisher_id] = seq

    def _skipped(self, publisher_id: int, high: int, seq: int) -> None:
        skipped = seq - high - 1
        kept = min(skipped, GAP_LIMIT)
        gaps = self._gaps.get(publisher_id)
        if gaps is None:
            gaps = self._gaps[publisher_id] = array("Q")
        gaps.extend(range(seq - kept, seq))
        excess = len(gaps) - GAP_LIMIT
        if excess > 0:
            del gaps[:excess]
            self.forgotten_gaps += excess

    def high_water(self, publisher_id: int) -> int:
        """The highest sequence number seen from `publisher_id`, 0 if none."""
        return self._marks.get(publisher_id, 0)

    def gaps(self, publisher_id: int) -> tuple[int, ...]:
        """The gaps of `publisher_id`, ascending."""
        return tuple(self._gaps.get(publisher_id, ()))

    def gap_count(self) -> int:
        """How many gaps all publishers have."""
        return sum(map(len, self._gaps.values()))

    def gap_items(self) -> Iterator[tuple[int, array[int]]]:
        """(publisher id, its gaps ascending) of every publisher with gaps (do not mutate)."""
        return iter(self._gaps.items())

    def set_gaps(self, publisher_id: int, seqs: Iterable[int]) -> None:
        """Replace the gaps of `publisher_id` (recovery): those below its mark, the highest
        GAP_LIMIT of them."""
        high = self._marks.get(publisher_id, 0)
        kept = sorted({seq for seq in seqs if 0 < seq < high})[-GAP_LIMIT:]
        if kept:
            self._gaps[publisher_id] = array("Q", kept)
        else:
            self._gaps.pop(publisher_id, None)

    def clear_gaps(self) -> None:
        self._gaps.clear()

    def next_seq(self, publisher_id: int) -> int:
        """The sequence number the instance assigns next under `publisher_id` (L5)."""
        return self._marks.get(publisher_id, 0) + 1

    def merge(self, other: PublisherMarks) -> None:
        """Take the higher mark of each publisher, without gaps (the marks of removed
        segments: everything below them was held)."""
        for publisher_id, seq in other.items():
            self.raise_mark(publisher_id, seq)

    def items(self) -> Iterator[tuple[int, int]]:
        return iter(self._marks.items())

    def copy(self) -> PublisherMarks:
        clone = PublisherMarks()
        clone._marks = dict(self._marks)
        clone._gaps = {p: array("Q", gaps) for p, gaps in self._gaps.items()}
        clone.forgotten_gaps = self.forgotten_gaps
        return clone

    def __len__(self) -> int:
        return len(self._marks)

    def __contains__(self, publisher_id: object) -> bool:
        return publisher_id in self._marks

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PublisherMarks)
            and self._marks == other._marks
            and self._gaps == other._gaps
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PublisherMarks({len(self._marks)} publishers, {len(self._gaps)} with gaps)"


def _contains(gaps: array[int], seq: int) -> bool:
    index = bisect_left(gaps, seq)
    return index < len(gaps) and gaps[index] == seq
