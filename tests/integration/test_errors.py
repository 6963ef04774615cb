"""Bad input gets a precise error and the instance keeps serving others."""

from __future__ import annotations

import contextlib
from pathlib import Path

import grpc
import pytest

from amps import errors
from amps.client import Client
from amps.names import MAX_NAME_LENGTH
from amps.v1 import client_pb2 as pb
from amps.v1 import client_pb2_grpc
from tests.harness.instance import InstanceProcess, config_xml

TIMEOUT_S = 20


def test_bad_config_is_refused_with_the_element_path(tmp_path: Path) -> None:
    bad = config_xml().replace("<JournalSize>64MB</JournalSize>", "<JournalSize>lots</JournalSize>")
    code, output = InstanceProcess(tmp_path / "amps", bad).run_to_exit()
    assert code == 78, output
    assert "AMPSConfig/TransactionLog/JournalSize" in output
    assert "'lots'" in output


def test_unknown_element_is_refused(tmp_path: Path) -> None:
    bad = config_xml(extra="<Tranports/>")
    code, output = InstanceProcess(tmp_path / "amps", bad).run_to_exit()
    assert code == 78, output
    assert "Tranports" in output


async def test_bad_bookmark_bad_filter_and_oversized_message(tmp_path: Path) -> None:
    instance = InstanceProcess(tmp_path / "amps", config_xml(max_message_size="1KB")).start()
    try:
        async with Client("errs") as client:
            await client.connect(instance.address)
            with pytest.raises(errors.InvalidBookmark):
                await client.subscribe("t", bookmark="not-a-bookmark")
            with pytest.raises(errors.FilterSyntaxError) as caught:
                await client.subscribe("t", filter="/a = = 1")
            assert "column" in str(caught.value)
            with pytest.raises(errors.InvalidTopic):
                await client.subscribe("t(", bookmark="epoch")
            await client.publish("t", b"x" * 2000)
            with pytest.raises(errors.MessageTooLarge):
                await client.flush(timeout_s=TIMEOUT_S)
            # The connection and the instance still work.
            await client.publish("t", b'{"ok":1}')
            await client.flush(timeout_s=TIMEOUT_S)
    finally:
        instance.kill()


async def test_unknown_command_and_command_before_logon(instance: InstanceProcess) -> None:
    """A Command with no body and a publish before logon get failed acks; the stream lives."""
    async with grpc.aio.insecure_channel(instance.address) as channel:
        stub = client_pb2_grpc.AmpsStub(channel)  # type: ignore[no-untyped-call]  # generated untyped
        frames = [
            pb.ClientFrame(
                commands=[
                    pb.Command(
                        cmd_id="p0", ack_type="processed", publish=pb.Publish(topic="t", data=b"{}")
                    )
                ]
            ),
            pb.ClientFrame(
                commands=[
                    pb.Command(cmd_id="l", ack_type="processed", logon=pb.Logon(client_name="raw"))
                ]
            ),
            pb.ClientFrame(commands=[pb.Command(cmd_id="u", ack_type="processed")]),
            pb.ClientFrame(
                commands=[pb.Command(cmd_id="f", ack_type="processed", flush=pb.Flush())]
            ),
        ]
        acks: dict[str, pb.Ack] = {}
        call = stub.Connect(iter(frames))
        async for frame in call:
            for message in frame.messages:
                if message.HasField("ack"):
                    acks[message.ack.cmd_id] = message.ack
            if "f" in acks:
                break
        call.cancel()
    assert acks["p0"].status == "failure"
    assert acks["p0"].reason.startswith("logon required")
    assert acks["l"].status == "success"
    assert acks["u"].status == "failure"
    assert acks["u"].reason.startswith("unknown command")
    assert acks["f"].status == "success"


async def test_name_in_use_same_user_replaces_other_user_refused(
    instance: InstanceProcess,
) -> None:
    """L6: the same name and user replaces the first connection; another user is refused."""
    first = Client("shared-name", user="alice", reconnect=False)
    second = Client("shared-name", user="alice", reconnect=False)
    intruder = Client("shared-name", user="mallory", reconnect=False)
    try:
        await first.connect(instance.address)
        await second.connect(instance.address)

        # The first connection was dropped by the instance with the reason "name in use",
        # which its client reads even when a write meets the stream's end (gRPC then reports
        # INTERNAL: issue 8).
        async def keep_publishing() -> None:
            for _ in range(50):
                await first.publish("t", b"{}")
                await first.flush(timeout_s=2)

        with pytest.raises(errors.NameInUse, match="logged on elsewhere"):
            await keep_publishing()
        with pytest.raises(errors.NameInUse):
            await intruder.connect(instance.address)
        await second.publish("t", b'{"still":"works"}')
        await second.flush(timeout_s=TIMEOUT_S)
    finally:
        for client in (first, second, intruder):
            with contextlib.suppress(errors.AmpsError):
                await client.close()


async def test_client_names_are_bounded(instance: InstanceProcess) -> None:
    # Issue 11: names were unbounded; a client name lands in logs, metrics and replication.
    longest = Client("c" * MAX_NAME_LENGTH, reconnect=False)
    too_long = Client("c" * (MAX_NAME_LENGTH + 1), reconnect=False)
    try:
        await longest.connect(instance.address)
        with pytest.raises(errors.InvalidOptions, match="at most 256 characters"):
            await too_long.connect(instance.address)
    finally:
        for client in (longest, too_long):
            with contextlib.suppress(errors.AmpsError):
                await client.close()
