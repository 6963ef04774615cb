"""Instances made of link cores, an in-memory log and a fake network (tests only).

Each instance has a log with a durable prefix (`flush` makes everything durable), de-duplicates
replicated publishes by publisher marks as the real instance does (L4), and has one `LinkCore`
per peer. A pair's stream is two FIFO queues of frames; cutting it drops what is in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from amps.config.model import DestinationConfig, ReplicationTransportConfig
from amps.log.dedup import PublisherMarks
from amps.log.records import PublishRecord, Record
from replication.frames import Frame
from replication.link_core import (
    Apply,
    Close,
    Connected,
    Disconnected,
    FrameReceived,
    LinkCore,
    LinkLimits,
    LogAdvanced,
    PeerAcked,
    RecordsDurable,
    Send,
)
from replication.positions import PositionBook
from replication.reachability import Reachability
from replication.routing import Route

LIMITS = LinkLimits(max_batch_records=3, window_batches=2, max_reads_per_step=2)


class MemoryLog:
    """A log whose first `durable_txid` records survive a restart."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.first_txid = 1
        self.durable = 0

    @property
    def durable_txid(self) -> int:
        return self.durable

    @property
    def last_txid(self) -> int:
        return len(self.records)

    def read(self, from_txid: int, max_records: int) -> list[Record]:
        start = max(from_txid, 1) - 1
        return self.records[start : min(start + max_records, self.durable)]


def destination(
    peer: str, *, sync: bool = True, pass_through: str | None = ".*"
) -> DestinationConfig:
    return DestinationConfig(
        name=peer,
        group=peer,
        sync_type="sync" if sync else "async",
        transports=(ReplicationTransportConfig("amps-replication"),),
        pass_through=pass_through,
    )


@dataclass
class SimInstance:
    name: str
    destinations: dict[str, DestinationConfig]
    peers: tuple[str, ...]
    log: MemoryLog = field(default_factory=MemoryLog)
    saved_book: list[tuple[str, object]] = field(default_factory=list)
    published: int = 0
    acked: dict[str, int] = field(default_factory=dict)
    limits: LinkLimits = LIMITS

    def __post_init__(self) -> None:
        self.boot()

    def boot(self) -> None:
        """Start (again) from the durable log and the last saved position book."""
        del self.log.records[self.log.durable :]
        self.marks = PublisherMarks()
        for record in self.log.records:
            assert isinstance(record, PublishRecord)
            self.marks.advance(record.publisher_id, record.seq)
        self.published = self.marks.high_water(self.publisher_id)
        self.book = PositionBook(self.saved_book)  # type: ignore[arg-type]
        routes = {p: Route(self.name, d) for p, d in self.destinations.items()}
        self.reachability = Reachability(self.name)
        self.links = {
            peer: LinkCore(
                self.name,
                self.name,
                self.log,
                routes,
                self.book,
                peer,
                limits=self.limits,
                reachability=self.reachability,
            )
            for peer in self.peers
        }

    @property
    def publisher_id(self) -> int:
        return 1000 + sum(ord(c) for c in self.name)

    def publish(self) -> None:
        seq = self.marks.high_water(self.publisher_id) + 1
        self._append(
            PublishRecord(0, 0, "orders", b"x", self.publisher_id, seq, self.name, self.name, 0)
        )

    def _append(self, record: PublishRecord) -> None:
        txid = self.log.last_txid + 1
        if record.origin_txid == 0:
            record = replace(record, origin_txid=txid)
        self.log.records.append(replace(record, txid=txid))
        self.marks.advance(record.publisher_id, record.seq)

    def apply(self, peer: str, action: Apply) -> None:
        """The shared de-duplicating append path (L4) for replicated records."""
        for record in action.records:
            assert isinstance(record, PublishRecord)
            if not self.marks.is_duplicate(record.publisher_id, record.seq):
                self._append(record)

    def save_book(self) -> None:
        self.saved_book = self.book.entries()  # type: ignore[assignment]


