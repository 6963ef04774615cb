"""Pub/sub subscriptions: who receives a durable publish, with a per-topic match cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from amps.server.topics import TopicMatcher

if TYPE_CHECKING:
    from amps.expr import Filter
    from amps.server.session import Session

# The cache of topic -> subscriptions is dropped whenever subscriptions change; bounded so that a
# stream of distinct topics cannot grow it without limit.
MAX_CACHED_TOPICS = 100_000


@dataclass(eq=False, slots=True)
class Subscription:
    """One pub/sub (or bookmark replay) subscription of a session."""

    session: Session
    sub_id: str
    topic: TopicMatcher
    filter: Filter | None
    # A replaying subscription receives nothing live until its cursor has caught up (L7).
    live: bool = True
    delivered: int = 0
    cancel_replay: Callable[[], object] | None = field(default=None, repr=False)


class SubscriptionIndex:
    """All pub/sub subscriptions of an instance, indexed for fan-out by topic."""

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()
        self._by_topic: dict[str, list[Subscription]] = {}

    def __len__(self) -> int:
        return len(self._subscriptions)

    def add(self, subscription: Subscription) -> None:
        self._subscriptions.add(subscription)
        self._by_topic.clear()

    def remove(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)
        self._by_topic.clear()

    def matching(self, topic: str) -> list[Subscription]:
        """Subscriptions whose topic matches (live or not; the caller checks)."""
        found = self._by_topic.get(topic)
        if found is None:
            found = [s for s in self._subscriptions if s.topic.matches(topic)]
            if len(self._by_topic) >= MAX_CACHED_TOPICS:
                self._by_topic.clear()
            self._by_topic[topic] = found
        return found
