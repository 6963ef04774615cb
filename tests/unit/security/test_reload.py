"""Certificate holders that SIGHUP reloads (issue 12): a usable pair replaces the old one, a bad
one raises and changes nothing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from amps import errors
from amps.config.model import TlsConfig
from amps.security.reload import ReloadableChannelTls, ReloadableServerTls

MAKE_CERTS = Path(__file__).resolve().parents[3] / "deploy" / "make-certs.sh"


def make_certs(directory: Path) -> Path:
    subprocess.run(["bash", str(MAKE_CERTS), str(directory), "a"], check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    return directory


@pytest.fixture
def pairs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(live, old, new): live starts as a copy of old."""
    old, new = make_certs(tmp_path / "old"), make_certs(tmp_path / "new")
    live = tmp_path / "live"
    shutil.copytree(old, live)
    return live, old, new


def tls_of(live: Path) -> TlsConfig:
    return TlsConfig(str(live / "a.pem"), str(live / "a.key"), str(live / "ca.pem"), True)


def test_a_server_holder_hands_the_new_pair_to_the_next_handshake_once(
    pairs: tuple[Path, Path, Path],
) -> None:
    live, _old, new = pairs
    holder = ReloadableServerTls(tls_of(live), "T")
    holder.credentials()
    assert holder._fetch() is None  # nothing new yet
    for name in ("a.pem", "a.key"):
        shutil.copy(new / name, live / name)
    holder.reload()
    assert holder._fetch() is not None
    assert holder._fetch() is None


def test_a_mismatched_pair_is_refused_and_nothing_changes(
    pairs: tuple[Path, Path, Path],
) -> None:
    live, _old, new = pairs
    server = ReloadableServerTls(tls_of(live), "T")
    channel = ReloadableChannelTls(tls_of(live))
    before = channel.credentials
    shutil.copy(new / "a.pem", live / "a.pem")  # the new certificate with the old key
    with pytest.raises(errors.ConfigError, match="matching PrivateKey"):
        server.reload()
    with pytest.raises(errors.ConfigError, match="matching PrivateKey"):
        channel.reload()
    assert server._fetch() is None
    assert channel.credentials is before
    shutil.copy(new / "a.key", live / "a.key")
    channel.reload()
    assert channel.credentials is not before
