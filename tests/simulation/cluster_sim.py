"""A deterministic simulation of a replicated-queue cluster (issue 9, R2-R7, R9, R10).

N instances (3 by default), each with a simulated disk (`disk.py`: a crash loses what was not
synced), the real replication link core per peer (`replication/link_core.py` with the real
routing, position book and reachability table), and three queues over replicated topics, each
a real `QueueReplica` (queue engine, ownership machine, transfer latency estimators) with
simulated consumers (`replica.py`): a `Queue`, a `GroupLocalQueue` (its InitialOwner owns
every message) and a `LocalQueue` (each instance delivers its own copy; its records stay
local); any publish may be a barrier message (R6). The network (`network.py`) has per-pair
delay and jitter, cuts, partitions and heals; transfer requests are the link core's
`TransferRequest` frames, routed towards the owner by the link's own rule. Publishers
republish what a crash lost before it was persisted (L3); consumers lease, ack, cancel, stall
and disconnect; the owner expires messages (Expiration, MaxDeliveries, MaxCancels) with a
dead letter. One clock; every random choice comes from one seed.

A fault phase (crashes, cuts, partitions, heals) is followed by a heal, a settle (everything
durable reaches everyone) and a drain with a steady consumer on every instance. Invariants,
after every step: no message leased on two instances at once, except the duplicate proxied
transfer documents (R7: a proxy took it from an owner that was unreachable yet alive); a dead
letter at most once per message (the same exception; once per instance for a LocalQueue's
copy or a barrier); a message's owner at entry is its publisher's instance (Queue) or the
InitialOwner (GroupLocalQueue); a barrier released on an instance only once every earlier
message left there, and never transferred; no instance takes for unreachable one that ready
links joined it to; every core's own invariants; after a crash, no persisted publish missing
from every log. After the heal: every instance holds the same unremoved messages with the
same owner and epoch (barriers and LocalQueues aside), and a message removed anywhere is
removed everywhere. At the end: every persisted publish left by an ack (a barrier by its
release) or with a dead letter, once in the cluster, or on every instance for a LocalQueue's
copy or a barrier.

    python -m tests.simulation.cluster_sim --seeds 1000      (make sim SEEDS=1000)
    python -m tests.simulation.cluster_sim --first 2000 --seeds 1000   (make sim FIRST=2000)
    python -m tests.simulation.cluster_sim --seed 123 -v     (make sim SEED=123)
"""

from __future__ import annotations

import argparse
import random
import sys
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from amps.config.model import DestinationConfig, ReplicationTransportConfig
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from amps.publishing import persisted_through
from replication import queue_snapshot
from replication.frames import Heartbeat
from replication.frames import TransferRequest as RequestFrame
from replication.link_core import (
    Apply,
    Close,
    Connected,
    Disconnected,
    FrameReceived,
    LinkCore,
    LinkLimits,
    LinkState,
    LogAdvanced,
    PeerAcked,
    RecordsDurable,
    RequestArrived,
    Send,
)
from replication.ownership import MessageKey
from replication.positions import PositionBook
from replication.reachability import Reachability
from replication.routing import (
    MAX_REQUEST_HOPS,
    REPLICATED_REMOVALS,
    RequestsSeen,
    Route,
    route_request,
)

from .disk import SimDisk
from .network import SimNetwork, Stream
from .replica import (
    BARRIER_DATA,
    BarrierReleased,
    Breakage,
    DeadLetter,
    Lease,
    QueueSpec,
    SendRecordNow,
    SimQueue,
    TransferRequest,
)

PROXIED_FROM_STEP = 30  # the administrator enables proxied transfer once the links are up
# A path of ready links that long carried a heartbeat (every 15 ms) across two hops (<= 9 ms
# each) and its reachability table onwards: well inside the 80 ms unreachability interval.
SURELY_HEARD_MS = 50
# An async destination acknowledges within 40 ms, or at once at 2 batches (half the window).
ACK_CONFLATION_INTERVAL_MS = 40
LIMITS = LinkLimits(
    max_batch_records=4,
    window_batches=4,
    heartbeat_interval_ms=15,
    peer_timeout_ms=60,
    max_reads_per_step=2,
)


@dataclass(frozen=True)
class SimOptions:
    """The knobs of one run; probabilities are per step."""

    instances: int = 3
    messages: int = 12
    barrier_probability: float = 0.1  # of a publish being a barrier message (R6, A3)
    fault_steps: int = 100
    drain_steps: int = 3_000
    max_delay_ms: int = 6
    max_skew_ms: int = 20  # how far an instance's clock may run ahead of another's
    commit_probability: float = 0.3  # of an instance's group commit in a step
    crash_probability: float = 0.015
    cut_probability: float = 0.02
    partition_probability: float = 0.01
    heal_probability: float = 0.04
    connect_probability: float = 0.3
    max_down_ms: int = 150
    unreachable_after_ms: int = 80  # R7: not heard from, by any path, for this long
    topology: str = "mesh"  # or "line": i0 - i1 - i2 ..., passing through (R9)
    proxied: bool = False  # proxied transfer on i0 during the fault phase (R7)
    break_log_before_send: bool = False  # grants sent before they are durable (must fail)
    break_first_request: bool = False  # every request granted, not the first (must fail)
    break_replay: bool = False  # recovery replays at the current time (must fail)
    break_reachability: bool = False  # only neighbours heard, not through them (must fail)
    sync_probability: float = 0.5  # of a seed giving each destination SyncType sync at 1/2
    failover: bool = False  # publishers fail over across sync destinations (see fail_over)
    snapshot_probability: float = 0.2  # of a group commit storing the queues' snapshots


