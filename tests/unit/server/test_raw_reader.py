"""amps.log.raw reads exactly the publishes Journal.read returns, as raw fields (for replay)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amps.errors import CorruptRecord
from amps.log.journal import Journal
from amps.log.raw import RawPublish, RawReader
from amps.log.records import PublishRecord
from amps.log.segments import segment_name
from tests.harness.journals import SEGMENT_SIZE_BYTES, mixed_journal


def _expected(journal: Journal, from_txid: int, upper: int, limit: int) -> list[RawPublish]:
    from_txid = max(from_txid, journal.first_txid)
    wanted = max(0, min(upper, journal.durable_txid) - from_txid + 1)
    records = journal.read(from_txid, min(limit, wanted))
    publishes = [r for r in records if isinstance(r, PublishRecord)]
    return [
        (r.txid, r.timestamp_us, r.publisher_id, r.seq, r.expiration_s, r.topic.encode(),
         r.correlation_id.encode(), r.data, r.origin_instance.encode(), r.origin_txid)
        for r in publishes
    ]  # fmt: skip


async def test_raw_reads_match_journal_reads(tmp_path: Path) -> None:
    journal = await mixed_journal(tmp_path, 600)
    assert journal.segment_count > 3
    reader = RawReader(journal)
    try:
        for from_txid in (0, 1, 2, 6, 7, 50, 133, 599, 600, 601):
            for upper, limit in ((600, 10_000), (600, 1), (600, 37), (140, 1000), (10, 1000)):
                got, reached = reader.read(from_txid, upper, limit)
                assert got == _expected(journal, from_txid, upper, limit), (from_txid, upper, limit)
                start = max(from_txid, 1)
                assert reached == max(start, min(600, upper, start + limit - 1) + 1)
        # A whole replay in small batches sees every publish once, in order.
        position, seen = 1, []
        while position <= 600:
            batch, position = reader.read(position, 600, 45)
            seen.extend(batch)
        assert seen == _expected(journal, 1, 600, 10_000)
    finally:
        reader.close()
        await journal.close()


async def test_raw_reads_stop_at_the_durable_point(tmp_path: Path) -> None:
    journal = await mixed_journal(tmp_path, 20)
    journal.append_publish(topic="t", data=b"x", publisher_id=1, seq=99, timestamp_us=1)
    reader = RawReader(journal)
    try:
        got, reached = reader.read(1, 1_000, 1_000)
        assert reached == 21
        assert got == _expected(journal, 1, 20, 1_000)
        assert reader.read(21, 1_000, 1_000) == ([], 21)
    finally:
        reader.close()
        await journal.close()


async def test_damage_is_corrupt_record_with_segment_and_offset(tmp_path: Path) -> None:
    journal = await mixed_journal(tmp_path, 40)
    await journal.close()
    segment = tmp_path / segment_name(1)
    raw = bytearray(segment.read_bytes())
    raw[300] ^= 0xFF
    segment.write_bytes(bytes(raw))
    journal = Journal.open(tmp_path, segment_size_bytes=SEGMENT_SIZE_BYTES, read_only=True)
    reader = RawReader(journal)
    try:
        with pytest.raises(CorruptRecord) as info:
            reader.read(1, 40, 1_000)
        assert info.value.segment == segment.name
    finally:
        reader.close()
        journal.close_read_only()
