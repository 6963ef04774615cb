"""A seeded simulation of replicated-queue ownership across instances (issue 9, R2-R5, R10).

Each instance runs the real ownership core (`replication/ownership.py`) and the real transfer
latency estimator, over a simulated log (a durable prefix: a crash loses what was not synced),
a simulated network (replication streams that resend from the receiver's durable position,
lossy transfer requests, partitions that heal) and simulated consumers that lease and ack.
All randomness comes from one seed. A safety phase (crashes, partitions) is followed by a
liveness phase (heal, replicate everything, then drain with consumers everywhere).

Invariants, checked after every step: no message is leased on two instances at once, except
the duplicates proxied transfer is documented to allow (R7: a message a proxy claimed or
granted while its owner was unreachable, not down); each machine's own invariants hold. At the
end: every instance agrees on the owner and epoch of every unremoved message, and every
published message is acked everywhere. With `proxied`, instance i0 is the runbook's survivor:
proxied transfer is on there until the heal, when it is switched off again.

    python -m tests.simulation.ownership_sim --seeds 1000      (make sim SEEDS=1000)
    python -m tests.simulation.ownership_sim --seed 123 -v     (make sim SEED=123)

The queue engine and the link core join this simulation when ownership is wired into them.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, field

from replication.latency import LatencyOptions, TransferLatencies
from replication.ownership import (
    Action,
    AppendOwnership,
    Event,
    MessageEntered,
    MessageKey,
    Offer,
    Ownership,
    OwnershipRecord,
    OwnershipRecorded,
    OwnershipState,
    Removed,
    SendOwnership,
    SendTransferRequest,
    TakerWaiting,
    TransferKind,
    TransferRequested,
)

REQUEST_TIMEOUT_MS = 40
LATENCY = LatencyOptions(default_ms=20, window=16, min_samples=4, max_tracked=1_024, max_ms=200)

# A log entry: a publish (key, initial owner), an ownership record, or a removal (an ack).
Entry = tuple[str, MessageKey, str] | tuple[str, OwnershipRecord] | tuple[str, MessageKey]


@dataclass(frozen=True)
class SimOptions:
    """The knobs of one run; probabilities are per step."""

    instances: int = 3
    messages: int = 10
    safety_steps: int = 160
    drain_steps: int = 4_000
    crash_probability: float = 0.02
    partition_probability: float = 0.03
    heal_probability: float = 0.05
    request_loss_probability: float = 0.1
    max_down_steps: int = 20  # a crashed instance stays down up to this many steps
    proxied: bool = False  # proxied transfer on i0 during the safety phase (R7)
    break_log_before_send: bool = False  # send grants before they are durable (must fail)
    break_first_request: bool = False  # grant every request, not the first (must fail)


class SimFailure(AssertionError):
    """An invariant broke; carries the seed and the last steps."""


class FirstRequestBroken(Ownership):
    """Deliberately wrong: grants again after granting (R5 broken), to prove the sim sees it."""

    def _on_requested(self, event: TransferRequested, actions: list[Action]) -> None:
        entry = self._entries.get(event.key)
        if entry is not None and entry.state is OwnershipState.GRANTED:
            if event.requester != entry.owner:
                record = OwnershipRecord(
                    event.key, TransferKind.GRANT, self.here, event.requester, entry.epoch + 1
                )
                self._apply(event.key, entry, record)
                actions += [AppendOwnership(record), SendOwnership(record)]
            return
        super()._on_requested(event, actions)


@dataclass
class Instance:
    name: str
    options: SimOptions
    log: list[tuple[str, Entry]] = field(default_factory=list)  # (origin, entry)
    durable_len: int = 0
    own: list[Entry] = field(default_factory=list)  # entries written here, in order
    own_durable_len: int = 0
    received: dict[str, int] = field(default_factory=dict)  # origin -> own entries held
    received_durable: dict[str, int] = field(default_factory=dict)
    up: bool = True
    down_steps: int = 0
    proxied: bool = False
    consumer_room: int = 0  # how many leases its consumers take at once (0: no consumer)
    leased: dict[MessageKey, int] = field(default_factory=dict)  # key -> lease start ms
    arrived_ms: dict[MessageKey, int] = field(default_factory=dict)
    machine: Ownership = field(init=False)
    latency: TransferLatencies = field(init=False)

    def __post_init__(self) -> None:
        self.restart(0)

    def restart(self, now_ms: int) -> None:
        """Lose what was not synced, then rebuild ownership from the durable log."""
        kind = FirstRequestBroken if self.options.break_first_request else Ownership
        self.machine = kind(self.name, request_timeout_ms=REQUEST_TIMEOUT_MS)
        self.machine.proxied_transfer = self.proxied
        self.latency = TransferLatencies(LATENCY)
        del self.log[self.durable_len :]
        del self.own[self.own_durable_len :]
        self.received = dict(self.received_durable)
        self.leased.clear()
        for _, entry in self.log:
            self.machine.handle(event_of(entry), now_ms)  # replay: actions were done before
            if entry[0] == "publish":
                self.arrived_ms[entry[1]] = now_ms  # type: ignore[index]

    def sync(self) -> None:
        self.durable_len = len(self.log)
        self.own_durable_len = len(self.own)
        self.received_durable = dict(self.received)

    def append(self, entry: Entry) -> None:
        self.log.append((self.name, entry))
        self.own.append(entry)


def event_of(entry: Entry) -> Event:
    if entry[0] == "publish":
        return MessageEntered(entry[1], entry[2])  # type: ignore[arg-type, misc]
    if entry[0] == "own":
        return OwnershipRecorded(entry[1])  # type: ignore[arg-type]
    return Removed(entry[1])  # type: ignore[arg-type]


class Cluster:
    """The instances, the network between them, the clock and the checker."""

    def __init__(self, seed: int, options: SimOptions) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.now_ms = 1
        names = [f"i{n}" for n in range(options.instances)]
        self.instances = {n: Instance(n, options) for n in names}
        for instance in self.instances.values():
            instance.consumer_room = self.rng.choice([0, 0, 1, 2])
        if options.proxied:
            self.set_proxied(self.instances[names[0]], on=True)
        self.proxied_keys: set[MessageKey] = set()  # claimed or granted by a proxy
        self.documented_duplicates = 0
        self.duplicated_now: set[MessageKey] = set()
        self.cut: set[frozenset[str]] = set()
        self.requests: list[tuple[str, str, MessageKey]] = []  # (from, to, key), unordered
        self.published: list[MessageKey] = []
        self.transcript: list[str] = []

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        options = self.options
        for _ in range(options.safety_steps):
            self.step(faults=True)
        for instance in self.instances.values():
            if instance.proxied:
                self.set_proxied(instance, on=False)  # the runbook: off once all are back
        self.heal()
        self.settle()
        self.check_agreement()
        for instance in self.instances.values():
            instance.consumer_room = max(instance.consumer_room, 1)
        for _ in range(options.drain_steps):
            if self.all_removed():
                return
            self.step(faults=False)
        left = [k for k in self.published if not self.removed_everywhere(k)]
        self.fail(f"not drained: {left} never acked everywhere")

    def step(self, *, faults: bool) -> None:
        rng = self.rng
        options = self.options
        for instance in self.instances.values():
            if not instance.up:
                instance.down_steps -= 1
                if instance.down_steps <= 0:
                    instance.up = True
                    self.note(f"restart {instance.name}")
        self.update_reachability()
        choice = rng.random()
        if faults and choice < options.crash_probability:
            self.crash(rng.choice(list(self.instances)))
        elif faults and choice < options.crash_probability + options.partition_probability:
            a, b = rng.sample(list(self.instances), 2)
            self.cut.add(frozenset((a, b)))
            self.note(f"cut {a}-{b}")
        elif choice < 0.15 and self.cut and rng.random() < self.options.heal_probability * 10:
            self.cut.discard(rng.choice(sorted(self.cut, key=sorted)))
            self.note("heal one")
        elif choice < 0.25 and len(self.published) < self.options.messages:
            self.publish(rng.choice(list(self.instances)))
        elif choice < 0.40:
            self.replicate_some()
        elif choice < 0.50:
            self.deliver_request()
        elif choice < 0.65:
            self.consume(rng.choice(list(self.instances)))
        elif choice < 0.78:
            self.ack_one()
        elif choice < 0.88:
            instance = rng.choice(list(self.instances.values()))
            instance.sync()
        else:
            self.tick(rng.randint(1, 25))
        self.check_step()

    # -- operations ------------------------------------------------------------------------

    def perform(self, instance: Instance, actions: list[Action]) -> None:
        appended = False
        for action in actions:
            if isinstance(action, AppendOwnership):
                instance.append(("own", action.record))
                appended = True
            elif isinstance(action, Offer) and appended:
                if not self.options.break_log_before_send:
                    instance.sync()  # the claim is durable before it is acted on (Rule 5)
            elif isinstance(action, SendOwnership) and self.options.break_log_before_send:
                for other in self.instances.values():  # at once, durable or not: wrong
                    if other is not instance and self.linked(instance.name, other.name):
                        self.handle(other, OwnershipRecorded(action.record))
            elif isinstance(action, SendTransferRequest):
                self.requests.append((instance.name, action.owner, action.key))

    def handle(self, instance: Instance, event: Event) -> None:
        machine = instance.machine
        key = event.record.key if isinstance(event, OwnershipRecorded) else event.key
        owned_before = machine.owned_here(key)
        actions = machine.handle(event, self.now_ms)
        wrote = any(isinstance(a, AppendOwnership) for a in actions)
        if wrote and machine.proxied_transfer and not owned_before:
            self.proxied_keys.add(key)  # a claim, or a grant of what it did not own
            self.note(f"proxied claim or grant of {key} at {instance.name}")
        self.perform(instance, actions)
        if isinstance(event, Removed) and event.key in instance.leased:
            del instance.leased[event.key]  # acked elsewhere: the lease here is moot

    def publish(self, name: str) -> None:
        instance = self.instances[name]
        if not instance.up:
            return
        key = (list(self.instances).index(name), len(self.published))  # (publisher, seq)
        self.published.append(key)
        instance.append(("publish", key, name))
        instance.sync()  # the publisher waits for its persisted ack
        instance.arrived_ms[key] = self.now_ms
        self.handle(instance, MessageEntered(key, name))
        self.note(f"publish {key} at {name}")

    def replicate_some(self) -> None:
        """One stream moves a few durable entries of its sender's own log."""
        pairs = [
            (a, b)
            for a in self.instances.values()
            for b in self.instances.values()
            if a is not b and self.linked(a.name, b.name)
        ]
        if not pairs:
            return
        sender, receiver = self.rng.choice(pairs)
        for _ in range(self.rng.randint(1, 3)):
            if not self.receive_next(sender, receiver):
                return

    def receive_next(self, sender: Instance, receiver: Instance) -> bool:
        """The receiver takes the next durable entry of the sender's own log, if any."""
        index = receiver.received.get(sender.name, 0)
        if index >= sender.own_durable_len:
            return False
        entry = sender.own[index]
        receiver.log.append((sender.name, entry))
        receiver.received[sender.name] = index + 1
        if entry[0] == "publish":
            receiver.arrived_ms[entry[1]] = self.now_ms  # type: ignore[index]
            receiver.latency.of(entry[2]).arrived(entry[1], self.now_ms)  # type: ignore[misc]
        elif entry[0] == "removed":
            for estimator in (receiver.latency.of(o) for o in self.instances):
                estimator.acked(entry[1], self.now_ms)
        self.handle(receiver, event_of(entry))
        return True

    def deliver_request(self) -> None:
        if not self.requests:
            return
        source, owner, key = self.requests.pop(self.rng.randrange(len(self.requests)))
        target = self.instances[owner]
        if owner in self.instances[source].machine.unreachable:
            # Routed through a proxy that can reach the requester (R7), if there is one.
            proxies = [
                i
                for i in self.instances.values()
                if i.proxied and i.name != source and self.linked(source, i.name)
            ]
            if not proxies:
                return
            target = proxies[0]
        lost = self.rng.random() < self.options.request_loss_probability
        if lost or not self.linked(source, target.name):
            return  # lost: the requester times out and may ask again
        held = key in target.leased or (
            target.consumer_room > len(target.leased) and target.machine.owned_here(key)
        )
        self.handle(target, TransferRequested(key, source, held))

    def consume(self, name: str) -> None:
        """The instance's consumers take what is owned here, and wish for what is not (R4)."""
        instance = self.instances[name]
        if not instance.up:
            return
        machine = instance.machine
        for key in self.published:
            if len(instance.leased) >= instance.consumer_room:
                return
            state = machine.state_of(key)
            if state is None or state is OwnershipState.REMOVED or key in instance.leased:
                continue
            if machine.owned_here(key):
                instance.leased[key] = self.now_ms
                self.note(f"lease {key} at {name}")
                continue
            owner = machine.owner_of(key)
            assert owner is not None
            latency = instance.latency.of(owner[0])
            if state is not OwnershipState.REQUESTED and latency.waited_long_enough(
                instance.arrived_ms.get(key, self.now_ms), self.now_ms
            ):
                self.handle(instance, TakerWaiting(key))

    def ack_one(self) -> None:
        holders = [(i, k) for i in self.instances.values() if i.up for k in i.leased]
        if not holders:
            return
        instance, key = self.rng.choice(holders)
        del instance.leased[key]
        instance.append(("removed", key))
        self.handle(instance, Removed(key))
        self.note(f"ack {key} at {instance.name}")

    def tick(self, ms: int) -> None:
        self.now_ms += ms
        for instance in self.instances.values():
            if instance.up:
                self.perform(instance, instance.machine.on_deadline(self.now_ms))

    def crash(self, name: str) -> None:
        instance = self.instances[name]
        if not instance.up:
            return
        self.requests = [r for r in self.requests if name not in (r[0], r[1])]
        instance.restart(self.now_ms)
        instance.up = False
        instance.down_steps = self.rng.randint(1, max(1, self.options.max_down_steps))
        self.note(f"crash {name}")

    def heal(self) -> None:
        self.cut.clear()
        for instance in self.instances.values():
            instance.up = True
        self.update_reachability()

    def set_proxied(self, instance: Instance, *, on: bool) -> None:
        instance.proxied = on
        instance.machine.proxied_transfer = on

    def update_reachability(self) -> None:
        """Each instance's `unreachable`: those not connected to it by any path (R7)."""
        for instance in self.instances.values():
            seen = {instance.name}
            frontier = [instance.name]
            while frontier:
                here = frontier.pop()
                for other in self.instances:
                    if other not in seen and self.linked(here, other):
                        seen.add(other)
                        frontier.append(other)
            instance.machine.unreachable = frozenset(set(self.instances) - seen)

    def settle(self) -> None:
        """Everything durable reaches everyone; nothing else happens meanwhile."""
        for instance in self.instances.values():
            instance.sync()
        for _ in range(100):
            moved = False
            for sender in self.instances.values():
                for receiver in self.instances.values():
                    while sender is not receiver and self.receive_next(sender, receiver):
                        moved = True
            for instance in self.instances.values():
                instance.sync()
            if not moved:
                return
        self.fail("replication did not settle")

    def linked(self, a: str, b: str) -> bool:
        up = self.instances[a].up and self.instances[b].up
        return up and frozenset((a, b)) not in self.cut

    # -- checks ----------------------------------------------------------------------------

    def check_step(self) -> None:
        holders: dict[MessageKey, list[str]] = {}
        for instance in self.instances.values():
            instance.machine.check_invariants()
            for key in instance.leased:
                holders.setdefault(key, []).append(instance.name)
        duplicated = set()
        for key, names in holders.items():
            if len(names) > 1:
                if key not in self.proxied_keys:
                    self.fail(f"message {key} leased on {names} at once (R2)")
                duplicated.add(key)  # the duplicate proxied transfer documents (R7)
        self.documented_duplicates += len(duplicated - self.duplicated_now)
        self.duplicated_now = duplicated

    def check_agreement(self) -> None:
        for key in self.published:
            views = {
                name: (i.machine.state_of(key) is OwnershipState.REMOVED, i.machine.owner_of(key))
                for name, i in self.instances.items()
            }
            if len(set(views.values())) > 1:
                self.fail(f"instances disagree on {key} after heal: {views}")

    def removed_everywhere(self, key: MessageKey) -> bool:
        return all(
            i.machine.state_of(key) is OwnershipState.REMOVED for i in self.instances.values()
        )

    def all_removed(self) -> bool:
        return all(self.removed_everywhere(key) for key in self.published)

    def note(self, line: str) -> None:
        self.transcript.append(f"{self.now_ms:>6} ms  {line}")

    def fail(self, why: str) -> None:
        tail = "\n".join(self.transcript[-25:])
        raise SimFailure(f"{why}\nreproduce with: make sim SEED={self.seed}\nlast steps:\n{tail}")


def run_seed(seed: int, options: SimOptions = SimOptions()) -> Cluster:
    """Run one seed to the end; `SimFailure` if an invariant broke."""
    cluster = Cluster(seed, options)
    cluster.run()
    return cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