class SimFailure(AssertionError):
    """An invariant broke; the message carries the seed and the last steps."""


def destination(peer: str, *, sync: bool) -> DestinationConfig:
    """A destination for `peer`, its own group, passing everything through."""
    return DestinationConfig(
        name=peer,
        group=peer,
        sync_type="sync" if sync else "async",
        transports=(ReplicationTransportConfig("amps-replication"),),
        pass_through=".*",
        # An async link's acks conflated (Rule 5 of link_core) within the simulated times.
        ack_conflation_interval_ms=ACK_CONFLATION_INTERVAL_MS,
    )


@dataclass
class Publisher:
    """A client publishing with its own sequence numbers to one instance; it republishes what
    a crash of that instance lost before it was persisted (L3), and while it is down it fails
    over to one of that instance's sync destinations, republishing there everything not yet
    acknowledged as persisted (the replication guide: fail over only across sync
    destinations)."""

    publisher_id: int
    home: str
    next_seq: int = 1
    unpersisted: dict[int, tuple[str, int]] = field(default_factory=dict)  # seq -> where, txid
    lost: list[int] = field(default_factory=list)  # seqs to republish
    messages: dict[int, tuple[str, bytes]] = field(default_factory=dict)  # seq -> topic, data


class Instance:
    """One instance: disk, link cores, reachability and its queues."""

    def __init__(
        self,
        name: str,
        names: Sequence[str],
        peers: Sequence[str],
        options: SimOptions,
        specs: Sequence[QueueSpec],
        sync_to: frozenset[str],
    ) -> None:
        self.name = name
        self.specs = tuple(specs)
        self.sync_to = sync_to  # the destinations whose SyncType is sync
        self.others = tuple(n for n in names if n != name)
        self.peers = tuple(peers)  # the instances it has a link (a destination) to
        self.options = options
        self.disk = SimDisk(name, name)
        self.saved_book: list[tuple[str, object]] = []
        self.snapshots: dict[str, bytes] = {}  # the queue state store: survives a crash
        self.restored = 0  # queues restored from a snapshot at a restart
        self.up = True
        self.down_until_ms = 0
        self.proxied = False
        self.skew_ms = 0  # its clock runs this far ahead of the cluster's
        self.boots = 0
        self.request_ids = 0  # the last transfer request id it used (never reused, as the
        # server's random start at each boot makes a reuse unlikely)
        self.boot(0)

    def boot(self, now_ms: int) -> None:
        """Start (again) from the durable log and the last saved position book."""
        self.boots += 1
        self.requests_seen = RequestsSeen()  # in memory: a restart forgets it
        self.book = PositionBook(self.saved_book)  # type: ignore[arg-type]
        kind = NeighboursOnly if self.options.break_reachability else Reachability
        self.reachability = kind(self.name)
        local = frozenset(s.name for s in self.specs if not s.replicated)
        routes = {
            p: Route(self.name, destination(p, sync=p in self.sync_to), local) for p in self.peers
        }
        self.links = {
            p: LinkCore(
                self.name, self.name, self.disk, routes, self.book, p,
                limits=LIMITS, reachability=self.reachability,
            )
            for p in self.peers
        }  # fmt: skip
        self.durable_waits: list[tuple[int, str, int, int]] = []  # txid, peer, through, stream
        self.held: list[tuple[int, Lease | DeadLetter]] = []  # performed once txid is durable
        self.proxied = False  # off at every start
        breakage = Breakage(
            first_request=self.options.break_first_request,
            log_before_send=self.options.break_log_before_send,
            replay_at_now=self.options.break_replay,
        )
        self.queues = {s.name: SimQueue(self.name, s, breakage) for s in self.specs}
        records = self.disk.records
        self.recovered = [
            action
            for q in self.queues.values()
            for action in q.recover(records, now_ms, self.snapshots.get(q.name))
        ]
        if self.snapshots:  # restored from a snapshot: the same queue as replaying it all
            self.restored += len(self.snapshots)
            for name, queue in self.queues.items():
                replayed = SimQueue(self.name, queue.spec, breakage)
                replayed.recover(records, now_ms)
                for key in sorted(queue.entered | replayed.entered):
                    restored, whole = queue.view_of(key), replayed.view_of(key)
                    assert restored == whole, (
                        f"{self.name} restored {key} of {name} from its snapshot as "
                        f"{restored}, replaying the log gives {whole}"
                    )
                if queue.spec.replicated:  # and the rest: ownership states, early records,
                    view = queue_snapshot.recovered_view  # removed keys, waiting messages
                    assert view(queue.replica) == view(replayed.replica), (
                        f"{self.name} restored {name} from its snapshot unlike a replay"
                    )

    def store_snapshots(self, now_ms: int) -> None:
        """Every replicated queue's snapshot at the durable end of the log (all applied)."""
        assert self.disk.durable_txid == self.disk.last_txid
        for name, queue in self.queues.items():
            data = queue.take_snapshot(self.disk.durable_txid, now_ms)
            if data is not None:
                self.snapshots[name] = data

    def applied(self, record: Record, now_ms: int, *, local: bool) -> list[object]:
        """A record appended here goes to the queue it belongs to, if any."""
        for queue in self.queues.values():
            if queue.holds(record):
                return queue.applied(record, now_ms, local=local)
        return []

    def republished(self, record: PublishRecord, now_ms: int) -> list[object]:
        """A peer's publish discarded here as a duplicate (L4): its origin goes to the queue."""
        for queue in self.queues.values():
            if queue.holds(record):
                key = (record.publisher_id, record.seq)
                return queue.republished(key, record.origin_instance, now_ms)
        return []

    def unreachable(self, now_ms: int) -> frozenset[str]:
        """R7: the instances nothing arrived from, by any path, within the interval."""
        interval = self.options.unreachable_after_ms
        return self.reachability.unreachable(self.others, now_ms, interval)


