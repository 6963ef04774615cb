"""SIGHUP reads the certificates again without a restart (issue 12): new connections get the
new certificate on the client and admin ports; files that are not a usable pair leave the
certificates in use."""

from __future__ import annotations

import shutil
import signal
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.instance import InstanceProcess
from tests.integration.test_tls import handshake, make_certs, tls_config


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"), "amps-test")


@pytest.fixture
def live(tmp_path: Path, certs: Path) -> Path:
    """A copy of the certificates the instance is configured with, to replace in place."""
    directory = tmp_path / "live"
    directory.mkdir()
    for name in ("ca.pem", "amps-test.pem", "amps-test.key"):
        shutil.copy(certs / name, directory / name)
    return directory


@pytest.fixture
def instance(tmp_path: Path, live: Path) -> Iterator[InstanceProcess]:
    process = InstanceProcess(tmp_path / "amps", tls_config(live)).start()
    try:
        yield process
    finally:
        process.kill()


def replace(live: Path, source: Path, *names: str) -> None:
    for name in names:
        shutil.copy(source / name, live / name)


def hup(instance: InstanceProcess) -> None:
    assert instance.process is not None
    instance.process.send_signal(signal.SIGHUP)


def test_sighup_serves_the_new_certificate_and_keeps_the_old_one_when_the_new_is_bad(
    tmp_path: Path, certs: Path, live: Path, instance: InstanceProcess
) -> None:
    renewed = make_certs(tmp_path / "renewed", "amps-test")
    for port in (instance.port, instance.admin_port):
        handshake(port, ssl.TLSVersion.TLSv1_2, certs / "ca.pem")

    # A half-done renewal (the new certificate, the old key): refused, the old pair stays.
    replace(live, renewed, "amps-test.pem")
    hup(instance)
    line = instance.wait_for_output("client transport certificates not reloaded")
    assert "expected a PEM certificate matching PrivateKey" in line, line
    instance.wait_for_output("admin certificates not reloaded")
    for port in (instance.port, instance.admin_port):
        handshake(port, ssl.TLSVersion.TLSv1_2, certs / "ca.pem")

    # The whole pair in place: new connections get the new certificate, on both ports.
    replace(live, renewed, "amps-test.key")
    hup(instance)
    instance.wait_for_output("client transport certificates reloaded")
    instance.wait_for_output("admin certificates reloaded")
    for port in (instance.port, instance.admin_port):
        handshake(port, ssl.TLSVersion.TLSv1_2, renewed / "ca.pem")
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(port, ssl.TLSVersion.TLSv1_2, certs / "ca.pem")
