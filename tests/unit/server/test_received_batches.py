"""A peer's batch that carries a replicated queue's removal and transfer records between its
publishes is appended as frames, restamped, like a batch of publishes only: the same journal
as appending its records one by one (issue 9, R1)."""

from __future__ import annotations

from pathlib import Path

from amps.config import load_config
from amps.log import codec
from amps.log.bookmarks import Bookmark
from amps.log.journal import Journal
from amps.log.received import ReceivedRun, scan
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from amps.server.instance import Instance

CONFIG = """<AMPSConfig><Name>b</Name>
<Transports>
  <Transport><Name>clients</Name><Type>grpc</Type><InetAddr>0</InetAddr></Transport>
  <Transport><Name>peers</Name><Type>amps-replication</Type><InetAddr>0</InetAddr></Transport>
</Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>
  <MessageType>json</MessageType></Queue></SOW>
<Replication><Destination><Name>a</Name><SyncType>sync</SyncType>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>work</Name><MessageType>json</MessageType></Topic>
  <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9</InetAddr></Transport>
</Destination></Replication>
</AMPSConfig>"""


def _publish(txid: int, seq: int) -> PublishRecord:
    return PublishRecord(
        txid, 1_000 + txid, "orders", b'{"n":%d}' % seq, 7, seq, "a", "a", txid,
        "corr" if seq % 2 else "",
    )  # fmt: skip


def _batch() -> list[Record]:
    """The owner's log as it replicates: publishes, an ack of two of them, a grant, more, and
    a publish sent twice (L4: the second is a duplicate)."""
    return [
        _publish(1, 1),
        _publish(2, 2),
        QueueRecord(3, 1_003, "work", QueueAction.ACK, (Bookmark(7, 1), Bookmark(7, 2)),
                    origin_instance="a", origin_group="a", origin_txid=3),
        _publish(4, 3),
        TransferRecord(5, 1_005, "work", Bookmark(7, 3), "a", "c", False, "a", "a", 5, 1),
        _publish(6, 4),
        _publish(7, 4),
        _publish(8, 5),
    ]  # fmt: skip


async def _appended(directory: Path, *, as_frames: bool) -> tuple[list[Record], bool]:
    """The journal after appending the batch, and whether its publishes went as frames."""
    journal = Journal.open(directory, instance_name="b", group="b")
    instance = Instance(load_config(CONFIG), journal, lambda _exc: None)
    records = _batch()
    instance.append_replicated(scan(b"".join(map(codec.encode, records))) if as_frames else records)
    as_runs = all(type(item) is ReceivedRun for item in instance._undispatched)
    await journal.commit()
    found = journal.read(1, 100)
    await journal.close()
    return found, as_runs


async def test_a_batch_with_queue_records_is_appended_as_frames(tmp_path: Path) -> None:
    expected, _ = await _appended(tmp_path / "records", as_frames=False)
    got, as_runs = await _appended(tmp_path / "frames", as_frames=True)
    assert as_runs
    assert got == expected
    kinds = [type(r).__name__ for r in got]
    assert (
        kinds
        == ["PublishRecord"] * 2
        + ["QueueRecord", "PublishRecord", "TransferRecord"]
        + ["PublishRecord"] * 2
    )  # the publish sent twice is appended once
    assert [r.seq for r in got if isinstance(r, PublishRecord)] == [1, 2, 3, 4, 5]
