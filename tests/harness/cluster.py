"""Several instance processes on 127.0.0.1 that replicate to each other (tests/cluster)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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
