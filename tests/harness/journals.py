"""A journal of mixed records for reader tests: publishes (some replicated), queue and transfer
records, in segments small enough that reads cross segment boundaries."""

from __future__ import annotations

from pathlib import Path

from amps.log.journal import Journal
from amps.log.records import Bookmark, QueueAction, QueueRecord, TransferRecord

SEGMENT_SIZE_BYTES = 16 * 1024


async def mixed_journal(directory: Path, count: int) -> Journal:
    """`count` records, committed: every 7th a queue ack, every 11th a transfer, else publishes
    on two topics with varied sizes, publishers, correlation ids, expirations and origins."""
    journal = Journal.open(directory, segment_size_bytes=SEGMENT_SIZE_BYTES)
    for i in range(1, count + 1):
        if i % 7 == 0:
            journal.append(QueueRecord(0, 0, "q", QueueAction.ACK, txids=(i - 1,), reason="r"))
        elif i % 11 == 0:
            journal.append(TransferRecord(0, 0, "q", Bookmark(1, i), "a", "b"))
        else:
            journal.append_publish(
                topic="orders" if i % 3 else "tópico/ü",
                data=(b"m%05d" % i) * (i % 40),
                publisher_id=2**63 + i % 4,
                seq=i,
                timestamp_us=1_700_000_000_000_000 + i,
                correlation_id="" if i % 2 else f"c{i}",
                expiration_s=i % 5,
                origin_instance="" if i % 5 else "other",
                origin_group="" if i % 5 else "g",
                origin_txid=0 if i % 5 else i * 3,
            )
    await journal.commit()
    return journal
