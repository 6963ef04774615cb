"""Byte budgets for what is queued to clients and not yet written (slow consumers, issue 11).

AMPS buffers a slow client's messages in memory up to `MessageMemoryLimit` (instance-wide), of
which one client may use `ClientMaxCapacity` percent, then offlines them to disk. This instance
has no disk offlining (a bookmark subscriber resumes from the transaction log instead), so a
client past its share, or the largest client when the instance as a whole is past its limit, is
disconnected with a reason. Live traffic is never paused: pausing one slow subscriber would stall
every publisher of the topic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, Protocol

GIB = 1 << 30
# What one queued item costs beyond its bytes: the bytes object's header and the list slot.
ENTRY_OVERHEAD_BYTES = 48
DEFAULT_CLIENT_MAX_CAPACITY_PERCENT = 50
SLOW_CONSUMER_STATUS = 8  # grpc.StatusCode.RESOURCE_EXHAUSTED

Limit = Literal["client", "instance"]


def default_message_memory_limit_bytes() -> int:
    """AMPS's default is 10 % of RAM; with disconnection instead of offlining, at most 1 GiB."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        physical = 8 * GIB
    return max(64 << 20, min(physical // 10, GIB))


@dataclass(frozen=True, slots=True)
class SendBudgetStatistics:
    """Snapshot for metrics and the admin interface."""

    queued_bytes: int
    largest_client_bytes: int
    max_bytes: int
    max_client_bytes: int
    client_disconnects: int
    instance_disconnects: int


class Charged(Protocol):
    """An account the budget charges (amps.server.outbox.Outbox, without importing it)."""

    queued_bytes: int

    def disconnect_slow_consumer(self, limit: Limit) -> None: ...


class SendBudget:
    """The instance-wide account of queued bytes; every Outbox charges and refunds it."""

    def __init__(
        self,
        max_bytes: int | None = None,
        client_max_capacity_percent: int = DEFAULT_CLIENT_MAX_CAPACITY_PERCENT,
    ) -> None:
        """`max_bytes` None: default_message_memory_limit_bytes()."""
        if max_bytes is None:
            max_bytes = default_message_memory_limit_bytes()
        assert max_bytes > 0, max_bytes
        assert 0 < client_max_capacity_percent <= 100, client_max_capacity_percent
        self.max_bytes = max_bytes
        self.max_client_bytes = max(1, max_bytes * client_max_capacity_percent // 100)
        self.queued_bytes = 0
        self.disconnects: dict[Limit, int] = {"client": 0, "instance": 0}
        self._outboxes: set[Charged] = set()

    def register(self, outbox: Charged) -> None:
        self._outboxes.add(outbox)

    def unregister(self, outbox: Charged) -> None:
        self._outboxes.discard(outbox)

    def largest(self) -> Charged | None:
        """The outbox holding the most bytes (the one an instance-wide overrun cuts)."""
        return max(self._outboxes, key=lambda o: o.queued_bytes, default=None)

    def statistics(self) -> SendBudgetStatistics:
        largest = self.largest()
        return SendBudgetStatistics(
            self.queued_bytes,
            0 if largest is None else largest.queued_bytes,
            self.max_bytes,
            self.max_client_bytes,
            self.disconnects["client"],
            self.disconnects["instance"],
        )


def slow_consumer_reason(limit: Limit, queued_bytes: int, budget: SendBudget) -> str:
    """The sentence the log and the client read when a slow consumer is disconnected."""
    if limit == "client":
        return (
            f"slow consumer: {queued_bytes} bytes waiting to be sent, over this client's limit of "
            f"{budget.max_client_bytes} bytes (ClientMaxCapacity of MessageMemoryLimit)"
        )
    return (
        f"slow consumer: {queued_bytes} bytes waiting to be sent, the most of any client, while "
        f"all clients together hold over MessageMemoryLimit ({budget.max_bytes} bytes)"
    )
