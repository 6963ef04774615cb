"""What TLS costs (issue 12): each figure beside its plaintext reference measured in the same run,
as a ratio. Prints; asserts nothing.

`.venv/bin/python -m bench.bench_tls [--quick] [--messages N] [--rounds R]`

1. durable publish (1 KB, persisted acks) from one client through a plaintext client transport
   and through a TLS one (TLS 1.2+, the server's certificate from deploy/make-certs.sh);
2. the same with one sync replication destination over `amps-replication` and over
   `amps-replication-secure` (mutual TLS both ways): every persisted ack waits for the link;
3. catch-up: an instance that missed N messages replays them over each kind of link.

Plaintext and TLS runs alternate, R rounds each, and the median of each is reported, with the
CPU each message cost the instances (user + system time from /proc) and the client: the machine
is shared with other work, so read the ratios (CPU per message varies much less than rates).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from amps.client import Client
from bench.bench_broker import process_cpu_s
from bench.common import json_payloads
from tests.harness.cluster import Link, cluster_configs, free_ports
from tests.harness.instance import InstanceProcess, config_xml

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "bench"
PHASE_TIMEOUT_S = 300.0
PLAIN = "<Type>amps-replication</Type>"


def make_certs(directory: Path, *names: str) -> Path:
    """A CA and a certificate per name, made by the documented script."""
    command = ["bash", str(ROOT / "deploy" / "make-certs.sh"), str(directory), *names]
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    return directory


def tls_elements(certs: Path, name: str, ca: bool) -> str:
    authority = f"<CAFile>{certs / 'ca.pem'}</CAFile>" if ca else ""
    return (
        f"<Certificate>{certs / name}.pem</Certificate>"
        f"<PrivateKey>{certs / name}.key</PrivateKey>{authority}"
    )


@contextlib.contextmanager
def instances(configs: dict[str, str]) -> Iterator[dict[str, InstanceProcess]]:
    """Start each configuration in a temporary directory; kill and delete afterwards."""
    root = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    started: dict[str, InstanceProcess] = {}
    try:
        for name, text in configs.items():
            started[name] = InstanceProcess(root / name, text).start()
        yield started
    finally:
        for process in started.values():
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Run:
    """One measured run: messages per second, and CPU microseconds per message spent by the
    instances involved and by the client."""

    rate: float
    server_us: float
    client_us: float


async def _publish(address: str, count: int, name: str, ca: Path | None) -> tuple[float, float]:
    """Publish `count` 1 KB messages and flush: (wall seconds, client CPU seconds)."""
    payloads = json_payloads()
    mask = len(payloads) - 1
    async with Client(name, tls_ca=ca) as client:
        await client.connect(address, timeout_s=30)
        started, cpu_started = time.monotonic(), time.process_time()
        for index in range(count):
            await client.publish(TOPIC, payloads[index & mask])
        await client.flush(timeout_s=PHASE_TIMEOUT_S)
        return time.monotonic() - started, time.process_time() - cpu_started


def publish_run(
    servers: list[InstanceProcess], count: int, name: str, ca: Path | None = None
) -> Run:
    """Publish through the first of `servers`; CPU counted over all of them."""
    before = sum(process_cpu_s(server) for server in servers)
    seconds, client_s = asyncio.run(_publish(servers[0].address, count, name, ca))
    server_s = sum(process_cpu_s(server) for server in servers) - before
    return Run(count / seconds, server_s / count * 1e6, client_s / count * 1e6)


async def _read(address: str, count: int, name: str) -> None:
    async with Client(name) as client:
        await client.connect(address, timeout_s=30)
        subscription = await client.subscribe(TOPIC, bookmark="epoch")
        got = 0
        async for _ in subscription:
            got += 1
            if got == count:
                return


def client_transport(certs: Path, messages: int, rounds: int) -> None:
    plain_text = config_xml(name="plain")
    tls = tls_elements(certs, "amps-test", ca=False)
    tls_text = config_xml(name="tls").replace(
        "</InetAddr></Transport>", f"</InetAddr>{tls}</Transport>"
    )
    ca = certs / "ca.pem"
    with instances({"plain": plain_text, "tls": tls_text}) as running:
        plain, secure = [running["plain"]], [running["tls"]]
        publish_run(plain, messages // 4, "warm-plain")
        publish_run(secure, messages // 4, "warm-tls", ca)
        plain_runs: list[Run] = []
        tls_runs: list[Run] = []
        for round_ in range(rounds):
            plain_runs.append(publish_run(plain, messages, f"plain-{round_}"))
            tls_runs.append(publish_run(secure, messages, f"tls-{round_}", ca))
    report("durable publish, 1 client, client transport", plain_runs, tls_runs, "TLS")


def pair_configs(certs: Path | None, sync: bool) -> dict[str, str]:
    """a -> b (one destination); with `certs`, over amps-replication-secure."""
    ports = dict(zip("ab", free_ports(2), strict=True))
    configs = cluster_configs("ab", {"a": [Link("b", sync=sync)]}, ports)
    if certs is None:
        return configs
    secure = {}
    for name, text in configs.items():
        allowed = "<AllowedInstance>a</AllowedInstance>" if name == "b" else ""
        text = text.replace(
            f"<Name>replication</Name>{PLAIN}", f"<Name>replication</Name>{PLAIN}{allowed}"
        )
        secure[name] = text.replace(
            PLAIN, f"<Type>amps-replication-secure</Type>{tls_elements(certs, name, ca=True)}"
        )
    return secure


def replication(certs: Path, messages: int, rounds: int) -> None:
    plain_runs: list[Run] = []
    tls_runs: list[Run] = []
    for round_ in range(rounds):
        for kind, runs in (("plain", plain_runs), ("mtls", tls_runs)):
            with instances(pair_configs(certs if kind == "mtls" else None, sync=True)) as pair:
                servers = [pair["a"], pair["b"]]
                runs.append(publish_run(servers, messages, f"sync-{kind}-{round_}"))
    report("durable publish, 1 client, one sync destination", plain_runs, tls_runs, "mTLS")


def catch_up(certs: Path, messages: int, rounds: int) -> None:
    """b starts after a holds `messages`: how fast a client of b receives them all."""
    plain_runs: list[Run] = []
    tls_runs: list[Run] = []
    for round_ in range(rounds):
        for kind, runs in (("plain", plain_runs), ("mtls", tls_runs)):
            configs = pair_configs(certs if kind == "mtls" else None, sync=False)
            with instances({"a": configs["a"]}) as first:
                publish_run([first["a"]], messages, f"fill-{kind}-{round_}")
                with instances({"b": configs["b"]}) as second:
                    servers = [first["a"], second["b"]]
                    before = sum(process_cpu_s(server) for server in servers)
                    started = time.monotonic()
                    asyncio.run(_read(second["b"].address, messages, f"read-{kind}-{round_}"))
                    seconds = time.monotonic() - started
                    server_s = sum(process_cpu_s(server) for server in servers) - before
                    runs.append(Run(messages / seconds, server_s / messages * 1e6, 0.0))
    report(f"catch-up of {messages:,} messages (b started late)", plain_runs, tls_runs, "mTLS")


def report(what: str, plain: list[Run], secure: list[Run], label: str) -> None:
    def median(runs: list[Run], field: str) -> float:
        return float(statistics.median(float(getattr(run, field)) for run in runs))

    rate_p, rate_s = median(plain, "rate"), median(secure, "rate")
    cpu_p, cpu_s = median(plain, "server_us"), median(secure, "server_us")
    client_p, client_s = median(plain, "client_us"), median(secure, "client_us")
    rounds = " / ".join(
        f"{name} " + ", ".join(f"{run.rate:,.0f}" for run in runs)
        for name, runs in (("plaintext", plain), (label, secure))
    )
    client = (
        f"; client CPU {client_p:.1f} -> {client_s:.1f} us/message ({client_s / client_p:.2f}x)"
        if client_p
        else ""
    )
    print(
        f"{what}: plaintext {rate_p:,.0f} msg/s, {label} {rate_s:,.0f} msg/s "
        f"({rate_s / rate_p:.2f}x); instance CPU {cpu_p:.1f} -> {cpu_s:.1f} us/message "
        f"({cpu_s / cpu_p:.2f}x){client} [rounds, msg/s: {rounds}]",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--messages", type=int, default=None, help="publishes per run")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds")
    args = parser.parse_args()
    messages = args.messages or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (3 if args.quick else 5)
    print(f"bench_tls: 1 KB JSON, topic {TOPIC!r}; shared machine: read the ratios", flush=True)
    certs = Path(tempfile.mkdtemp(prefix="bench-tls-certs-"))
    try:
        make_certs(certs, "amps-test", "a", "b")
        client_transport(certs, messages, rounds)
        replication(certs, messages, rounds)
        catch_up(certs, messages, rounds)
    finally:
        shutil.rmtree(certs, ignore_errors=True)


if __name__ == "__main__":
    main()
