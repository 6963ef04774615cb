"""The failover part of bench_replication (issue 8): a publisher with the instance list keeps
publishing while the instance it is connected to is SIGKILLed, N times, rotating the victim.

Three instance processes run `deploy/amps-N.xml` (the sync full mesh `make cluster` runs) with
their ports replaced by free ones and the downgrade action's `Every`/`Age` as asked. For each
kill: kill -> the publisher sees its stream end -> it is logged on to another instance (its
publishes go there from then on), and kill -> the first persisted ack of a message published
after the kill (the survivor holds it until its downgrade action gives up on the dead sync
destination: the survivor's log line says when). A kill comes after a second of steady
publishing in which no live destination was downgraded (on a loaded machine one can fall
`Age` behind; the period is then run again, and counted). The killed instance is restarted
and the next kill waits until every destination is connected and sync again. At the end every
instance's log is read from epoch and checked for lost, duplicated and out-of-order messages
(tests/cluster/checker.py): a figure from a run that lost a persisted message is worthless.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import os
import random
import re
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from amps.client import Client, Message, Subscription
from tests.cluster.checker import check
from tests.harness.cluster import destinations, free_ports, until_all_sync
from tests.harness.instance import ROOT, InstanceProcess
from tests.harness.streams import more_within

DEPLOY = ROOT / "deploy"
NAMES = ("amps-1", "amps-2", "amps-3")
TOPIC = "failover"
PUBLISHER = "bench-failover"
RATE_PER_S = 1_000
TICK_S = 0.001  # the publisher sends what is due and looks at its acks this often
STEADY_S = 1.0  # publishing on the current instance, acks flowing, before each kill
# ... plus a random part: the wait before a kill starts when the last destination is upgraded,
# which happens on an `Every` tick, so without it every kill fell at the same phase of the
# survivors' schedules (just after a tick: the downgrade then came nearly a whole Every after
# the Age, each time). Seeded: a run can be repeated.
STEADY_JITTER_S = 1.0
SEED = 8
MAX_STEADY_PERIODS = 30  # in a row, each with a live destination downgraded: give up
FAILOVER_TIMEOUT_S = 60.0
REJOIN_TIMEOUT_S = 120.0
REPLAY_QUIET_S = 30.0
# (Every, Age) in ms of the downgrade action: the tests' (tests/cluster/test_sync.py) and
# deploy/amps-N.xml's own.
SHORT = (100, 500)
DEPLOYED = (500, 2000)


@dataclass(frozen=True)
class Kill:
    """One kill: the victim and, in seconds after the SIGKILL, the publisher's stream lost,
    its logon on another instance, the survivor's downgrade of the victim and the first
    persisted ack of a message published after the kill."""

    victim: str
    survivor: str
    killed_wall: float  # time.time(): the instances' log lines are stamped in wall-clock time
    lost_s: float  # the publisher saw its stream end (at most TICK_S late)
    logged_on_s: float
    downgraded_s: float | None  # the survivor's log line (to the millisecond)
    acked_s: float
    republished: int


def downgraded_at(survivor: InstanceProcess, victim: str, after: float) -> float | None:
    """The wall-clock time of the survivor's first log line after `after` saying it
    downgraded `victim` (logging's asctime: local time, to the millisecond)."""
    text = f"replication destination {victim} downgraded to async"
    for line in list(survivor.output):
        if text not in line:
            continue
        stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if stamp >= after - 0.001:
            return stamp
    return None


def deploy_config(name: str, ports: dict[str, int], every_ms: int, age_ms: int) -> str:
    """deploy/<name>.xml with every port of the three instances replaced by `ports` (keyed
    by the deployed port as text) and the downgrade action's Every and Age replaced; a
    ValueError names what the file no longer has (the bench must not run on the deployed
    ports, where `make cluster` may be running)."""
    text = (DEPLOY / f"{name}.xml").read_text()
    unknown = sorted(set(re.findall(r":(\d{4})<", text)) - ports.keys())
    if unknown:
        raise ValueError(f"deploy/{name}.xml: ports {', '.join(unknown)} not known here")
    text = re.sub(r":(\d{4})<", lambda m: f":{ports[m[1]]}<", text)
    down = "amps-action-do-downgrade-replication</Module>"
    text, everys = re.subn(r"<Every>[^<]*</Every>", f"<Every>{every_ms}ms</Every>", text)
    head, found, tail = text.partition(down)
    tail, ages = re.subn(r"<Age>[^<]*</Age>", f"<Age>{age_ms}ms</Age>", tail, count=1)
    if not (everys and found and ages):
        raise ValueError(f"deploy/{name}.xml: no scheduled downgrade action with an Age")
    return head + down + tail


@contextlib.contextmanager
def deployed_cluster(every_ms: int, age_ms: int) -> Iterator[dict[str, InstanceProcess]]:
    """The three deploy/ instances on free ports in a temporary directory."""
    root = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    deployed = [f"{base + n}" for base in (9100, 8100, 9200) for n in (1, 2, 3)]
    ports = dict(zip(deployed, free_ports(len(deployed)), strict=True))
    instances = {
        name: InstanceProcess(root / name, deploy_config(name, ports, every_ms, age_ms))
        for name in NAMES
    }
    try:
        for instance in instances.values():
            instance.start()
        yield instances
    finally:
        for instance in instances.values():
            instance.kill()
        shutil.rmtree(root, ignore_errors=True)


def sync_state(instances: dict[str, InstanceProcess]) -> tuple[list[str], int]:
    """Every destination not connected and sync, as "a -> b (how)", and the downgrades and
    upgrades made so far by every instance."""
    found, changes = [], 0
    for name, instance in instances.items():
        for d in destinations(instance):
            changes += d["sync_changes"]
            if not d["connected"] or d["downgraded"]:
                how = "downgraded" if d["downgraded"] else "not connected"
                found.append(f"{name} -> {d['name']} ({how}, {d['seconds_behind']:.1f} s behind)")
    return found, changes


class Publisher:
    """Publishes numbered messages at RATE_PER_S, each tick noting when it is logged on and
    how far its acks go: the kill's two figures are read from these notes."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.sent = 0
        self.stopped = asyncio.Event()
        self._watch: tuple[float, str, int] | None = None  # (killed at, victim, first seq)
        self.lost_at: float | None = None
        self.logged_on_at: float | None = None
        self.acked_at: float | None = None
        self.pad = "x" * 1000

    async def run(self) -> None:
        started = time.monotonic()
        while not self.stopped.is_set():
            due = int((time.monotonic() - started) * RATE_PER_S) + 1
            for _ in range(self.sent, due):
                self.sent += 1
                body = orjson.dumps({"p": PUBLISHER, "n": self.sent, "pad": self.pad})
                await self.client.publish(TOPIC, body)
            self._note(time.monotonic())
            await asyncio.sleep(TICK_S)

    def watch(self, killed_at: float, victim: str) -> None:
        """From now on note the logon elsewhere and the ack of a message sent after now."""
        self.lost_at = self.logged_on_at = self.acked_at = None
        self._watch = (killed_at, victim, self.sent + 1)

    def _note(self, now: float) -> None:
        if self._watch is None:
            return
        _, victim, first = self._watch
        stats = self.client.statistics()
        if self.lost_at is None and stats.connected_server != victim:
            self.lost_at = now
        if self.logged_on_at is None and stats.connected_server not in (None, victim):
            self.logged_on_at = now
        if self.acked_at is None and stats.persisted_seq >= first and self.sent >= first:
            self.acked_at = now


async def _until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise TimeoutError(f"failover bench: {what} not reached in {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


async def _kill_once(
    instances: dict[str, InstanceProcess], client: Client, publisher: Publisher
) -> Kill:
    """SIGKILL the instance the publisher is connected to; the figures once it has an ack
    from another instance."""
    by_address = {i.address: name for name, i in instances.items()}
    current = client.statistics().connected_server
    assert current is not None
    victim = instances[by_address[current]]
    assert victim.process is not None
    republished = client.statistics().republished
    killed_at, killed_wall = time.monotonic(), time.time()
    os.kill(victim.process.pid, signal.SIGKILL)
    publisher.watch(killed_at, current)
    await asyncio.to_thread(victim.kill)  # reaped
    await _until(lambda: publisher.acked_at is not None, FAILOVER_TIMEOUT_S, "the next ack")
    stats = client.statistics()
    assert publisher.lost_at is not None
    assert publisher.logged_on_at is not None
    assert publisher.acked_at is not None
    return Kill(
        by_address[current],
        by_address.get(stats.connected_server or "", "?"),
        killed_wall,
        publisher.lost_at - killed_at,
        publisher.logged_on_at - killed_at,
        None,
        publisher.acked_at - killed_at,
        stats.republished - republished,
    )


async def _steady(
    instances: dict[str, InstanceProcess], client: Client, jitter: random.Random
) -> int:
    """STEADY_S, and up to STEADY_JITTER_S more, of publishing with acks flowing and no
    destination downgraded meanwhile: on a loaded machine a live destination can fall more
    than Age behind and be downgraded, and a kill then measures a publisher told "persisted"
    by an instance whose destinations were async (its last messages reach the others only
    when it returns: the replication guide's failover section). Returns how many times a
    period had to be run again for that."""
    _, before = await asyncio.to_thread(sync_state, instances)
    for again in range(MAX_STEADY_PERIODS):
        await asyncio.sleep(STEADY_S + jitter.uniform(0, STEADY_JITTER_S))
        await client.flush(FAILOVER_TIMEOUT_S)
        missing, after = await asyncio.to_thread(sync_state, instances)
        if not missing and after == before:
            return again
        print(
            f"  before the kill: {after - before} downgrades and upgrades of live destinations "
            f"({', '.join(missing) or 'all sync again'}); publishing on",
            flush=True,
        )
        await until_all_sync(instances, REJOIN_TIMEOUT_S)
        _, before = await asyncio.to_thread(sync_state, instances)
    raise RuntimeError(
        f"failover bench: a live destination was downgraded in each of {MAX_STEADY_PERIODS} "
        "steady periods in a row: the machine is too loaded for this Age"
    )


async def _kills(instances: dict[str, InstanceProcess], kills: int) -> tuple[list[Kill], int, int]:
    """Kill the publisher's instance `kills` times, restarting each victim and waiting for
    every destination to be sync again; the kills, the messages published and how many
    times a live destination was found downgraded before a kill."""
    results: list[Kill] = []
    live_downgrades = 0
    jitter = random.Random(SEED)
    async with Client(PUBLISHER) as client:
        await client.connect([instances[name].address for name in NAMES])
        publisher = Publisher(client)
        running = asyncio.ensure_future(publisher.run())
        try:
            for number in range(1, kills + 1):
                live_downgrades += await _steady(instances, client, jitter)
                kill = await _kill_once(instances, client, publisher)
                await asyncio.to_thread(instances[kill.victim].restart, kill=True)
                await until_all_sync(instances, REJOIN_TIMEOUT_S)
                # Read once it is surely there: the survivor logs it before it releases the
                # acks, but its output reaches this process through a pipe and a thread.
                if kill.survivor in instances:
                    down = downgraded_at(instances[kill.survivor], kill.victim, kill.killed_wall)
                    if down is not None:
                        kill = dataclasses.replace(kill, downgraded_s=down - kill.killed_wall)
                results.append(kill)
                print(
                    f"  kill {number}: {kill.victim} -> {kill.survivor}: stream lost after "
                    f"{kill.lost_s:.3f} s, publishing there after {kill.logged_on_s:.3f} s, "
                    f"{kill.survivor} downgraded {kill.victim} "
                    f"after {_seconds(kill.downgraded_s)}, next persisted ack after "
                    f"{kill.acked_s:.3f} s ({kill.republished} republished)",
                    flush=True,
                )
        finally:
            publisher.stopped.set()
            await running
        await client.flush(FAILOVER_TIMEOUT_S)
        return results, publisher.sent, live_downgrades


def _load() -> str:
    return " ".join(f"{load:.1f}" for load in os.getloadavg())


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


async def _replay(subscription: Subscription, count: int) -> list[Message]:
    """Up to `count` messages, fewer when none comes for REPLAY_QUIET_S (then the check
    reports the missing ones as lost instead of the bench failing on a timeout)."""
    out: list[Message] = []
    messages = aiter(subscription)
    with contextlib.suppress(TimeoutError, StopAsyncIteration):
        while len(out) < count:
            out.append(await asyncio.wait_for(anext(messages), REPLAY_QUIET_S))
    return out


async def _check(instances: dict[str, InstanceProcess], sent: int) -> dict[str, str]:
    """Each instance's epoch replay of TOPIC, checked: lost, duplicated, out of order (with
    the first few numbers that came after a higher one, and the instance each came from)."""
    found = {}
    for name, instance in instances.items():
        async with Client(f"bench-failover-check-{name}") as reader:
            await reader.connect(instance.address)
            subscription = await reader.subscribe(TOPIC, bookmark="epoch", options="origin")
            messages = await _replay(subscription, sent)
            messages += await more_within(subscription, 0.5)
        numbers = [(m.json()["n"], m.origin_instance) for m in messages]
        count = check(((PUBLISHER, n) for n, _ in numbers), {PUBLISHER: sent})[PUBLISHER]
        late = [
            f"{n} (from {origin}) after {previous} (from {previous_origin})"
            for (previous, previous_origin), (n, origin) in itertools.pairwise(numbers)
            if n <= previous
        ]
        found[name] = (
            f"lost {count.lost}, duplicated {count.duplicated}, out of order "
            f"{count.out_of_order}" + (f" ({', '.join(late[:3])})" if late else "")
        )
    return found


def failover(kills: int, schedule: tuple[int, int]) -> None:
    """`kills` SIGKILLs of the publisher's instance with the downgrade action's
    (Every, Age) = `schedule` in ms; prints each kill, then p50 and max beside the Age."""
    every_ms, age_ms = schedule
    if kills < 1:
        return
    print(
        f"failover: deploy/amps-N.xml (sync full mesh, free ports), downgrade action Every "
        f"{every_ms} ms / Age {age_ms} ms; a publisher at {RATE_PER_S:,} msg/s (1 KB) with "
        f"the three instances, {kills} SIGKILLs of its instance (target: <= 1 s beyond the "
        f"Age); load average {_load()}",
        flush=True,
    )
    with deployed_cluster(every_ms, age_ms) as instances:
        results, sent, live_downgrades = asyncio.run(_kills(instances, kills))
        checked = asyncio.run(_check(instances, sent))
    logged_on = sorted(k.logged_on_s for k in results)
    acked = sorted(k.acked_s for k in results)
    age_s = age_ms / 1000

    def summary(values: list[float]) -> str:
        p50, worst = statistics.median(values), values[-1]
        return f"p50 {p50:.3f} s, max {worst:.3f} s"

    beyond = [a - age_s for a in acked]
    downgraded = sorted(k.downgraded_s for k in results if k.downgraded_s is not None)
    after_downgrade = sorted(
        k.acked_s - k.downgraded_s for k in results if k.downgraded_s is not None
    )
    print(
        f"failover, Every {every_ms} ms / Age {age_ms} ms, {len(results)} kills: kill -> "
        f"publishing on another instance {summary(logged_on)}; kill -> next persisted ack "
        f"{summary(acked)}, beyond the Age: p50 {statistics.median(beyond):.3f} s, max "
        f"{beyond[-1]:.3f} s (target <= 1 s); load average now {_load()}\n"
        f"  where it goes: kill -> the publisher sees its stream end "
        f"{summary(sorted(k.lost_s for k in results))}, -> logged on elsewhere "
        f"{summary(sorted(k.logged_on_s - k.lost_s for k in results))}; "
        f"kill -> the survivor's downgrade of the victim "
        f"{summary(downgraded) if downgraded else '-'} (its oldest unacknowledged record "
        f"passes the Age, then the next Every tick); downgrade -> the ack at the publisher "
        f"{summary(after_downgrade) if after_downgrade else '-'}\n"
        f"  steady periods run again because a live destination was downgraded meanwhile: "
        f"{live_downgrades}\n"
        f"  {sent:,} published, every one persisted; each instance's log from epoch: "
        + "; ".join(f"{name} {counts}" for name, counts in checked.items()),
        flush=True,
    )
