"""A bounded cache of recent publish records by txid, so queue deliveries rarely read the journal.

Queues keep no second copy of a message body (Q3); this cache holds the newest records only and
falls back to a batched journal read, which also warms the cache for the records that follow.
"""

from __future__ import annotations

from collections import deque

from amps.log.journal import Journal
from amps.log.records import PublishRecord

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
READ_AHEAD_RECORDS = 256
# Measured with tracemalloc: a cached record costs ~300 bytes beyond its payload (the record
# object, its dict and deque entries).
RECORD_OVERHEAD_BYTES = 300


class RecordCache:
    """txid -> PublishRecord for the most recent records, bounded by payload bytes."""

    def __init__(self, journal: Journal, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._journal = journal
        self._records: dict[int, PublishRecord] = {}
        self._order: deque[int] = deque()
        self._bytes = 0
        self.max_bytes = max_bytes
        self.misses = 0

    def __len__(self) -> int:
        return len(self._records)

    def put(self, record: PublishRecord) -> None:
        if record.txid in self._records:
            return
        self._records[record.txid] = record
        self._order.append(record.txid)
        self._bytes += len(record.data) + RECORD_OVERHEAD_BYTES
        while self._bytes > self.max_bytes and self._order:
            old = self._records.pop(self._order.popleft(), None)
            if old is not None:
                self._bytes -= len(old.data) + RECORD_OVERHEAD_BYTES

    def get(self, txid: int) -> PublishRecord | None:
        """The record, from memory or the journal; None if txid is not a publish."""
        record = self._records.get(txid)
        if record is not None:
            return record
        self.misses += 1
        found = None
        for item in self._journal.read(txid, READ_AHEAD_RECORDS):
            if isinstance(item, PublishRecord):
                self.put(item)
                if item.txid == txid:
                    found = item
        return found
