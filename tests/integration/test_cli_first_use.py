"""What a new user trips over, through the real `amps` command against real instances (issue 11,
items 5 and 9): readable errors and exit statuses, never a traceback, each fatal line once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from tests.harness.instance import InstanceProcess, amps_cli, config_xml, process_env

TIMEOUT_S = 30


def test_a_configuration_of_random_bytes_exits_78_with_one_sentence(tmp_path: Path) -> None:
    config = tmp_path / "config.xml"
    config.write_bytes(b"\xfd" + os.urandom(4096))
    done = amps_cli("server", "--config", str(config))
    assert done.returncode == 78, done.stderr
    assert "Traceback" not in done.stderr
    assert "byte 0xfd at offset 0" in done.stderr
    assert "UTF-8" in done.stderr
    # A fatal error is printed once (it was a log line and an `amps: fatal` line).
    assert done.stderr.count("fatal (config_invalid)") == 1, done.stderr


def test_a_second_server_on_a_used_port_fails_before_creating_its_journal(
    instance: InstanceProcess, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    text = config_xml(journal="data/journal", grpc_port=instance.port, admin_port=None)
    (other / "config.xml").write_text(text)
    done = amps_cli("server", "--config", "config.xml", cwd=other)
    assert done.returncode == 69, done.stderr
    assert f"127.0.0.1:{instance.port}" in done.stderr
    assert "address in use" in done.stderr
    assert done.stderr.count("fatal (address_in_use)") == 1, done.stderr
    assert not (other / "data").exists()


def test_admin_against_the_grpc_port_names_the_likely_mistake(instance: InstanceProcess) -> None:
    done = amps_cli("admin", "queues", "--server", instance.address, "--timeout", "5")
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "gRPC transport's port" in done.stderr
    assert "Admin/InetAddr" in done.stderr


def test_a_bad_regex_topic_is_shown_as_text_and_the_server_stderr_stays_quiet(
    instance: InstanceProcess,
) -> None:
    done = amps_cli(
        "subscribe", "--server", instance.address, "--topic", "orders.(", "--timeout", "5"
    )
    assert done.returncode == 1, done.stderr
    assert "bad regex topic 'orders.(': missing ): orders.(" in done.stderr
    assert "b'" not in done.stderr
    # The instance answered: a ping after the refusal proves the output below is complete.
    assert amps_cli("ping", "--server", instance.address).returncode == 0
    server_output = "".join(instance.output)
    assert "absl" not in server_output
    assert "re2.cc" not in server_output


def test_journal_dump_into_a_closed_pipe_exits_quietly(instance: InstanceProcess) -> None:
    from amps.client import Client

    async def fill() -> None:
        async with Client("pipe-filler") as client:
            await client.connect(instance.address)
            for n in range(2000):
                await client.publish("orders", b'{"n": %d}' % n)
            await client.flush(timeout_s=TIMEOUT_S)

    asyncio.run(fill())
    dump = subprocess.Popen(
        [sys.executable, "-m", "amps", "journal", "dump", str(instance.workdir / "journal")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=process_env(),
    )
    assert dump.stdout is not None
    assert dump.stdout.readline().startswith(b'{"txid":1,')
    dump.stdout.close()  # `| head -1`: the reader goes away with ~400 KB still to come
    _, stderr = dump.communicate(timeout=TIMEOUT_S)
    assert dump.returncode == 0, stderr
    assert stderr == b""
