"""When this instance last heard from every other instance, by any path. [core]

A link hears its peer directly (any frame); heartbeats carry the sender's own table, so an
instance also learns about instances it has no link to, through its neighbours (passthrough).
The replicated-queues issue asks this table whether an owner is reachable (R7).
"""

from __future__ import annotations

from collections.abc import Iterable


class Reachability:
    """instance -> the latest `now_ms` at which it was known alive (here, not its clock)."""

    def __init__(self, local: str) -> None:
        self.local = local
        self._heard_ms: dict[str, int] = {}

    def heard_directly(self, instance: str, now_ms: int) -> None:
        if instance != self.local:
            self._heard_ms[instance] = max(self._heard_ms.get(instance, now_ms), now_ms)

    def heard_via(self, table: tuple[tuple[str, int], ...], now_ms: int) -> None:
        """A neighbour's table: each instance it heard from, `age_ms` before it sent it."""
        for instance, age_ms in table:
            if instance == self.local:
                continue
            at_ms = now_ms - age_ms
            if at_ms > self._heard_ms.get(instance, at_ms - 1):
                self._heard_ms[instance] = at_ms

    def table(self, now_ms: int) -> tuple[tuple[str, int], ...]:
        """(instance, milliseconds since heard) for every instance heard from, by name."""
        return tuple((i, max(0, now_ms - at)) for i, at in sorted(self._heard_ms.items()))

    def last_heard_ms(self, instance: str) -> int | None:
        return self._heard_ms.get(instance)

    def unreachable(
        self, instances: Iterable[str], now_ms: int, interval_ms: int
    ) -> frozenset[str]:
        """R7: those of `instances` not known to be reachable: nothing from them arrived, by
        any path, within `interval_ms` before `now_ms` (never heard from counts as not)."""
        assert interval_ms > 0
        found = set()
        for instance in instances:
            if instance == self.local:
                continue
            heard_ms = self._heard_ms.get(instance)
            if heard_ms is None or now_ms - heard_ms > interval_ms:
                found.add(instance)
        return frozenset(found)
