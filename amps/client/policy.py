"""Pure client decisions: server addresses, reconnect delays, the publish store, queue-ack batches.

Rules of this module (the asyncio adapter in `aio.py` relies on them):

Rule 1: no I/O, no clock, no asyncio, no global randomness. Time arrives as `now_ms` (monotonic
milliseconds) and randomness as an injected `random.Random`.
Rule 2: the publish store is ordered by sequence number and is the only record of what the
instance has not yet persisted (L3). A conflated persisted ack for N releases every entry <= N;
a logon ack carrying N does the same before the rest is republished with the same numbers (D3).
Rule 3: plain queue acks are batched per topic; cancel/expire acks never go through a batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from amps.errors import InvalidOptions

if TYPE_CHECKING:
    from random import Random

DEFAULT_PORT = 9007


# --- Server addresses ------------------------------------------------------------------------


def parse_server(uri: str) -> str:
    """Turn "host:port", "grpc://host:port" or "host" into a gRPC target "host:port"."""
    text = uri.strip()
    if text.startswith("grpc://"):
        text = text[len("grpc://") :]
    text = text.rstrip("/")
    if not text or "/" in text:
        raise InvalidOptions(f"server address {uri!r}: expected host:port")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        return f"{text}:{DEFAULT_PORT}"
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidOptions(f"server address {uri!r}: expected host:port")
    return f"{host}:{int(port_text)}"


def parse_servers(uris: str | Sequence[str]) -> list[str]:
    """Parse one address, a comma list, or a list of addresses, keeping failover order."""
    items = uris.split(",") if isinstance(uris, str) else list(uris)
    targets = [parse_server(item) for item in items if item.strip()]
    if not targets:
        raise InvalidOptions("no server address given")
    return targets


class ServerRotation:
    """Failover order over the configured servers (AMPS DefaultServerChooser).

    A round starts at the server that last worked (the first attempt after a loss goes back to
    it) and goes once through the list; the client waits its backoff only between rounds, so a
    dead instance costs one refused attempt before the next one is tried (D3).
    """

    def __init__(self, targets: Sequence[str]) -> None:
        assert targets, "at least one server"
        self._targets = list(targets)
        self._index = 0
        self._failures_in_round = 0

    @property
    def count(self) -> int:
        """How many servers take part in the rotation."""
        return len(self._targets)

    @property
    def current(self) -> str:
        """The server the next connection attempt goes to."""
        return self._targets[self._index]

    def report_failure(self) -> bool:
        """A connection attempt to `current` failed: the next attempt tries the next server.
        True when that ends a round (every server failed once): wait before the next attempt."""
        self._index = (self._index + 1) % len(self._targets)
        self._failures_in_round = (self._failures_in_round + 1) % len(self._targets)
        return self._failures_in_round == 0

    def report_success(self) -> None:
        """Stay on the server that worked: a lost connection is first retried there."""
        self._failures_in_round = 0


# --- Reconnect delays ------------------------------------------------------------------------


class ExponentialBackoff:
    """Delays between connection attempts: initial × multiplier^k, capped, plus random jitter.

    With the defaults (AMPS ExponentialDelayStrategy): 200, 400, 800, ... ms up to 20 s, each plus
    a uniform jitter in [0, jitter × initial) and never above the maximum.
    """

    def __init__(
        self,
        random: Random,
        *,
        initial_delay_ms: int = 200,
        max_delay_ms: int = 20_000,
        multiplier: float = 2.0,
        jitter: float = 1.0,
    ) -> None:
        assert 0 < initial_delay_ms <= max_delay_ms
        assert multiplier >= 1.0
        assert jitter >= 0.0
        self._random = random
        self.initial_delay_ms = initial_delay_ms
        self.max_delay_ms = max_delay_ms
        self.multiplier = multiplier
        self.jitter = jitter
        self.attempt_count = 0

    def next_delay_ms(self) -> int:
        """Delay before the next attempt; each call counts one more failed attempt."""
        base_ms = min(
            float(self.max_delay_ms),
            self.initial_delay_ms * self.multiplier**self.attempt_count,
        )
        self.attempt_count += 1
        jitter_ms = self._random.random() * self.jitter * self.initial_delay_ms
        return int(min(float(self.max_delay_ms), base_ms + jitter_ms))

    def reset(self) -> None:
        """A connection succeeded: the next loss starts again from the initial delay."""
        self.attempt_count = 0


def is_link_dead(last_receive_ms: int, now_ms: int, heartbeat_interval_ms: int) -> bool:
    """True after two heartbeat intervals without any frame from the instance (AMPS default)."""
    assert heartbeat_interval_ms > 0
    return now_ms - last_receive_ms > 2 * heartbeat_interval_ms


# --- Publish store ---------------------------------------------------------------------------


class StoredPublish(NamedTuple):
    """One publish kept until the instance persists it (a tuple: the cheapest immutable record)."""

    seq: int
    topic: str
    data: bytes


_new_tuple = tuple.__new__


class PublishStore:
    """Unpersisted publishes in sequence order, with limits on messages and bytes (memory store).

    Numbering: `assign_seq()` hands out last_seq + 1; `on_logon(N)` moves last_seq up to N when
    the instance already holds more of this client name's messages than we do.
    """

    def __init__(self, *, max_messages: int = 100_000, max_bytes: int = 256 * 1024 * 1024) -> None:
        assert max_messages > 0
        assert max_bytes > 0
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._entries: deque[StoredPublish] = deque()
        self.size_bytes = 0
        # Highest sequence number assigned (or seen in a logon ack).
        self.last_seq = 0
        # Highest sequence number the instance reported persisted.
        self.persisted_seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[StoredPublish]:
        return iter(self._entries)

    def has_room(self) -> bool:
        """False while the store is at either limit: the publisher must wait (back-pressure)."""
        return len(self._entries) < self.max_messages and self.size_bytes < self.max_bytes

    def add(self, topic: str, data: bytes, seq: int | None = None) -> StoredPublish:
        """Keep a publish; `seq` defaults to the next number and must exceed every earlier one."""
        if seq is None:
            seq = self.last_seq + 1
        elif seq <= self.last_seq:
            raise InvalidOptions(f"sequence number {seq} is not above {self.last_seq}")
        entry = _new_tuple(StoredPublish, (seq, topic, data))
        self._entries.append(entry)
        self.size_bytes += len(data)
        self.last_seq = seq
        return entry

    def on_persisted(self, seq: int) -> int:
        """A conflated persisted ack: release every entry <= seq; return how many were released."""
        if seq > self.persisted_seq:
            self.persisted_seq = seq
        released = 0
        entries = self._entries
        while entries and entries[0].seq <= seq:
            self.size_bytes -= len(entries.popleft().data)
            released += 1
        assert self.size_bytes >= 0
        return released

    def on_rejected(self, seq: int) -> StoredPublish | None:
        """The instance refused one publish: drop it (rare, so a linear search is fine)."""
        for index, entry in enumerate(self._entries):
            if entry.seq == seq:
                del self._entries[index]
                self.size_bytes -= len(entry.data)
                return entry
            if entry.seq > seq:
                break
        return None

    def on_logon(self, logon_seq: int) -> list[StoredPublish]:
        """Logged on; the instance holds up to `logon_seq`: return what to republish, in order."""
        self.on_persisted(logon_seq)
        if logon_seq > self.last_seq:
            self.last_seq = logon_seq
        return list(self._entries)

    def is_persisted_through(self, seq: int) -> bool:
        """True when no publish numbered <= seq waits for persistence any more."""
        return not self._entries or self._entries[0].seq > seq


# --- Queue acknowledgement batching (§7.2) ----------------------------------------------------


def parse_max_backlog(options: str) -> int | None:
    """Read `max_backlog=N` from a subscribe ack's options, or None when absent."""
    for item in options.split(","):
        name, sep, value = item.strip().partition("=")
        if sep and name == "max_backlog" and value.isdigit():
            return int(value)
    return None


