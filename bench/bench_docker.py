"""The compose deployment's figures (issue 13): image size, `up -d` to three healthy instances,
durable publish through a container's published port beside the same three configurations run
as local processes (what `make cluster` runs) in the same run, and failover after `docker kill`.

`.venv/bin/python -m bench.bench_docker [--messages N]`: needs a Docker engine
(`make docker-up`); without one it says why and exits 0. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from amps.client import Client
from bench.common import json_payloads, rate
from tests.harness.cluster import free_ports
from tests.harness.docker import (
    DEPLOY,
    Compose,
    build_image,
    engine_env,
    run,
    wait_healthy,
    why_no_engine,
)
from tests.harness.instance import process_env

INSTANCES = ("amps-1", "amps-2", "amps-3")


async def durable_publish(addresses: list[str], count: int, password: str = "") -> float:
    """Seconds to publish `count` 1 KB messages and have them all persisted (L2); `password`
    is the compose deployment's admin password (the local cluster has no users)."""
    payloads = json_payloads()
    user = "admin" if password else ""
    name = f"bench-docker-{uuid.uuid4().hex[:6]}"
    async with Client(name, user=user, password=password) as client:
        await client.connect(addresses)
        started = time.perf_counter()
        for i in range(count):
            await client.publish("bench-docker", payloads[i % len(payloads)])
        await client.flush(300)
        return time.perf_counter() - started


@contextlib.contextmanager
def local_cluster() -> Iterator[list[str]]:
    """deploy/amps-N.xml as three local processes on loopback, as `make cluster` runs them."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-docker-local-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        command = [sys.executable, "-m", "amps", "server", "--config"]
        processes = [
            subprocess.Popen(
                [*command, str(DEPLOY / f"{name}.xml")],
                cwd=workdir,
                env=process_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name in INSTANCES
        ]
        addresses = ["127.0.0.1:9101", "127.0.0.1:9102", "127.0.0.1:9103"]

        async def ready() -> None:
            for address in addresses:
                async with Client("bench-docker-ready") as client:
                    await client.connect(address, timeout_s=60)

        asyncio.run(ready())
        yield addresses
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


async def failover_s(addresses: list[str], victim: str, password: str) -> tuple[float, float]:
    """(kill -> first publish accepted elsewhere, kill -> next persisted ack): a publisher at
    ~1,000 msg/s through the first address while its container is killed."""
    async with Client("bench-docker-failover", user="admin", password=password) as client:
        await client.connect(addresses)
        for n in range(200):
            await client.publish("bench-failover", f'{{"n":{n}}}')
        await client.flush(60)
        killed = time.perf_counter()
        await asyncio.to_thread(run, ["docker", "kill", victim])
        await client.publish("bench-failover", '{"n":-1}')
        await client.wait_connected(60)
        reconnected = time.perf_counter() - killed
        await client.flush(300)
        return reconnected, time.perf_counter() - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    reason = why_no_engine()
    if reason is not None:
        print(f"bench_docker: skipped: {reason}")
        return
    tag = f"amps-bench:{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="bench-docker-"))
    try:
        started = time.perf_counter()
        build_image(tag, work)
        size = int(run(["docker", "image", "inspect", "-f", "{{.Size}}", tag]).stdout)
        base = engine_env().get("AMPS_BASE_IMAGE", "python:3.11-slim")
        base_size = int(run(["docker", "image", "inspect", "-f", "{{.Size}}", base]).stdout)
        built_s = time.perf_counter() - started
        print(
            f"image: {size / 1e6:.0f} MB on {base} ({base_size / 1e6:.0f} MB): the project adds "
            f"{(size - base_size) / 1e6:.0f} MB; built in {built_s:.0f} s"
        )

        ports = free_ports(7)
        names = [f"AMPS_{n}_CLIENT_PORT" for n in (1, 2, 3)]
        names += [f"AMPS_{n}_ADMIN_PORT" for n in (1, 2, 3)] + ["PROMETHEUS_PORT"]
        env = dict(zip(names, map(str, ports), strict=True))
        env["AMPS_IMAGE"] = tag
        # The deployment's certificates and admin password (issue 12), made for this run.
        secrets = work / "secrets"
        run([str(DEPLOY / "make-secrets.sh"), str(secrets)])
        env["AMPS_SECRETS"] = str(secrets)
        password = dict(
            line.split("=", 1) for line in (secrets / "amps.env").read_text().splitlines()
        )["AMPS_ADMIN_PASSWORD"]
        env["PROMETHEUS_IMAGE"] = os.environ.get(
            "PROMETHEUS_IMAGE", engine_env().get("PROMETHEUS_IMAGE", "prom/prometheus:v2.53.2")
        )
        compose = Compose(f"ampsbench{uuid.uuid4().hex[:6]}", env, [DEPLOY / "docker-compose.yml"])
        started = time.perf_counter()
        compose("up", "--detach", "--no-build")
        for name in INSTANCES:
            container = compose.container(name)
            wait_healthy(container, name, 180, every_s=0.2)
        print(f"up -d to three healthy instances: {time.perf_counter() - started:.1f} s")
        try:
            containers = [f"127.0.0.1:{port}" for port in ports[:3]]
            in_containers = asyncio.run(durable_publish(containers[:1], args.messages, password))
            with local_cluster() as local:
                on_loopback = asyncio.run(durable_publish(local[:1], args.messages))
            print(
                "durable publish, 1 KB, sync full mesh, one client: containers (users, mTLS "
                f"between them) {rate(args.messages, in_containers)}; local processes "
                "(make cluster: plaintext, no users) "
                f"{rate(args.messages, on_loopback)}; "
                f"containers/local {on_loopback / in_containers:.2f}"
            )
            victim = compose.container("amps-1")
            reconnect_s, ack_s = asyncio.run(failover_s(containers, victim, password))
            print(
                "docker kill of the publisher's instance: publishing again after "
                f"{reconnect_s:.2f} s, next persisted ack after {ack_s:.2f} s"
            )
        finally:
            compose("down", "--volumes", "--timeout", "10", check=False)
    finally:
        run(["docker", "image", "rm", "--force", tag], check=False)
        run(
            ["docker", "image", "prune", "--force", "--filter", "label=org.amps.stage=build"],
            check=False,
        )
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
