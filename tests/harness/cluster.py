"""Several instance processes on 127.0.0.1 that replicate to each other (tests/cluster)."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.harness.instance import InstanceProcess, config_xml


@dataclass(frozen=True)
class Link:
    """One `Replication/Destination` of an instance (defaults: sync, passthrough of all)."""

    peer: str
    sync: bool = True
    pass_through: str | None = ".*"
    topics: tuple[str, ...] = ()
    group: str | None = None  # the destination's Group (default: the peer's Name)
    port: int | None = None  # dial this port instead of the peer's (a LinkProxy)


def free_ports(count: int) -> list[int]:
    """Ports free now on 127.0.0.1 (a destination must name its peer's port up front)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def destination_xml(link: Link, port: int) -> str:
    passthrough = f"<PassThrough>{link.pass_through}</PassThrough>" if link.pass_through else ""
    topics = "".join(
        f"<Topic><Name>{t}</Name><MessageType>json</MessageType></Topic>" for t in link.topics
    )
    return (
        f"<Destination><Name>{link.peer}</Name><Group>{link.group or link.peer}</Group>"
        f"<SyncType>{'sync' if link.sync else 'async'}</SyncType>"
        f"<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{port}</InetAddr>"
        f"<ReconnectTimeout>200ms</ReconnectTimeout></Transport>{topics}{passthrough}"
        "</Destination>"
    )


def cluster_configs(
    names: Sequence[str],
    links: Mapping[str, Sequence[Link]],
    ports: Mapping[str, int],
    extras: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """One configuration per instance: an incoming replication transport on its port and a
    destination for each of its links."""
    configs = {}
    for name in names:
        destinations = "".join(
            destination_xml(link, link.port or ports[link.peer]) for link in links.get(name, ())
        )
        extra = f"<Replication>{destinations}</Replication>" if destinations else ""
        extra += (extras or {}).get(name, "")
        text = config_xml(name=name, extra=extra)
        configs[name] = text.replace(
            "</Transports>",
            "<Transport><Name>replication</Name><Type>amps-replication</Type>"
            f"<InetAddr>127.0.0.1:{ports[name]}</InetAddr></Transport></Transports>",
        )
    return configs


class Cluster:
    """Instances by name, with the replication port of each."""

    def __init__(self, root: Path, names: Sequence[str], ports: Mapping[str, int]) -> None:
        self.root = root
        self.names = list(names)
        self.replication_ports = dict(ports)
        self.instances: dict[str, InstanceProcess] = {}

    def __getitem__(self, name: str) -> InstanceProcess:
        return self.instances[name]

    def start(
        self, links: Mapping[str, Sequence[Link]], extras: Mapping[str, str] | None = None
    ) -> Cluster:
        """Start every instance; `extras[name]` is inserted into that instance's config."""
        configs = cluster_configs(self.names, links, self.replication_ports, extras)
        try:
            for name in self.names:
                self.instances[name] = InstanceProcess(self.root / name, configs[name]).start()
        except BaseException:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        for process in self.instances.values():
            process.kill()


def cluster(root: Path, names: Sequence[str]) -> Cluster:
    """A cluster with replication ports chosen, not yet started."""
    return Cluster(root, names, dict(zip(names, free_ports(len(names)), strict=True)))


def full_mesh(names: Sequence[str], **options: object) -> dict[str, list[Link]]:
    return {n: [Link(p, **options) for p in names if p != n] for n in names}  # type: ignore[arg-type]


async def wait_until(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll a condition (it reads another process's admin view) until it holds; bounded.
    Polling, since the other process's state is nothing this one could await."""
    for _ in range(int(timeout_s / 0.05)):
        if await asyncio.to_thread(condition):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached in time")


DOWNGRADED = "downgraded to async"  # the instance's log line when it downgrades a destination


def destinations(instance: InstanceProcess) -> list[dict[str, Any]]:
    """The instance's admin view of its replication destinations."""
    url = f"http://127.0.0.1:{instance.admin_port}/amps/instance/replication.json"
    with urllib.request.urlopen(url, timeout=10) as response:
        found: list[dict[str, Any]] = orjson.loads(response.read())["destinations"]
    return found


def not_sync(instances: Mapping[str, InstanceProcess]) -> list[str]:
    """Every destination of the instances (in their order) not connected or downgraded, as
    "a -> b (state)"."""
    found = []
    for name, instance in instances.items():
        for d in destinations(instance):
            if not d["connected"] or d["downgraded"]:
                state = ", ".join(
                    f"{key} {d[key]}" for key in ("connected", "sync_type", "downgraded")
                )
                behind = f"{d['seconds_behind']:.1f} s behind"
                found.append(f"{name} -> {d['name']} ({state}, {behind})")
    return found


def downgrades_logged(instance: InstanceProcess) -> int:
    """How many times the instance has logged a downgrade of a destination (readable after
    a SIGKILL: the line is written before the downgrade releases any ack)."""
    return sum(DOWNGRADED in line for line in list(instance.output))


async def until_all_sync(instances: Mapping[str, InstanceProcess], timeout_s: float = 60.0) -> None:
    """Until every destination of the instances is connected, sync and not downgraded; bounded.
    Under load a live sync destination can fall more than a downgrade action's Age behind;
    an instance SIGKILLed while it is downgraded may hold acknowledged messages the others
    get only after its restart, out of order (documented async behaviour), so a test that
    claims order across a kill waits for this first. Put the instance to be killed last."""
    missing: list[str] = []
    for _ in range(int(timeout_s / 0.05)):
        missing = await asyncio.to_thread(not_sync, instances)
        if not missing:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not all destinations connected and sync in {timeout_s:.0f} s: {missing}")


async def kill_when_all_sync(running: Cluster, victim: str, timeout_s: float = 60.0) -> None:
    """SIGKILL `victim` once every destination of the cluster is connected and sync; fail if
    the victim downgraded one between the last check and the kill. What it acknowledged while
    downgraded would reach the others only after its restart, out of order: documented async
    behaviour, which a test claiming order across the kill does not test."""
    killed = running[victim]
    everyone = {name: running[name] for name in running.names if name != victim}
    everyone[victim] = killed  # last: the shortest window between its check and the kill
    for _ in range(20):  # each round ends sync; only a victim downgrading again repeats it
        await until_all_sync(everyone, timeout_s)
        downgrades = downgrades_logged(killed)  # counted from a moment all were sync...
        if not await asyncio.to_thread(not_sync, {victim: killed}):  # ...and still are
            break
    else:
        raise AssertionError(f"{victim} kept downgrading live destinations: {_logged(killed)}")
    await asyncio.to_thread(killed.kill)
    assert downgrades_logged(killed) == downgrades, (
        f"{victim} downgraded a live destination between the all-sync check and its SIGKILL "
        f"(a machine too loaded for the Age: the documented async window): {_logged(killed)}"
    )


def _logged(instance: InstanceProcess) -> str:
    return "".join(line for line in instance.output if DOWNGRADED in line)
