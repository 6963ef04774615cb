"""`amps publish` from stdin rides out a SIGKILL and restart of the instance (issue 2, L3, L4)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson

from amps.client import Client
from tests.harness.instance import InstanceProcess, config_xml, process_env
from tests.harness.streams import replay_ids, take

TOTAL = 20_000
TIMEOUT_S = 120


async def test_cli_publish_survives_a_restart_and_exits_zero(tmp_path: Path) -> None:
    instance = InstanceProcess(tmp_path / "amps", config_xml(journal_size="4MB")).start()
    try:
        publisher = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "amps", "publish", "--server", instance.address,
            "--topic", "cli-restart", "--client-name", "cli-restart", "--connect-timeout", "60",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=process_env(),
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert publisher.stdin is not None
        stdin = publisher.stdin
        lines = b"".join(orjson.dumps({"id": i}) + b"\n" for i in range(1, TOTAL + 1))
        half = len(lines) // 2
        async with Client("cli-restart-watch") as watcher:
            await watcher.connect(instance.address)
            subscription = await watcher.subscribe("cli-restart")
            stdin.write(lines[:half])
            await stdin.drain()
            # Killed once the publisher is connected and publishing, whatever its start-up took.
            await take(subscription, 1, TIMEOUT_S)
        await asyncio.to_thread(instance.kill)

        async def write_rest() -> None:
            # Concurrently with the restart: the publisher reads stdin only while it publishes.
            try:
                stdin.write(lines[half:])
                await stdin.drain()
                stdin.close()
            except ConnectionError:
                pass  # the publisher ended early: its exit status and message say why, below

        writer = asyncio.create_task(write_rest())
        await asyncio.to_thread(instance.restart)
        await writer
        _, stderr = await asyncio.wait_for(publisher.communicate(), TIMEOUT_S)
        assert publisher.returncode == 0, stderr.decode()

        ids = await replay_ids(instance.address, "cli-restart", TOTAL, timeout_s=TIMEOUT_S)
        assert ids == list(range(1, TOTAL + 1))
        assert f"{TOTAL} persisted" in stderr.decode()
    finally:
        instance.kill()
