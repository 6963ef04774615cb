"""deploy/: the compose file, the instance configurations and the Prometheus files agree, so
`make cluster` and `docker compose` run the same cluster (issue 13, D2, D5). Runs everywhere: no
Docker engine needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from amps.config import Config, load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
INSTANCES = ("amps-1", "amps-2", "amps-3")


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return document


def config_in_compose(service: str) -> Config:
    """The instance's configuration with the environment compose gives its container."""
    env = {key: str(value) for key, value in compose()["services"][service]["environment"].items()}
    return load_config((DEPLOY / f"{service}.xml").read_text(), env)


def config_on_loopback(instance: str) -> Config:
    """The instance's configuration as `make cluster` runs it (no environment)."""
    return load_config((DEPLOY / f"{instance}.xml").read_text(), {})


def scrape_targets(file_name: str) -> list[str]:
    document = yaml.safe_load((DEPLOY / file_name).read_text())
    [job] = document["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    return [target for group in job["static_configs"] for target in group["targets"]]


def published(service: str) -> set[int]:
    """Container ports a service publishes, each on 127.0.0.1 only."""
    ports = set()
    for mapping in compose()["services"][service]["ports"]:
        host, _, rest = mapping.partition(":")
        assert host == "127.0.0.1", f"{service} publishes {mapping} beyond loopback"
        ports.add(int(rest.rpartition(":")[2]))
    return ports


def test_the_compose_services_are_the_three_instances_and_prometheus() -> None:
    assert set(compose()["services"]) == {*INSTANCES, "prometheus"}


@pytest.mark.parametrize("instance", INSTANCES)
def test_each_service_runs_its_deploy_configuration(instance: str) -> None:
    service = compose()["services"][instance]
    mounted = {volume.split(":")[0]: volume.split(":")[1] for volume in service["volumes"]}
    config_path = mounted[f"./{instance}.xml"]
    assert service["command"] == ["--config", config_path]
    assert any(target == "/var/lib/amps" for target in mounted.values()), "journal in a volume"
    assert config_in_compose(instance).name == instance


@pytest.mark.parametrize("instance", INSTANCES)
def test_published_ports_are_the_configured_client_and_admin_ports(instance: str) -> None:
    config = config_in_compose(instance)
    assert config.grpc_transport is not None
    assert config.admin is not None
    assert config.admin.inet_addr is not None
    client, admin = config.grpc_transport.inet_addr, config.admin.inet_addr
    assert client.host == admin.host == "0.0.0.0"  # inside the container's network only
    assert published(instance) == {client.port, admin.port}
    # The image's health check reads the admin port from AMPS_ADMIN_PORT.
    assert compose()["services"][instance]["environment"]["AMPS_ADMIN_PORT"] == str(admin.port)


@pytest.mark.parametrize("instance", INSTANCES)
def test_replication_reaches_every_other_instance_by_service_name_and_on_loopback(
    instance: str,
) -> None:
    for config, host_of in (
        (config_in_compose(instance), lambda peer: peer),
        (config_on_loopback(instance), lambda peer: "127.0.0.1"),
    ):
        assert config.replication is not None
        targets = {
            d.name: [str(addr) for t in d.transports for addr in t.inet_addrs]
            for d in config.replication.destinations
        }
        peers = [peer for peer in INSTANCES if peer != instance]
        expected = {}
        for peer in peers:
            transport = config_on_loopback(peer).replication_transport
            assert transport is not None
            expected[peer] = [f"{host_of(peer)}:{transport.inet_addr.port}"]
        assert targets == expected


def test_prometheus_scrapes_every_admin_port_in_compose_and_on_loopback() -> None:
    admin_ports = {}
    for instance in INSTANCES:
        admin = config_on_loopback(instance).admin
        assert admin is not None
        assert admin.inet_addr is not None
        assert admin.inet_addr.host == "127.0.0.1"  # make cluster stays on loopback
        admin_ports[instance] = admin.inet_addr.port
    assert scrape_targets("prometheus.yml") == [f"127.0.0.1:{p}" for p in admin_ports.values()]
    assert scrape_targets("prometheus-compose.yml") == [f"{i}:{p}" for i, p in admin_ports.items()]


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed (Debian package prometheus; .ci/run installs it)",
)
@pytest.mark.parametrize("file_name", ["prometheus.yml", "prometheus-compose.yml"])
def test_promtool_accepts_the_prometheus_configuration(file_name: str) -> None:
    done = subprocess.run(
        ["promtool", "check", "config", str(DEPLOY / file_name)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
