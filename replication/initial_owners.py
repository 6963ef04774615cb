"""The initial owner of each message of one replicated queue, as runs in txid order (issue 9,
Q16, R2). [core]

A message enters owned by its initial owner at epoch 0 (`Queue`: its origin; `GroupLocalQueue`:
the `InitialOwner`), and most never move. Publishes of one origin arrive in runs (a group
commit, a replicated batch), so a few (first txid, owner) pairs describe every message: a
snapshot stores them, and the ownership of the messages no record moved, instead of one owner
per message (`replication/queue_snapshot.py`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence


class InitialOwners:
    """Runs of (first txid, initial owner), txids increasing. No I/O, no clock."""

    def __init__(self, starts: Sequence[int] = (), owners: Sequence[str] = ()) -> None:
        assert len(starts) == len(owners)
        self.starts: array[int] = array("q", starts)
        self.owners: list[str] = list(owners)
        # A message older than the newest run (never, when publishes come in log order):
        # runs cannot place it, so a snapshot stores none and a restart replays the log.
        self.disordered = False
        self.last_txid = self.starts[-1] if self.starts else -1

    def note(self, txid: int, owner: str) -> None:
        """A message entered with `owner` (the first of a run of them, or any of it)."""
        if txid <= self.last_txid:
            self.disordered = True
            return
        self.last_txid = txid
        owners = self.owners
        if not owners or owners[-1] != owner:
            self.starts.append(txid)
            owners.append(owner)

    def prune(self, first_txid: int) -> None:
        """Forget the runs that end before `first_txid` (the oldest message still held)."""
        drop = bisect_right(self.starts, first_txid) - 1
        if drop > 0:
            del self.starts[:drop]
            del self.owners[:drop]

    def runs_over(self, txids: Sequence[int]) -> list[tuple[int, str]]:
        """(count, owner) of the increasing `txids`, run by run; ValueError if the runs do
        not cover them."""
        if not txids:
            return []
        starts = self.starts
        if self.disordered or not starts or txids[0] < starts[0]:
            raise ValueError("the initial owners do not cover the queue's messages")
        first = bisect_right(starts, txids[0]) - 1
        runs: list[tuple[int, str]] = []
        at = 0
        for index in range(first, len(starts)):
            end = len(txids) if index + 1 == len(starts) else bisect_left(txids, starts[index + 1])
            if end > at:
                runs.append((end - at, self.owners[index]))
                at = end
        return runs
