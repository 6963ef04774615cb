"""When a queue's next snapshot is due (Q16, issue 9). [core]

A restart restores a queue's last snapshot and replays the log after it, so what it replays
is what changed since that snapshot; a snapshot costs CPU on the event loop in proportion to
the messages it holds. The rules weigh the two. Times are seconds on a monotonic clock and
costs CPU seconds, both arguments (no clock here).

Rule 1 (time): a changed queue's snapshot is due `interval_s` after the last one, or
        `spread` times that snapshot's cost after it if longer (a large queue is snapshotted
        less often: at most 1/`spread` of the loop on snapshots).
Rule 2 (replay bound): it is due sooner once the messages that entered or left the queue
        since the last one reach `replay_bound`: each is a record (or part of one) a restart
        would replay, ~1-3 us of CPU each (500,000 acks are ~1,000 removal records).
Rule 3 (budget): never sooner than `budget` times the last attempt's cost after it, whatever
        rule 2 says: snapshots take at most 1/`budget` of the loop however fast the queue
        changes. A large queue changing fast is then bounded by this rule, not by rule 2.

"Entered or left" is counted from the engine's `entered_total` (messages that entered, ever)
and its live count (messages held, owned here or elsewhere): every message live at the last
snapshot or entered since is either still live or left, so the left ones are
`live_then + entered_since - live_now`. A counter that went back (the engine was restored)
makes the count unknown: then only rule 1 applies until the next snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amps.queue.statistics import QueueStatistics

INTERVAL_S = 5.0
SPREAD = 50.0
REPLAY_BOUND = 100_000
BUDGET = 10.0


@dataclass(frozen=True, slots=True)
class QueueChanges:
    """What the engine has counted: messages that ever entered it, and messages held now."""

    entered_total: int
    live: int

    @classmethod
    def of(cls, stats: QueueStatistics) -> QueueChanges:
        """The counts of an engine's statistics (live: held here, owned anywhere)."""
        return cls(stats.entered_total, stats.depth + stats.inactive_count)


class SnapshotSpacing:
    """Decides when one queue's next snapshot is due (see the module rules)."""

    def __init__(
        self,
        *,
        interval_s: float = INTERVAL_S,
        spread: float = SPREAD,
        replay_bound: int = REPLAY_BOUND,
        budget: float = BUDGET,
    ) -> None:
        assert interval_s > 0
        assert spread >= budget >= 1
        assert replay_bound > 0
        self.interval_s = interval_s
        self.spread = spread
        self.replay_bound = replay_bound
        self.budget = budget
        self._due_at = 0.0  # rule 1: none taken yet, so the first checkpoint takes one
        self._not_before = 0.0  # rule 3
        self._since: QueueChanges | None = None  # the engine's counts at the last snapshot

    @property
    def taken_any(self) -> bool:
        """Whether a snapshot was taken since this instance started."""
        return self._since is not None

    def changed_since(self, now: QueueChanges) -> int | None:
        """Messages that entered or left the queue since the last snapshot; None if unknown."""
        then = self._since
        if then is None or now.entered_total < then.entered_total:
            return None
        entered = now.entered_total - then.entered_total
        left = then.live + entered - now.live
        return entered + max(0, left)

    def due(self, now_s: float, changes: Callable[[], QueueChanges]) -> bool:
        """Whether a snapshot should be taken now (rule 1, or rule 2 within rule 3); the
        engine's counts are asked for only when rule 2 decides."""
        if now_s < self._not_before:
            return False
        if now_s >= self._due_at:
            return True
        changed = self.changed_since(changes())
        return changed is not None and changed >= self.replay_bound

    def by_replay_bound(self, now_s: float) -> bool:
        """Whether a snapshot due now is due by rule 2 only (rule 1 would have waited)."""
        return now_s < self._due_at

    def attempted(self, now_s: float, cost_s: float) -> None:
        """A snapshot was taken but could not be stored (its position was not ready): it
        cost the loop all the same, so rule 3 counts it; rule 1's time stays."""
        self._not_before = now_s + self.budget * cost_s

    def taken(self, now_s: float, cost_s: float, changes: QueueChanges) -> float:
        """A snapshot was taken with the engine's counts `changes`, costing `cost_s` of CPU on
        the loop; returns the seconds until rule 1 makes the next one due."""
        wait = max(self.interval_s, self.spread * cost_s)
        self._due_at = now_s + wait
        self._not_before = now_s + self.budget * cost_s
        self._since = changes
        return wait
