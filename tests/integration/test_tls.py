"""TLS on the client transport and the admin interface, against real instances (issue 12)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from amps import errors
from amps.client import Client
from amps.security.tls import client_ssl_context
from tests.harness.instance import InstanceProcess, config_xml

ROOT = Path(__file__).resolve().parents[2]
MAKE_CERTS = ROOT / "deploy" / "make-certs.sh"


def make_certs(directory: Path, *names: str) -> Path:
    """A CA and a certificate per name, made by the documented script."""
    command = ["bash", str(MAKE_CERTS), str(directory), *names]
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    return directory


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"), "amps-test", "client")


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another CA, which the instance's certificate does not chain to."""
    return make_certs(tmp_path_factory.mktemp("other"), "amps-test") / "ca.pem"


def tls_xml(certs: Path, verify_client: bool = False) -> str:
    ca = f"<CAFile>{certs / 'ca.pem'}</CAFile>" if verify_client else ""
    verify = "<VerifyClient>true</VerifyClient>" if verify_client else ""
    return (
        f"<Certificate>{certs / 'amps-test.pem'}</Certificate>"
        f"<PrivateKey>{certs / 'amps-test.key'}</PrivateKey>{ca}{verify}"
    )


def tls_config(certs: Path, verify_client: bool = False) -> str:
    """The test configuration with TLS on the gRPC transport and on the admin interface."""
    tls = tls_xml(certs, verify_client)
    text = config_xml()
    text = text.replace("</InetAddr></Transport>", f"</InetAddr>{tls}</Transport>")
    return text.replace("</InetAddr></Admin>", f"</InetAddr>{tls}</Admin>")


@pytest.fixture
def tls_instance(tmp_path: Path, certs: Path) -> Iterator[InstanceProcess]:
    process = InstanceProcess(tmp_path / "amps", tls_config(certs)).start()
    try:
        yield process
    finally:
        process.kill()


async def test_a_client_with_the_ca_publishes_and_reads(
    tls_instance: InstanceProcess, certs: Path
) -> None:
    async with Client("tls-1", tls_ca=certs / "ca.pem", reconnect=False) as client:
        await client.connect(tls_instance.address, timeout_s=10)
        await client.publish("orders", '{"id":1}')
        await client.flush(10)
        subscription = await client.subscribe("orders", bookmark="epoch")
        message = await anext(aiter(subscription))
        assert message.json() == {"id": 1}


async def test_a_client_without_the_ca_is_refused(
    tls_instance: InstanceProcess, other_ca: Path
) -> None:
    """Plaintext, and TLS trusting another CA, both fail to connect."""
    async with Client("plain", reconnect=False) as plain:
        with pytest.raises(errors.ConnectionBroken):
            await plain.connect(tls_instance.address, timeout_s=2)
    async with Client("other-ca", tls_ca=other_ca, reconnect=False) as stranger:
        with pytest.raises(errors.ConnectionBroken):
            await stranger.connect(tls_instance.address, timeout_s=2)


def handshake(port: int, version: ssl.TLSVersion, ca: Path) -> None:
    """A TLS handshake pinned to one protocol version (raises ssl.SSLError when refused)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(ca))
    # Security level 0 lets this client offer TLS 1.0/1.1 at all: the refusal must be the
    # server's, not the local OpenSSL policy's.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():  # TLS 1.1 is deprecated: that is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = version
        context.maximum_version = version
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost"),
    ):
        pass


@pytest.mark.parametrize("listener", ["grpc", "admin"])
def test_tls_below_1_2_is_refused_and_1_2_accepted(
    tls_instance: InstanceProcess, certs: Path, listener: str
) -> None:
    port = tls_instance.port if listener == "grpc" else tls_instance.admin_port
    handshake(port, ssl.TLSVersion.TLSv1_2, certs / "ca.pem")
    with pytest.raises(ssl.SSLError) as refused:
        handshake(port, ssl.TLSVersion.TLSv1_1, certs / "ca.pem")
    # The server refused the version (an alert), not this side's OpenSSL.
    assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value)


def test_the_admin_interface_answers_over_https_only_with_the_ca(
    tls_instance: InstanceProcess, certs: Path
) -> None:
    url = f"https://localhost:{tls_instance.admin_port}/health"
    context = client_ssl_context(certs / "ca.pem")
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        assert response.read() == b"ok\n"
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=10)  # the system CAs do not trust the local CA


async def test_verify_client_needs_a_client_certificate(tmp_path: Path, certs: Path) -> None:
    process = InstanceProcess(tmp_path / "amps", tls_config(certs, verify_client=True)).start()
    try:
        async with Client("no-cert", tls_ca=certs / "ca.pem", reconnect=False) as anonymous:
            with pytest.raises(errors.ConnectionBroken):
                await anonymous.connect(process.address, timeout_s=2)
        async with Client(
            "with-cert",
            tls_ca=certs / "ca.pem",
            tls_cert=certs / "client.pem",
            tls_key=certs / "client.key",
            reconnect=False,
        ) as known:
            await known.connect(process.address, timeout_s=10)
            await known.publish("orders", "{}")
            await known.flush(10)
    finally:
        process.kill()


def test_the_cli_connects_with_tls_ca(tls_instance: InstanceProcess, certs: Path) -> None:
    command = [sys.executable, "-m", "amps", "ping", "--server", tls_instance.address]
    refused = subprocess.run(
        [*command, "--connect-timeout", "1"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 3, refused.stderr
    done = subprocess.run(
        [*command, "--tls-ca", str(certs / "ca.pem")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    admin = [sys.executable, "-m", "amps", "admin", "status"]
    url = f"https://localhost:{tls_instance.admin_port}"
    status = subprocess.run(
        [*admin, "--server", url, "--tls-ca", str(certs / "ca.pem")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert '"name": "amps-test"' in status.stdout


def test_a_missing_certificate_file_stops_the_start_with_78(tmp_path: Path, certs: Path) -> None:
    text = tls_config(certs).replace(str(certs / "amps-test.pem"), str(tmp_path / "none.pem"))
    status, output = InstanceProcess(tmp_path / "amps", text).run_to_exit()
    assert status == 78
    assert "none.pem" in output
