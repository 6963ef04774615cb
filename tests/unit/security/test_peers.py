"""The peer allow-list of secure replication links (issue 12, S4)."""

from __future__ import annotations

import pytest

from amps.config import ConfigErrors, load_config
from amps.security.peers import PeerAllowList

TLS = "<Certificate>/c.pem</Certificate><PrivateKey>/c.key</PrivateKey><CAFile>/ca.pem</CAFile>"


def config(kind: str = "amps-replication-secure", allowed: str = "") -> str:
    tls = TLS if kind == "amps-replication-secure" else ""
    return (
        "<AMPSConfig><Name>b</Name><Transports>"
        "<Transport><Name>c</Name><Type>grpc</Type><InetAddr>9007</InetAddr></Transport>"
        f"<Transport><Name>r</Name><Type>{kind}</Type><InetAddr>9201</InetAddr>{tls}{allowed}"
        "</Transport></Transports><TransactionLog><JournalDirectory>/tmp/j</JournalDirectory>"
        "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>"
        "<Replication><Destination><Name>c</Name><Group>east</Group><SyncType>sync</SyncType>"
        f"<Transport><Type>{kind}</Type><InetAddr>9301</InetAddr>{tls}</Transport>"
        "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></Destination>"
        "</Replication></AMPSConfig>"
    )


def allow_list(text: str) -> PeerAllowList:
    allowed = PeerAllowList.from_config(load_config(text))
    assert allowed is not None
    return allowed


def test_a_destination_is_known_with_its_group_only() -> None:
    allowed = allow_list(config())
    assert allowed.refusal("b", "c", "east") is None
    refusal = allowed.refusal("b", "c", "west")
    assert refusal == ("b does not know c in group 'west': its destination c is in group 'east'")


def test_an_unknown_instance_is_refused_naming_who_is_known() -> None:
    refusal = allow_list(config()).refusal("b", "mallory", "east")
    assert refusal is not None
    assert refusal.startswith("b does not know instance 'mallory' (group 'east'): ")
    assert "known instances c, groups none" in refusal


def test_allowed_instances_and_groups_let_senders_in() -> None:
    allowed = allow_list(
        config(allowed="<AllowedInstance>a</AllowedInstance><AllowedGroup>west</AllowedGroup>")
    )
    assert allowed.refusal("b", "a", "anything") is None
    assert allowed.refusal("b", "z", "west") is None
    assert allowed.refusal("b", "c", "west") is None  # a destination in an allowed group
    assert allowed.refusal("b", "z", "north") is not None


def test_plaintext_replication_enforces_only_an_explicit_list() -> None:
    assert PeerAllowList.from_config(load_config(config("amps-replication"))) is None
    explicit = allow_list(
        config("amps-replication", allowed="<AllowedInstance>a</AllowedInstance>")
    )
    assert explicit.refusal("b", "a", "a") is None
    assert explicit.refusal("b", "z", "z") is not None


def test_allowed_entries_on_a_client_transport_are_refused() -> None:
    text = config().replace(
        "<InetAddr>9007</InetAddr>", "<InetAddr>9007</InetAddr><AllowedInstance>a</AllowedInstance>"
    )
    with pytest.raises(ConfigErrors) as refused:
        load_config(text)
    assert refused.value.errors[0].path == "AMPSConfig/Transports/Transport[1]/AllowedInstance[1]"
    assert "on a replication transport only" in refused.value.errors[0].expected
