"""`amps report queues` (issue 10): from a journal with known acknowledgements, expiries,
redeliveries, a transfer and an acknowledgement made on two instances, the report's figures are
those values; the page is one HTML file whose images are valid PNGs."""

from __future__ import annotations

import asyncio
import base64
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from amps.cli.report_cmd import report
from amps.log.bookmarks import Bookmark
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from amps.spark.report import queue_report

# A Spark session starts in ~10 s on a quiet machine and in minutes on a busy one.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

S = 1_000_000  # microseconds
BASE = 1_800_000_000 * S
PUBLISHER = 77


def _published(i: int) -> int:
    return BASE + i * S


def _removal(i: int, action: QueueAction, removed: int, delivered: int, count: int,
             reason: str = "", origin: str = "") -> tuple[int, Record]:  # fmt: skip
    return removed, QueueRecord(
        0, removed, "jobs", action, txids=(i + 1,), reason=reason, origin_instance=origin,
        origin_group="g" if origin else "", delivered_us=(delivered,), deliveries=(count,),
    )  # fmt: skip


async def _journal(directory: Path) -> None:
    """Ten messages (sequence numbers 1..10, one a second). 0-5 acknowledged 5 s after publish,
    3 s after delivery (3-5 on their second delivery; 5 acknowledged on instance `other` too); 6
    expired undelivered (time_limit); 7 after three deliveries (max_deliveries); 8 and 9 never
    removed; 9 transferred from a to b."""
    journal = Journal.open(directory, instance_name="amps-1")
    events: list[tuple[int, Record]] = [
        (_published(i), PublishRecord(0, _published(i), "jobs-topic", b'{"i":%d}' % i,
                                      PUBLISHER, i + 1))
        for i in range(10)
    ]  # fmt: skip
    events += [
        _removal(i, QueueAction.ACK, _published(i) + 5 * S, _published(i) + 2 * S, 1 + (i >= 3))
        for i in range(6)
    ]
    # The ack of 5 on instance `other`, as a peer's removal is logged here: by bookmark, with
    # its origin, without txids or delivery facts (replication/link_core.py strips them).
    events.append(
        (_published(5) + 5 * S, QueueRecord(
            0, _published(5) + 5 * S, "jobs", QueueAction.ACK,
            bookmarks=(Bookmark(PUBLISHER, 6),), origin_instance="other", origin_group="g",
        ))
    )  # fmt: skip
    events.append(_removal(6, QueueAction.EXPIRED, _published(6) + 20 * S, 0, 0, "time_limit"))
    events.append(
        _removal(7, QueueAction.EXPIRED, _published(7) + 6 * S, _published(7) + 4 * S, 3,
                 "max_deliveries")
    )  # fmt: skip
    transfer = TransferRecord(0, BASE + 30 * S, "jobs", Bookmark(PUBLISHER, 10), "a", "b")
    events.append((BASE + 30 * S, transfer))
    # In time order (the journal keeps timestamps non-decreasing); a publish before a removal.
    # A removal's txids are built as message numbers + 1: the txids its publishes got.
    txid_of: dict[int, int] = {}
    for _, record in sorted(events, key=lambda e: (e[0], isinstance(e[1], QueueRecord))):
        if isinstance(record, QueueRecord):
            record = replace(record, txids=tuple(txid_of[n] for n in record.txids))
        appended = journal.append(record)
        if isinstance(appended, PublishRecord):
            txid_of[appended.seq] = appended.txid
    await journal.commit()
    await journal.close()


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources.append(dict(attrs)["src"] or "")


def test_the_report_computes_the_known_figures(spark: SparkSession, tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    asyncio.run(_journal(directory))
    [health], _end = queue_report(spark, str(directory))
    assert health.queue == "jobs"
    assert health.acknowledged == 7
    assert health.latency_s == {"p50": 5.0, "p90": 5.0, "p99": 5.0}
    assert health.waiting_s == {"p50": 2.0, "p90": 2.0, "p99": 2.0}
    assert health.processing_s == {"p50": 3.0, "p90": 3.0, "p99": 3.0}
    # The peer's removal of 5 carries no delivery facts: counted by this instance's records.
    assert health.deliveries == {0: 1, 1: 3, 2: 3, 3: 1}
    assert health.redeliveries == 3 * 1 + 1 * 2
    assert health.expired_by_reason == {"time_limit": 1, "max_deliveries": 1}
    assert health.oldest_unacknowledged == f"{PUBLISHER}|9|"
    assert health.oldest_unacknowledged_age_s == 30 - 8  # at the transfer, the last record
    assert health.transfers == {"a -> b": 1}
    assert health.double_acknowledged == [f"{PUBLISHER}|6|"]
    assert sum(r["removed"] for r in health.per_minute) == 9

    out = tmp_path / "report.html"
    # The `report` group itself, not the root `amps` group: invoking that one in-process makes
    # click cache its `-h` help option, which the generated CLI page (checked later) lacks.
    result = CliRunner().invoke(report, ["queues", "--journal", str(directory), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "Queue jobs" in page
    assert "max_deliveries" in page
    parser = _Images()
    parser.feed(page)
    assert len(parser.sources) == 3
    for source in parser.sources:
        match = re.fullmatch(r"data:image/png;base64,(.+)", source)
        assert match is not None
        assert base64.b64decode(match.group(1)).startswith(b"\x89PNG\r\n\x1a\n")
