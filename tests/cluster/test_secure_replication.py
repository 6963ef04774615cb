"""amps-replication-secure: mutual TLS between instances, and a peer's certificate must name
the instance it claims to be (issue 12, S4)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from amps.client import Client
from tests.cluster.checker import assert_clean, check
from tests.cluster.test_replication import publish, read_all
from tests.cluster.test_sync import replication_status
from tests.harness.cluster import Link, cluster_configs, free_ports
from tests.harness.instance import InstanceProcess
from tests.harness.streams import more_within
from tests.integration.test_tls import make_certs

PLAIN = "<Type>amps-replication</Type>"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"), "a", "b", "x")


def secure(text: str, certs: Path, cert_name: str, allowed: str = "") -> str:
    """Every replication transport of one instance's config made secure with `cert_name`;
    `allowed` goes into its incoming transport (AllowedInstance / AllowedGroup elements)."""
    tls = (
        f"<Certificate>{certs / cert_name}.pem</Certificate>"
        f"<PrivateKey>{certs / cert_name}.key</PrivateKey><CAFile>{certs / 'ca.pem'}</CAFile>"
    )
    incoming = f"<Name>replication</Name>{PLAIN}"
    text = text.replace(incoming, f"<Name>replication</Name>{PLAIN}{allowed}")
    return text.replace(PLAIN, f"<Type>amps-replication-secure</Type>{tls}")


@pytest.fixture
def started() -> Iterator[list[InstanceProcess]]:
    processes: list[InstanceProcess] = []
    try:
        yield processes
    finally:
        for process in processes:
            process.kill()


def refused_links(process: InstanceProcess) -> dict[str, object]:
    """The refusal the admin view shows per incoming link of `process`."""
    assert process.admin_port
    links = replication_status(process.admin_port)["links"]
    assert isinstance(links, list)
    return {link["peer"]: link["refused"] for link in links if link["refused"]}


def start_pair(
    root: Path,
    certs: Path,
    cert_of: dict[str, str],
    started: list[InstanceProcess],
    b_allows: str = "<AllowedInstance>a</AllowedInstance>",
) -> dict[str, InstanceProcess]:
    """a replicates to b (async) over amps-replication-secure, each with the named cert; b has
    no destination to a, so it lets a in by `b_allows`."""
    ports = dict(zip("ab", free_ports(2), strict=True))
    configs = cluster_configs("ab", {"a": [Link("b", sync=False)]}, ports)
    pair = {}
    for name in "ab":
        allowed = b_allows if name == "b" else ""
        text = secure(configs[name], certs, cert_of[name], allowed)
        process = InstanceProcess(root / name, text)
        started.append(process.start())
        pair[name] = process
    return pair


async def test_instances_with_their_own_certificates_replicate(
    tmp_path: Path, certs: Path, started: list[InstanceProcess]
) -> None:
    pair = start_pair(tmp_path, certs, {"a": "a", "b": "b"}, started)
    await publish(pair["a"], "pub-a", 20)
    got = await read_all(pair["b"], 20)
    assert_clean(check(((p, n) for p, n, _ in got), {"pub-a": 20}), "b")


async def test_a_peer_presenting_a_certificate_for_another_name_is_refused(
    tmp_path: Path, certs: Path, started: list[InstanceProcess]
) -> None:
    """a says it is a but holds x's certificate (signed by the same CA): b refuses the link."""
    pair = start_pair(tmp_path, certs, {"a": "x", "b": "b"}, started)
    line = await asyncio.to_thread(pair["b"].wait_for_output, "link to a refused")
    message = "b and a: the peer's certificate names 127.0.0.1, localhost, x, not 'a'"
    assert message in line
    assert "ERROR" in line
    assert refused_links(pair["b"]) == {"a": {"code": "identity", "message": message}}
    await asyncio.to_thread(pair["a"].wait_for_output, "refused")
    await publish(pair["a"], "pub-a", 3)  # both stay up; nothing replicated
    assert pair["b"].process is not None
    assert pair["b"].process.poll() is None


@pytest.mark.parametrize(
    "b_allows",
    ["", "<AllowedInstance>c</AllowedInstance><AllowedGroup>other</AllowedGroup>"],
)
async def test_an_instance_b_does_not_know_is_refused_at_the_handshake_on_both_sides(
    tmp_path: Path, certs: Path, started: list[InstanceProcess], b_allows: str
) -> None:
    """a holds a valid certificate for its own name, but b has no destination a and does not
    allow it: b refuses the link saying whom it knows, a logs the refusal; nothing replicates."""
    pair = start_pair(tmp_path, certs, {"a": "a", "b": "b"}, started, b_allows)
    line = await asyncio.to_thread(pair["b"].wait_for_output, "link to a refused")
    assert "b does not know instance 'a' (group 'a')" in line
    assert "AllowedInstance" in line
    shown = refused_links(pair["b"])["a"]
    assert isinstance(shown, dict)
    assert shown["code"] == "unknown_peer"
    assert shown["message"] in line
    refused = await asyncio.to_thread(pair["a"].wait_for_output, "refused")
    assert "by b: b does not know instance 'a'" in refused
    async with Client("reader-b") as reader:
        await reader.connect(pair["b"].address)
        orders = await reader.subscribe("orders", bookmark="epoch")
        await publish(pair["a"], "pub-a", 3)
        assert await more_within(orders, 1.0) == []


async def test_a_group_allowed_by_b_links(
    tmp_path: Path, certs: Path, started: list[InstanceProcess]
) -> None:
    pair = start_pair(
        tmp_path, certs, {"a": "a", "b": "b"}, started, "<AllowedGroup>a</AllowedGroup>"
    )
    await publish(pair["a"], "pub-a", 5)
    got = await read_all(pair["b"], 5)
    assert_clean(check(((p, n) for p, n, _ in got), {"pub-a": 5}), "b")


async def test_a_destination_whose_certificate_names_another_instance_is_not_linked(
    tmp_path: Path, certs: Path, started: list[InstanceProcess]
) -> None:
    """b listens with x's certificate: a, dialling destination b, fails the TLS check and
    never sends it anything (the instance reached is not the one the destination names)."""
    pair = start_pair(tmp_path, certs, {"a": "a", "b": "x"}, started)
    async with Client("reader-b") as reader:
        await reader.connect(pair["b"].address)
        orders = await reader.subscribe("orders", bookmark="epoch")
        await publish(pair["a"], "pub-a", 3)
        assert await more_within(orders, 2.0) == []


def test_a_missing_certificate_of_a_secure_destination_stops_the_start_with_78(
    tmp_path: Path, certs: Path
) -> None:
    ports = dict(zip("ab", free_ports(2), strict=True))
    configs = cluster_configs("ab", {"a": [Link("b", sync=False)]}, ports)
    text = secure(configs["a"], certs, "a")
    # Only the destination's certificate (the last one named) is missing.
    head, _, tail = text.rpartition(f"{certs / 'a'}.pem")
    status, output = InstanceProcess(
        tmp_path / "a", f"{head}{tmp_path}/gone.pem{tail}"
    ).run_to_exit()
    assert status == 78
    assert "gone.pem" in output
