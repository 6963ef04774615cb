"""Several instance processes on 127.0.0.1 that replicate to each other (tests/cluster)."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.harness.instance import InstanceProcess, config_xml


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


def destination_xml(
    peer: str, port: int, *, sync: str = "sync", pass_through: str | None = ".*", topics: str = ""
) -> str:
    passthrough = f"<PassThrough>{pass_through}</PassThrough>" if pass_through else ""
    return (
        f"<Destination><Name>{peer}</Name><Group>{peer}</Group><SyncType>{sync}</SyncType>"
        f"<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{port}</InetAddr>"
        f"<ReconnectTimeout>200ms</ReconnectTimeout></Transport>{topics}{passthrough}"
        "</Destination>"
    )


def cluster_configs(
    names: Sequence[str],
    links: Mapping[str, Sequence[str]],
    ports: Mapping[str, int],
    **destination_options: str | None,
) -> dict[str, str]:
    """One configuration per instance: an incoming replication transport on its port and a
    destination for each peer in `links[name]`."""
    configs = {}
    for name in names:
        destinations = "".join(
            destination_xml(peer, ports[peer], **destination_options)  # type: ignore[arg-type]
            for peer in links.get(name, ())
        )
        extra = f"<Replication>{destinations}</Replication>" if destinations else ""
        text = config_xml(name=name, extra=extra)
        text = text.replace(
            "</Transports>",
            "<Transport><Name>replication</Name><Type>amps-replication</Type>"
            f"<InetAddr>127.0.0.1:{ports[name]}</InetAddr></Transport></Transports>",
        )
        configs[name] = text
    return configs


def start_cluster(
    root: Path,
    names: Sequence[str],
    links: Mapping[str, Sequence[str]],
    **destination_options: str | None,
) -> dict[str, InstanceProcess]:
    """Start every instance (replication ports chosen free up front); kill them on failure."""
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    configs = cluster_configs(names, links, ports, **destination_options)
    started: dict[str, InstanceProcess] = {}
    try:
        for name in names:
            started[name] = InstanceProcess(root / name, configs[name]).start()
    except BaseException:
        for process in started.values():
            process.kill()
        raise
    return started


def full_mesh(names: Sequence[str]) -> dict[str, list[str]]:
    return {n: [p for p in names if p != n] for n in names}
