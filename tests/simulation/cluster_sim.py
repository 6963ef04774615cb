"""A deterministic simulation of a replicated-queue cluster (issue 9, R2-R7, R9, R10).

N instances, each with a simulated disk (`disk.py`: a crash loses what was not synced), the real
replication link core per peer (`replication/link_core.py` with the real routing, position book
and reachability table), and one replicated queue's ownership side (`replica.py`: the real
ownership core and transfer latency estimator), over a simulated network (`network.py`: per-pair
delay and jitter, cuts, partitions, heals; transfer requests travel the same streams and are
forwarded towards the owner). Publishers fail over and republish what was not persisted (L3);
consumers lease, ack, cancel, stall and disconnect. One clock; every random choice comes from
one seed.

A fault phase (crashes, cuts, partitions, heals) is followed by a heal, a settle (everything
durable reaches everyone) and a drain with a consumer on every instance. Invariants, after every
step: no message leased on two instances at once, except the duplicate proxied transfer
documents (R7: a proxy took it from an owner that was unreachable yet alive); no persisted
publish is lost (it is in some instance's durable log); every core's own invariants. After the
heal: every instance holds the same unremoved messages with the same owner and epoch, and a
message acked anywhere is removed everywhere. At the end: every persisted publish was acked
everywhere.

    python -m tests.simulation.cluster_sim --seeds 1000      (make sim SEEDS=1000)
    python -m tests.simulation.cluster_sim --seed 123 -v     (make sim SEED=123)
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from amps.config.model import DestinationConfig, ReplicationTransportConfig
from amps.log.records import PublishRecord, Record, TransferRecord
from replication.frames import Heartbeat
from replication.link_core import (
    Apply,
    Close,
    Connected,
    Disconnected,
    FrameReceived,
    LinkCore,
    LinkLimits,
    LogAdvanced,
    RecordsDurable,
    Send,
)
from replication.ownership import MessageKey
from replication.positions import PositionBook
from replication.reachability import Reachability
from replication.routing import Route

from .disk import SimDisk
from .network import SimNetwork, Stream
from .replica import (
    AfterDurable,
    Lease,
    OwnershipReplica,
    ReplicaOptions,
    SendRecordNow,
    TransferRequest,
)

LIMITS = LinkLimits(
    max_batch_records=4,
    window_batches=2,
    heartbeat_interval_ms=15,
    peer_timeout_ms=60,
    max_reads_per_step=2,
)


@dataclass(frozen=True)
class SimOptions:
    """The knobs of one run; probabilities are per step."""

    instances: int = 3
    messages: int = 10
    fault_steps: int = 150
    drain_steps: int = 3_000
    max_delay_ms: int = 6
    sync_probability: float = 0.3
    crash_probability: float = 0.015
    cut_probability: float = 0.02
    partition_probability: float = 0.01
    heal_probability: float = 0.04
    connect_probability: float = 0.3
    max_down_ms: int = 150
    unreachable_after_ms: int = 80  # R7: not heard from, by any path, for this long
    proxied: bool = False  # proxied transfer on i0 during the fault phase (R7)
    break_log_before_send: bool = False  # grants sent before they are durable (must fail)
    break_first_request: bool = False  # every request granted, not the first (must fail)


class SimFailure(AssertionError):
    """An invariant broke; the message carries the seed and the last steps."""


def destination(peer: str) -> DestinationConfig:
    """Every instance replicates to every other, its own group, passing everything through."""
    return DestinationConfig(
        name=peer,
        group=peer,
        sync_type="async",
        transports=(ReplicationTransportConfig("amps-replication"),),
        pass_through=".*",
    )


@dataclass
class Publisher:
    """A client publishing with its own sequence numbers; it republishes what was not
    persisted when its instance crashed (L3), to whichever instance is up."""

    publisher_id: int
    home: str
    next_seq: int = 1
    unpersisted: dict[int, tuple[str, int]] = field(default_factory=dict)  # seq -> where, txid
    lost: list[int] = field(default_factory=list)  # seqs to republish


class Instance:
    """One instance: disk, link cores, reachability and the queue's replica."""

    def __init__(self, name: str, names: Sequence[str], options: SimOptions) -> None:
        self.name = name
        self.peers = tuple(n for n in names if n != name)
        self.options = options
        self.disk = SimDisk(name, name)
        self.saved_book: list[tuple[str, object]] = []
        self.up = True
        self.down_until_ms = 0
        self.proxied = False
        self.boot(0)

    def boot(self, now_ms: int) -> None:
        """Start (again) from the durable log and the last saved position book."""
        self.booted_ms = now_ms
        self.book = PositionBook(self.saved_book)  # type: ignore[arg-type]
        self.reachability = Reachability(self.name)
        routes = {p: Route(self.name, destination(p)) for p in self.peers}
        self.links = {
            p: LinkCore(
                self.name, self.name, self.disk, routes, self.book, p,
                limits=LIMITS, reachability=self.reachability,
            )
            for p in self.peers
        }  # fmt: skip
        self.durable_waits: list[tuple[int, str, int, int]] = []  # txid, peer, through, stream
        self.replica = OwnershipReplica(
            self.name,
            ReplicaOptions(
                break_first_request=self.options.break_first_request,
                break_log_before_send=self.options.break_log_before_send,
            ),
        )
        self.replica.set_proxied(self.proxied)
        self.replica.recover(self.disk.records, now_ms)

    def unreachable(self, now_ms: int) -> frozenset[str]:
        """R7's reachability: not heard from, by any path, within the interval (an instance
        not heard from since this one started counts from the start)."""
        limit = self.options.unreachable_after_ms
        found = set()
        for peer in self.peers:
            heard = self.reachability.last_heard_ms(peer)
            if now_ms - max(heard or 0, self.booted_ms) > limit:
                found.add(peer)
        return frozenset(found)


