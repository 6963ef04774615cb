"""Publisher sequence high-water marks for duplicate detection (L4, L5). [core]"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["PublisherMarks"]


class PublisherMarks:
    """Highest sequence number seen per publisher id; sequence numbers start at 1."""

    __slots__ = ("_marks",)

    def __init__(self, marks: Iterable[tuple[int, int]] = ()) -> None:
        self._marks: dict[int, int] = {}
        for publisher_id, seq in marks:
            self.advance(publisher_id, seq)

    def is_duplicate(self, publisher_id: int, seq: int) -> bool:
        """L4: a sequence number equal to or lower than the highest seen is a duplicate."""
        return seq <= self._marks.get(publisher_id, 0)

    def claim(self, publisher_id: int, seq: int) -> bool:
        """`is_duplicate` then `advance` in one look-up: False for a duplicate (L4), else the
        mark moves to `seq` and True."""
        marks = self._marks
        if seq <= marks.get(publisher_id, 0):
            return False
        marks[publisher_id] = seq
        return True

    def advance(self, publisher_id: int, seq: int) -> None:
        """Record that `seq` from `publisher_id` is in the log; never moves a mark back."""
        if seq > self._marks.get(publisher_id, 0):
            self._marks[publisher_id] = seq

    def high_water(self, publisher_id: int) -> int:
        """The highest sequence number seen from `publisher_id`, 0 if none."""
        return self._marks.get(publisher_id, 0)

    def next_seq(self, publisher_id: int) -> int:
        """The sequence number the instance assigns next under `publisher_id` (L5)."""
        return self._marks.get(publisher_id, 0) + 1

    def merge(self, other: PublisherMarks) -> None:
        """Take the higher mark of each publisher (marks arriving through replication)."""
        for publisher_id, seq in other.items():
            self.advance(publisher_id, seq)

    def items(self) -> Iterator[tuple[int, int]]:
        return iter(self._marks.items())

    def copy(self) -> PublisherMarks:
        clone = PublisherMarks()
        clone._marks = dict(self._marks)
        return clone

    def __len__(self) -> int:
        return len(self._marks)

    def __contains__(self, publisher_id: object) -> bool:
        return publisher_id in self._marks

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublisherMarks) and self._marks == other._marks

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PublisherMarks({len(self._marks)} publishers)"
