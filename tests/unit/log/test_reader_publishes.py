"""SegmentReader.read_publishes (codec.decode_publishes): exactly the publishes Journal.read
returns for a range, other records checked but not built; damage is CorruptRecord."""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path

import pytest

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueAction, QueueRecord
from amps.log.segments import segment_name
from amps.log.storage import iter_keys
from tests.harness.journals import SEGMENT_SIZE_BYTES, mixed_journal


def _expected(journal: Journal, from_txid: int, upper: int, limit: int) -> list[PublishRecord]:
    from_txid = max(from_txid, journal.first_txid)
    wanted = max(0, min(upper, journal.durable_txid) - from_txid + 1)
    records = journal.read(from_txid, wanted)
    return [r for r in records if isinstance(r, PublishRecord)][:limit]


def _read(
    journal: Journal, from_txid: int, upper: int, limit: int, max_bytes: int = 1 << 62
) -> list[PublishRecord]:
    from_txid = max(from_txid, journal.first_txid)
    upper = min(upper, journal.durable_txid)
    return journal.reader.read_publishes(journal.segments(), from_txid, upper, limit, max_bytes)


async def test_publish_reads_match_journal_reads(tmp_path: Path) -> None:
    journal = await mixed_journal(tmp_path, 600)
    assert journal.segment_count > 3
    try:
        for from_txid in (0, 1, 2, 6, 7, 50, 133, 599, 600, 601):
            for upper, limit in ((600, 10_000), (600, 1), (600, 37), (140, 1000), (10, 1000)):
                got = _read(journal, from_txid, upper, limit)
                assert got == _expected(journal, from_txid, upper, limit), (from_txid, upper)
                assert all(type(r) is PublishRecord for r in got)
    finally:
        await journal.close()


async def test_publish_reads_stop_at_the_byte_budget(tmp_path: Path) -> None:
    journal = await mixed_journal(tmp_path, 600)
    try:
        every = _expected(journal, 1, 600, 10_000)
        for budget in (1, 500, 5_000, 50_000):
            got = _read(journal, 1, 600, 10_000, budget)
            totals = list(accumulate(len(record.data) for record in every))
            count = next(i for i, total in enumerate(totals, 1) if total >= budget)
            assert got == every[:count], budget
    finally:
        await journal.close()


async def test_publish_reads_stop_at_the_upper_txid(tmp_path: Path) -> None:
    journal = await mixed_journal(tmp_path, 20)
    journal.append_publish(topic="t", data=b"x", publisher_id=1, seq=99, timestamp_us=1)
    try:
        got = _read(journal, 1, 1_000, 1_000)
        assert [r.txid for r in got] == [r.txid for r in _expected(journal, 1, 20, 1_000)]
        assert _read(journal, 21, 1_000, 1_000) == []
    finally:
        await journal.close()


def test_decode_publishes_skips_other_records_and_reports_the_next_txid() -> None:
    publish = PublishRecord(5, 9, "t", b"data", 3, 4, correlation_id="c")
    removal = QueueRecord(6, 9, "q", QueueAction.ACK, txids=(5,), reason="")
    later = PublishRecord(7, 9, "t", b"more", 3, 5)
    buf = codec.encode(publish) + codec.encode(removal) + codec.encode(later)
    out: list[PublishRecord] = []
    offset, next_txid, left = codec.decode_publishes(buf, 0, len(buf), 5, 6, 100, out, 1000)
    assert out == [publish]
    assert next_txid == 7
    assert left == 1000 - len(publish.data)
    assert offset == len(codec.encode(publish)) + len(codec.encode(removal))
    out.clear()
    # A limit stops right after the last publish taken; an incomplete frame is not consumed.
    offset, next_txid, _left = codec.decode_publishes(buf, 0, len(buf) - 1, 0, 100, 1, out)
    assert (out, next_txid, offset) == ([publish], 6, len(codec.encode(publish)))
    out.clear()
    offset, next_txid, _left = codec.decode_publishes(buf, 0, len(buf) - 1, 6, 100, 5, out)
    assert (out, next_txid) == ([], 7)
    out.clear()
    # A byte budget stops after the publish that uses it up (one at least).
    offset, next_txid, left = codec.decode_publishes(buf, 0, len(buf), 0, 100, 5, out, 1)
    assert (out, next_txid, left) == ([publish], 6, 1 - len(publish.data))