class Cluster:
    """The instances, the network, the clock, the publishers, and the checker."""

    def __init__(self, seed: int, options: SimOptions) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.names = [f"i{n}" for n in range(options.instances)]
        self.instances = {n: Instance(n, self.names, options) for n in self.names}
        self.network = SimNetwork(self.rng, self.names, max_delay_ms=options.max_delay_ms)
        self.publishers = [Publisher(100 + n, name) for n, name in enumerate(self.names)]
        self.persisted: list[MessageKey] = []
        self.published = 0
        self.transcript: list[str] = []
        self.documented_duplicates = 0
        self.proxied_keys: set[MessageKey] = set()  # claimed or granted by a proxy (R7)
        self.wanting: set[tuple[str, str]] = set()  # links that stopped early with more to send
        self._duplicated_now: set[MessageKey] = set()
        if options.proxied:
            self.set_proxied(self.names[0], on=True)
        for instance in self.instances.values():
            instance.replica.add_consumers(self.rng.choice([0, 0, 1, 2]), self.rng)

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        for _ in range(self.options.fault_steps):
            self.step(faults=True)
        for name in self.names:
            if self.instances[name].proxied:
                self.set_proxied(name, on=False)  # the runbook: off once the owner is back
        self.heal_all()
        self.settle()
        self.check_agreement()
        for instance in self.instances.values():
            instance.replica.add_consumers(1, self.rng, steady=True)
        for _ in range(self.options.drain_steps):
            if self.drained():
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
            self.crash(self.instances[rng.choice(self.names)])
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
                self.perform(instance, instance.replica.consumer_step(rng, self.now_ms))
        for instance in self.instances.values():
            if instance.up and rng.random() < options.sync_probability:
                self.sync(instance)
        self.pump()
        self.check_step()

    def pump(self) -> None:
        """Every instance's consumers take what they can; waiting takers ask (R4)."""
        for instance in self.instances.values():
            if instance.up:
                replica = instance.replica
                replica.set_unreachable(instance.unreachable(self.now_ms))
                self.perform(instance, replica.pump(self.now_ms))

    # -- instances -------------------------------------------------------------------------

    def perform(self, instance: Instance, actions: Sequence[object]) -> None:
        """Carry out a replica's actions in order (their ordering contract)."""
        for action in actions:
            if isinstance(action, Record):
                self.append_local(instance, action)
            elif isinstance(action, AfterDurable):
                if instance.disk.durable_txid >= instance.disk.last_txid:
                    instance.replica.release(action.keys)
                else:
                    instance.replica.hold_until(instance.disk.last_txid, action)
            elif isinstance(action, TransferRequest):
                self.send_request(instance, action)
            elif isinstance(action, SendRecordNow):
                # The broken adapter: a grant leaves before it is durable (must fail).
                record = instance.disk.records[-1]
                for peer in instance.peers:
                    self.network.send(instance.name, peer, ("record", record), self.now_ms)
            elif isinstance(action, Lease):
                self.note(f"{instance.name} leases {action.key} to {action.consumer}")
            elif isinstance(action, str):
                self.note(f"{instance.name} {action}")
            else:
                raise AssertionError(f"unknown action {action!r}")

    def append_local(self, instance: Instance, record: Record) -> Record:
        stamped = instance.disk.append(record)
        if isinstance(stamped, TransferRecord) and stamped.proxied:
            key = (stamped.bookmark.publisher_id, stamped.bookmark.seq)
            self.proxied_keys.add(key)
            self.note(
                f"{instance.name} proxied {stamped.to_instance} {key} (epoch {stamped.epoch})"
            )
        instance.replica.applied(stamped, self.now_ms, local=True)
        return stamped

    def sync(self, instance: Instance) -> None:
        """A group commit: everything appended is durable; links and waiters hear of it."""
        disk = instance.disk
        if disk.durable_txid == disk.last_txid and not instance.durable_waits:
            return
        disk.sync()
        if self.rng.random() < 0.5:
            instance.saved_book = instance.book.entries()  # type: ignore[assignment]
        for publisher in self.publishers:
            for seq, (where, txid) in list(publisher.unpersisted.items()):
                if where == instance.name and txid <= disk.durable_txid:
                    del publisher.unpersisted[seq]
                    self.persisted.append((publisher.publisher_id, seq))
        waits, instance.durable_waits = instance.durable_waits, []
        for wait in waits:
            txid, peer, through, ident = wait
            stream = self.network.stream(instance.name, peer)
            if stream is None or stream.ident != ident:
                continue  # the stream that carried them is gone
            if txid > disk.durable_txid:
                instance.durable_waits.append(wait)
                continue
            self.link_actions(instance, peer, instance.links[peer].handle(
                RecordsDurable(through), self.now_ms))  # fmt: skip
        self.perform(instance, instance.replica.durable(disk.durable_txid))
        self.advance_links(instance)

    def advance_links(self, instance: Instance) -> None:
        for peer, core in instance.links.items():
            self.link_actions(instance, peer, core.handle(LogAdvanced(), self.now_ms))
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
        self.note(f"crash {instance.name} (durable through txid {lost_from})")
        for key in self.persisted:  # only a crash can lose a record
            if not any(i.disk.marks.is_duplicate(*key) for i in self.instances.values()):
                self.fail(f"persisted message {key} is in no instance's log (lost)")

    def restart(self, instance: Instance) -> None:
        instance.up = True
        instance.boot(self.now_ms)
        instance.replica.add_consumers(self.rng.choice([0, 1]), self.rng)
        self.note(f"restart {instance.name}")

    def set_proxied(self, name: str, *, on: bool) -> None:
        instance = self.instances[name]
        instance.proxied = on
        instance.replica.set_proxied(on)
        self.note(f"proxied transfer {'on' if on else 'off'} at {name}")

    # -- publishing ------------------------------------------------------------------------

    def publish(self) -> None:
        """A publisher sends its next message, or republishes a lost one, to its instance.

        It waits while its instance is down: failing over with asynchronous replication can
        make a later sequence number reach a third instance before an earlier one, which L4
        then discards there as a duplicate (seed 33 of this simulation's first version)."""
        publisher = self.rng.choice(self.publishers)
        target = self.instances[publisher.home]
        if not target.up:
            return
        if publisher.lost:
            seq = publisher.lost.pop(0)
        elif self.published < self.options.messages:
            seq = publisher.next_seq
            publisher.next_seq += 1
            self.published += 1
        else:
            return
        key = (publisher.publisher_id, seq)
        if target.disk.marks.is_duplicate(*key):
            self.persisted.append(key)  # L4: already held here, acknowledged as persisted
            return
        record = PublishRecord(0, 0, "work", b"{}", publisher.publisher_id, seq)
        stamped = self.append_local(target, record)
        publisher.unpersisted[seq] = (target.name, stamped.txid)
        self.note(f"publish {key} at {target.name}")

    # -- the network -----------------------------------------------------------------------

    def reconnect(self) -> None:
        """Pairs that are both up, not cut and without a stream dial (the smaller name)."""
        for a in self.names:
            for b in self.names:
                if a >= b or self.network.stream(a, b) is not None:
                    continue
                x, y = self.instances[a], self.instances[b]
                if not (x.up and y.up and self.network.connected(a, b)):
                    continue
                if self.rng.random() >= self.options.connect_probability:
                    continue
                self.network.open(a, b)
                self.link_actions(x, b, x.links[b].handle(Connected(dialled=True), self.now_ms))
                self.link_actions(y, a, y.links[a].handle(Connected(dialled=False), self.now_ms))

    def close_stream(self, a: str, b: str, reason: str) -> None:
        if self.network.close(a, b) is None:
            return
        for x, y in ((a, b), (b, a)):
            instance = self.instances[x]
            if instance.up:
                instance.links[y].handle(Disconnected(reason), self.now_ms)
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
        if isinstance(payload, tuple) and payload[0] == "request":
            self.receive_request(instance, sender, payload[1])
        elif isinstance(payload, tuple) and payload[0] == "record":
            self.apply_replicated(instance, (payload[1],))
        else:
            actions = instance.links[sender].handle(FrameReceived(payload), self.now_ms)  # type: ignore[arg-type]
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
            elif isinstance(action, Close):
                self.close_stream(instance.name, peer, action.reason)
        core = instance.links[peer]
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
                self.link_actions(instance, peer, core.handle(LogAdvanced(), self.now_ms))
        raise AssertionError("a link never stopped wanting to send")

    def apply_replicated(self, instance: Instance, records: Sequence[Record]) -> None:
        """The instance's one de-duplicating append path for a peer's records (L4, R9)."""
        for record in records:
            stamped = instance.disk.append_replicated(record)
            if stamped is not None:
                self.perform(instance, instance.replica.applied(stamped, self.now_ms, local=False))

    def send_request(self, instance: Instance, request: TransferRequest) -> None:
        """To the owner on its stream; without one, to every neighbour (passthrough forwards it,
        a proxy may grant it)."""
        payload = ("request", request)
        if self.network.stream(instance.name, request.owner) is not None:
            self.network.send(instance.name, request.owner, payload, self.now_ms)
            return
        for peer in instance.peers:
            self.network.send(instance.name, peer, payload, self.now_ms)

    def receive_request(self, instance: Instance, sender: str, request: TransferRequest) -> None:
        replica = instance.replica
        replica.set_unreachable(instance.unreachable(self.now_ms))
        if request.requester == instance.name:
            return
        if request.owner == instance.name or replica.may_proxy_for(request.owner):
            self.perform(instance, replica.requested(request, self.now_ms))
        elif request.owner != sender and self.network.stream(instance.name, request.owner):
            self.network.send(instance.name, request.owner, ("request", request), self.now_ms)

    def fire_deadlines(self) -> None:
        for instance in self.instances.values():
            if not instance.up:
                continue
            for peer, core in instance.links.items():
                deadline = core.next_deadline_ms()
                if deadline is not None and deadline <= self.now_ms:
                    self.link_actions(instance, peer, core.on_deadline(self.now_ms))
            self.perform(instance, instance.replica.on_deadline(self.now_ms))

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
                    if name < peer and self.network.stream(name, peer) is None:
                        self.options_connect(name, peer)
            for instance in self.instances.values():
                self.sync(instance)
            if self.quiet():
                return
        self.fail("replication did not settle after the heal")

    def options_connect(self, a: str, b: str) -> None:
        x, y = self.instances[a], self.instances[b]
        self.network.open(a, b)
        self.link_actions(x, b, x.links[b].handle(Connected(dialled=True), self.now_ms))
        self.link_actions(y, a, y.links[a].handle(Connected(dialled=False), self.now_ms))

    def quiet(self) -> bool:
        if self.network.in_flight(lambda payload: not isinstance(payload, Heartbeat)):
            return False
        for instance in self.instances.values():
            if instance.disk.durable_txid != instance.disk.last_txid:
                return False
            for core in instance.links.values():
                stats = core.statistics(self.now_ms)
                if stats.state != "ready" or stats.behind_records:
                    return False
        return True

    # -- checks ----------------------------------------------------------------------------

    def check_step(self) -> None:
        holders: dict[MessageKey, list[str]] = {}
        for instance in self.instances.values():
            if not instance.up:
                continue
            instance.replica.check_invariants()
            for key in instance.replica.leased():
                holders.setdefault(key, []).append(instance.name)
        duplicated = set()
        for key, names in holders.items():
            if len(names) > 1:
                if key not in self.proxied_keys:
                    self.fail(f"message {key} leased on {names} at once (R2)")
                duplicated.add(key)
        self.documented_duplicates += len(duplicated - self._duplicated_now)
        self._duplicated_now = duplicated

    def check_agreement(self) -> None:
        """After the heal: the same unremoved messages with the same owners everywhere, and
        what was acked anywhere is removed everywhere."""
        for key in self.persisted:
            views = {n: i.replica.view_of(key) for n, i in self.instances.items()}
            if len(set(views.values())) > 1:
                self.fail(f"instances disagree on {key} after heal: {views}")

    def removed_everywhere(self, key: MessageKey) -> bool:
        return all(i.replica.removed(key) for i in self.instances.values())

    def drained(self) -> bool:
        if any(p.lost or p.unpersisted for p in self.publishers):
            return False
        if self.published < self.options.messages:
            return False
        return all(self.removed_everywhere(key) for key in self.persisted)

    def note(self, line: str) -> None:
        self.transcript.append(f"{self.now_ms:>6} ms  {line}")

    def fail(self, why: str) -> None:
        tail = "\n".join(self.transcript[-30:])
        raise SimFailure(f"{why}\nreproduce with: make sim SEED={self.seed}\nlast steps:\n{tail}")


def run_seed(seed: int, options: SimOptions | None = None) -> Cluster:
    """Run one seed to the end; `SimFailure` if an invariant broke."""
    cluster = Cluster(seed, options or SimOptions())
    try:
        cluster.run()
    except SimFailure:
        raise
    except Exception as error:  # a core's assertion or protocol error: report it with the seed
        cluster.fail(f"{type(error).__name__}: {error}")
    return cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=1_000, help="run seeds 0..N-1")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the transcript")
    parser.add_argument("--proxied", action="store_true", help="proxied transfer on i0 (R7)")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.seeds)
    options = SimOptions(proxied=args.proxied)
    for seed in seeds:
        try:
            cluster = run_seed(seed, options)
        except SimFailure as failure:
            print(f"seed {seed} failed: {failure}", file=sys.stderr)
            return 1
        if args.verbose:
            print("\n".join(cluster.transcript))
    print(f"{len(seeds)} seed(s) passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
