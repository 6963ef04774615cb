"""Default-deny beyond loopback and per-transport Authentication on real instances (issue 12,
S1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amps import errors
from amps.client import Client
from tests.harness.instance import InstanceProcess, config_xml
from tests.integration.test_security import PASSWORDS, write_users


def test_a_client_port_on_every_interface_without_users_does_not_start(tmp_path: Path) -> None:
    """Refused before anything is bound or written: exit 78, the fix named, no journal made."""
    text = config_xml().replace(
        "127.0.0.1:0</InetAddr></Transport>", "0.0.0.0:0</InetAddr></Transport>"
    )
    status, output = InstanceProcess(tmp_path / "amps", text).run_to_exit()
    assert status == 78, output
    assert "AMPSConfig/Transports/Transport[1]/InetAddr: '0.0.0.0:0'" in output
    assert "<Authentication><UsersFile>PATH</UsersFile></Authentication>" in output
    assert not (tmp_path / "amps" / "journal").exists()


async def test_a_transport_users_file_guards_its_clients_while_the_instance_has_none(
    tmp_path: Path,
) -> None:
    users_file = tmp_path / "users.toml"
    write_users(users_file)
    text = config_xml().replace(
        "</InetAddr></Transport>",
        f"</InetAddr><Authentication><UsersFile>{users_file}</UsersFile></Authentication>"
        "</Transport>",
    )
    instance = InstanceProcess(tmp_path / "amps", text).start()
    try:
        with pytest.raises(errors.AuthenticationFailed):
            async with Client("anonymous", reconnect=False) as anonymous:
                await anonymous.connect(instance.address, timeout_s=10)
        async with Client("alice-1", user="alice", password=PASSWORDS["alice"]) as alice:
            await alice.connect(instance.address)
            await alice.publish("orders", '{"id":1}')
            await alice.flush(10)
    finally:
        instance.kill()
