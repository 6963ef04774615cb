"""Bookmark -> txid lookup for acks by bookmark (Q10), kept compact.

A publisher's sequence numbers increase in log order (L2, L4), so each publisher keeps two
parallel arrays sorted by seq and a lookup is a bisect (or one subtraction while the
publisher's newest seqs in this queue have no gaps): 16 bytes per message. A seq that
arrives out of order (rare: a de-duplication gap filled by replication after later seqs,
amps.log.dedup) falls back to a small dict.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import compress, islice
from operator import lt, ne

from amps.queue.bulk import select, stretch_mask
from amps.queue.columns import Column, ColumnFactory, as_array, extend, memory_columns, tail


class PublisherRun:
    """One publisher's seqs and txids, both increasing, as two parallel columns."""

    __slots__ = ("seqs", "txids")

    def __init__(self, seqs: Column, txids: Column) -> None:
        self.seqs = seqs
        self.txids = txids


class BookmarkIndex:
    """Maps (publisher_id, seq) to txid for the messages the queue still tracks."""

    def __init__(self, columns: ColumnFactory = memory_columns) -> None:
        self.columns = columns
        self._runs: dict[int, PublisherRun] = {}
        self._max_seq: dict[int, int] = {}
        self._unordered: dict[tuple[int, int], int] = {}
        self.entry_count = 0

    def add(self, publisher_id: int, seq: int, txid: int) -> None:
        """Index a new message."""
        self.entry_count += 1
        max_seq = self._max_seq
        last = max_seq.get(publisher_id)
        if last is not None and seq <= last:
            self._unordered[(publisher_id, seq)] = txid
            return
        max_seq[publisher_id] = seq
        run = self._runs.get(publisher_id)
        if run is None:
            run = self._runs[publisher_id] = self.new_run()
        run.seqs.append(seq)
        run.txids.append(txid)

    def add_many(self, publisher_ids: list[int], seqs: list[int], txids: list[int]) -> None:
        """`add` of each message in turn; each publisher's increasing seqs in bulk (usual).

        Several publishers in one batch (a replicated queue has one per origin) are split per
        publisher in C: `add` files each entry under its own publisher only, so the order
        between publishers does not change the result.
        """
        count = len(txids)
        if not count:
            return
        first = publisher_ids[0]
        if publisher_ids.count(first) == count:
            self._add_run(first, seqs, txids)
            return
        distinct = dict.fromkeys(publisher_ids)  # first-seen order, as `add` creates runs
        if len(distinct) > _BULK_PUBLISHERS:
            for publisher_id, seq, txid in zip(publisher_ids, seqs, txids, strict=True):
                self.add(publisher_id, seq, txid)
            return
        for publisher_id in distinct:
            mask = bytes(map(publisher_id.__eq__, publisher_ids))
            self._add_run(publisher_id, list(compress(seqs, mask)), list(compress(txids, mask)))

    def _add_run(self, publisher_id: int, seqs: list[int], txids: list[int]) -> None:
        """`add` of each of one publisher's entries in turn, in bulk when its seqs increase."""
        last = self._max_seq.get(publisher_id)
        if (last is not None and seqs[0] <= last) or not all(map(lt, seqs, islice(seqs, 1, None))):
            for seq, txid in zip(seqs, txids, strict=True):
                self.add(publisher_id, seq, txid)
            return
        run = self._runs.get(publisher_id)
        if run is None:
            run = self._runs[publisher_id] = self.new_run()
        self.entry_count += len(txids)
        self._max_seq[publisher_id] = seqs[-1]
        extend(run.seqs, seqs)
        extend(run.txids, txids)

    def find(self, publisher_id: int, seq: int) -> int | None:
        """The txid of the bookmark, or None if it is not indexed."""
        run = self._runs.get(publisher_id)
        if run is not None:
            seqs = run.seqs
            # Counted from the newest entry: acks name recent messages, and the newest seqs
            # stay dense after compaction squeezed out older holes.
            i = len(seqs) - 1 - (seqs[-1] - seq)
            if not (0 <= i < len(seqs) and seqs[i] == seq):
                i = bisect_left(seqs, seq)
            if i < len(seqs) and seqs[i] == seq:
                return run.txids[i]
        if not self._unordered:
            return None
        return self._unordered.get((publisher_id, seq))

    def find_many(self, bookmarks: Sequence[tuple[int, int]]) -> list[int | None]:
        """`find` of each bookmark, in order (the run is looked up once per publisher change)."""
        if len(bookmarks) >= _BULK_FIND:
            in_runs = self._find_in_runs(bookmarks)
            if in_runs is not None:
                return in_runs
        found: list[int | None] = []
        append = found.append
        runs = self._runs
        unordered = self._unordered
        publisher = None
        seqs: Column | None = None
        txids: Column | None = None
        top = last_seq = 0
        for publisher_id, seq in bookmarks:
            if publisher_id != publisher:
                publisher = publisher_id
                run = runs.get(publisher_id)
                seqs = txids = None
                if run is not None:
                    seqs, txids = run.seqs, run.txids
                    top = len(seqs) - 1
                    last_seq = seqs[top]
            if seqs is not None:
                assert txids is not None
                i = top - (last_seq - seq)  # as in `find`: counted from the newest entry
                if not (0 <= i <= top and seqs[i] == seq):
                    i = bisect_left(seqs, seq)
                if i <= top and seqs[i] == seq:
                    append(txids[i])
                    continue
            append(unordered.get((publisher_id, seq)) if unordered else None)
        return found

    def _find_in_runs(self, bookmarks: Sequence[tuple[int, int]]) -> list[int | None] | None:
        """`find_many` when each publisher's part of `bookmarks` is a stretch of increasing seqs
        all in its run and close together there (a replicated removal's acks, mostly): one
        pass in C per part. None when a part is not (the caller looks each up)."""
        publishers, seqs = zip(*bookmarks, strict=True)
        changes = bytes(map(ne, publishers, islice(publishers, 1, None)))  # 1: a new part next
        found: list[int | None] = []
        start, count = 0, len(publishers)
        while start < count:
            end = changes.find(1, start) + 1 or count
            run = self._runs.get(publishers[start])
            txids = None if run is None else _stretch(run, seqs[start:end])
            if txids is None:
                return None
            found += txids
            start = end
        return found

    def seen(self, publisher_id: int, seq: int) -> bool:
        """True if a message at or after this bookmark of its publisher was ever indexed."""
        last = self._max_seq.get(publisher_id)
        return last is not None and seq <= last

    def compact(self, keep: Callable[[int], bool], below: int = 0) -> None:
        """Drop every entry below txid `below` and every other one `keep` rejects.

        A run's txids increase, so the entries below `below` are a prefix cut without calls.
        `keep` is called per remaining entry: pass a set's `__contains__` to keep it in C.
        """
        count = 0
        for publisher_id, run in list(self._runs.items()):
            start = bisect_left(run.txids, below)
            mask = bytes(map(keep, tail(run.txids, start)))
            if 0 not in mask:  # the whole tail is kept: one buffer copy per column
                txids = as_array(run.txids, "q", start)
                seqs = as_array(run.seqs, "Q", start)
            else:
                txids = array("q", compress(tail(run.txids, start), mask))
                seqs = array("Q", compress(tail(run.seqs, start), mask))
            if not txids:
                del self._runs[publisher_id]
                continue
            self._runs[publisher_id] = self.new_run(seqs, txids)
            count += len(txids)
        self._unordered = {k: t for k, t in self._unordered.items() if t >= below and keep(t)}
        self.entry_count = count + len(self._unordered)

    def new_run(
        self, seqs: array[int] | None = None, txids: array[int] | None = None
    ) -> PublisherRun:
        """A run in this index's column storage, holding `seqs` and `txids` if given."""
        columns = self.columns
        if seqs is None or txids is None:
            return PublisherRun(columns("Q"), columns("q"))
        return PublisherRun(columns("Q", seqs), columns("q", txids))

    def load(
        self,
        runs: dict[int, PublisherRun],
        unordered: dict[tuple[int, int], int],
        max_seq: dict[int, int],
    ) -> None:
        """Install runs built in bulk (restore) into an empty index."""
        assert not self._runs
        assert not self._unordered
        assert not self.entry_count
        self._runs = runs
        self._unordered = unordered
        self._max_seq = max_seq
        self.entry_count = sum(len(r.txids) for r in runs.values()) + len(unordered)

    def export(self) -> tuple[dict[int, PublisherRun], dict[tuple[int, int], int]]:
        """The runs and the out-of-order entries (for snapshots; do not modify)."""
        return self._runs, self._unordered

    def items(self) -> list[tuple[int, int, int]]:
        """Every (txid, publisher_id, seq), in txid order (for snapshots)."""
        rows = [
            (txid, publisher_id, seq)
            for publisher_id, run in self._runs.items()
            for seq, txid in zip(run.seqs, run.txids, strict=True)
        ]
        rows.extend((t, p, s) for (p, s), t in self._unordered.items())
        rows.sort()
        return rows

    def nbytes(self) -> int:
        """Bytes held by the arrays (for the memory benchmark)."""
        return sum(16 * len(run.txids) for run in self._runs.values())


_BULK_PUBLISHERS = 16  # beyond this many in one batch, one `add` each
_BULK_FIND = 16  # from this many bookmarks on, `find_many` tries whole stretches of a run
_SPAN_SLACK = 4  # a stretch spans at most this many entries of its run per bookmark (+ 256)


def _stretch(run: PublisherRun, seqs: Sequence[int]) -> array[int] | None:
    """The txids of `seqs` (increasing, all in `run`, spanning few more entries than they
    are), in order; None otherwise, or when the run's columns are not in memory."""
    run_seqs, run_txids = run.seqs, run.txids
    if not isinstance(run_seqs, array) or not isinstance(run_txids, array):
        return None
    if not all(map(lt, seqs, islice(seqs, 1, None))):
        return None
    first = bisect_left(run_seqs, seqs[0])
    last = bisect_left(run_seqs, seqs[-1], first)
    if last >= len(run_seqs) or run_seqs[first] != seqs[0] or run_seqs[last] != seqs[-1]:
        return None
    if last - first >= _SPAN_SLACK * len(seqs) + 256:
        return None
    mask = stretch_mask(run_seqs, first, last, seqs)
    return None if mask is None else select(run_txids[first : last + 1], mask)
