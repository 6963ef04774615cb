"""A replication link that reads through a damaged journal record (issue 11 item 1, R10).

Catching a peer up reads old records; a damaged one is reported once and counted, the stream
ends there, and the instance goes on serving everyone else.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson

from amps.client import Client
from amps.log.storage import iter_keys
from tests.harness.cluster import Link, cluster, wait_until
from tests.harness.streams import take

COUNT = 200
TIMEOUT_S = 60


def _metric(admin_port: int, name: str) -> float:
    url = f"http://127.0.0.1:{admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith((name + "{", name + " ")):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_a_peer_catch_up_through_damage_is_reported_and_the_instance_carries_on(
    tmp_path: Path,
) -> None:
    running = cluster(tmp_path, ["a", "b"]).start({"a": [Link("b", sync=False)]})
    a, b = running["a"], running["b"]
    try:
        b.kill()
        async with Client("pub") as client:
            await client.connect(a.address)
            for n in range(1, COUNT + 1):
                await client.publish("orders", orjson.dumps({"n": n}))
            await client.flush(timeout_s=TIMEOUT_S)
        a.stop()
        (segment,) = sorted((a.workdir / "journal").glob("*.journal"))
        offsets = [offset for offset, *_ in iter_keys(segment)]
        data = bytearray(segment.read_bytes())
        data[offsets[COUNT // 2] + 30] ^= 0xFF  # covered by the tail checkpoint: a starts
        segment.write_bytes(bytes(data))
        a.start()
        b.restart(kill=True)
        # b reconnects to a and asks to be caught up from the start: a's reads meet the damage.
        await wait_until(lambda: any("damaged journal record met by" in line for line in a.output))
        # a still serves: a publish is acknowledged and delivered.
        async with Client("after") as client:
            await client.connect(a.address)
            live = await client.subscribe("orders")
            await client.publish("orders", b'{"n": "after"}')
            await client.flush(timeout_s=TIMEOUT_S)
            (message,) = await take(live, 1)
            assert message.json()["n"] == "after"
        assert a.process is not None
        assert a.process.poll() is None
        assert _metric(a.admin_port, "amps_journal_damaged_records_total") == 1
        logged = [line for line in a.output if "damaged journal record met by" in line]
        assert len(logged) == 1, a.output
        assert "replication" in logged[0]
    finally:
        running.kill()
