"""deploy/docker-compose.yml for real (issue 13, D2, D5): three instances and Prometheus in
containers, reached through the ports published on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from amps.client import Client
from tests.cluster.checker import assert_clean, check
from tests.docker.conftest import ADMIN_USER, admin_password, compose_project
from tests.harness.cluster import free_ports
from tests.harness.docker import Compose, run, wait_for, wait_healthy
from tests.harness.streams import more_within, take

INSTANCES = ("amps-1", "amps-2", "amps-3")
HEALTHY_WITHIN_S = 90.0
# Prometheus scrapes every 5 s (deploy/prometheus-compose.yml); a change shows within a few scrapes.
SCRAPED_WITHIN_S = 60.0


@dataclass
class Cluster:
    compose: Compose
    client_ports: dict[str, int]
    prometheus_port: int
    password: str

    def client(self, name: str) -> Client:
        """A client logged on as the admin user of deploy/make-secrets.sh (issue 12)."""
        return Client(name, user=ADMIN_USER, password=self.password)

    def address(self, instance: str) -> str:
        return f"127.0.0.1:{self.client_ports[instance]}"

    def targets(self) -> dict[str, str]:
        """Prometheus's view: scrape target host -> health (`up`, `down`, `unknown`)."""
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/targets"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except OSError:
            return {}
        active = body["data"]["activeTargets"]
        return {t["labels"]["instance"].split(":")[0]: t["health"] for t in active}

    def query(self, expression: str) -> dict[str, float]:
        """A Prometheus instant query: scraped instance (host) -> value."""
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expression}
        )
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except OSError:
            return {}
        return {
            r["metric"]["instance"].split(":")[0]: float(r["value"][1])
            for r in body["data"]["result"]
        }

    def wait_healthy(self, *instances: str) -> None:
        for instance in instances:
            container = self.compose.container(instance)
            wait_healthy(container, f"{instance} healthy", HEALTHY_WITHIN_S)


def start_cluster(amps_image: str, secrets: Path, *services: str) -> Cluster:
    ports = free_ports(7)
    names = [f"AMPS_{n}_CLIENT_PORT" for n in (1, 2, 3)] + [
        f"AMPS_{n}_ADMIN_PORT" for n in (1, 2, 3)
    ]
    compose = compose_project(
        amps_image, {**dict(zip(names, ports, strict=False)), "PROMETHEUS_PORT": ports[6]}, secrets
    )
    cluster = Cluster(
        compose, dict(zip(INSTANCES, ports[:3], strict=True)), ports[6], admin_password(secrets)
    )
    compose("up", "--detach", "--no-build", *services)
    return cluster


@pytest.fixture(scope="module")
def cluster(amps_image: str, compose_secrets: Path) -> Iterator[Cluster]:
    cluster = start_cluster(amps_image, compose_secrets)
    try:
        cluster.wait_healthy(*INSTANCES)
        yield cluster
    finally:
        cluster.compose("down", "--volumes", "--timeout", "10", check=False)


async def publish(cluster: Cluster, address: str, topic: str, ids: range) -> None:
    async with cluster.client(f"compose-publisher-{topic}") as client:
        await client.connect(address)
        for i in ids:
            await client.publish(topic, json.dumps({"id": i}))
        await client.flush(30)


async def replay(cluster: Cluster, address: str, topic: str, count: int) -> list[int]:
    async with cluster.client(f"compose-reader-{topic}") as client:
        await client.connect(address)
        subscription = await client.subscribe(topic, bookmark="epoch")
        return [message.json()["id"] for message in await take(subscription, count)]


async def replay_numbers(cluster: Cluster, address: str, topic: str, count: int) -> list[int]:
    """`n` of each message an epoch replay returns: `count`, plus any extra within 1 s."""
    async with cluster.client(f"compose-checker-{topic}") as client:
        await client.connect(address)
        subscription = await client.subscribe(topic, bookmark="epoch")
        messages = await take(subscription, count) + await more_within(subscription, 1.0)
        return [message.json()["n"] for message in messages]


def test_every_instance_is_healthy_and_scraped_by_prometheus(cluster: Cluster) -> None:
    """Three healthy instances; Prometheus reaches each one's /metrics by service name."""
    expected = dict.fromkeys(INSTANCES, "up")
    wait_for(lambda: cluster.targets() == expected, "all three targets up", SCRAPED_WITHIN_S)


def test_each_instance_serves_clients_on_its_published_port(cluster: Cluster) -> None:
    """Publish through every instance's published port and read it back there (L1, L7)."""
    for n, instance in enumerate(INSTANCES):
        topic = f"compose-each-{n}"
        asyncio.run(publish(cluster, cluster.address(instance), topic, range(20)))
        assert asyncio.run(replay(cluster, cluster.address(instance), topic, 20)) == list(range(20))


def test_a_publish_on_one_instance_is_read_on_the_other_two(cluster: Cluster) -> None:
    """Replication between containers by service name (D1, R1): every instance holds every
    message of the publisher, in its order."""
    asyncio.run(publish(cluster, cluster.address("amps-1"), "compose-replicated", range(100)))
    for instance in ("amps-2", "amps-3"):
        ids = asyncio.run(replay(cluster, cluster.address(instance), "compose-replicated", 100))
        assert ids == list(range(100)), instance


