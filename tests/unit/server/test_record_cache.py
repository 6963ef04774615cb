"""RecordCache: recent publishes from memory, misses read ahead from the journal without
pushing the recent part out, both parts bounded."""

from __future__ import annotations

from pathlib import Path

from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueAction, QueueRecord
from amps.server.record_cache import READ_AHEAD_RECORDS, RECORD_OVERHEAD_BYTES, RecordCache

DATA = b"x" * 700
RECORD_BYTES = len(DATA) + RECORD_OVERHEAD_BYTES


async def _journal(directory: Path, count: int) -> tuple[Journal, list[PublishRecord]]:
    """`count` publishes, a removal record after every third one."""
    journal = Journal.open(directory, segment_size_bytes=256 * 1024)
    publishes = []
    for i in range(1, count + 1):
        record = journal.append_publish(
            topic="orders", data=DATA, publisher_id=7, seq=i, timestamp_us=1_000 + i,
            correlation_id="c" if i % 2 else "",
        )  # fmt: skip
        assert isinstance(record, PublishRecord)
        publishes.append(record)
        if i % 3 == 0:
            journal.append(QueueRecord(0, 0, "q", QueueAction.ACK, txids=(record.txid,)))
    await journal.commit()
    return journal, publishes


async def test_recent_records_are_served_from_memory(tmp_path: Path) -> None:
    journal, publishes = await _journal(tmp_path, 50)
    cache = RecordCache(journal)
    for record in publishes:
        cache.put(record)
    assert all(cache.get(r.txid) is r for r in publishes)
    assert cache.misses == 0
    await journal.close()


async def test_a_miss_reads_ahead_and_returns_what_the_journal_holds(tmp_path: Path) -> None:
    journal, publishes = await _journal(tmp_path, 1000)
    cache = RecordCache(journal, max_bytes=0, read_ahead_bytes=10**9)
    for record in publishes:
        assert cache.get(record.txid) == record
    # One read per READ_AHEAD_RECORDS publishes; removal records are not publishes.
    assert cache.misses == -(-len(publishes) // READ_AHEAD_RECORDS)
    removal_txid = publishes[2].txid + 1
    assert cache.get(removal_txid) is None
    assert cache.get(journal.last_txid + 1) is None
    await journal.close()


async def test_read_ahead_never_pushes_out_recent_records(tmp_path: Path) -> None:
    """A lagging queue: misses at the old end, the newest records stay in memory for later."""
    journal, publishes = await _journal(tmp_path, 2000)
    recent = publishes[-500:]
    cache = RecordCache(journal, max_bytes=500 * RECORD_BYTES, read_ahead_bytes=600 * RECORD_BYTES)
    for record in publishes:
        cache.put(record)
    assert len(cache) == 500
    for record in publishes[:-500]:
        assert cache.get(record.txid) == record
    misses = cache.misses
    # Reads stop before the oldest recent record (it is in memory), and evicted none of them.
    assert misses == -(-1500 // READ_AHEAD_RECORDS)
    assert all(cache.get(r.txid) is r for r in recent)
    assert cache.misses == misses
    # The read-ahead part stays bounded (it keeps at least the last read).
    assert len(cache) <= 500 + 600
    await journal.close()


async def test_one_read_brings_at_most_half_the_read_ahead_budget(tmp_path: Path) -> None:
    """Large messages: a miss reads fewer records, so the read-ahead part stays bounded."""
    journal, publishes = await _journal(tmp_path, 300)
    cache = RecordCache(journal, max_bytes=0, read_ahead_bytes=20 * len(DATA))
    assert cache.get(publishes[0].txid) == publishes[0]
    assert len(cache) == 10
    for record in publishes:
        assert cache.get(record.txid) == record
    assert cache.misses == 30
    assert len(cache) <= 20
    await journal.close()


async def test_recent_part_is_bounded_by_bytes(tmp_path: Path) -> None:
    journal, publishes = await _journal(tmp_path, 100)
    cache = RecordCache(journal, max_bytes=10 * RECORD_BYTES)
    for record in publishes:
        cache.put(record)
    assert len(cache) == 10
    assert cache.get(publishes[-1].txid) is publishes[-1]
    assert cache.misses == 0
    assert cache.get(publishes[0].txid) == publishes[0]
    assert cache.misses == 1
    await journal.close()
