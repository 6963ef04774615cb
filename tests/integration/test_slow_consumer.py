"""A subscriber that never reads is cut by bytes, and resumes from its bookmark (issue 11)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from amps.client import Client
from amps.v1 import client_pb2 as pb
from tests.harness.instance import InstanceProcess, config_xml
from tests.harness.streams import take
from tests.integration.test_admin import samples

TIMEOUT_S = 30
LIMITS = "<MessageMemoryLimit>8MB</MessageMemoryLimit><ClientMaxCapacity>50%</ClientMaxCapacity>"
CLIENT_LIMIT_BYTES = 4 * 1024 * 1024
PAD = "y" * (16 * 1024)
MAX_MESSAGES = 2_000  # 32 MB: far past the 4 MB a client may hold


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[InstanceProcess]:
    process = InstanceProcess(tmp_path / "amps", config_xml(extra=LIMITS)).start()
    try:
        yield process
    finally:
        process.kill()


def node(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"node": "amps-test", **labels}.items()))


async def test_a_subscriber_that_never_reads_is_cut_by_bytes_and_resumes(
    limited: InstanceProcess,
) -> None:
    """Issue 11: 16 KB messages to a subscriber that never reads: past its byte share it is
    disconnected (log, /metrics, and its stream's status say why), the bytes held go back to
    near zero, and a new connection resumes after the last bookmark it had read."""
    async with grpc.aio.insecure_channel(limited.address) as channel:
        call = channel.stream_stream(
            "/amps.v1.Amps/Connect",
            request_serializer=pb.ClientFrame.SerializeToString,
            response_deserializer=pb.ServerFrame.FromString,
        )()
        logon = pb.Command(cmd_id="1", logon=pb.Logon(client_name="slow"))
        subscribe = pb.Command(
            cmd_id="2", subscribe=pb.Subscribe(topic="orders", sub_id="s", bookmark="0|1|")
        )
        await call.write(pb.ClientFrame(commands=[logon, subscribe]))
        for _ in range(10):  # until the replay from `now` has switched to live
            frame = await call.read()
            if any(m.ack.ack_type == "completed" for m in frame.messages):
                break
        else:
            pytest.fail("no completed ack for the subscription")

        async with Client("pub") as publisher:
            await publisher.connect(limited.address)
            key = node("amps_slow_consumer_disconnects_total", limit="client")
            published = 0
            while published < MAX_MESSAGES:
                for _ in range(100):
                    published += 1
                    await publisher.publish("orders", orjson.dumps({"i": published, "p": PAD}))
                await publisher.flush(timeout_s=TIMEOUT_S)
                if samples(limited)[key] >= 1:
                    break
            assert samples(limited)[key] == 1
            for _ in range(100):  # later messages are not queued for the cut connection
                published += 1
                await publisher.publish("orders", orjson.dumps({"i": published, "p": PAD}))
            await publisher.flush(timeout_s=TIMEOUT_S)
            metrics = samples(limited)
        assert metrics[node("amps_client_queued_bytes_client_limit")] == CLIENT_LIMIT_BYTES
        assert metrics[node("amps_client_queued_bytes")] < CLIENT_LIMIT_BYTES // 4
        assert metrics[node("amps_slow_consumer_disconnects_total", limit="instance")] == 0
        # The log line is read from the process's output by a thread: awaited, not polled once.
        line = await asyncio.to_thread(limited.wait_for_output, "ClientMaxCapacity")
        assert "'slow'" in line, line
        assert "slow consumer" in line, line

        # What the client had been sent before the cut, then the reason as the stream's status.
        read: list[pb.Delivery] = []
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await read_until_the_end(call, read)
        assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "slow consumer" in (ended.value.details() or "")

    last = orjson.loads(read[-1].data)["i"] if read else 0
    async with Client("slow") as client:
        await client.connect(limited.address)
        sub = await client.subscribe("orders", bookmark=read[-1].bookmark if read else "epoch")
        rest = await take(sub, published - last, TIMEOUT_S)
    assert [orjson.loads(m.data)["i"] for m in rest] == list(range(last + 1, published + 1))


async def read_until_the_end(call: Any, into: list[pb.Delivery]) -> None:
    """Read deliveries until the stream ends; its status is raised as AioRpcError."""
    for _ in range(MAX_MESSAGES):
        frame = await call.read()
        assert frame is not grpc.aio.EOF
        into.extend(m.delivery for m in frame.messages if m.WhichOneof("body") == "delivery")