def test_a_killed_instance_restarts_with_its_journal_and_prometheus_sees_it(
    cluster: Cluster,
) -> None:
    """docker kill (SIGKILL) then docker start: the journal in the named volume keeps every
    persisted message (L8); Prometheus shows the target down and up again, and the others'
    replication series show the destination disconnected, then connected and caught up (R10)."""
    address = cluster.address("amps-2")
    asyncio.run(publish(cluster, address, "compose-kill", range(50)))
    container = cluster.compose.container("amps-2")
    connected = 'amps_replication_connected{destination="amps-2"}'
    behind = 'amps_replication_behind_messages{destination="amps-2"}'
    others = {"amps-1", "amps-3"}
    run(["docker", "kill", container])
    wait_for(lambda: cluster.targets().get("amps-2") == "down", "amps-2 down", SCRAPED_WITHIN_S)
    wait_for(
        lambda: cluster.query(connected) == dict.fromkeys(others, 0.0),
        "amps-1 and amps-3 see amps-2 disconnected",
        SCRAPED_WITHIN_S,
    )
    # Traffic while it is down, for it to catch up on.
    asyncio.run(publish(cluster, cluster.address("amps-1"), "compose-while-down", range(30)))
    run(["docker", "start", container])
    cluster.wait_healthy("amps-2")
    assert asyncio.run(replay(cluster, address, "compose-kill", 50)) == list(range(50))
    assert asyncio.run(replay(cluster, address, "compose-while-down", 30)) == list(range(30))
    wait_for(lambda: cluster.targets().get("amps-2") == "up", "amps-2 up again", SCRAPED_WITHIN_S)
    wait_for(
        lambda: (
            cluster.query(connected) == dict.fromkeys(others, 1.0)
            and cluster.query(behind) == dict.fromkeys(others, 0.0)
        ),
        "amps-2 connected and caught up in the others' replication series",
        SCRAPED_WITHIN_S,
    )


def test_docker_kill_under_a_failover_publisher_and_subscriber_loses_and_duplicates_nothing(
    cluster: Cluster,
) -> None:
    """D3: a publisher and a subscriber given all three addresses both use amps-1; amps-1 is
    killed mid-stream. The publisher goes on through amps-2 and republishes what was not
    persisted; the subscriber resumes there after the last bookmark it was handed. `docker
    start` brings amps-1 back to catch up (R10): every instance, and the subscriber, then hold
    every message once, in order."""
    total = 600
    addresses = [cluster.address(instance) for instance in INSTANCES]
    victim = cluster.compose.container("amps-1")

    async def run_publisher() -> None:
        async with cluster.client("compose-failover-publisher") as client:
            await client.connect(addresses)
            for n in range(1, total + 1):
                await client.publish("compose-failover", json.dumps({"p": "f", "n": n}))
                if n == total // 3:
                    await client.flush(30)  # some of it persisted everywhere before the kill
                    await asyncio.to_thread(run, ["docker", "kill", victim])
                if n == 2 * total // 3:
                    await asyncio.to_thread(run, ["docker", "start", victim])
            await client.flush(120)

    async def run_subscriber() -> list[int]:
        async with cluster.client("compose-failover-subscriber") as client:
            await client.connect(addresses)
            subscription = await client.subscribe("compose-failover", bookmark="epoch")
            messages = await take(subscription, total, 180) + await more_within(subscription, 1)
            return [message.json()["n"] for message in messages]

    async def both() -> list[int]:
        received, _ = await asyncio.gather(run_subscriber(), run_publisher())
        return received

    received = asyncio.run(both())
    assert_clean(check((("f", n) for n in received), {"f": total}), "the failover subscriber")
    cluster.wait_healthy("amps-1")
    for instance in INSTANCES:
        numbers = asyncio.run(
            replay_numbers(cluster, cluster.address(instance), "compose-failover", total)
        )
        assert_clean(check((("f", n) for n in numbers), {"f": total}), instance)


def test_down_keeps_the_journal_volumes_and_down_volumes_removes_them(
    amps_image: str, compose_secrets: Path
) -> None:
    """`down` keeps each instance's named volume (its journal); `down -v` removes them. (All
    three run: amps-1's sync destinations must be up for its persisted acks, L2.)"""
    own = start_cluster(amps_image, compose_secrets)
    try:
        own.wait_healthy(*INSTANCES)
        asyncio.run(publish(own, own.address("amps-1"), "compose-volume", range(5)))
        own.compose("down", "--timeout", "10")
        volumes = set(own.compose.volumes())
        assert {f"{own.compose.project}_{i}-data" for i in INSTANCES} <= volumes
        own.compose("up", "--detach", "--no-build")
        own.wait_healthy(*INSTANCES)
        assert asyncio.run(replay(own, own.address("amps-1"), "compose-volume", 5)) == list(
            range(5)
        )
    finally:
        own.compose("down", "--volumes", "--timeout", "10", check=False)
    assert not set(own.compose.volumes())
