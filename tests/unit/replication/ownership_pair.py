"""Several ownership machines over a fake, lossless link (h11 `ConnectionPair` style).

`deliver_all()` moves every sent request and record to the machines it is meant for, so a
test reads as a conversation. The unit-level twin of the cluster simulation.
"""

from __future__ import annotations

from replication.ownership import (
    Action,
    AppendOwnership,
    Event,
    MessageKey,
    Offer,
    Ownership,
    OwnershipRecord,
    OwnershipRecorded,
    SendOwnership,
    SendTransferRequest,
    TransferRequested,
    Withdraw,
)

TIMEOUT_MS = 5_000


class OwnershipCluster:
    """Named machines; what each logged, offered and withdrew, and what is in flight."""

    def __init__(self, *names: str) -> None:
        self.machines = {n: Ownership(n, request_timeout_ms=TIMEOUT_MS) for n in names}
        self.logged: dict[str, list[OwnershipRecord]] = {n: [] for n in names}
        self.offered: dict[str, list[MessageKey]] = {n: [] for n in names}
        self.withdrawn: dict[str, list[MessageKey]] = {n: [] for n in names}
        self.in_flight: list[tuple[str, str, Event]] = []  # (from, to, event)
        # Whether the owner has a local taker when a request arrives (R5), per instance.
        self.held: dict[str, bool] = dict.fromkeys(names, False)
        self.now_ms = 1

    def handle(self, name: str, event: Event) -> list[Action]:
        actions = self.machines[name].handle(event, self.now_ms)
        self.perform(name, actions)
        return actions

    def perform(self, name: str, actions: list[Action]) -> None:
        appended: set[OwnershipRecord] = set()
        for action in actions:
            match action:
                case AppendOwnership(record):
                    self.logged[name].append(record)
                    appended.add(record)
                case SendOwnership(record):
                    assert record in appended, "sent before it was logged (Rule 5)"
                    for other in self.machines:
                        if other != name:
                            self.in_flight.append((name, other, OwnershipRecorded(record)))
                case SendTransferRequest(key, owner):
                    request = TransferRequested(key, name, self.held[owner])
                    self.in_flight.append((name, owner, request))
                case Offer(key):
                    self.offered[name].append(key)
                case Withdraw(key):
                    self.withdrawn[name].append(key)

    def deliver_all(self, *, dropping_to: frozenset[str] = frozenset()) -> None:
        """Deliver until quiet; messages to an instance in `dropping_to` are lost (a cut)."""
        for _ in range(1_000):
            if not self.in_flight:
                return
            _, to, event = self.in_flight.pop(0)
            if to not in dropping_to:
                if isinstance(event, TransferRequested):
                    event = TransferRequested(event.key, event.requester, self.held[to])
                self.handle(to, event)
        raise AssertionError("the fake link did not go quiet")

    def owners(self, key: MessageKey) -> set[str]:
        return {n for n, m in self.machines.items() if m.owned_here(key)}
