"""Client failover against real instance processes (issue 8, D3, L3, L4, Q6, Q10).

Without replication two instances do not share logs, so these tests check what failover means
on its own: a publisher republishes what the dead instance never persisted to the next one (no
loss, no duplicate within either log), a subscriber resumes on a restarted instance from its
bookmark, a queue consumer's unconfirmed acks are sent again, and a file bookmark store carries
a subscription across a client restart.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

import orjson
import pytest

from amps.client import BlockingClient, Client, Message
from amps.client.bookmarks import FileBookmarkStore
from tests.harness.instance import InstanceProcess, config_xml, process_env
from tests.harness.streams import more_within, replay_ids, take

TIMEOUT_S = 30.0
QUEUE = """
<SOW><Queue>
  <Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic><MessageType>json</MessageType>
  <LeasePeriod>60s</LeasePeriod><MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>
</Queue></SOW>
"""


def closed_address() -> str:
    """A loopback address nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def ids(messages: list[Message]) -> list[int]:
    return [message.json()["id"] for message in messages]


async def publish_ids(client: Client, topic: str, first: int, last: int) -> None:
    for n in range(first, last + 1):
        await client.publish(topic, orjson.dumps({"id": n}))


async def test_a_publisher_fails_over_and_republishes_what_was_not_persisted(
    tmp_path: Path,
) -> None:
    first = InstanceProcess(tmp_path / "a", config_xml(name="a")).start()
    second = InstanceProcess(tmp_path / "b", config_xml(name="b")).start()
    try:
        async with Client("failover-publisher") as client:
            await client.connect([first.address, second.address])
            await publish_ids(client, "orders", 1, 300)
            await client.flush(TIMEOUT_S)  # 1..300 persisted on the first instance
            # Stopped, 301..600 reach its socket and are never read; then it dies.
            assert first.process is not None
            first.process.send_signal(signal.SIGSTOP)
            await publish_ids(client, "orders", 301, 600)
            await asyncio.to_thread(first.kill)
            await publish_ids(client, "orders", 601, 1000)
            await client.flush(TIMEOUT_S)
            stats = client.statistics()
            assert stats.connected_server == second.address
            assert stats.reconnects >= 1
            assert stats.persisted == 1000
            assert stats.republished >= 300
        await asyncio.to_thread(first.restart, kill=True)
        # Every message the publisher was told is persisted is on exactly one instance.
        assert await replay_ids(first.address, "orders", 300) == list(range(1, 301))
        assert await replay_ids(second.address, "orders", 700) == list(range(301, 1001))
    finally:
        first.kill()
        second.kill()


async def test_with_heartbeats_a_frozen_instance_is_left_for_the_next(tmp_path: Path) -> None:
    """A stopped (SIGSTOP) instance breaks no connection: only heartbeats notice it."""
    first = InstanceProcess(tmp_path / "a", config_xml(name="a")).start()
    second = InstanceProcess(tmp_path / "b", config_xml(name="b")).start()
    try:
        async with Client("frozen-pub", heartbeat_interval_s=1, logon_timeout_s=2) as client:
            await client.connect([first.address, second.address])
            await publish_ids(client, "orders", 1, 100)
            await client.flush(TIMEOUT_S)
            assert first.process is not None
            first.process.send_signal(signal.SIGSTOP)
            await publish_ids(client, "orders", 101, 200)
            await client.flush(TIMEOUT_S)
            assert client.statistics().connected_server == second.address
        assert await replay_ids(second.address, "orders", 100) == list(range(101, 201))
    finally:
        first.kill()
        second.kill()


@pytest.mark.parametrize(
    ("bookmark", "with_list"), [(None, True), ("epoch", False)], ids=["live-list", "replay"]
)
async def test_a_subscriber_resumes_on_a_restarted_instance_without_gap_or_duplicate(
    tmp_path: Path, bookmark: str | None, with_list: bool
) -> None:
    instance = InstanceProcess(tmp_path / "amps", config_xml()).start()
    # The list: the client goes round it (refused, refused, ...) until the instance is back.
    servers = [instance.address, closed_address()] if with_list else [instance.address]
    try:
        async with Client("resume-sub") as reader, Client("resume-pub") as writer:
            await reader.connect(servers)
            await writer.connect(instance.address)
            subscription = await reader.subscribe("ticks", bookmark=bookmark)
            await publish_ids(writer, "ticks", 1, 200)
            await writer.flush(TIMEOUT_S)
            seen = ids(await take(subscription, 120))
            await asyncio.to_thread(instance.restart, kill=True)
            await publish_ids(writer, "ticks", 201, 400)
            await writer.flush(TIMEOUT_S)
            seen += ids(await take(subscription, 280))
            seen += ids(await more_within(subscription, 0.5))
            assert seen == list(range(1, 401))
            assert reader.statistics().reconnects >= 1
    finally:
        instance.kill()


