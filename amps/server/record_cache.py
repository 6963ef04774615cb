"""A bounded cache of publish records by txid, so queue deliveries rarely read the journal.

Queues keep no second copy of a message body (Q3). The cache has two parts, both first in,
first out and bounded by payload bytes:

- the *recent* part holds the newest durable publishes (`put`, from the commit path): while
  consumers keep up with publishers, every delivery is found here;
- the *read-ahead* part holds what a miss read from the journal: when consumers fall behind
  (a backlog larger than the recent part), a miss reads the next `READ_AHEAD_RECORDS` publishes
  in one go, and the deliveries that follow find them here. Read-ahead never evicts recent
  records: a single FIFO would let each read-ahead push out the oldest recent records, exactly
  the ones the consumers reach next, so a lagging queue would miss on every message until the
  publishers stopped long enough.

A read stops before the oldest recent record (it is in memory already) and builds only the
publishes of the range (`SegmentReader.read_publishes`): queue removal records interleaved in
the log are checked, not decoded.

The replication links read every record in txid order, not only publishes: the newest queue
and transfer records appended here are kept too (`others`, the last `max_other_records`), so a
link that keeps up reads none of them back from the journal (a read from a removal record on
decodes every publish after it again: a fifth of a sync peer's CPU with a replicated queue).

Memory: at most `max_bytes` + `read_ahead_bytes` of payload plus ~RECORD_OVERHEAD_BYTES per
record: 32 MiB + 4 MiB by default, whatever the number of queues or messages (one read brings
at most half the read-ahead budget, or one message if it is larger).

Sizing, measured with `bench.bench_queues --only e2e` (1 KB messages, the publisher far ahead of
four consumers): 120,000 messages, 301 misses (77,000 records read back) with 32 MiB; 169 with
64 MiB, for the same CPU per message and 35 MB more RSS. The quick run (50,000) misses 25-45
times. A miss costs ~5 us per record read on the bench machine.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from amps.errors import CorruptRecord
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueRecord, TransferRecord

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_READ_AHEAD_BYTES = 4 * 1024 * 1024
READ_AHEAD_RECORDS = 256
# Measured with tracemalloc: a cached record costs ~300 bytes beyond its payload (the record
# object, its dict and deque entries).
RECORD_OVERHEAD_BYTES = 300
# Txids found damaged, remembered so a delivery retried later does not read the journal again.
MAX_UNREADABLE = 4096
# Queue and transfer records kept for the links: one per commit and queue or so (a removal
# names a step's acks), a few KiB at most each.
DEFAULT_MAX_OTHER_RECORDS = 2048


class RecordCache:
    """txid -> PublishRecord for the most recent records and the last ones read, bounded."""

    def __init__(
        self,
        journal: Journal,
        max_bytes: int = DEFAULT_MAX_BYTES,
        read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES,
        on_damage: Callable[[CorruptRecord, str], object] | None = None,
        max_other_records: int = DEFAULT_MAX_OTHER_RECORDS,
    ) -> None:
        self._journal = journal
        self._on_damage = on_damage
        self._unreadable: set[int] = set()
        # One dict for both parts (one look-up per hit); each txid is in one part's order.
        self.records: dict[int, PublishRecord] = {}
        self._recent: deque[int] = deque()
        self._recent_bytes = 0
        self._read: deque[int] = deque()
        self._read_bytes = 0
        self.max_bytes = max_bytes
        self.read_ahead_bytes = read_ahead_bytes
        self.misses = 0
        # txid -> the newest queue and transfer records appended here, oldest first.
        self.others: dict[int, QueueRecord | TransferRecord] = {}
        self._others_order: deque[int] = deque()
        self.max_other_records = max_other_records

    def __len__(self) -> int:
        return len(self.records)

    def put(self, record: PublishRecord) -> None:
        """A newly durable publish."""
        records = self.records
        txid = record.txid
        if txid in records:
            return
        records[txid] = record
        order = self._recent
        order.append(txid)
        self._recent_bytes += len(record.data) + RECORD_OVERHEAD_BYTES
        if self._recent_bytes > self.max_bytes:
            while self._recent_bytes > self.max_bytes and order:
                old = records.pop(order.popleft(), None)
                if old is not None:
                    self._recent_bytes -= len(old.data) + RECORD_OVERHEAD_BYTES

    def put_other(self, record: QueueRecord | TransferRecord) -> None:
        """A queue or transfer record as appended (txid assigned), for the links."""
        order = self._others_order
        self.others[record.txid] = record
        order.append(record.txid)
        if len(order) > self.max_other_records:
            self.others.pop(order.popleft(), None)

    def get(self, txid: int) -> PublishRecord | None:
        """The record, from memory or the journal; None if txid is not a publish."""
        record = self.records.get(txid)
        if record is not None:
            return record
        return self._miss(txid)

    def is_unreadable(self, txid: int) -> bool:
        """Whether txid was found damaged (already reported)."""
        return txid in self._unreadable

    def _miss(self, txid: int) -> PublishRecord | None:
        if txid in self._unreadable:
            return None
        self.misses += 1
        upper = self._journal.durable_txid
        if self._recent and txid < self._recent[0]:
            upper = self._recent[0] - 1  # the rest is in memory already
        try:
            found = self._journal.read_publishes(
                txid, upper, READ_AHEAD_RECORDS, self.read_ahead_bytes // 2
            )
        except CorruptRecord as exc:
            found = self._read_around_damage(txid, exc)
        records = self.records
        order = self._read
        added = 0
        for item in found:
            if item.txid not in records:
                records[item.txid] = item
                order.append(item.txid)
                added += len(item.data) + RECORD_OVERHEAD_BYTES
        self._read_bytes += added
        # Evict the oldest read-ahead, never what this read just brought in.
        keep = len(found)
        while self._read_bytes > self.read_ahead_bytes and len(order) > keep:
            old = records.pop(order.popleft(), None)
            if old is not None:
                self._read_bytes -= len(old.data) + RECORD_OVERHEAD_BYTES
        if found and found[0].txid == txid:
            return found[0]
        return None

    def _read_around_damage(self, txid: int, error: CorruptRecord) -> list[PublishRecord]:
        """`txid` itself lies in damage (a read stops before damage further on, and steps over
        damage before it): report it once, and remember the txid so that a delivery retried
        later gets None without reading the journal again."""
        if self._on_damage is not None:
            self._on_damage(error, "a queue delivery (record cache miss)")
        if len(self._unreadable) >= MAX_UNREADABLE:
            self._unreadable.clear()
        self._unreadable.add(txid)
        return []
