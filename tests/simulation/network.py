"""The simulated network between instances (issue 9's simulation).

One stream per pair of instances (as the replication link keeps one per pair), in each direction
a FIFO of payloads, each due after the pair's delay plus jitter, never before the one ahead of it
(a stream is ordered). A cut pair holds its payloads (TCP retransmits; nothing is delivered out
of order or lost while the stream lives); if the stream is closed meanwhile (a peer timeout, a
crash), what was in flight is gone. Partitions are sets of cuts; heal removes them.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

Pair = frozenset[str]


def pair(a: str, b: str) -> Pair:
    return frozenset((a, b))


@dataclass
class Stream:
    """One open stream: `dialler` dialled `acceptor`; payloads in flight per receiver."""

    ident: int
    dialler: str
    acceptor: str
    flights: dict[str, deque[tuple[int, object]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.flights = {self.dialler: deque(), self.acceptor: deque()}

    def other(self, name: str) -> str:
        return self.acceptor if name == self.dialler else self.dialler


class SimNetwork:
    """Streams, delays and cuts between named instances; all randomness from `rng`."""

    def __init__(self, rng: random.Random, names: list[str], *, max_delay_ms: int) -> None:
        self.rng = rng
        self.names = names
        self.delay_ms = {
            pair(a, b): rng.randint(1, max_delay_ms) for a in names for b in names if a < b
        }
        self.jitter_ms = max(1, max_delay_ms // 2)
        self.cut: set[Pair] = set()
        self.streams: dict[Pair, Stream] = {}
        self._next_ident = 1

    def open(self, dialler: str, acceptor: str) -> Stream:
        key = pair(dialler, acceptor)
        assert key not in self.streams
        stream = self.streams[key] = Stream(self._next_ident, dialler, acceptor)
        self._next_ident += 1
        return stream

    def close(self, a: str, b: str) -> Stream | None:
        """End the pair's stream; what is in flight is lost."""
        return self.streams.pop(pair(a, b), None)

    def stream(self, a: str, b: str) -> Stream | None:
        return self.streams.get(pair(a, b))

    def send(self, sender: str, receiver: str, payload: object, now_ms: int) -> bool:
        """Queue `payload` on the pair's stream; False when there is no stream."""
        stream = self.streams.get(pair(sender, receiver))
        if stream is None:
            return False
        flight = stream.flights[receiver]
        due = now_ms + self.delay_ms[pair(sender, receiver)] + self.rng.randint(0, self.jitter_ms)
        if flight:
            due = max(due, flight[-1][0])
        flight.append((due, payload))
        return True

    def next_due(self, now_ms: int) -> tuple[str, str, Stream, object] | None:
        """Take the earliest payload due by `now_ms` on a stream that is not cut."""
        best: tuple[int, str, str, Stream] | None = None
        for key, stream in self.streams.items():  # insertion order: deterministic
            if key in self.cut:
                continue
            for receiver, flight in stream.flights.items():
                if flight and flight[0][0] <= now_ms and (best is None or flight[0][0] < best[0]):
                    best = (flight[0][0], stream.other(receiver), receiver, stream)
        if best is None:
            return None
        _, sender, receiver, stream = best
        _, payload = stream.flights[receiver].popleft()
        return sender, receiver, stream, payload

    def in_flight(self, counted: Callable[[object], bool] = lambda _: True) -> int:
        """How many payloads (those `counted`) are in flight."""
        flights = [f for s in self.streams.values() for f in s.flights.values()]
        return sum(1 for f in flights for _, payload in f if counted(payload))

    def partition(self, side: set[str]) -> None:
        """Cut every pair with one end in `side` and the other outside it."""
        for a in side:
            for b in self.names:
                if b not in side:
                    self.cut.add(pair(a, b))

    def heal(self) -> None:
        self.cut.clear()

    def connected(self, a: str, b: str) -> bool:
        return pair(a, b) not in self.cut
