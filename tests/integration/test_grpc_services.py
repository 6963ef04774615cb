"""gRPC health checking and server reflection are on, so standard tools (grpcurl) work."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.harness.instance import InstanceProcess

TIMEOUT_S = 10


async def test_health_check_reports_serving(instance: InstanceProcess) -> None:
    async with grpc.aio.insecure_channel(instance.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        overall = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S)
        amps = await stub.Check(
            health_pb2.HealthCheckRequest(service="amps.v1.Amps"), timeout=TIMEOUT_S
        )
    assert overall.status == health_pb2.HealthCheckResponse.SERVING
    assert amps.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_client_service(instance: InstanceProcess) -> None:
    async with grpc.aio.insecure_channel(instance.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        call = stub.ServerReflectionInfo(iter([request]), timeout=TIMEOUT_S)
        names = []
        async for response in call:
            names = [s.name for s in response.list_services_response.service]
            break
    assert "amps.v1.Amps" in names
    assert "grpc.health.v1.Health" in names
