"""Ownership records as the log's `TransferRecord`s and back (R1, R5, R7). [core]

A grant or claim of `replication/ownership.py` is written to the local log as a
`TransferRecord` and replicates like every record, so recovery replays it (the records of other
instances included). `from_instance` is the writer, `to_instance` the new owner; a claim is a
record to its own writer. `proxied` marks a record written while the owner was unreachable.
An ORIGIN record (issue 9) is one to its own writer at epoch 0, never proxied.
"""

from __future__ import annotations

from amps.errors import OwnershipProtocolError
from amps.log.bookmarks import Bookmark
from amps.log.records import TransferRecord
from replication.ownership import OwnershipRecord, TransferKind


def to_log(
    queue: str, record: OwnershipRecord, *, proxied: bool, timestamp_us: int = 0
) -> TransferRecord:
    """The record to append (the journal assigns the txid; the timestamp never goes back)."""
    if record.kind is TransferKind.ORIGIN:
        assert record.epoch == 0
        assert record.by == record.owner
        assert not proxied
    elif record.kind is TransferKind.CLAIM:
        assert record.epoch >= 1
        assert record.by == record.owner
        assert proxied
    else:
        assert record.epoch >= 1
        assert record.by != record.owner
    publisher_id, seq = record.key
    return TransferRecord(
        0, timestamp_us, queue, Bookmark(publisher_id, seq), record.by, record.owner, proxied,
        epoch=record.epoch,
    )  # fmt: skip


def from_log(record: TransferRecord) -> OwnershipRecord:
    """The machine's view of a logged or replicated transfer; a record without an epoch
    (written before epochs existed) or without instances is refused."""
    claim = record.from_instance == record.to_instance
    if record.epoch == 0 and claim and not record.proxied and record.from_instance:
        key = (record.bookmark.publisher_id, record.bookmark.seq)
        return OwnershipRecord(
            key, TransferKind.ORIGIN, record.from_instance, record.from_instance, 0
        )
    if record.epoch < 1 or not record.from_instance or not record.to_instance:
        raise OwnershipProtocolError(
            f"transfer record {record.txid} of queue {record.queue!r} from "
            f"{record.origin_instance or 'this instance'} has no epoch or instance"
        )
    return OwnershipRecord(
        (record.bookmark.publisher_id, record.bookmark.seq),
        TransferKind.CLAIM if claim else TransferKind.GRANT,
        record.from_instance,
        record.to_instance,
        record.epoch,
    )
