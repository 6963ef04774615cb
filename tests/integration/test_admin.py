"""Admin HTTP and `amps admin` against a real instance: queue metrics and JSON (issue 4, D4, D5)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from amps.client import Client
from tests.harness.instance import InstanceProcess, amps_cli, config_xml
from tests.harness.streams import take

TIMEOUT_S = 30
WORK_QUEUE = (
    "<SOW><Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>"
    "<MessageType>json</MessageType><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue></SOW>"
)


@pytest.fixture
def queue_instance(tmp_path: Path) -> Iterator[InstanceProcess]:
    process = InstanceProcess(tmp_path / "amps", config_xml(extra=WORK_QUEUE)).start()
    try:
        yield process
    finally:
        process.kill()


def get(instance: InstanceProcess, path: str) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{instance.admin_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def get_json(instance: InstanceProcess, path: str) -> Any:
    status, body = get(instance, path)
    assert status == 200, (path, body)
    return orjson.loads(body)


def samples(instance: InstanceProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    status, body = get(instance, "/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def work(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    key = {"node": "amps-test", "queue": "work", **labels}
    return name, tuple(sorted(key.items()))


async def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll a condition the instance reaches asynchronously; bounded."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_queue_metrics_and_json_follow_the_queue(queue_instance: InstanceProcess) -> None:
    """D5: per-queue gauges and counters in /metrics; the JSON pages use the AMPS names."""
    inst = queue_instance
    before = samples(inst)
    assert before[work("amps_queue_depth")] == 0
    assert before[work("amps_queue_oldest_message_age_seconds")] == 0
    for reason in ("time_limit", "forced_expire", "max_cancels", "max_deliveries"):
        assert before[work("amps_queue_expired_messages_total", reason=reason)] == 0
    assert ("amps_record_cache_misses_total", (("node", "amps-test"),)) in before

    async with Client("admin-pub") as pub, Client("admin-sub") as sub:
        await pub.connect(inst.address)
        for i in range(5):
            await pub.publish("orders", orjson.dumps({"id": i}))
        await pub.flush(timeout_s=TIMEOUT_S)
        await eventually(lambda: samples(inst)[work("amps_queue_depth")] == 5)

        await sub.connect(inst.address)
        leased = await take(await sub.subscribe("work", max_backlog=2), 2)
        await eventually(lambda: samples(inst)[work("amps_queue_leased_messages")] == 2)
        now = samples(inst)
        assert now[work("amps_queue_depth")] == 5
        assert now[work("amps_queue_deliverable_messages")] == 3
        assert now[work("amps_queue_subscriptions")] == 1
        assert now[work("amps_queue_entered_messages_total")] == 5
        assert now[work("amps_queue_delivered_messages_total")] == 2
        assert now[work("amps_queue_oldest_message_age_seconds")] >= 0

        listing = get_json(inst, "/amps/instance/queues")
        assert listing["node"] == "amps-test"
        suffixed = get_json(inst, "/amps/instance/queues.json")
        assert [q["name"] for q in suffixed["queues"]] == ["work"]
        (queue,) = listing["queues"]
        assert queue["name"] == "work"
        assert queue["id"] == "work!json"
        assert queue["underlying_topic"] == "orders"
        assert queue["message_type"] == "json"
        assert queue["semantics"] == "at-least-once"
        assert queue["lease_period_seconds"] == 30
        assert queue["max_per_subscription_backlog"] == 100
        assert queue["target_queue_depth"] is None
        assert queue["queue_depth"] == 5
        assert queue["backlog"] == 2
        assert queue["deliverable_count"] == 3
        for name in ("seconds_behind", "age_of_oldest_lease", "expired_leases"):
            assert name in queue
        assert queue["deferred_ack_count"] == 0
        assert queue["inactive_message_count"] == 0

        one = get_json(inst, "/amps/instance/queues/work")
        assert one["queue_depth"] == 5
        assert get_json(inst, "/amps/instance/queues/work!json.json")["name"] == "work"
        assert get_json(inst, "/amps/instance/queues/work/backlog") == {"backlog": 2}
        status, body = get(inst, "/amps/instance/queues/nope")
        assert status == 404
        assert orjson.loads(body)["queues"] == ["work"]

        await sub.ack_message(leased[0])
        await sub.flush_acks()
        await eventually(lambda: samples(inst)[work("amps_queue_acked_messages_total")] == 1)
        assert samples(inst)[work("amps_queue_depth")] == 4

    instance_json = get_json(inst, "/amps/instance")
    assert instance_json["name"] == "amps-test"
    assert instance_json["queue_depths"] == {"work": 4}
    assert get_json(inst, "/amps/instance.json")["name"] == "amps-test"


async def test_amps_admin_cli(queue_instance: InstanceProcess) -> None:
    """D4: `amps admin queues|status|metrics`; exit 3 unreachable, 1 on HTTP errors."""
    inst = queue_instance
    async with Client("admin-cli-pub") as pub:
        await pub.connect(inst.address)
        for i in range(3):
            await pub.publish("orders", orjson.dumps({"id": i}))
        await pub.flush(timeout_s=TIMEOUT_S)
    await eventually(lambda: get_json(inst, "/amps/instance/queues/work")["queue_depth"] == 3)
    server = f"127.0.0.1:{inst.admin_port}"
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        unused = closed.getsockname()[1]

    runs = await asyncio.gather(
        *(
            asyncio.to_thread(amps_cli, "admin", *args)
            for args in (
                ("queues", "--server", server, "--output", "json"),
                ("queues", "--server", server),
                ("status", "--server", server),
                ("metrics", "--server", server),
                ("queues", "--server", f"127.0.0.1:{unused}", "--timeout", "2"),
                ("status", "--server", f"{server}/nope"),
                ("queues", "--server", server, "--output", "yaml"),
            )
        )
    )
    as_json, table, status, metrics, unreachable, http_error, usage = runs

    assert as_json.returncode == 0, as_json.stderr
    (queue,) = json.loads(as_json.stdout)["queues"]
    assert (queue["name"], queue["queue_depth"], queue["backlog"]) == ("work", 3, 0)

    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:4] == ["QUEUE", "DEPTH", "BACKLOG", "DELIVERABLE"]
    assert row.split()[:4] == ["work", "3", "0", "3"]

    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["queue_depths"] == {"work": 3}

    assert metrics.returncode == 0, metrics.stderr
    assert 'amps_queue_depth{node="amps-test",queue="work"} 3.0' in metrics.stdout

    assert unreachable.returncode == 3
    assert "cannot reach the admin interface" in unreachable.stderr
    assert http_error.returncode == 1
    assert "HTTP 404" in http_error.stderr
    assert usage.returncode == 2
