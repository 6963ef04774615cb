"""Closing a client while its link is being lost (the stop-16 CI failure, D3).

close() waits for the writer to send what is queued; if the reader (or heartbeat) declares the
link lost meanwhile, it cancels the writer. close() must still return quietly, not raise the
writer's CancelledError at the caller, as it did after a SIGKILL in the runbook cluster test.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from amps.client import Client
from amps.errors import ConnectionBroken
from tests.harness.instance import InstanceProcess, config_xml


async def test_close_returns_when_the_link_is_lost_while_it_drains(tmp_path: Path) -> None:
    instance = InstanceProcess(tmp_path / "a", config_xml(name="a")).start()
    assert instance.process is not None
    try:
        client = Client("closer", reconnect=False)
        await client.connect(instance.address)
        conn = client._conn
        assert conn is not None
        # A stopped instance reads nothing: the writer blocks on gRPC flow control.
        instance.process.send_signal(signal.SIGSTOP)
        payload = b"x" * 60_000
        for _ in range(200):
            await client.publish("orders", payload)
        closing = asyncio.create_task(client.close())
        for _ in range(5_000):  # until close() waits for the writer (bounded: 5 s)
            if conn._closing or closing.done():
                break
            await asyncio.sleep(0.001)
        assert not closing.done()  # waiting for the blocked writer
        conn.break_link(ConnectionBroken("lost while closing"))
        await asyncio.wait_for(closing, 10)
    finally:
        instance.process.send_signal(signal.SIGCONT)
        instance.kill()