class NeighboursOnly(Reachability):
    """Deliberately wrong: ignores what heartbeats say of instances behind a neighbour, so a
    proxy would bypass an alive owner two hops away (R7, R9 broken), to prove the sim sees it."""

    def heard_via(self, table: tuple[tuple[str, int], ...], now_ms: int) -> None:
        pass


class Cluster:
    """The instances, the network, the clock, the publishers, and the checker."""

    def __init__(self, seed: int, options: SimOptions) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.names = [f"i{n}" for n in range(options.instances)]
        self.specs = (
            QueueSpec("work", "Queue"),
            QueueSpec("group", "GroupLocalQueue", self.rng.choice(self.names)),
            QueueSpec("local", "LocalQueue"),
        )
        synced = self.rng.random() < options.sync_probability
        self.sync_to = {
            n: frozenset(p for p in self.peers_of(n) if synced and self.rng.random() < 0.5)
            for n in self.names
        }
        self.instances = {
            n: Instance(n, self.names, self.peers_of(n), options, self.specs, self.sync_to[n])
            for n in self.names
        }
        for instance in self.instances.values():
            instance.skew_ms = self.rng.randint(0, options.max_skew_ms)
        self.network = SimNetwork(self.rng, self.names, max_delay_ms=options.max_delay_ms)
        self.publishers = [Publisher(100 + n, name) for n, name in enumerate(self.names)]
        self.persisted: list[MessageKey] = []
        self.queue_of: dict[MessageKey, str] = {}  # key -> its queue's name
        self.barriers: set[MessageKey] = set()
        self.published = 0
        self.transcript: list[str] = []
        self.documented_duplicates = 0
        # transfer request frames sent, per request (requester, id): routing Rule 5's count
        self.request_frames: Counter[tuple[str, int]] = Counter()
        # requests offered to an instance's queues, per (instance, boot, requester, id)
        self.request_offers: Counter[tuple[str, int, str, int]] = Counter()
        self.proxied_keys: set[MessageKey] = set()  # claimed or granted by a proxy (R7)
        # republished after failover while another instance held a copy (issue 9): until each
        # instance hears of the other copy, both may deliver it (the documented duplicate)
        self.republished_keys: set[MessageKey] = set()
        self.wanting: set[tuple[str, str]] = set()  # links that stopped early with more to send
        # (key, instance) for a LocalQueue's or a barrier's copy, (key, "") for a message of a
        # replicated queue -> the dead letters' reasons, each once durable.
        self.dead_letters: dict[tuple[MessageKey, str], list[str]] = {}
        self._duplicated_now: set[MessageKey] = set()
        self.path_since: dict[tuple[str, str], int] = {}  # (a, b) -> since when a path joins them
        self._shape: tuple[tuple[str, ...], frozenset[tuple[str, str]]] = ((), frozenset())
        for instance in self.instances.values():
            for queue in instance.queues.values():
                count = self.rng.choice([0, 0, 1, 2])
                self.perform(instance, queue.add_consumers(count, self.rng, self.clock(instance)))

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        for index in range(self.options.fault_steps):
            if self.options.proxied and index == PROXIED_FROM_STEP:
                self.set_proxied(self.names[0], on=True)  # the survivor, once links are up
            self.step(faults=True)
        for name in self.names:
            if self.instances[name].proxied:
                self.set_proxied(name, on=False)  # the runbook: off once the owner is back
        self.heal_all()
        self.settle()
        self.check_held()
        self.check_agreement()
        for instance in self.instances.values():
            for queue in instance.queues.values():
                added = queue.add_consumers(1, self.rng, self.clock(instance), steady=True)
                self.perform(instance, added)
        for _ in range(self.options.drain_steps):
            if self.drained():
                self.check_accounted()
                return
            self.step(faults=False)
        left = [k for k in self.persisted if not self.removed_everywhere(k)]
        self.fail(f"not drained: {left} not acked everywhere")

    def step(self, *, faults: bool) -> None:
        rng = self.rng
        options = self.options
        self.now_ms += rng.randint(1, 4)
        for instance in self.instances.values():
            if not instance.up and self.now_ms >= instance.down_until_ms:
                self.restart(instance)
        self.deliver_due()
        self.fire_deadlines()
        self.continue_links()
        self.reconnect()
        choice = rng.random()
        cut_at = options.crash_probability + options.cut_probability
        if faults and choice < options.crash_probability:
            # With proxied transfer, i0 is the runbook's survivor: it does not crash.
            self.crash(self.instances[rng.choice(self.names[options.proxied :])])
        elif faults and choice < cut_at:
            a, b = rng.sample(self.names, 2)
            self.network.cut.add(frozenset((a, b)))
            self.note(f"cut {a}-{b}")
        elif faults and choice < cut_at + options.partition_probability:
            side = {rng.choice(self.names)}
            self.network.partition(side)
            self.note(f"partition {sorted(side)} from the rest")
        elif choice < cut_at + options.partition_probability + options.heal_probability:
            if self.network.cut:
                self.network.heal()
                self.note("heal")
        elif choice < 0.35:
            self.publish()
        else:
            up = [i for i in self.instances.values() if i.up]
            if up:
                instance = rng.choice(up)
                queue = rng.choice(list(instance.queues.values()))
                self.perform(instance, queue.consumer_step(rng, self.clock(instance)))
        for instance in self.instances.values():
            if instance.up and rng.random() < options.commit_probability:
                self.sync(instance)
        self.pump()
        self.check_step()

    def pump(self) -> None:
        """Every instance learns which owners are unreachable now (R7)."""
        for instance in self.instances.values():
            if instance.up:
                now_ms = self.clock(instance)
                unreachable = instance.unreachable(now_ms)
                for queue in instance.queues.values():
                    self.perform(instance, queue.set_unreachable(unreachable, now_ms))

    # -- instances -------------------------------------------------------------------------

    def perform(self, instance: Instance, actions: Sequence[object]) -> None:
        """Carry out a queue's actions in order, keeping the ordering contract: a lease given
        after a grant or claim of the same list waits until that record is durable."""
        if not actions:
            return
        disk = instance.disk
        recorded = False
        broken = self.options.break_log_before_send
        requests: dict[tuple[str, str], list[MessageKey]] = {}  # one frame per queue and owner
        for action in actions:
            if isinstance(action, Record):
                stamped = self.append_local(instance, action)
                recorded |= isinstance(stamped, TransferRecord)
            elif isinstance(action, Lease):
                if recorded and not broken and disk.durable_txid < disk.last_txid:
                    instance.held.append((disk.last_txid, action))
                else:
                    self.lease(instance, action)
            elif isinstance(action, DeadLetter):
                # Published once the removal before it is durable (a crash loses both).
                if disk.durable_txid < disk.last_txid:
                    instance.held.append((disk.last_txid, action))
                else:
                    self.dead_letter(instance, action)
            elif isinstance(action, TransferRequest):
                requests.setdefault((action.queue, action.owner), []).append(action.key)
            elif isinstance(action, SendRecordNow):
                # The broken adapter: a grant leaves before it is durable (must fail).
                for peer in instance.peers:
                    self.network.send(
                        instance.name, peer, ("record", disk.records[-1]), self.now_ms
                    )
            elif isinstance(action, str):
                self.note(f"{instance.name} {action}")
            elif isinstance(action, BarrierReleased):
                self.note(f"{instance.name} releases barrier {action.key} of {action.queue}")
            else:
                raise AssertionError(f"unknown action {action!r}")
        for (queue, owner), keys in requests.items():
            instance.request_ids += 1
            frame = RequestFrame(
                queue, tuple(keys), instance.name, owner, MAX_REQUEST_HOPS, instance.request_ids
            )
            self.route_request(instance, frame, "")

    def lease(self, instance: Instance, lease: Lease) -> None:
        queue = instance.queues[lease.queue]
        if queue.leased(queue.consumers.get(lease.client_id), lease):
            self.note(f"{instance.name} leases {lease.key} to {lease.client_id}")

    def dead_letter(self, instance: Instance, letter: DeadLetter) -> None:
        """Once per cluster for a replicated queue's message (its owner's); once per instance
        for a LocalQueue's or a barrier's copy (each instance's own)."""
        copy = self.copy_of(letter.key, instance.name)
        reasons = self.dead_letters.setdefault(copy, [])
        reasons.append(letter.reason)
        self.note(f"{instance.name} dead-letters {letter.key}: {letter.reason}")
        if not letter.reason:
            self.fail(f"message {letter.key} dead-lettered without a reason")
        if len(reasons) > 1 and not self.documented(letter.key):
            self.fail(f"message {letter.key} dead-lettered twice: {reasons}")

    def documented(self, key: MessageKey) -> bool:
        """A duplicate delivery of `key` is a documented one: proxied (R7) or failover's."""
        return key in self.proxied_keys or key in self.republished_keys

    def copy_of(self, key: MessageKey, instance: str) -> tuple[MessageKey, str]:
        """Which copy of a message an instance's removal concerns: its own for a LocalQueue
        or a barrier, else the cluster's one."""
        return (key, instance) if self.per_instance(key) else (key, "")

    def per_instance(self, key: MessageKey) -> bool:
        return key in self.barriers or not self.spec_of(key).replicated

    def spec_of(self, key: MessageKey) -> QueueSpec:
        name = self.queue_of[key]
        return next(s for s in self.specs if s.name == name)

    def append_local(self, instance: Instance, record: Record) -> Record:
        stamped = instance.disk.append(record)
        if isinstance(stamped, TransferRecord) and stamped.proxied:
            key = (stamped.bookmark.publisher_id, stamped.bookmark.seq)
            self.proxied_keys.add(key)
            self.note(
                f"{instance.name} proxied {stamped.to_instance} {key} (epoch {stamped.epoch})"
            )
        return stamped

    def sync(self, instance: Instance) -> None:
        """A group commit: everything appended is durable; links and waiters hear of it."""
        disk = instance.disk
        if disk.durable_txid == disk.last_txid and not instance.durable_waits:
            return
        disk.sync()
        if self.rng.random() < 0.5:
            instance.saved_book = instance.book.entries()  # type: ignore[assignment]
        if self.rng.random() < self.options.snapshot_probability:
            instance.store_snapshots(self.clock(instance))
        self.release_persisted(instance)
        waits, instance.durable_waits = instance.durable_waits, []
        durable: dict[str, list[tuple[int, int]]] = {}  # per link: one event, one ack
        for wait in waits:
            txid, peer, through, ident = wait
            stream = self.network.stream(instance.name, peer)
            if stream is None or stream.ident != ident:
                continue  # the stream that carried them is gone
            if txid > disk.durable_txid:
                instance.durable_waits.append(wait)
                continue
            durable.setdefault(peer, []).append((through, 0))
        for peer, batches in durable.items():
            self.link_actions(instance, peer, instance.links[peer].handle(
                RecordsDurable(tuple(batches)), self.clock(instance)))  # fmt: skip
        due = [item for txid, item in instance.held if txid <= disk.durable_txid]
        instance.held = [(t, item) for t, item in instance.held if t > disk.durable_txid]
        for item in due:
            if isinstance(item, Lease):
                self.lease(instance, item)
            else:
                self.dead_letter(instance, item)
        self.advance_links(instance)

    def release_persisted(self, instance: Instance) -> None:
        """L2: publishers get their persisted acks for what is durable here and held by every
        sync destination (`amps.publishing.persisted_through`, as the server decides)."""
        acked = [instance.links[p].acked_through_txid for p in instance.sync_to]
        through = persisted_through(instance.disk.durable_txid, acked)
        for publisher in self.publishers:
            for seq, (where, txid) in list(publisher.unpersisted.items()):
                if where == instance.name and txid <= through:
                    del publisher.unpersisted[seq]
                    key = (publisher.publisher_id, seq)
                    self.persisted.append(key)
                    for peer in instance.sync_to:
                        if not self.instances[peer].disk.holds_durably(key):
                            early = f"before its sync destination {peer} held it durably (L2)"
                            self.fail(f"{key} acked as persisted by {instance.name} {early}")

    def advance_links(self, instance: Instance) -> None:
        for peer, core in instance.links.items():
            self.link_actions(instance, peer, core.handle(LogAdvanced(), self.clock(instance)))
        self.continue_links()

    def crash(self, instance: Instance) -> None:
        if not instance.up:
            return
        instance.up = False
        instance.down_until_ms = self.now_ms + self.rng.randint(10, self.options.max_down_ms)
        for peer in instance.peers:
            self.close_stream(instance.name, peer, f"{instance.name} crashed")
        lost_from = instance.disk.durable_txid
        instance.disk.crash()
        for publisher in self.publishers:
            for seq, (where, txid) in list(publisher.unpersisted.items()):
                if where == instance.name and txid > lost_from:
                    del publisher.unpersisted[seq]
                    publisher.lost.append(seq)
            # Republished in order (L3): a later one first would make the earlier a duplicate.
            publisher.lost.sort()
        self.note(f"crash {instance.name} (durable through txid {lost_from})")
        for key in self.persisted:  # only a crash can lose a record
            if not any(i.disk.holds_publish(key) for i in self.instances.values()):
                self.fail(f"persisted message {key} is in no instance's log (lost)")

    def restart(self, instance: Instance) -> None:
        instance.up = True
        instance.boot(self.clock(instance))
        self.perform(instance, instance.recovered)
        for queue in instance.queues.values():
            added = queue.add_consumers(self.rng.choice([0, 1, 2]), self.rng, self.clock(instance))
            self.perform(instance, added)
        self.note(f"restart {instance.name}")

    def set_proxied(self, name: str, *, on: bool) -> None:
        instance = self.instances[name]
        instance.proxied = on
        for queue in instance.queues.values():
            self.perform(instance, queue.set_proxied(on, self.clock(instance)))
        self.note(f"proxied transfer {'on' if on else 'off'} at {name}")

    # -- publishing ------------------------------------------------------------------------

    def publish(self) -> None:
        """A publisher sends its next message, or republishes a lost one, to its instance.

        While its instance is down it waits, or with `failover` fails over to an up sync
        destination of it: failing over to an asynchronous one can make a later sequence
        number reach a third instance before an earlier one, which L4 then discards there as
        a duplicate (seed 33 of this simulation's first version)."""
        publisher = self.rng.choice(self.publishers)
        target = self.instances[publisher.home]
        if not target.up:
            found = self.fail_over(publisher) if self.options.failover else None
            if found is None:
                return
            target = found
        if publisher.lost:
            seq = publisher.lost.pop(0)
        elif self.published < self.options.messages:
            seq = publisher.next_seq
            publisher.next_seq += 1
            self.published += 1
            topic = self.rng.choice(("work", "work", "group", "local"))
            barrier = self.rng.random() < self.options.barrier_probability
            publisher.messages[seq] = (topic, BARRIER_DATA if barrier else b"{}")
            key = (publisher.publisher_id, seq)
            self.queue_of[key] = topic
            if barrier:
                self.barriers.add(key)
        else:
            return
        key = (publisher.publisher_id, seq)
        if target.disk.marks.is_duplicate(*key):
            self.check_discard(target, key)
            self.persisted.append(key)  # L4: already held here, acknowledged as persisted
            return
        if any(i.disk.holds_publish(key) for i in self.instances.values()):
            self.republished_keys.add(key)  # a second copy, logged elsewhere too (issue 9)
        topic, data = publisher.messages[seq]
        now_ms = self.clock(target)
        record = PublishRecord(0, now_ms * 1000, topic, data, publisher.publisher_id, seq)
        stamped = self.append_local(target, record)
        publisher.unpersisted[seq] = (target.name, stamped.txid)
        self.note(f"publish {key} to {topic} at {target.name}")
        self.perform(target, target.applied(stamped, now_ms, local=True))

    def fail_over(self, publisher: Publisher) -> Instance | None:
        """The publisher's instance is down: connect to the first up sync destination of it
        and republish, in order, everything not acknowledged as persisted.

        A `Queue` message that was durable on the dead instance but not yet persisted-acked
        is then logged on two instances, each its origin, so each owns it at epoch 0 until
        each instance hears of the other copy (`Instance.republished`) and the lower origin
        wins (issue 9; seeds 12 and 61 found it)."""
        home = self.instances[publisher.home]
        up = [self.instances[n] for n in sorted(home.sync_to) if self.instances[n].up]
        if not up:
            return None
        target = up[0]
        publisher.lost = sorted({*publisher.lost, *publisher.unpersisted})
        publisher.unpersisted.clear()
        publisher.home = target.name
        self.note(f"publisher {publisher.publisher_id} fails over to {target.name}")
        return target

    # -- the network -----------------------------------------------------------------------

    def reconnect(self) -> None:
        """Pairs that are both up, not cut and without a stream dial (the smaller name)."""
        for a in self.names:
            for b in self.names:
                if a >= b or b not in self.instances[a].peers or self.network.stream(a, b):
                    continue
                x, y = self.instances[a], self.instances[b]
                if not (x.up and y.up and self.network.connected(a, b)):
                    continue
                if self.rng.random() < self.options.connect_probability:
                    self.connect(a, b)

    def connect(self, a: str, b: str) -> None:
        """`a` dials `b`: a stream opens and both link cores hear of it."""
        x, y = self.instances[a], self.instances[b]
        self.network.open(a, b)
        self.link_actions(x, b, x.links[b].handle(Connected(dialled=True), self.clock(x)))
        self.link_actions(y, a, y.links[a].handle(Connected(dialled=False), self.clock(y)))

    def close_stream(self, a: str, b: str, reason: str) -> None:
        if self.network.close(a, b) is None:
            return
        for x, y in ((a, b), (b, a)):
            instance = self.instances[x]
            if instance.up:
                instance.links[y].handle(Disconnected(reason), self.clock(instance))
                instance.durable_waits = [w for w in instance.durable_waits if w[1] != y]
        self.note(f"stream {a}-{b} closed: {reason}")

    def deliver_due(self) -> None:
        for _ in range(10_000):
            due = self.network.next_due(self.now_ms)
            if due is None:
                return
            sender, receiver, stream, payload = due
            self.receive(self.instances[receiver], sender, stream, payload)
        raise AssertionError("the network never went quiet")

    def receive(self, instance: Instance, sender: str, stream: Stream, payload: object) -> None:
        if isinstance(payload, tuple) and payload[0] == "record":
            self.apply_replicated(instance, (payload[1],))
        else:
            actions = instance.links[sender].handle(FrameReceived(payload), self.clock(instance))  # type: ignore[arg-type]
            self.link_actions(instance, sender, actions, stream)

    def link_actions(
        self,
        instance: Instance,
        peer: str,
        actions: Sequence[object],
        stream: Stream | None = None,
    ) -> None:
        for action in actions:
            if isinstance(action, Send):
                self.network.send(instance.name, peer, action.frame, self.now_ms)
            elif isinstance(action, Apply):
                self.apply_replicated(instance, action.records)
                current = stream or self.network.stream(instance.name, peer)
                assert current is not None
                instance.durable_waits.append(
                    (instance.disk.last_txid, peer, action.through_txid, current.ident)
                )
            elif isinstance(action, RequestArrived):
                self.request_arrived(instance, peer, action.request)
            elif isinstance(action, PeerAcked) and peer in instance.sync_to:
                self.release_persisted(instance)
            elif isinstance(action, Close):
                self.close_stream(instance.name, peer, action.reason)
        core = instance.links[peer]
        if actions:
            core.check_invariants()
        if core.wants_to_send:
            self.wanting.add((instance.name, peer))  # it stopped early: go on (the adapter)

    def continue_links(self) -> None:
        for _ in range(1_000):
            if not self.wanting:
                return
            name, peer = min(self.wanting)
            self.wanting.discard((name, peer))
            instance = self.instances[name]
            if instance.up:
                core = instance.links[peer]
                self.link_actions(instance, peer, core.handle(LogAdvanced(), self.clock(instance)))
        raise AssertionError("a link never stopped wanting to send")

    def apply_replicated(self, instance: Instance, records: Sequence[Record]) -> None:
        """The instance's one de-duplicating append path for a peer's records (L4, R9)."""
        for record in records:
            if isinstance(record, QueueRecord):
                keys = {(b.publisher_id, b.seq) for b in record.bookmarks}
                if not keys.isdisjoint(self.barriers):  # R6: released or expired per instance
                    self.fail(f"{record.action.name} of barrier {keys} crossed a link")
            stamped = instance.disk.append_replicated(record)
            now_ms = self.clock(instance)
            if stamped is not None:
                self.perform(instance, instance.applied(stamped, now_ms, local=False))
            elif isinstance(record, PublishRecord):  # a republished copy's origin (issue 9)
                self.check_discard(instance, (record.publisher_id, record.seq))
                self.perform(instance, instance.republished(record, now_ms))

    def check_discard(self, instance: Instance, key: MessageKey) -> None:
        """L4: a publish is discarded as a duplicate only where the log holds it (gaps: a seq
        replicated after a later one is not a duplicate; make sim FAILOVER=1 SEED=2174)."""
        if not instance.disk.holds_publish(key):
            self.fail(f"{instance.name} discarded {key} as a duplicate without holding it (L4)")

    def route_request(self, instance: Instance, request: RequestFrame, came_from: str) -> None:
        """R4, R9: the link's own routing (`route_request`): to the owner when it is a ready
        neighbour, else onwards by passthrough; sent as a `TransferRequest` frame by the link
        core (lost on a link that is not ready: a refusal)."""
        links = instance.links
        ready = [p for p, core in links.items() if core.state is LinkState.READY]
        request, targets = route_request(request, ready, came_from)
        now_ms = self.clock(instance)
        for peer in targets:
            sent = links[peer].send_request(request, now_ms)
            if sent:
                self.request_frames[(request.requester, request.request_id)] += 1
            self.link_actions(instance, peer, sent)

    def request_arrived(self, instance: Instance, sender: str, request: RequestFrame) -> None:
        """As the server's link adapter: the owner answers; any other instance offers it to
        its queue as a proxy (R7: answered only with proxied transfer on and the owner
        unreachable) and sends it on towards the owner; each request once (routing Rule 5)."""
        if not instance.requests_seen.first(request):
            return  # a copy by another path: answered and forwarded already (routing Rule 5)
        queue = instance.queues[request.queue]
        now_ms = self.clock(instance)
        self.perform(instance, queue.set_unreachable(instance.unreachable(now_ms), now_ms))
        ident = (instance.name, instance.boots, request.requester, request.request_id)
        self.request_offers[ident] += 1
        if request.owner == instance.name or instance.proxied:
            for key in request.keys:
                asked = TransferRequest(queue.name, key, request.requester, request.owner)
                self.perform(instance, queue.requested(asked, now_ms))
        if request.owner != instance.name:
            self.route_request(instance, request, sender)

    def fire_deadlines(self) -> None:
        for instance in self.instances.values():
            if not instance.up:
                continue
            now_ms = self.clock(instance)
            for peer, core in instance.links.items():
                deadline = core.next_deadline_ms()
                if deadline is not None and deadline <= now_ms:
                    self.link_actions(instance, peer, core.on_deadline(now_ms))
            for queue in instance.queues.values():
                self.perform(instance, queue.on_deadline(now_ms))

    # -- heal and settle -------------------------------------------------------------------

    def heal_all(self) -> None:
        self.network.heal()
        for instance in self.instances.values():
            if not instance.up:
                self.restart(instance)
        self.note("heal everything")

    def settle(self) -> None:
        """Run without faults or consumers until every durable record reached everyone."""
        for _ in range(5_000):
            self.now_ms += 1
            self.deliver_due()
            self.fire_deadlines()
            self.continue_links()
            for name in self.names:
                for peer in self.names:
                    linked = peer in self.instances[name].peers
                    if name < peer and linked and self.network.stream(name, peer) is None:
                        self.connect(name, peer)
            for instance in self.instances.values():
                self.sync(instance)
            if self.quiet():
                return
        self.fail("replication did not settle after the heal")

    def quiet(self) -> bool:
        if self.network.in_flight(lambda payload: not isinstance(payload, Heartbeat)):
            return False
        for instance in self.instances.values():
            if instance.disk.durable_txid != instance.disk.last_txid:
                return False
            for core in instance.links.values():
                stats = core.statistics(self.clock(instance))
                if stats.state != "ready" or stats.behind_records:
                    return False
        return True

    # -- checks ----------------------------------------------------------------------------

    def check_step(self) -> None:
        holders: dict[MessageKey, list[str]] = {}
        for instance in self.instances.values():
            if not instance.up:
                continue
            for queue in instance.queues.values():
                if queue.dirty:  # the cores' own cross-checks, after every step they moved
                    queue.check_invariants()
                if queue.spec.replicated:  # a LocalQueue's copies are each instance's own
                    for key in queue.leases(self.clock(instance)):
                        holders.setdefault(key, []).append(instance.name)
        duplicated = set()
        for key, names in holders.items():
            if len(names) > 1:
                if not self.documented(key):
                    self.fail(f"message {key} leased on {names} at once (R2)")
                duplicated.add(key)
        self.documented_duplicates += len(duplicated - self._duplicated_now)
        self._duplicated_now = duplicated
        self.check_reachable_owners()

    def check_reachable_owners(self) -> None:
        """R7, R9: an instance never takes for unreachable one that a path of ready links
        (through passthrough neighbours) has joined it to for long enough that something from
        it must have arrived within the interval, so a proxy never bypasses an alive owner,
        even two hops away."""
        up = tuple(n for n in self.names if self.instances[n].up)
        edges = set()
        ready = LinkState.READY
        for stream in self.network.streams.values():
            a, b = stream.dialler, stream.acceptor
            x, y = self.instances[a], self.instances[b]
            if not (x.up and y.up and self.network.connected(a, b)):
                continue
            if x.links[b].state is ready and y.links[a].state is ready:
                edges |= {(a, b), (b, a)}
        shape = (up, frozenset(edges))
        if shape != self._shape:  # who is joined to whom changed: start or end the paths
            self._shape = shape
            for a in self.names:
                reached, frontier = ({a}, [a]) if a in up else (set(), [])
                while frontier:
                    x_name = frontier.pop()
                    for y_name in up:
                        if (x_name, y_name) in edges and y_name not in reached:
                            reached.add(y_name)
                            frontier.append(y_name)
                for b in self.names:
                    if b != a and b in reached:
                        self.path_since.setdefault((a, b), self.now_ms)
                    else:
                        self.path_since.pop((a, b), None)
        for a in up:
            for b in self.instances[a].queues[self.specs[0].name].ownership.unreachable:
                since = self.path_since.get((a, b))
                joined_ms = self.now_ms - since if since is not None else 0
                if joined_ms > SURELY_HEARD_MS:
                    why = f"joined by a path for {joined_ms} ms (R7: an alive owner bypassed)"
                    self.fail(f"{a} takes {b} for unreachable, {why}")

    def check_held(self) -> None:
        """After the heal: every publish a client was told is persisted is held, exactly once
        (`SimDisk` refuses a second copy), by every instance (all of them take every topic)."""
        for key in self.persisted:
            missing = [n for n, i in self.instances.items() if not i.disk.holds_publish(key)]
            if missing:
                self.fail(f"persisted message {key} is not held by {missing} after the heal")

    def check_agreement(self) -> None:
        """After the heal: the same unremoved messages with the same owners everywhere, and
        what was acked anywhere is removed everywhere."""
        for key in self.persisted:
            if self.per_instance(key):
                continue  # barriers and LocalQueues aside
            queue = self.queue_of[key]
            views = {n: i.queues[queue].view_of(key) for n, i in self.instances.items()}
            if len(set(views.values())) > 1:
                self.fail(f"instances disagree on {key} of {queue} after heal: {views}")
        for instance in self.instances.values():
            for record in instance.disk.records:
                if (
                    isinstance(record, QueueRecord)
                    and record.action in REPLICATED_REMOVALS
                    and record.queue in self.replicated
                ):
                    for b in record.bookmarks:
                        if not self.removed_everywhere((b.publisher_id, b.seq)):
                            self.fail(f"{b} left the queue on {instance.name}, not everywhere")

    def removed_everywhere(self, key: MessageKey) -> bool:
        queue = self.queue_of[key]
        return all(i.queues[queue].removed(key) for i in self.instances.values())

    def drained(self) -> bool:
        if any(p.lost or p.unpersisted for p in self.publishers):
            return False
        if self.published < self.options.messages:
            return False
        if any(i.held for i in self.instances.values()):
            return False  # a dead letter waits for its removal record to be durable
        return all(self.removed_everywhere(key) for key in self.persisted)

    def check_accounted(self) -> None:
        """Nothing lost: every persisted publish left by an ack (a barrier by its release) or
        with a dead letter: once in the cluster, or on every instance for a LocalQueue's
        copies and a barrier (R6): each instance releases or expires its own, by its own
        record."""
        delivered = (QueueAction.ACK, QueueAction.BARRIER_RELEASED)
        left = {
            self.copy_of((b.publisher_id, b.seq), i.name)
            for i in self.instances.values()
            for r in i.disk.records
            if isinstance(r, QueueRecord) and r.action in delivered
            for b in r.bookmarks
        }
        expired = {key for key, _ in self.dead_letters}
        for key in self.persisted:
            if not self.per_instance(key) and key in expired:
                continue
            copies = [(key, n) for n in self.names] if self.per_instance(key) else [(key, "")]
            for copy in copies:
                if copy not in left and copy not in self.dead_letters:
                    where = f" on {copy[1]}" if copy[1] else ""
                    self.fail(f"message {key} left{where} without an ack or a dead letter")

    @property
    def replicated(self) -> frozenset[str]:
        return frozenset(s.name for s in self.specs if s.replicated)

    def peers_of(self, name: str) -> tuple[str, ...]:
        """Who `name` has destinations for: everyone (mesh) or its neighbours (line)."""
        index = self.names.index(name)
        if self.options.topology == "line":
            return tuple(self.names[i] for i in (index - 1, index + 1) if 0 <= i < len(self.names))
        return tuple(n for n in self.names if n != name)

    def clock(self, instance: Instance) -> int:
        """The instance's own clock: the cluster's time plus its skew."""
        return self.now_ms + instance.skew_ms

    def note(self, line: str) -> None:
        self.transcript.append(f"{self.now_ms:>6} ms  {line}")

    def fail(self, why: str) -> None:
        tail = "\n".join(self.transcript[-30:])
        options = self.options
        flags = [
            f"INSTANCES={options.instances}" if options.instances != 3 else "",
            f"TOPOLOGY={options.topology}" if options.topology != "mesh" else "",
            "PROXIED=1" if options.proxied else "",
            "FAILOVER=1" if options.failover else "",
            f"SEED={self.seed}",
        ]
        again = " ".join(f for f in flags if f)
        raise SimFailure(f"{why}\nreproduce with: make sim {again}\nlast steps:\n{tail}")


