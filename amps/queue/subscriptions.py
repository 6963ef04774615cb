"""One queue subscription: its backlog, filter and the messages it holds (Q8)."""

from __future__ import annotations

from amps.queue.events import TxidPredicate


class Subscription:
    """A subscription of one client; `leased` holds txids leased (or sent, at-most-once)."""

    __slots__ = ("backlog", "client_id", "index", "leased", "matches", "position", "sub_id")

    def __init__(
        self,
        index: int,
        position: int,
        sub_id: str,
        client_id: str,
        backlog: int,
        matches: TxidPredicate | None,
    ) -> None:
        self.index = index  # slot in the engine's subscription list, stored in lease columns
        self.position = position  # increasing with subscription order, for round-robin
        self.sub_id = sub_id
        self.client_id = client_id
        self.backlog = backlog
        self.matches = matches
        self.leased: set[int] = set()

    @property
    def has_room(self) -> bool:
        """True while it holds fewer messages than its backlog (Q8)."""
        return len(self.leased) < self.backlog

    def wants(self, txid: int) -> bool:
        """True if its content filter passes the message (or it has none)."""
        return self.matches is None or self.matches(txid)


def effective_backlog(max_backlog: int | None, max_per_subscription_backlog: int) -> int:
    """Q8: min(subscribe max_backlog, 1 when absent; the queue's MaxPerSubscriptionBacklog)."""
    requested = 1 if max_backlog is None else max_backlog
    assert requested >= 0
    return min(requested, max_per_subscription_backlog)
