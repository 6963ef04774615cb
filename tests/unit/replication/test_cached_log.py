"""The links' view of the log reads a commit's records from the record cache, never from disk
in the moment between the commit's fsync and its dispatch (issue 8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from amps.log.journal import Journal
from amps.log.records import PublishRecord
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
    assert not view.read_frames
    for record in appended:
        assert isinstance(record, PublishRecord)
        instance.records.put(record)
    instance.dispatched_txid = 3
    assert view.durable_txid == 3
    assert view.read(1, 10) == appended
    assert not view.read_frames  # from the cache, not the disk
    await journal.close()
