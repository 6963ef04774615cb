"""Which journal segments a lifecycle action may take, and what holds the others back. [core]

Rule 1: the newest (active) segment is never touched.
Rule 2: a segment qualifies by age once its newest record is older than `now - age`, and, when
an action names a segment (the admin path), only if it is that segment or an older one.
Rule 3: removal never takes a segment something still needs. A hold names the oldest txid its
holder needs, and it needs everything after too (a queue's oldest unacknowledged message, what a
replication destination has not acknowledged): so removal always takes a prefix of the log, the
log stays contiguous (recovery rule 3), and each segment kept back names its holders.
Rule 4: archive and compress keep a segment readable, so holds do not stop them; each takes
only segments it has not already taken.
Publisher de-duplication is not a hold: its high-water marks are kept apart before a removal
(see `Journal.remove_segments`), so they survive the segments they came from.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["ACTIONS", "Action", "Hold", "SegmentState", "Selection", "select_segments"]

Action = Literal["remove", "archive", "compress"]
ACTIONS: tuple[Action, ...] = ("remove", "archive", "compress")


@dataclass(frozen=True, slots=True)
class Hold:
    """`holder` (e.g. "queue work") still needs every record from `oldest_needed_txid` on."""

    holder: str
    oldest_needed_txid: int


@dataclass(frozen=True, slots=True)
class SegmentState:
    """What the lifecycle knows of one segment."""

    first_txid: int
    last_txid: int  # first_txid - 1 when empty
    last_timestamp_us: int
    size_bytes: int
    archived: bool = False
    compressed: bool = False


@dataclass(frozen=True, slots=True)
class Selection:
    """The segments an action takes (oldest first), and those it may not take, with holders."""

    chosen: tuple[SegmentState, ...]
    held: tuple[tuple[SegmentState, tuple[str, ...]], ...] = ()

    @property
    def chosen_bytes(self) -> int:
        return sum(s.size_bytes for s in self.chosen)

    def held_by(self) -> dict[str, int]:
        """Holder -> how many segments it keeps back."""
        counts: dict[str, int] = {}
        for _segment, holders in self.held:
            for holder in holders:
                counts[holder] = counts.get(holder, 0) + 1
        return counts


def select_segments(
    action: Action,
    segments: Sequence[SegmentState],
    holds: Sequence[Hold],
    *,
    now_us: int,
    age_us: int,
    up_to_first_txid: int | None = None,
) -> Selection:
    """The segments `action` takes now; `segments` oldest first, the last one active."""
    assert age_us >= 0, age_us
    for older, newer in itertools.pairwise(segments):
        assert older.last_txid + 1 == newer.first_txid, (older, newer)
    cutoff_us = now_us - age_us
    chosen: list[SegmentState] = []
    held: list[tuple[SegmentState, tuple[str, ...]]] = []
    for segment in segments[:-1]:  # Rule 1
        if segment.last_timestamp_us > cutoff_us:
            break  # Rule 2: later segments are younger still
        if up_to_first_txid is not None and segment.first_txid > up_to_first_txid:
            break
        if action == "remove":
            holders = tuple(
                sorted({h.holder for h in holds if h.oldest_needed_txid <= segment.last_txid})
            )
            if holders:
                held.append((segment, holders))
                continue
            assert not held  # Rule 3: a hold needs every later segment too
            chosen.append(segment)
        elif action == "archive":
            if not segment.archived:
                chosen.append(segment)
        elif not segment.compressed:
            chosen.append(segment)
    return Selection(tuple(chosen), tuple(held))
