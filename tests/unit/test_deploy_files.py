"""deploy/: the compose file, the instance configurations and the Prometheus files agree, so
`make cluster` and `docker compose` run the same cluster, compose with users and mutual TLS on
top (issue 13, issue 12, D2, D5). Runs everywhere: no Docker engine needed."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from amps.config import Config, ConfigErrors, load_config
from amps.config.model import DestinationConfig, TransportConfig, TransportType

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
INSTANCES = ("amps-1", "amps-2", "amps-3")


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return document


def config_in_compose(service: str) -> Config:
    """The instance's configuration with the environment compose gives its container."""
    env = {key: str(value) for key, value in compose()["services"][service]["environment"].items()}
    return load_config((DEPLOY / "compose" / f"{service}.xml").read_text(), env)


def config_on_loopback(instance: str) -> Config:
    """The instance's configuration as `make cluster` runs it (no environment)."""
    return load_config((DEPLOY / f"{instance}.xml").read_text(), {})


def mount(volume: str) -> tuple[str, str]:
    """(source, target) of a compose volume `source:target[:ro]` (a source may hold `:-`)."""
    source, _, target = volume.removesuffix(":ro").rpartition(":")
    return source, target


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
    mounted = dict(mount(volume) for volume in service["volumes"])
    config_path = mounted[f"./compose/{instance}.xml"]
    assert service["command"] == ["--config", config_path]
    assert any(target == "/var/lib/amps" for target in mounted.values()), "journal in a volume"
    config = config_in_compose(instance)
    assert config.name == instance
    # Every TLS file the configuration names is mounted from the secrets directory.
    assert config.replication_transport is not None
    tls = config.replication_transport.tls
    assert tls is not None
    secrets = "${AMPS_SECRETS:-./secrets}"
    for file_name, target in (
        ("ca.pem", tls.ca_file),
        (f"{instance}.pem", tls.certificate),
        (f"{instance}.key", tls.private_key),
    ):
        assert mounted[f"{secrets}/{file_name}"] == target
    assert service["env_file"] == [f"{secrets}/amps.env"]


def security_removed(config: Config) -> Config:
    """`config` with its users and TLS taken out and replication made plaintext."""

    def plain(transport: TransportConfig) -> TransportConfig:
        kind: TransportType = "amps-replication" if transport.type != "grpc" else "grpc"
        return dataclasses.replace(transport, type=kind, tls=None)

    def plain_destination(destination: DestinationConfig) -> DestinationConfig:
        transports = tuple(
            dataclasses.replace(t, type="amps-replication", tls=None)
            for t in destination.transports
        )
        return dataclasses.replace(destination, transports=transports)

    assert config.replication is not None
    replication = dataclasses.replace(
        config.replication,
        destinations=tuple(plain_destination(d) for d in config.replication.destinations),
    )
    return dataclasses.replace(
        config,
        authentication=None,
        transports=tuple(plain(t) for t in config.transports),
        replication=replication,
    )


@pytest.mark.parametrize("instance", INSTANCES)
def test_compose_runs_the_make_cluster_configuration_plus_users_and_mutual_tls(
    instance: str,
) -> None:
    secure = load_config((DEPLOY / "compose" / f"{instance}.xml").read_text(), {})
    assert secure.authentication is not None
    assert secure.authentication.users_file is not None
    assert secure.replication_transport is not None
    assert secure.replication_transport.type == "amps-replication-secure"
    assert secure.replication is not None
    assert {t.type for d in secure.replication.destinations for t in d.transports} == {
        "amps-replication-secure"
    }
    assert security_removed(secure) == config_on_loopback(instance)


@pytest.mark.parametrize("instance", INSTANCES)
def test_the_make_cluster_configuration_beyond_loopback_is_refused(instance: str) -> None:
    """Default-deny (issue 12): the loopback files with compose's AMPS_BIND do not start."""
    with pytest.raises(ConfigErrors) as refused:
        load_config((DEPLOY / f"{instance}.xml").read_text(), {"AMPS_BIND": "0.0.0.0"})
    message = str(refused.value)
    assert "<Authentication><UsersFile>PATH</UsersFile></Authentication>" in message
    assert "amps-replication-secure" in message


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


def test_prometheus_in_compose_scrapes_with_the_admin_password_file() -> None:
    [job] = yaml.safe_load((DEPLOY / "prometheus-compose.yml").read_text())["scrape_configs"]
    target = job["basic_auth"]["password_file"]
    mounted = compose()["services"]["prometheus"]["volumes"]
    assert f"${{AMPS_SECRETS:-./secrets}}/admin-password:{target}:ro" in mounted


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_make_secrets_makes_certificates_keys_and_a_password_once(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    script = DEPLOY / "make-secrets.sh"
    subprocess.run([str(script), str(secrets)], check=True, capture_output=True, timeout=60)
    env = dict(line.split("=", 1) for line in (secrets / "amps.env").read_text().splitlines())
    assert env["AMPS_ADMIN_USER"] == "admin"
    assert len(env["AMPS_ADMIN_PASSWORD"]) == 32
    assert (secrets / "admin-password").read_text() == env["AMPS_ADMIN_PASSWORD"]

    def mode(name: str) -> int:
        return stat.S_IMODE(os.stat(secrets / name).st_mode)

    assert stat.S_IMODE(os.stat(secrets).st_mode) == 0o700
    assert mode("amps.env") == 0o600
    assert mode("ca.key") == 0o600
    for instance in INSTANCES:
        assert mode(f"{instance}.key") == 0o644  # mounted alone; the directory guards it
        certificate = secrets / f"{instance}.pem"
        done = subprocess.run(
            ["openssl", "verify", "-CAfile", str(secrets / "ca.pem"), str(certificate)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    before = {name: (secrets / name).read_bytes() for name in ("amps.env", "amps-1.pem")}
    subprocess.run([str(script), str(secrets)], check=True, capture_output=True, timeout=60)
    assert before == {name: (secrets / name).read_bytes() for name in before}


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
