"""QueuePolicy: the per-queue settings the engine obeys (AMPS-REFERENCE §1.3), validated once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from amps.queue.columns import ColumnFactory

Semantics = Literal["at-least-once", "at-most-once"]
Fairness = Literal["fast", "round-robin", "proportional"]
Leasing = Literal["strict", "sublet"]

# Delivery and cancel counters are 16-bit columns (memory target); limits must fit in them.
MAX_COUNT_LIMIT = 65_535
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """Settings of one queue; `None` means "unset" (no limit / no expiry) as in the AMPS config.

    `fairness=None` picks the default for the semantics: proportional for at-least-once,
    round-robin for at-most-once (Q9). `max_cancels=0` and `max_deliveries=0` mean no limit.
    """

    semantics: Semantics = "at-least-once"
    lease_period_ms: int | None = None
    expiration_ms: int | None = None
    max_backlog: int | None = None
    max_per_subscription_backlog: int = 1
    max_cancels: int = 0
    max_deliveries: int = 0
    fairness: Fairness | None = None
    leasing: Leasing = "sublet"
    target_queue_depth: int | None = None
    deferred_ack_expiration_ms: int = DAY_MS
    has_priority: bool = False
    has_barrier: bool = False
    columns: ColumnFactory | None = field(default=None, compare=False, repr=False)
    """Where the per-message structures live (FileBackedMetadata, Q17): None keeps them in
    memory; the adapter injects a file-backed factory. Not a setting the engine interprets."""

    def __post_init__(self) -> None:
        _positive("lease_period_ms", self.lease_period_ms)
        _positive("expiration_ms", self.expiration_ms)
        _positive("target_queue_depth", self.target_queue_depth)
        _positive("deferred_ack_expiration_ms", self.deferred_ack_expiration_ms)
        if self.max_backlog is not None and self.max_backlog < 0:
            raise ValueError("max_backlog must be zero or more when set.")
        if self.max_per_subscription_backlog < 0:
            raise ValueError("max_per_subscription_backlog must be zero or more.")
        for name in ("max_cancels", "max_deliveries"):
            value = getattr(self, name)
            if not 0 <= value <= MAX_COUNT_LIMIT:
                raise ValueError(f"{name} must be between 0 and {MAX_COUNT_LIMIT}.")
        self._check_combinations()

    def _check_combinations(self) -> None:
        if self.semantics == "at-most-once" and self.fairness not in (None, "round-robin"):
            raise ValueError("An at-most-once queue allows only round-robin fairness (Q9).")
        if self.target_queue_depth is not None and (self.has_priority or self.has_barrier):
            raise ValueError("TargetQueueDepth cannot be combined with Priority or barriers (A4).")
        if self.has_priority and self.has_barrier:
            raise ValueError("Priority cannot be combined with a BarrierExpression.")

    @property
    def effective_fairness(self) -> Fairness:
        """The fairness model in force: the explicit one or the semantics' default (Q9)."""
        if self.fairness is not None:
            return self.fairness
        return "round-robin" if self.semantics == "at-most-once" else "proportional"

    @property
    def at_most_once(self) -> bool:
        """True when messages leave the queue as they are sent (Q7)."""
        return self.semantics == "at-most-once"


def _positive(name: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be a positive number of units when set.")
