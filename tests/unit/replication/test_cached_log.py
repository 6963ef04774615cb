"""The links' view of the log reads a commit's records from the record cache, never from disk
in the moment between the commit's fsync and its dispatch (issue 8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from amps.log.bookmarks import Bookmark
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueAction, QueueRecord, TransferRecord
from amps.server.record_cache import RecordCache
from replication.link import _CachedLog


@dataclass
class _Dispatching:
    journal: Journal
    records: RecordCache
    dispatched_txid: int


async def test_records_durable_but_not_dispatched_are_not_yet_the_links(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, instance_name="a", group="g")
    journal.keep_frames(0)  # every frame a read brings in would come from the disk
    instance = _Dispatching(journal, RecordCache(journal), dispatched_txid=0)
    view = _CachedLog(instance)
    appended = [
        journal.append_publish(topic="t", data=b"m%d" % i, publisher_id=1, seq=i, timestamp_us=i)
        for i in range(1, 4)
    ]
    assert await journal.commit() == 3
    # The fsync is done, the dispatch (which fills the cache, then steps the links) is not.
    assert view.durable_txid == 0
    assert view.read(1, 10) == []
    for record in appended:
        assert isinstance(record, PublishRecord)
        instance.records.put(record)
    instance.dispatched_txid = 3
    assert view.durable_txid == 3
    read = view.read(1, 10)
    assert read == appended
    assert type(read) is list  # from the cache, not the disk (ReceivedFrames)
    assert all(a is b for a, b in zip(read, appended, strict=True))
    await journal.close()


async def test_queue_records_between_publishes_are_read_from_memory(tmp_path: Path) -> None:
    """A link reads every record in order; the queue and transfer records appended here come
    from the cache too, not a journal read (which decodes the publishes after them again)."""
    journal = Journal.open(tmp_path, instance_name="a", group="g")
    journal.keep_frames(0)
    instance = _Dispatching(journal, RecordCache(journal), dispatched_txid=0)
    view = _CachedLog(instance)
    first = journal.append_publish(topic="t", data=b"m1", publisher_id=1, seq=1, timestamp_us=1)
    removal = journal.append(QueueRecord(0, 2, "q", QueueAction.ACK, txids=(1,)))
    transfer = journal.append(TransferRecord(0, 3, "q", Bookmark(1, 1), "a", "b", False, epoch=1))
    last = journal.append_publish(topic="t", data=b"m2", publisher_id=1, seq=2, timestamp_us=4)
    assert await journal.commit() == 4
    for record in (first, last):
        assert isinstance(record, PublishRecord)
        instance.records.put(record)
    instance.records.put_other(removal)
    instance.records.put_other(transfer)
    instance.dispatched_txid = 4
    read = view.read(1, 10)
    assert read == [first, removal, transfer, last]
    assert type(read) is list  # nothing read from the disk (that would be ReceivedFrames)
    await journal.close()


async def test_the_other_records_kept_are_bounded(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, instance_name="a", group="g")
    cache = RecordCache(journal, max_other_records=2)
    for txid in range(1, 5):
        cache.put_other(QueueRecord(txid, txid, "q", QueueAction.ACK, txids=(txid,)))
    assert sorted(cache.others) == [3, 4]
    await journal.close()
