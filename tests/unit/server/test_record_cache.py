"""RecordCache: recent publishes from memory, misses read ahead from the journal without
pushing the recent part out, both parts bounded."""

from __future__ import annotations

from pathlib import Path

from amps.errors import CorruptRecord
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueAction, QueueRecord
from amps.log.storage import iter_keys
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


def _damage_record(directory: Path, txid: int) -> tuple[str, int]:
    """Flip a byte inside the record `txid`; its segment's name and the record's offset."""
    (segment,) = sorted(directory.glob("*.journal"))
    offset = next(offset for offset, _size, found, *_ in iter_keys(segment) if found == txid)
    data = bytearray(segment.read_bytes())
    data[offset + 40] ^= 0xFF
    segment.write_bytes(bytes(data))
    return segment.name, offset


async def test_a_damaged_record_is_reported_once_and_the_others_still_read(tmp_path: Path) -> None:
    """Issue 11 item 1: a miss that meets damage reports it (segment, offset); the damaged
    record is None from then on, without another read; the records around it still read."""
    journal, publishes = await _journal(tmp_path, 40)
    await journal.close()
    damaged = publishes[20]
    segment, offset = _damage_record(tmp_path, damaged.txid)
    journal = Journal.open(tmp_path, segment_size_bytes=256 * 1024)
    reports: list[tuple[CorruptRecord, str]] = []
    cache = RecordCache(journal, max_bytes=0, on_damage=lambda e, r: reports.append((e, r)))
    # The read-ahead stops before the damage: nothing to report until the damaged one is asked.
    assert cache.get(publishes[0].txid) == publishes[0]
    assert cache.get(publishes[19].txid) == publishes[19]
    assert reports == []
    assert cache.get(damaged.txid) is None
    assert {(e.segment, e.offset) for e, _ in reports} == {(segment, offset)}
    assert cache.is_unreadable(damaged.txid)
    misses = cache.misses
    assert cache.get(damaged.txid) is None
    assert cache.misses == misses  # not read again
    # A read that starts before the damage (at the sparse index entry before its txid) steps
    # over it to the record asked for.
    assert cache.get(publishes[21].txid) == publishes[21]
    assert all(cache.get(r.txid) == r for r in publishes[21:])
    assert len(reports) == 1
    await journal.close()