async def test_a_queue_consumer_sends_its_unconfirmed_acks_again_after_a_restart(
    tmp_path: Path,
) -> None:
    instance = InstanceProcess(tmp_path / "amps", config_xml(extra=QUEUE)).start()
    try:
        async with Client("queue-pub") as writer, Client("consumer", ack_batch_size=1) as reader:
            await writer.connect(instance.address)
            await reader.connect(instance.address)
            await publish_ids(writer, "orders", 1, 10)
            await writer.flush(TIMEOUT_S)
            subscription = await reader.subscribe("work", max_backlog=10)
            messages = await take(subscription, 10)
            await messages[0].ack()
            await reader.ping()  # 1 is acked and confirmed before the instance stops
            assert instance.process is not None
            instance.process.send_signal(signal.SIGSTOP)
            for message in messages[1:5]:  # written to a stopped instance: never processed
                await message.ack()
            await asyncio.to_thread(instance.kill)
            for message in messages[5:7]:  # acked while the client notices or reconnects
                await message.ack()
            await asyncio.to_thread(instance.restart, kill=True)
            # Without the kept acks, 2..7 would be leased again here.
            again = await take(subscription, 3)
            assert sorted(ids(again)) == [8, 9, 10]
            assert await more_within(subscription, 0.5) == []
    finally:
        instance.kill()


async def test_a_file_bookmark_store_carries_a_subscription_across_a_client_restart(
    tmp_path: Path,
) -> None:
    instance = InstanceProcess(tmp_path / "amps", config_xml()).start()
    store_path = tmp_path / "bookmarks"
    try:
        async with Client("store-pub") as writer:
            await writer.connect(instance.address)
            await publish_ids(writer, "prices", 1, 100)
            await writer.flush(TIMEOUT_S)
        seen: list[int] = []
        for count in (30, 45, 25):
            async with Client("store-sub", bookmark_store=store_path) as reader:
                await reader.connect(instance.address)
                subscription = await reader.subscribe("prices", sub_id="s", bookmark="recent")
                seen += ids(await take(subscription, count))
        assert seen == list(range(1, 101))
        store = FileBookmarkStore(store_path)
        assert store.get("s") is not None
        store.close()
    finally:
        instance.kill()


async def run_cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "amps", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=process_env(),
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin), 4 * TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_cli_goes_down_a_server_list_and_continues_from_its_bookmark_store(
    tmp_path: Path,
) -> None:
    instance = InstanceProcess(tmp_path / "amps", config_xml()).start()
    servers = f"{closed_address()},{instance.address},{closed_address()}"
    store = str(tmp_path / "bookmarks")
    try:
        lines = b"".join(orjson.dumps({"id": n}) + b"\n" for n in range(1, 101))
        status, _, err = await run_cli(
            "publish", "--server", servers, "--topic", "cli", "--client-name", "cli-pub",
            stdin=lines,
        )  # fmt: skip
        assert status == 0, err
        assert "100 persisted" in err
        subscribe = ["subscribe", "--server", servers, "--topic", "cli", "--bookmark", "recent"]
        subscribe += ["--bookmark-store", store, "--sub-id", "cli-sub"]
        seen: list[int] = []
        for count in ("40", "60"):
            status, out, err = await run_cli(*subscribe, "--count", count)
            assert status == 0, err
            seen += [orjson.loads(line)["data"]["id"] for line in out.splitlines()]
        assert seen == list(range(1, 101))
    finally:
        instance.kill()


def test_the_blocking_client_takes_a_server_list_and_a_bookmark_store(tmp_path: Path) -> None:
    instance = InstanceProcess(tmp_path / "amps", config_xml()).start()
    servers = [closed_address(), instance.address]
    store = tmp_path / "bookmarks"
    try:
        with BlockingClient("blocking-pub") as writer:
            writer.connect(servers)
            for n in range(1, 21):
                writer.publish("blocking", orjson.dumps({"id": n}))
            writer.flush(TIMEOUT_S)
            assert writer.statistics().connected_server == instance.address
        seen: list[int] = []
        for count in (5, 15):
            with BlockingClient("blocking-sub", bookmark_store=store) as reader:
                reader.connect(servers)
                subscription = reader.subscribe("blocking", sub_id="s", bookmark="recent")
                for _ in range(count):
                    message = subscription.next_message(TIMEOUT_S)
                    assert message is not None
                    seen.append(message.json()["id"])
        assert seen == list(range(1, 21))
    finally:
        instance.kill()
