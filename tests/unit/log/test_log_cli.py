"""`amps journal dump` and `verify`: JSON lines, filters, damaged ranges, and never a write to
the directory."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import orjson
from click.testing import CliRunner

from amps.cli.journal_cmd import journal
from amps.log.compressed import compress_segment
from amps.log.journal import Journal
from amps.log.records import Bookmark, QueueAction, QueueRecord
from tests.harness.journals import mixed_journal


def _make(directory: Path) -> None:
    async def fill() -> None:
        log = Journal.open(directory)
        for seq in range(1, 6):
            log.append_publish(topic="a" if seq % 2 else "b", data=b"hi %d" % seq,
                               publisher_id=9, seq=seq, timestamp_us=seq * 1_000_000)  # fmt: skip
        log.append_publish(topic="a", data=b"\xff\x00", publisher_id=9, seq=6, timestamp_us=7)
        log.append(QueueRecord(0, 8, "a", QueueAction.ACK, (Bookmark(9, 1),)))
        await log.close()

    asyncio.run(fill())


def test_dump_prints_every_record_as_json(tmp_path: Path) -> None:
    _make(tmp_path)
    before = {p.name: p.stat().st_size for p in tmp_path.iterdir()}
    result = CliRunner().invoke(journal, ["dump", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [line["txid"] for line in lines] == list(range(1, 8))
    assert lines[0]["kind"] == "publish"
    assert lines[0]["bookmark"] == "9|1|"
    assert lines[0]["data"] == "hi 1"
    assert lines[0]["timestamp"] == "1970-01-01T00:00:01.000000Z"
    assert base64.b64decode(lines[5]["data_base64"]) == b"\xff\x00"
    assert lines[6]["kind"] == "queue"
    assert lines[6]["action"] == "ack"
    assert {p.name: p.stat().st_size for p in tmp_path.iterdir()} == before


def test_dump_filters(tmp_path: Path) -> None:
    _make(tmp_path)
    runner = CliRunner()
    result = runner.invoke(journal, ["dump", str(tmp_path), "--topic", "b"])
    assert [orjson.loads(x)["txid"] for x in result.stdout.splitlines()] == [2, 4]
    result = runner.invoke(journal, ["dump", str(tmp_path), "--from", "9|3|", "--limit", "2"])
    assert [orjson.loads(x)["txid"] for x in result.stdout.splitlines()] == [4, 5]
    result = runner.invoke(journal, ["dump", str(tmp_path), "--from", "9|99|"])
    assert result.exit_code == 2
    assert "bookmark not found" in result.stderr


def test_dump_works_while_the_journal_is_open(tmp_path: Path) -> None:
    """A running instance holds the directory lock; the dump neither needs nor takes it."""

    async def scenario() -> list[int]:
        log = Journal.open(tmp_path)
        log.append_publish(topic="t", data=b"x", publisher_id=9, seq=1, timestamp_us=1)
        await log.commit()
        log.append_publish(topic="t", data=b"y", publisher_id=9, seq=2, timestamp_us=2)
        result = CliRunner().invoke(journal, ["dump", str(tmp_path)])
        await log.close()
        return [orjson.loads(x)["txid"] for x in result.stdout.splitlines()]

    assert asyncio.run(scenario()) == [1]


def _mixed(directory: Path, count: int) -> None:
    async def fill() -> None:
        log = await mixed_journal(directory, count)
        await log.close()

    asyncio.run(fill())


def test_verify_passes_a_sound_journal_and_writes_nothing(tmp_path: Path) -> None:
    _mixed(tmp_path, 300)
    before = {p.name: p.stat().st_size for p in tmp_path.iterdir()}
    result = CliRunner().invoke(journal, ["verify", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "300 records: 0 damaged ranges" in result.stdout
    assert {p.name: p.stat().st_size for p in tmp_path.iterdir()} == before


def test_verify_lists_each_damaged_range_and_exits_1(tmp_path: Path) -> None:
    """Issue 11 item 1: every record of every segment is checked (summaries are not trusted);
    each damaged range is named by segment, offsets and the txids it holds."""
    _mixed(tmp_path, 300)
    oldest, *_, newest = sorted(tmp_path.glob("*.journal"))
    for path, at in ((oldest, 0.5), (newest, 0.3)):
        data = bytearray(path.read_bytes())
        spot = int(len(data) * at)
        data[spot : spot + 16] = b"\xee" * 16
        path.write_bytes(bytes(data))
    result = CliRunner().invoke(journal, ["verify", str(tmp_path), "--output", "json"])
    assert result.exit_code == 1, result.output
    *segments, summary = (orjson.loads(line) for line in result.stdout.splitlines())
    assert summary["damaged_ranges"] == 2
    damaged = {s["segment"]: s["damaged"] for s in segments if s["damaged"]}
    assert set(damaged) == {oldest.name, newest.name}
    (old_range,) = damaged[oldest.name]
    assert old_range["committed"] is True
    assert old_range["start_offset"] <= len(oldest.read_bytes()) // 2 < old_range["end_offset"]
    assert old_range["next_good_txid"] > old_range["last_good_txid"] + 1
    text = CliRunner().invoke(journal, ["verify", str(tmp_path)])
    assert text.exit_code == 1
    assert f"{oldest.name}:" in text.stdout
    assert "DAMAGED offsets" in text.stdout


def test_verify_reads_compressed_segments_too(tmp_path: Path) -> None:
    """A segment compressed by the journal lifecycle is checked through its blocks; a block
    that no longer decompresses is a damaged range."""
    _mixed(tmp_path, 300)
    oldest = sorted(tmp_path.glob("*.journal"))[0]
    compressed = compress_segment(oldest)
    oldest.unlink()
    result = CliRunner().invoke(journal, ["verify", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"{compressed.name}: " in result.stdout
    assert "300 records: 0 damaged ranges" in result.stdout
    data = bytearray(compressed.read_bytes())
    data[-20] ^= 0xFF
    compressed.write_bytes(bytes(data))
    damaged = CliRunner().invoke(journal, ["verify", str(tmp_path)])
    assert damaged.exit_code == 1, damaged.output
    assert "does not decompress" in damaged.stdout
