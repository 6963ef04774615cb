"""`amps journal dump`: JSON lines, filters, and never a write to the directory."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import orjson
from click.testing import CliRunner

from amps.cli.journal_cmd import journal
from amps.log.journal import Journal
from amps.log.records import Bookmark, QueueAction, QueueRecord


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
