"""How far this instance is behind each origin instance, in messages and seconds. [core]

A sender's heartbeats carry its heads, for every origin whose records are in its durable log
the newest one (the origin's txid, and the sender's own txid of it), and how far the link's
receiver holds the sender's log (`acked_through_txid`: everything the receiver takes, up to
that txid of the sender's). The receiver is behind origin O over peer P while P's head for O
lies beyond that point and it holds less of O, from any peer, than the head: then

- messages behind = the head's origin txid less the origin txid of the last record of O held
  here, counted in the origin's txids (an estimate while behind when the destination takes
  only some of O's records or O's log interleaves records of other origins; 0 once caught up);
- seconds behind = the age of the oldest head of O heard and not yet held here (0 once caught
  up). Under steady traffic every heartbeat finds a few records missing, each held within
  milliseconds: the age stays that small instead of running from the first heartbeat that
  ever found this instance behind.

A record's origin is never behind itself. Heads come at the heartbeat interval, so a new
backlog shows within one interval, and the count falls as records arrive, between heartbeats.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from replication.frames import OriginPosition
from replication.positions import PositionBook

# Replicated txid ranges kept above this instance's own head: contiguous ranges merge, so two
# ranges have a local record between them and the walk back from the durable txid stops at
# the first such gap; ranges below the own head are dropped as it moves on. A safety bound.
MAX_RANGES = 4096
# Heads remembered per origin for the age of the oldest not yet held. When full, the newest
# entry takes the newer head and keeps its earlier instant: an age can only look older.
MAX_HEADS_HEARD = 1024


@dataclass(frozen=True, slots=True)
class OriginLag:
    """One origin at one reading: how far this instance is behind it."""

    origin: str
    messages_behind: int
    seconds_behind: float
    held_origin_txid: int


class OriginHeads:
    """The newest durable record of each origin in this instance's log (what heartbeats send).

    This instance's own head is its newest durable txid that is not a peer's record: the
    local log interleaves records replicated here (`replicated` names their txid ranges)."""

    def __init__(self, local: str = "") -> None:
        self.local = local
        self._heads: dict[str, OriginPosition] = {}
        self._replicated: deque[tuple[int, int]] = deque()  # (first, last) txids, ascending

    def replicated(self, first_txid: int, last_txid: int) -> None:
        """Local txids first..last hold peers' records (appended in one call)."""
        if first_txid > last_txid:
            return
        ranges = self._replicated
        if ranges and ranges[-1][1] + 1 == first_txid:
            ranges[-1] = (ranges[-1][0], last_txid)  # an instance that only receives: one range
        else:
            ranges.append((first_txid, last_txid))
            if len(ranges) > MAX_RANGES:
                ranges.popleft()

    def durable(self, durable_txid: int) -> None:
        """The local log is durable through `durable_txid`: move this instance's own head."""
        own = durable_txid
        for first, last in reversed(self._replicated):
            if first <= own <= last:
                own = first - 1
            elif last < own:
                break
        current = self._heads.get(self.local)
        if own > 0 and (current is None or own > current.origin_txid):
            self._heads[self.local] = OriginPosition(self.local, own, own)
        # Ranges below the durable own head no longer decide anything.
        ranges = self._replicated
        while ranges and ranges[0][1] < own:
            ranges.popleft()

    def advance(self, head: OriginPosition) -> None:
        """A record of `head.origin` (and all its earlier ones here) is durable at
        `head.upstream_txid` of the local log."""
        current = self._heads.get(head.origin)
        if current is None or head.origin_txid > current.origin_txid:
            self._heads[head.origin] = head

    def positions(self) -> tuple[OriginPosition, ...]:
        return tuple(self._heads[origin] for origin in sorted(self._heads))


class OriginLags:
    """Per origin, how far this instance is behind: from its peers' heads and its book."""

    def __init__(self, local: str, book: PositionBook) -> None:
        self.local = local
        self._book = book
        # peer -> (its heads by origin, the txid of its log this instance holds through)
        self._heard: dict[str, tuple[dict[str, OriginPosition], int]] = {}
        # origin -> (head origin txid, first heard at), ascending; dropped once held
        self._unheld: dict[str, deque[tuple[int, int]]] = {}

    def heard(
        self, peer: str, heads: tuple[OriginPosition, ...], acked_through_txid: int, now_ms: int
    ) -> None:
        """A heartbeat from `peer`: its heads and how far it knows this instance holds its log."""
        self._heard[peer] = ({h.origin: h for h in heads}, acked_through_txid)
        for head in heads:
            if head.origin == self.local or head.upstream_txid <= acked_through_txid:
                continue
            heard = self._unheld.setdefault(head.origin, deque())
            if heard and head.origin_txid <= heard[-1][0]:
                continue
            if len(heard) >= MAX_HEADS_HEARD:
                heard[-1] = (head.origin_txid, heard[-1][1])
            else:
                heard.append((head.origin_txid, now_ms))

    def read(self, now_ms: int) -> list[OriginLag]:
        """Every origin heard of or held from, by name, at `now_ms`."""
        held: dict[str, int] = {}
        for _peer, position in self._book.entries():
            held[position.origin] = max(held.get(position.origin, 0), position.origin_txid)
        behind: dict[str, int] = {}
        for heads, acked_through in self._heard.values():
            for origin, head in heads.items():
                if origin == self.local:
                    continue
                count = 0
                if head.upstream_txid > acked_through:
                    count = max(0, head.origin_txid - held.get(origin, 0))
                behind[origin] = max(behind.get(origin, 0), count)
        out = []
        for origin in sorted(held.keys() | behind.keys()):
            if origin == self.local:
                continue
            count = behind.get(origin, 0)
            heard = self._unheld.get(origin)
            if heard is not None:
                if not count:
                    heard.clear()
                while heard and heard[0][0] <= held.get(origin, 0):
                    heard.popleft()
            age_ms = now_ms - heard[0][1] if count and heard else 0
            out.append(OriginLag(origin, count, max(0, age_ms) / 1000, held.get(origin, 0)))
        return out
