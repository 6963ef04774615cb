"""Pub/sub subscriptions: who receives a durable publish, with a per-topic match cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amps.server.session import Subscription

# The cache of topic -> subscriptions is dropped whenever subscriptions change; bounded so that a
# stream of distinct topics cannot grow it without limit.
MAX_CACHED_TOPICS = 100_000


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