class Network:
    """Instances joined pairwise by streams; the smaller name dials."""

    def __init__(self, instances: list[SimInstance]) -> None:
        self.instances = {i.name: i for i in instances}
        self.streams: dict[tuple[str, str], deque[Frame]] = {}  # (from, to) -> frames in flight
        self.durable_waits: dict[str, list[tuple[int, str, int]]] = {i.name: [] for i in instances}
        self.now_ms = 0

    def pairs(self) -> list[tuple[str, str]]:
        names = sorted(self.instances)
        return [(a, b) for a in names for b in names if a < b and b in self.instances[a].links]

    def connected(self, a: str, b: str) -> bool:
        return (a, b) in self.streams

    def connect(self, a: str, b: str) -> None:
        if self.connected(a, b):
            return
        self.streams[(a, b)] = deque()
        self.streams[(b, a)] = deque()
        self._run(a, b, self.instances[a].links[b].handle(Connected(dialled=True), self.now_ms))
        self._run(b, a, self.instances[b].links[a].handle(Connected(dialled=False), self.now_ms))

    def cut(self, a: str, b: str, reason: str = "cut") -> None:
        if not self.connected(a, b):
            return
        del self.streams[(a, b)], self.streams[(b, a)]
        for x, y in ((a, b), (b, a)):
            self.instances[x].links[y].handle(Disconnected(reason), self.now_ms)
        for x, y in ((a, b), (b, a)):
            self.durable_waits[x] = [w for w in self.durable_waits[x] if w[1] != y]

    def restart(self, name: str) -> None:
        for a, b in list(self.streams):
            if name in (a, b) and a < b:
                self.cut(a, b, "restart")
        self.durable_waits[name] = []
        self.instances[name].boot()

    def deliver(self, sender: str, receiver: str) -> bool:
        """Deliver one frame from `sender` to `receiver`; False when none is in flight."""
        frames = self.streams.get((sender, receiver))
        if not frames:
            return False
        frame = frames.popleft()
        link = self.instances[receiver].links[sender]
        self._run(receiver, sender, link.handle(FrameReceived(frame), self.now_ms))
        return True

    def flush(self, name: str) -> None:
        """fsync: everything appended becomes durable; links hear of it."""
        instance = self.instances[name]
        instance.log.durable = instance.log.last_txid
        due = [w for w in self.durable_waits[name] if w[0] <= instance.log.durable]
        self.durable_waits[name] = [
            w for w in self.durable_waits[name] if w[0] > instance.log.durable
        ]
        by_peer: dict[str, list[tuple[int, int]]] = {}
        for _, peer, through in due:  # one event per link for the commit (one ack)
            by_peer.setdefault(peer, []).append((through, instance.log.durable))
        for peer, batches in by_peer.items():
            durable = RecordsDurable(tuple(batches))
            self._run(name, peer, instance.links[peer].handle(durable, self.now_ms))
        for peer, link in instance.links.items():
            self._run(name, peer, link.handle(LogAdvanced(), self.now_ms))
            while link.wants_to_send:
                self._run(name, peer, link.handle(LogAdvanced(), self.now_ms))

    def _run(self, name: str, peer: str, actions: Sequence[object]) -> None:
        instance = self.instances[name]
        for action in actions:
            if isinstance(action, Send):
                stream = self.streams.get((name, peer))
                if stream is not None:
                    stream.append(action.frame)
            elif isinstance(action, Apply):
                instance.apply(peer, action)
                self.durable_waits[name].append((instance.log.last_txid, peer, action.through_txid))
            elif isinstance(action, PeerAcked):
                assert action.through_txid <= instance.log.durable_txid
                instance.acked[peer] = action.through_txid
            elif isinstance(action, Close):
                a, b = sorted((name, peer))
                if self.connected(a, b):
                    del self.streams[(a, b)], self.streams[(b, a)]
                    other = b if name == a else a
                    self.instances[other].links[name].handle(
                        Disconnected(action.reason), self.now_ms
                    )
        instance.links[peer].check_invariants()

    def settle(self, max_steps: int = 100_000) -> None:
        """Heal every link and run until nothing is in flight and every log is durable."""
        for a, b in self.pairs():
            self.connect(a, b)
        for _ in range(max_steps):
            moved = False
            for a, b in list(self.streams):
                moved |= self.deliver(a, b)
            for name, instance in self.instances.items():
                if instance.log.durable < instance.log.last_txid or self.durable_waits[name]:
                    self.flush(name)
                    moved = True
            if not moved:
                for name in self.instances:
                    self.flush(name)
                if not any(self.streams.values()):
                    return
        raise AssertionError("the network did not settle")


def mesh(
    names: list[str],
    *,
    pass_through: str | None = ".*",
    sync: bool = True,
    limits: LinkLimits = LIMITS,
) -> Network:
    """Every instance replicates to every other."""
    return Network(
        [
            SimInstance(
                n,
                {p: destination(p, sync=sync, pass_through=pass_through) for p in names if p != n},
                tuple(p for p in names if p != n),
                limits=limits,
            )
            for n in names
        ]
    )


def line(names: list[str]) -> Network:
    """a <-> b <-> c: each replicates to its neighbours, passing through everything."""
    instances = []
    for index, name in enumerate(names):
        peers = tuple(names[j] for j in (index - 1, index + 1) if 0 <= j < len(names))
        instances.append(SimInstance(name, {p: destination(p) for p in peers}, peers))
    return Network(instances)


def check_converged(network: Network) -> None:
    """Every instance holds exactly every origin's publishes, each once, in origin order."""
    expected = {
        name: [
            r.seq
            for r in instance.log.records
            if isinstance(r, PublishRecord) and r.origin_instance == name
        ]
        for name, instance in network.instances.items()
    }
    for origin, seqs in expected.items():
        assert seqs == list(range(1, len(seqs) + 1)), (origin, seqs)
    for name, instance in network.instances.items():
        for origin, seqs in expected.items():
            held = [
                r.seq
                for r in instance.log.records
                if isinstance(r, PublishRecord) and r.origin_instance == origin
            ]
            assert held == seqs, f"{name} holds {held} of {origin}'s {seqs}"
