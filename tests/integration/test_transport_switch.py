"""A client transport that starts disabled (InitialState), enabled and disabled again by
`amps admin transport` against a real instance (seed 004's runbook, issue 9)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from amps.client import Client
from amps.errors import ConnectionBroken
from tests.harness.instance import InstanceProcess, amps_cli, config_xml, process_env
from tests.harness.streams import take
from tests.integration.test_admin import WORK_QUEUE, eventually, get_json

TIMEOUT_S = 30


@pytest.fixture
def closed_instance(tmp_path: Path) -> Iterator[InstanceProcess]:
    config = config_xml(extra=WORK_QUEUE, initial_state="disabled")
    process = InstanceProcess(tmp_path / "amps", config).start()
    try:
        yield process
    finally:
        process.kill()


async def client_health(instance: InstanceProcess, service: str = "amps.v1.Amps") -> int:
    """The gRPC health status of the client service (or of the instance, service "")."""
    async with grpc.aio.insecure_channel(instance.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    return int(answer.status)


def transport_state(instance: InstanceProcess) -> dict[str, object]:
    (transport,) = get_json(instance, "/amps/instance/transports.json")["transports"]
    assert isinstance(transport, dict)
    return transport


async def test_a_disabled_transport_refuses_logons_until_enabled_then_drops_its_clients(
    closed_instance: InstanceProcess,
) -> None:
    inst = closed_instance
    server = f"127.0.0.1:{inst.admin_port}"
    assert "transport grpc starts disabled (InitialState)" in "".join(inst.output)
    assert transport_state(inst)["state"] == "disabled"

    # Given the transport starts disabled: a logon is refused, with what to do about it.
    async with Client("refused", reconnect=False) as client:
        with pytest.raises(ConnectionBroken) as refused:
            await client.connect(inst.address, timeout_s=5)
    assert "transport 'grpc' is disabled" in str(refused.value)
    assert "amps admin transport enable grpc" in str(refused.value)
    assert transport_state(inst)["refused_logons"] == 1
    # Load balancers see the client service down and the instance alive (it replicates).
    assert await client_health(inst) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert await client_health(inst, "") == health_pb2.HealthCheckResponse.SERVING

    # When an administrator enables it, clients log on and take work.
    enabled = await asyncio.to_thread(
        amps_cli, "admin", "transport", "enable", "grpc", "--server", server
    )
    assert (enabled.returncode, enabled.stdout) == (0, "transport grpc enabled\n"), enabled.stderr
    assert await client_health(inst) == health_pb2.HealthCheckResponse.SERVING
    async with Client("pub") as pub, Client("worker", reconnect=False) as worker:
        await pub.connect(inst.address)
        await pub.publish("orders", orjson.dumps({"id": 1}))
        await pub.flush(timeout_s=TIMEOUT_S)
        await worker.connect(inst.address)
        await take(await worker.subscribe("work", max_backlog=1), 1)
        await eventually(lambda: get_json(inst, "/amps/instance/queues/work")["backlog"] == 1)

        # When it is disabled again, its clients are disconnected and their leases return.
        disabled = await asyncio.to_thread(
            amps_cli, "admin", "transport", "disable", "grpc", "--server", server, "--yes"
        )
        assert disabled.returncode == 0, disabled.stderr
        await eventually(lambda: get_json(inst, "/amps/instance/queues/work")["backlog"] == 0)
        await eventually(lambda: get_json(inst, "/amps/instance")["connected_clients"] == 0)
    listing = await asyncio.to_thread(
        amps_cli, "admin", "transports", "--server", server, "--output", "json"
    )
    (transport,) = json.loads(listing.stdout)["transports"]
    assert (transport["state"], transport["initial_state"]) == ("disabled", "disabled")
    assert transport["port"] == inst.port


async def test_amps_subscribe_says_why_its_connection_ended(instance: InstanceProcess) -> None:
    """issue 8: the instance's reason for ending the stream reaches the command's user."""
    async with Client("publisher") as publisher:
        await publisher.connect(instance.address)
        await publisher.publish("orders", b'{"id":1}')
        await publisher.flush(TIMEOUT_S)
    subscriber = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "amps", "subscribe", "--server", instance.address,
        "--topic", "orders", "--bookmark", "epoch",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=process_env(),
    )  # fmt: skip
    assert subscriber.stdout is not None
    assert subscriber.stderr is not None
    try:
        # Logged on and subscribed once it prints the message replayed from the log.
        line = await asyncio.wait_for(subscriber.stdout.readline(), TIMEOUT_S)
        assert b'"id":1' in line, line
        disabled = await asyncio.to_thread(
            amps_cli, "admin", "transport", "disable", "grpc",
            "--server", f"127.0.0.1:{instance.admin_port}", "--yes",
        )  # fmt: skip
        assert disabled.returncode == 0, disabled.stderr
        said = await asyncio.wait_for(subscriber.stderr.readline(), TIMEOUT_S)
    finally:
        subscriber.kill()
        await subscriber.wait()
    reason = "closed by the instance: transport disabled: transport 'grpc' is disabled"
    assert said.decode().startswith(f"amps: connection to {instance.address} lost: {reason}")
    assert said.decode().rstrip().endswith("; reconnecting"), said