def run_seed(seed: int, options: SimOptions | None = None) -> Cluster:
    """Run one seed to the end; `SimFailure` if an invariant broke."""
    cluster = Cluster(seed, options or SimOptions())
    try:
        cluster.run()
    except SimFailure:
        raise
    except Exception as error:  # a core's assertion or protocol error: report it with the seed
        where = "".join(traceback.format_exc(limit=-3))
        cluster.fail(f"{type(error).__name__}: {error}\n{where}")
    return cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=1_000, help="run N seeds from --first")
    parser.add_argument("--first", type=int, default=0, help="the first of --seeds (0)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the transcript")
    parser.add_argument("--proxied", action="store_true", help="proxied transfer on i0 (R7)")
    parser.add_argument("--instances", type=int, default=3, help="how many instances")
    parser.add_argument("--topology", choices=("mesh", "line"), default="mesh")
    parser.add_argument("--failover", action="store_true", help="publishers fail over")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    options = SimOptions(
        instances=args.instances,
        topology=args.topology,
        proxied=args.proxied,
        failover=args.failover,
    )
    failed = []
    for seed in seeds:
        try:
            cluster = run_seed(seed, options)
        except SimFailure as failure:
            print(f"seed {seed} failed: {failure}", file=sys.stderr)
            failed.append(seed)
            continue
        if args.verbose:
            print("\n".join(cluster.transcript))
    print(f"{len(seeds) - len(failed)} seed(s) passed, {len(failed)} failed {failed or ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
