"""The TLS elements of a Transport and of Admin (AMPS-REFERENCE §1.5-§1.7; issue 12)."""

from __future__ import annotations

from amps.config import InetAddr
from amps.config.model import TlsConfig

from .helpers import assert_error, document, load

TRANSPORT = (
    "<Transports><Transport><Name>c</Name><Type>grpc</Type><InetAddr>9007</InetAddr>{}"
    "</Transport></Transports>"
)


def transport(tls: str) -> str:
    return document(TRANSPORT.format(tls))


def test_certificate_key_ca_and_verify_client_are_parsed_on_transport_and_admin() -> None:
    tls = (
        "<Certificate>/c.pem</Certificate><PrivateKey>/c.key</PrivateKey>"
        "<CAFile>/ca.pem</CAFile><VerifyClient>true</VerifyClient>"
    )
    config = load(
        document(f"<Admin><InetAddr>8085</InetAddr>{tls}</Admin>" + TRANSPORT.format(tls))
    )
    expected = TlsConfig("/c.pem", "/c.key", "/ca.pem", verify_client=True)
    assert config.grpc_transport is not None
    assert config.grpc_transport.tls == expected
    assert config.admin is not None
    assert config.admin.tls == expected
    assert config.admin.inet_addr == InetAddr("127.0.0.1", 8085)


def test_without_tls_elements_a_listener_is_plaintext() -> None:
    config = load(transport(""))
    assert config.grpc_transport is not None
    assert config.grpc_transport.tls is None


def test_a_certificate_needs_its_private_key() -> None:
    assert_error(
        transport("<Certificate>/c.pem</Certificate>"),
        "AMPSConfig/Transports/Transport[1]/PrivateKey",
        "both Certificate and PrivateKey",
    )


def test_verify_client_needs_a_ca_file() -> None:
    assert_error(
        transport(
            "<Certificate>/c.pem</Certificate><PrivateKey>/c.key</PrivateKey>"
            "<VerifyClient>true</VerifyClient>"
        ),
        "AMPSConfig/Transports/Transport[1]/CAFile",
        "a CAFile",
    )


def test_a_ca_file_without_a_certificate_is_an_error_not_silently_plaintext() -> None:
    assert_error(
        transport("<CAFile>/ca.pem</CAFile>"),
        "AMPSConfig/Transports/Transport[1]/Certificate",
        "Certificate and PrivateKey",
    )


SECURE = "<Type>amps-replication-secure</Type><InetAddr>10004</InetAddr>{}"


def test_amps_replication_secure_is_mutual_tls_on_both_ends() -> None:
    tls = "<Certificate>/a.pem</Certificate><PrivateKey>/a.key</PrivateKey><CAFile>/ca.pem</CAFile>"
    incoming = f"<Transport><Name>r</Name>{SECURE.format(tls)}</Transport>"
    destination = (
        "<Replication><Destination><Name>b</Name><SyncType>async</SyncType>"
        f"<Transport>{SECURE.format(tls).replace('10004', '10005')}</Transport>"
        "</Destination></Replication>"
    )
    config = load(
        document(
            TRANSPORT.format("").replace("</Transports>", f"{incoming}</Transports>") + destination
        )
    )
    expected = TlsConfig("/a.pem", "/a.key", "/ca.pem", verify_client=True)
    assert config.replication_transport is not None
    assert config.replication_transport.tls == expected
    assert config.replication is not None
    [transport] = config.replication.destinations[0].transports
    assert (transport.type, transport.tls) == ("amps-replication-secure", expected)


def test_amps_replication_secure_needs_a_certificate_and_a_ca_file() -> None:
    incoming = f"<Transport><Name>r</Name>{SECURE.format('')}</Transport>"
    assert_error(
        document(TRANSPORT.format("").replace("</Transports>", f"{incoming}</Transports>")),
        "AMPSConfig/Transports/Transport[2]/Certificate",
        "mutual TLS",
    )
    tls = "<Certificate>/a.pem</Certificate><PrivateKey>/a.key</PrivateKey>"
    incoming = f"<Transport><Name>r</Name>{SECURE.format(tls)}</Transport>"
    assert_error(
        document(TRANSPORT.format("").replace("</Transports>", f"{incoming}</Transports>")),
        "AMPSConfig/Transports/Transport[2]/CAFile",
        "CAFile",
    )
