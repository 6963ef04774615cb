"""Default-deny outside loopback (issue 12, S1) and per-transport Authentication."""

from __future__ import annotations

import pytest

from amps.config.exposure import is_loopback, open_listeners
from amps.config.model import AuthenticationConfig

from .helpers import assert_error, document, errors_of, load

USERS = "<Authentication><UsersFile>/etc/amps/users.toml</UsersFile></Authentication>"
OPEN = "<Authentication><Mode>none</Mode></Authentication>"
SECURE_TLS = (
    "<Certificate>/c.pem</Certificate><PrivateKey>/c.key</PrivateKey><CAFile>/ca.pem</CAFile>"
)


def client_on(addr: str, extra: str = "", inside: str = "") -> str:
    return document(
        f"{extra}<Transports><Transport><Name>c</Name><Type>grpc</Type>"
        f"<InetAddr>{addr}</InetAddr>{inside}</Transport></Transports>"
    )


def replication_on(addr: str, kind: str, extra: str = "") -> str:
    tls = SECURE_TLS if kind == "amps-replication-secure" else ""
    return document(
        f"{extra}<Transports><Transport><Name>c</Name><Type>grpc</Type><InetAddr>9007</InetAddr>"
        f"</Transport><Transport><Name>r</Name><Type>{kind}</Type><InetAddr>{addr}</InetAddr>"
        f"{tls}</Transport></Transports>"
    )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("amps-1", False),
        ("fe80::1%eth0", False),
    ],
)
def test_loopback_is_127_8_and_1_and_localhost_only(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_loopback_listeners_need_no_authentication() -> None:
    load(client_on("127.0.0.1:9007", extra="<Admin><InetAddr>[::1]:8085</InetAddr></Admin>"))


def test_a_client_port_beyond_loopback_without_authentication_is_refused_naming_the_fix() -> None:
    error = assert_error(
        client_on("0.0.0.0:9007"),
        "AMPSConfig/Transports/Transport[1]/InetAddr",
        "<Authentication><UsersFile>PATH</UsersFile></Authentication>",
    )
    assert error.value == "0.0.0.0:9007"
    assert "<Mode>none</Mode>" in error.expected
    assert "amps users add" in error.expected


def test_an_admin_port_beyond_loopback_without_authentication_is_refused() -> None:
    assert_error(
        client_on("9007", extra="<Admin><InetAddr>10.1.2.3:8085</InetAddr></Admin>"),
        "AMPSConfig/Admin/InetAddr",
        "an admin port beyond loopback",
    )


def test_a_users_file_allows_listening_beyond_loopback() -> None:
    config = load(client_on("0.0.0.0:9007", extra=USERS))
    assert open_listeners(config) == []


def test_mode_none_allows_it_on_purpose_and_is_reported_as_open() -> None:
    config = load(client_on("0.0.0.0:9007", extra=OPEN))
    assert [(listener.kind, str(listener.inet_addr)) for listener in open_listeners(config)] == [
        ("client", "0.0.0.0:9007")
    ]


def test_a_plaintext_replication_port_beyond_loopback_is_refused_even_with_users() -> None:
    error = assert_error(
        replication_on("0.0.0.0:9201", "amps-replication", extra=USERS),
        "AMPSConfig/Transports/Transport[2]/Type",
        "amps-replication-secure",
    )
    assert "inject records" in error.expected


def test_a_secure_replication_port_beyond_loopback_is_accepted() -> None:
    load(replication_on("0.0.0.0:9201", "amps-replication-secure", extra=USERS))


def test_a_plaintext_replication_port_on_loopback_is_accepted() -> None:
    load(replication_on("127.0.0.1:9201", "amps-replication"))


def test_a_transport_authentication_overrides_the_instance_one() -> None:
    config = load(client_on("0.0.0.0:9007", inside=USERS))
    assert config.authentication is None
    assert config.client_authentication == AuthenticationConfig("/etc/amps/users.toml")
    opened = load(client_on("0.0.0.0:9007", extra=USERS, inside=OPEN))
    assert opened.client_authentication == AuthenticationConfig(None, "none")
    assert [listener.kind for listener in open_listeners(opened)] == ["client"]


def test_a_transport_mode_none_does_not_open_the_admin_port() -> None:
    errors = errors_of(
        client_on(
            "0.0.0.0:9007", extra="<Admin><InetAddr>0.0.0.0:8085</InetAddr></Admin>", inside=OPEN
        )
    )
    assert [error.path for error in errors] == ["AMPSConfig/Admin/InetAddr"]


def test_authentication_on_a_replication_transport_is_refused() -> None:
    assert_error(
        document(
            "<Transports><Transport><Name>c</Name><Type>grpc</Type><InetAddr>9007</InetAddr>"
            "</Transport><Transport><Name>r</Name><Type>amps-replication</Type>"
            f"<InetAddr>9201</InetAddr>{USERS}</Transport></Transports>"
        ),
        "AMPSConfig/Transports/Transport[2]/Authentication",
        "mutual TLS",
    )
