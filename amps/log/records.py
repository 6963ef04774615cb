"""Record types of the transaction log: publishes, queue events, ownership transfers. [core]

Every record has a local `txid` (u64, +1 per record, starting at 1) and `timestamp_us` (UTC
microseconds, non-decreasing in the log). Every record also names its origin (instance, group,
txid there) so replication can ship it unchanged and detect loops (R1, R9). A record built by a
caller for `Journal.append` carries `txid=0`; the journal assigns the real one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from amps.log.bookmarks import Bookmark

__all__ = [
    "Bookmark",
    "PublishRecord",
    "QueueAction",
    "QueueRecord",
    "Record",
    "RecordKind",
    "TransferRecord",
]


class RecordKind(IntEnum):
    """First byte of every encoded record; values are on disk, never renumber."""

    PUBLISH = 1
    QUEUE = 2
    TRANSFER = 3


class QueueAction(IntEnum):
    """What a queue record says happened to its messages (Q6-Q15); values are on disk."""

    ACK = 1  # sow_delete by bookmark or filter: the message leaves the queue
    CANCEL = 2  # returned to the queue, cancel count +1 (Q11)
    EXPIRE = 3  # expired on request, on-expire actions run (Q12)
    DELIVERED = 4  # leased to a subscriber (at-least-once); counts towards MaxDeliveries
    DELIVERED_AT_MOST_ONCE = 5  # left the queue when sent (Q7)
    EXPIRED = 6  # left the queue by Expiration, MaxDeliveries or MaxCancels; `reason` says which
    LEASE_RETURNED = 7  # lease ran out or holder disconnected; back in the queue (Q6)
    BARRIER_RELEASED = 8  # barrier message sent to every subscriber (A3)
    BARRIER_EXPIRED = 9  # barrier message left by expiry; like a release, per instance (R6)


@dataclass(frozen=True, slots=True)
class PublishRecord:
    """A message published to a topic recorded in the log (L1)."""

    txid: int
    timestamp_us: int
    topic: str
    data: bytes
    publisher_id: int
    seq: int
    origin_instance: str = ""
    origin_group: str = ""
    origin_txid: int = 0
    correlation_id: str = ""
    expiration_s: int = 0

    @property
    def bookmark(self) -> Bookmark:
        return Bookmark(self.publisher_id, self.seq)


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """Something that happened to messages of one queue, named by bookmark and/or txid.

    A removal names, per txid, when the message was last delivered (UTC microseconds, 0 when
    never or unknown) and how many times: `delivered_us` and `deliveries` are empty or as long
    as `txids` (queue record format 2; format 1 records have neither).
    """

    txid: int
    timestamp_us: int
    queue: str
    action: QueueAction
    bookmarks: Sequence[Bookmark] = ()
    """A tuple, or `PackedBookmarks` as read from the log (built into Bookmarks when read)."""
    txids: tuple[int, ...] = ()
    reason: str = ""
    origin_instance: str = ""
    origin_group: str = ""
    origin_txid: int = 0
    delivered_us: tuple[int, ...] = ()
    deliveries: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TransferRecord:
    """Ownership of a queued message moves from one instance to another (R5, R7).

    `from_instance` wrote it (the owner granting, or a proxy); `to_instance` owns the message
    from `epoch` on (replication/ownership.py). A claim is a record to its own writer.
    """

    txid: int
    timestamp_us: int
    queue: str
    bookmark: Bookmark
    from_instance: str
    to_instance: str
    proxied: bool = False  # claimed or granted by a non-owner while the owner is unreachable
    origin_instance: str = ""
    origin_group: str = ""
    origin_txid: int = 0
    epoch: int = 0  # 0 only in records written before epochs (format 1)


Record = PublishRecord | QueueRecord | TransferRecord
