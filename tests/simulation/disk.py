"""One instance's transaction log on a simulated disk (issue 9's simulation).

Appends are buffered until `sync` (the fsync of a group commit); `crash` keeps only what was
synced, as a power cut would. Records carry their origin (instance, group, txid there) like
the journal's, and a replicated record is appended under a local txid only once: a publish is
de-duplicated by publisher marks (L4), any other record by its origin identity, so a record
that reaches an instance on two paths is neither applied nor forwarded twice (R9). The links
read it through `replication.link_core.LogView`.
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
        if isinstance(record, PublishRecord):
            return self.marks.is_duplicate(record.publisher_id, record.seq)
        return (record.origin_instance, record.origin_txid) in self._held

    def _hold(self, record: Record) -> None:
        self.records.append(record)
        self._held.add((record.origin_instance, record.origin_txid))
        if isinstance(record, PublishRecord):
            self.marks.advance(record.publisher_id, record.seq)

    def holds_durably(self, key: tuple[int, int]) -> bool:
        """Whether a publish of this (publisher id, seq) is in the durable part of the log."""
        return any(
            isinstance(r, PublishRecord) and (r.publisher_id, r.seq) == key
            for r in self.records[: self.durable]
        )

    def sync(self) -> None:
        """fsync: everything appended so far survives a crash."""
        self.durable = self.last_txid

    def crash(self) -> None:
        """Lose what was not synced; rebuild the de-duplication marks from what is left."""
        del self.records[self.durable :]
        self.marks = PublisherMarks()
        self._held.clear()
        for record in self.records:
            self._held.add((record.origin_instance, record.origin_txid))
            if isinstance(record, PublishRecord):
                self.marks.advance(record.publisher_id, record.seq)
