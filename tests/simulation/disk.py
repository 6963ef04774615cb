"""One instance's transaction log on a simulated disk (issue 9's simulation).

Appends are buffered until `sync` (the fsync of a group commit); `crash` keeps only what was
synced, as a power cut would. Records carry their origin (instance, group, txid there) like
the journal's, and a replicated record is appended under a local txid only once: a publish is
de-duplicated by publisher marks (L4, with their gaps: a seq replicated after a later one is
still taken), any other record by its origin identity, so a record that reaches an instance on
two paths is neither applied nor forwarded twice (R9). Apart from the marks, the disk knows
exactly which publishes it holds (`holds_publish`), so the checks test holding itself, not the
marks' opinion of it. The links read it through `replication.link_core.LogView`.
"""

from __future__ import annotations

from dataclasses import replace

from amps.log.dedup import PublisherMarks
from amps.log.records import PublishRecord, Record


class SimDisk:
    """A log whose first `durable_txid` records survive a crash."""

    def __init__(self, instance: str, group: str) -> None:
        self.instance = instance
        self.group = group
        self.records: list[Record] = []
        self.durable = 0
        self.marks = PublisherMarks()
        self._held: set[tuple[str, int]] = set()  # (origin, origin txid) of every record
        self._publishes: dict[tuple[int, int], int] = {}  # (publisher id, seq) -> local txid

    # -- LogView --------------------------------------------------------------------------

    @property
    def first_txid(self) -> int:
        return 1

    @property
    def durable_txid(self) -> int:
        return self.durable

    def read(self, from_txid: int, max_records: int) -> list[Record]:
        start = max(from_txid, 1) - 1
        return self.records[start : min(start + max_records, self.durable)]

    # -- writing --------------------------------------------------------------------------

    @property
    def last_txid(self) -> int:
        return len(self.records)

    def append(self, record: Record) -> Record:
        """A record written here (txid 0): stamped with the next txid and this origin."""
        assert record.txid == 0
        assert not record.origin_instance
        txid = self.last_txid + 1
        stamped = replace(
            record, txid=txid, origin_instance=self.instance, origin_group=self.group,
            origin_txid=txid,
        )  # fmt: skip
        self._hold(stamped)
        return stamped

    def append_replicated(self, record: Record) -> Record | None:
        """A peer's record under the next local txid, origin kept; None if already held."""
        if self.holds(record):
            return None
        stamped = replace(record, txid=self.last_txid + 1)
        self._hold(stamped)
        return stamped

    def holds(self, record: Record) -> bool:
        """The append path's decision: a publish by the marks (L4), any other by origin."""
        if isinstance(record, PublishRecord):
            return self.marks.is_duplicate(record.publisher_id, record.seq)
        return (record.origin_instance, record.origin_txid) in self._held

    def _hold(self, record: Record) -> None:
        self.records.append(record)
        self._held.add((record.origin_instance, record.origin_txid))
        if isinstance(record, PublishRecord):
            key = (record.publisher_id, record.seq)
            assert key not in self._publishes, f"{self.instance} logs publish {key} twice"
            self._publishes[key] = record.txid
            self.marks.advance(*key)

    def holds_publish(self, key: tuple[int, int]) -> bool:
        """Whether the log holds a publish of this (publisher id, seq): exactly, not by marks."""
        return key in self._publishes

    def holds_durably(self, key: tuple[int, int]) -> bool:
        """Whether a publish of this (publisher id, seq) is in the durable part of the log."""
        txid = self._publishes.get(key)
        return txid is not None and txid <= self.durable

    def sync(self) -> None:
        """fsync: everything appended so far survives a crash."""
        self.durable = self.last_txid

    def crash(self) -> None:
        """Lose what was not synced; rebuild the de-duplication marks (and their gaps) from
        what is left, in log order, as the journal's recovery does."""
        records = self.records[: self.durable]
        self.records = []
        self.marks = PublisherMarks()
        self._held.clear()
        self._publishes.clear()
        for record in records:
            self._hold(record)
