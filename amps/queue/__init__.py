"""The sans-IO queue engine (issue 4): one `QueueEngine` per queue per instance.

Events in (`amps.queue.events`), actions out (`amps.queue.actions`), time as `now_ms`.
See docs/design/queue-engine.md for the theory of operation.
"""

from __future__ import annotations

from amps.queue.actions import (
    Action,
    Deliver,
    DeliverBarrier,
    ExpireReason,
    PublishDeadLetter,
    RecordRemoval,
    RemovalReason,
)
from amps.queue.engine import QueueEngine
from amps.queue.events import (
    Acked,
    AckedByFilter,
    AckOption,
    Bookmark,
    ClientDisconnected,
    Event,
    MessagePublished,
    MessageRemoved,
    OwnershipMoved,
    Subscribed,
    Unsubscribed,
)
from amps.queue.policy import QueuePolicy
from amps.queue.recovery import QueueSnapshot
from amps.queue.statistics import QueueStatistics

__all__ = [
    "AckOption",
    "Acked",
    "AckedByFilter",
    "Action",
    "Bookmark",
    "ClientDisconnected",
    "Deliver",
    "DeliverBarrier",
    "Event",
    "ExpireReason",
    "MessagePublished",
    "MessageRemoved",
    "OwnershipMoved",
    "PublishDeadLetter",
    "QueueEngine",
    "QueuePolicy",
    "QueueSnapshot",
    "QueueStatistics",
    "RecordRemoval",
    "RemovalReason",
    "Subscribed",
    "Unsubscribed",
]
