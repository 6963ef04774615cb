"""R4's transfer latency: how long a replicated message typically waits here for its replicated
ack, per queue and owner. A non-owner asks for a message only after it waited longer. [core]

The estimate is the median of the last `window` samples (a sample: the time from a replicated
message arriving to its ack arriving). A median, not a mean: one stalled consumer's hour-long
lease would drag a mean far up and stop every transfer; a median ignores a few such outliers.
A window, not all history: it follows the owner's consumers as load changes, within `window`
acks. Until `min_samples` acks arrived the configured default is used (an owner with no
consumers produces no acks, and its messages must still move). Memory is bounded: the window.
The arrivals are not kept here: the queue's glue knows when each waiting message arrived
(`replication/queue_replica.py`) and hands in the waits of the messages a replicated ack
removed, a step's worth at once.

The owner's answers teach it too. A granted request shows the owner had no local subscriber
that could take a message that waited that long (R5): the wait halves, down to `min_ms`. An
unanswered one (a refusal is silence) shows its subscribers take its messages: the wait
doubles back, and never beyond the typical time above. Without this, an owner whose consumers
left (or never were) keeps its last median, or the default, for ever: no replicated acks come
to replace them, and every transferred message waits that long first. Asking sooner cannot
take a message from the owner's own subscribers: it refuses while one of them can take it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LatencyOptions:
    """Limits of one estimator, with units."""

    default_ms: int = 1_000
    window: int = 64
    min_samples: int = 8
    min_ms: int = 1
    max_ms: int = 60_000

    def __post_init__(self) -> None:
        assert 0 < self.min_samples <= self.window
        assert 0 <= self.min_ms <= self.default_ms <= self.max_ms


class TransferLatency:
    """The typical arrival-to-ack time of one owner's messages of one queue here."""

    def __init__(self, options: LatencyOptions) -> None:
        self.options = options
        self._samples: deque[int] = deque(maxlen=options.window)
        self._estimate_ms = options.default_ms
        self._stale = False
        self.samples_total = 0
        # The wait the owner's grants taught (see the module's docstring); None: the typical
        # time above applies.
        self._learned_ms: int | None = None

    def acked_after(self, waits_ms: Sequence[int]) -> None:
        """Replicated acks arrived for messages of this owner that waited here `waits_ms`
        (each from its arrival to its ack): one sample each (only the newest fit the window)."""
        if not waits_ms:
            return
        self._samples.extend(waits_ms[-self.options.window :])
        self.samples_total += len(waits_ms)
        self._stale = True  # the median is taken when it is read (acks outnumber reads)

    def granted(self) -> None:
        """A request of ours was granted: the owner had no local taker for it. Ask sooner."""
        self._learned_ms = max(self.options.min_ms, self.estimate_ms() // 2)

    def refused(self) -> None:
        """A request of ours went unanswered: the owner's subscribers take its messages. The
        wait doubles back towards the typical time."""
        if self._learned_ms is not None:
            doubled = self._learned_ms * 2
            self._learned_ms = None if doubled >= self._typical_ms() else doubled

    def estimate_ms(self) -> int:
        """How long a message waits before a transfer may be requested (R4)."""
        typical = self._typical_ms()
        learned = self._learned_ms
        return typical if learned is None or learned >= typical else learned

    def _typical_ms(self) -> int:
        """The median of the samples (clamped), or the default until there are enough."""
        if self._stale:
            self._stale = False
            if len(self._samples) >= self.options.min_samples:
                ordered = sorted(self._samples)
                median = ordered[len(ordered) // 2]
                self._estimate_ms = min(self.options.max_ms, max(self.options.min_ms, median))
        return self._estimate_ms

    def waited_long_enough(self, arrived_ms: int, now_ms: int) -> bool:
        """R4's time condition for a message that arrived here at `arrived_ms`."""
        return now_ms - arrived_ms > self.estimate_ms()


class TransferLatencies:
    """One estimator per owner of one queue, all with the same options."""

    def __init__(self, options: LatencyOptions) -> None:
        self.options = options
        self._by_owner: dict[str, TransferLatency] = {}

    def of(self, owner: str) -> TransferLatency:
        found = self._by_owner.get(owner)
        if found is None:
            found = self._by_owner[owner] = TransferLatency(self.options)
        return found

    def estimates_ms(self) -> dict[str, int]:
        """Owner -> the current estimate, for metrics and the admin CLI."""
        return {owner: e.estimate_ms() for owner, e in sorted(self._by_owner.items())}