@pytest.mark.parametrize("position", [0, 5, 8, 30, -1])
def test_decode_publishes_damage_is_corrupt_record(position: int) -> None:
    buf = bytearray(
        codec.encode(QueueRecord(1, 9, "q", QueueAction.ACK, txids=(5,), reason=""))
        + codec.encode(PublishRecord(2, 9, "t", b"data" * 10, 3, 4))
    )
    at = len(buf) - 30 if position == 0 else position % len(buf)
    buf[at] ^= 0x40
    with pytest.raises(CorruptRecord):
        codec.decode_publishes(bytes(buf), 0, len(buf), 0, 100, 100, [])


async def test_damage_names_the_segment_and_offset(tmp_path: Path) -> None:
    """A read that reaches damage returns what came before it; a read of a damaged record
    raises CorruptRecord naming the segment and offset; a read that starts after the damage
    (from the index entry before it) steps over it (issue 11)."""
    journal = await mixed_journal(tmp_path, 40)
    expected = _read(journal, 1, 40, 1_000)
    await journal.close()
    segment = tmp_path / segment_name(1)
    keys = [(offset, txid) for offset, _size, txid, *_ in iter_keys(segment)]
    damaged_offset, damaged_txid = next((o, t) for o, t in keys if o > 300)
    raw = bytearray(segment.read_bytes())
    raw[damaged_offset + 20] ^= 0xFF
    segment.write_bytes(bytes(raw))
    journal = Journal.open(tmp_path, segment_size_bytes=SEGMENT_SIZE_BYTES, read_only=True)
    try:
        before = [r for r in expected if r.txid < damaged_txid]
        assert _read(journal, 1, 40, 1_000) == before
        with pytest.raises(CorruptRecord) as info:
            _read(journal, damaged_txid, 40, 1_000)
        assert (info.value.segment, info.value.offset) == (segment.name, damaged_offset)
        assert _read(journal, damaged_txid + 1, 40, 1_000) == [
            r for r in expected if r.txid > damaged_txid
        ]
    finally:
        journal.close_read_only()


def _head(record: object) -> object:
    if isinstance(record, PublishRecord):
        return (
            record.txid, record.timestamp_us, record.topic, record.publisher_id, record.seq,
            record.expiration_s,
        )  # fmt: skip
    return record


async def test_head_reads_are_journal_reads_with_publishes_as_heads(tmp_path: Path) -> None:
    """Queue recovery's read (Q16): the same records in the same order as `Journal.read`, each
    publish as (txid, timestamp_us, topic, publisher_id, seq, expiration_s)."""
    journal = await mixed_journal(tmp_path, 600)
    try:
        for from_txid in (0, 1, 2, 7, 133, 599, 600, 601):
            for limit in (1, 37, 10_000):
                want = [_head(r) for r in journal.read(from_txid, limit)]
                assert journal.read_heads(from_txid, limit) == want, (from_txid, limit)
    finally:
        await journal.close()


def test_head_decode_refuses_what_decode_refuses() -> None:
    """Damage in a publish is CorruptRecord at the same offset, heads or records: a checksum
    that does not match, and a correlation id that is not UTF-8 under a matching checksum."""
    good = codec.encode(PublishRecord(5, 9, "t", b"data", 3, 4, correlation_id="c"))
    body = codec.encode(PublishRecord(6, 9, "t", b"data", 3, 5, correlation_id="\xe9"))[8:]
    body = body.replace("\xe9".encode(), b"\xff\xfe")
    not_utf8 = codec._MAGIC_CRC.pack(codec.MAGIC, codec._crc_value(body)) + body
    for damaged in (good[:-3] + b"xyz", not_utf8):
        buf = good + damaged
        with pytest.raises(CorruptRecord) as records:
            codec.decode(buf)
        with pytest.raises(CorruptRecord) as heads:
            codec.decode_heads(buf)
        assert heads.value.offset == records.value.offset == len(good)