def ack_batch_size(configured: int | None, max_backlog: int | None) -> int:
    """Batch size for a queue subscription: the configured size capped at the granted backlog,
    or a third of the backlog by default (so acks flow before the backlog is exhausted)."""
    backlog = max_backlog if max_backlog is not None and max_backlog > 0 else 1
    if configured is None:
        return max(1, backlog // 3)
    return max(1, min(configured, backlog))


@dataclass(slots=True, frozen=True)
class AckBatch:
    """Bookmarks to acknowledge on one topic with one `sow_delete`."""

    topic: str
    bookmarks: tuple[str, ...]

    @property
    def bookmark_list(self) -> str:
        """The comma-separated form carried by `SowDelete.bookmark`."""
        return ",".join(self.bookmarks)


@dataclass(slots=True)
class _PendingAcks:
    first_ms: int
    bookmarks: list[str] = field(default_factory=list)


class AckBatcher:
    """Pending plain acks per topic; a batch is due when full or when its oldest ack times out."""

    def __init__(self, *, timeout_ms: int = 1000) -> None:
        assert timeout_ms >= 0
        # 0 means no timeout: a batch waits until it is full or flushed explicitly (as in AMPS).
        self.timeout_ms = timeout_ms
        self._pending: dict[str, _PendingAcks] = {}

    def add(self, topic: str, bookmark: str, batch_size: int, now_ms: int) -> AckBatch | None:
        """Queue one ack; return the topic's batch when it reached `batch_size`."""
        assert batch_size >= 1
        pending = self._pending.get(topic)
        if pending is None:
            pending = self._pending[topic] = _PendingAcks(now_ms)
        pending.bookmarks.append(bookmark)
        if len(pending.bookmarks) >= batch_size:
            del self._pending[topic]
            return AckBatch(topic, tuple(pending.bookmarks))
        return None

    def has_pending(self, topic: str) -> bool:
        """Whether acks wait for `topic` (then `add` does not use its `now_ms`)."""
        return topic in self._pending

    def next_deadline_ms(self) -> int | None:
        """When the oldest pending batch times out, or None when nothing waits on time."""
        if not self._pending or self.timeout_ms == 0:
            return None
        return min(p.first_ms for p in self._pending.values()) + self.timeout_ms

    def take_due(self, now_ms: int) -> list[AckBatch]:
        """Remove and return every batch whose oldest ack has waited at least the timeout."""
        if self.timeout_ms == 0:
            return []
        due = [t for t, p in self._pending.items() if now_ms - p.first_ms >= self.timeout_ms]
        return [AckBatch(t, tuple(self._pending.pop(t).bookmarks)) for t in due]

    def take_all(self) -> list[AckBatch]:
        """Remove and return every pending batch (explicit flush, close)."""
        batches = [AckBatch(t, tuple(p.bookmarks)) for t, p in self._pending.items()]
        self._pending.clear()
        return batches

    def pending_count(self) -> int:
        """Acks queued and not yet sent."""
        return sum(len(p.bookmarks) for p in self._pending.values())
