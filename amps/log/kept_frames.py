"""The frames of a journal's latest commits, by txid, for the replication links (issue 8).

A link ships a publish as the frame its journal appended instead of encoding the record again.
The frames are kept a commit at a time, as the list the journal handed to its writer, so keeping
them costs nothing per record; a link's batch of consecutive txids is a slice of those lists
(`span`), and forgetting what every link has sent drops whole lists or cuts one. A dict entry
per frame, inserted on append and deleted once sent, cost the sender ~0.4 us a record.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping
from itertools import accumulate

__all__ = ["KeptFrames"]


class KeptFrames(Mapping[int, bytes]):
    """Runs of frames of consecutive txids, oldest first, up to `max_bytes` (0: keep none)."""

    __slots__ = ("_firsts", "_runs", "_sizes", "max_bytes", "size_bytes")

    def __init__(self, max_bytes: int = 0) -> None:
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self._firsts: list[int] = []  # each run's first txid, ascending
        self._runs: list[list[bytes]] = []
        self._sizes: list[int] = []  # each run's bytes

    def clear(self) -> None:
        self._firsts.clear()
        self._runs.clear()
        self._sizes.clear()
        self.size_bytes = 0

    def add_run(self, first_txid: int, frames: list[bytes]) -> None:
        """Keep `frames`, of txids `first_txid` on (after every txid kept so far), then forget
        the oldest runs while over `max_bytes`."""
        if not frames or not self.max_bytes:
            return
        if self._firsts and first_txid < self._firsts[-1] + len(self._runs[-1]):
            raise ValueError(f"frames from txid {first_txid} overlap those kept")
        size = sum(map(len, frames))
        self._firsts.append(first_txid)
        self._runs.append(frames)
        self._sizes.append(size)
        self.size_bytes += size
        if self.size_bytes > self.max_bytes:
            self._forget_oldest()

    def drop_before(self, txid: int) -> None:
        """Forget the frames of txids below `txid`."""
        firsts, runs = self._firsts, self._runs
        while runs and firsts[0] + len(runs[0]) <= txid:
            self._forget_first_run()
        if runs and firsts[0] < txid:
            cut = txid - firsts[0]
            dropped = sum(map(len, runs[0][:cut]))
            runs[0] = runs[0][cut:]  # a new list: the one added may still be read elsewhere
            firsts[0] = txid
            self._sizes[0] -= dropped
            self.size_bytes -= dropped

    def span(self, first_txid: int, count: int) -> list[bytes] | None:
        """The frames of txids `first_txid` .. `first_txid + count - 1`, or None unless all are
        kept."""
        index = bisect_right(self._firsts, first_txid) - 1
        if index < 0 or count <= 0:
            return None
        out: list[bytes] = []
        txid, left = first_txid, count
        firsts, runs = self._firsts, self._runs
        while left and index < len(runs):
            start = txid - firsts[index]
            if start < 0:
                return None  # a gap between runs (the journal keeps none: not expected)
            piece = runs[index][start : start + left]
            out += piece
            txid += len(piece)
            left -= len(piece)
            index += 1
        return out if not left else None

    def _forget_oldest(self) -> None:
        """Forget the oldest frames until within `max_bytes` (whole runs while they fit)."""
        while self.size_bytes > self.max_bytes and self._runs:
            excess = self.size_bytes - self.max_bytes
            if self._sizes[0] <= excess:
                self._forget_first_run()
                continue
            cut = bisect_left(list(accumulate(map(len, self._runs[0]))), excess) + 1
            self.drop_before(self._firsts[0] + cut)

    def _forget_first_run(self) -> None:
        del self._firsts[0], self._runs[0]
        self.size_bytes -= self._sizes.pop(0)

    # -- Mapping: what tests and the per-record fallback read ----------------------------------

    def __getitem__(self, txid: int) -> bytes:
        index = bisect_right(self._firsts, txid) - 1
        if index >= 0:
            offset = txid - self._firsts[index]
            run = self._runs[index]
            if offset < len(run):
                return run[offset]
        raise KeyError(txid)

    def __iter__(self) -> Iterator[int]:
        for first, run in zip(self._firsts, self._runs, strict=True):
            yield from range(first, first + len(run))

    def __len__(self) -> int:
        return sum(map(len, self._runs))
