"""One message at a time (issue 14): a consumer acking each message, against Redis Streams.

`.venv/bin/python -m bench.bench_backlog [--quick] [--only consumer|latency] [--rounds N]`

In one run, beside Redis Streams (`redis-server` with `appendonly yes`, `appendfsync always`,
redis-py; installed by `bench.peers` when missing; 127.0.0.1):

1. consumer: the queue `work` over `orders` with N 1 KB messages waiting, one consumer that
   acks each message (`async for m in sub: await m.ack()`, default client settings) at
   max_backlog 1, 10 and 100, against one redis-py consumer doing `XREADGROUP COUNT n` and one
   `XACK` of what it read. At backlog 1 it also prints where a message's round trip goes: the
   instance's own per-hop statistics (`/amps/instance` `hops`), instance and client CPU;
2. latency: publish -> delivery at a steady 1,000 and 5,000 msg/s (a publisher process stamps
   its monotonic clock into each payload; a consumer process, backlog 100, acks each message
   and records receive - stamp), every publish fsynced before it is delivered on both sides
   (redis: the publisher pipelines each tick's XADDs, the consumer blocks in XREADGROUP).

The machine is shared: compare the two columns of one run (their ratio), not figures of
different runs. Prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from amps.client import Client
from bench.bench_queues import (
    QUEUE,
    SPAWN,
    TOPIC,
    Workers,
    payload,
    pid_of,
    process_cpu_s,
    queue_xml,
    workers,
)
from bench.common import percentile
from bench.peers import ensure_redis, redis_server
from tests.harness.instance import InstanceProcess, config_xml, process_env

BACKLOGS = (1, 10, 100)
GROUP = "work"
HOPS = ("frame_handling", "queue_ack_step", "outbox_wait", "frame_write", "removal_durable")


@contextlib.contextmanager
def amps_instance() -> Iterator[InstanceProcess]:
    """An instance with the queue `work` over `orders` (backlog up to 1000), deleted after."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-backlog-"))
    instance = InstanceProcess(
        workdir, config_xml(name="backlog", journal_size="1GB", extra=queue_xml(backlog=1000))
    )
    try:
        instance.start(timeout_s=120)
        yield instance
    finally:
        instance.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def instance_hops(instance: InstanceProcess) -> dict[str, Any]:
    import urllib.request

    url = f"http://127.0.0.1:{instance.admin_port}/amps/instance"
    with urllib.request.urlopen(url, timeout=10) as response:
        hops: dict[str, Any] = orjson.loads(response.read())["hops"]
    return hops


# --------------------------------------------------------------------------- 1: consumer


async def amps_consumer(instance: InstanceProcess, backlog: int, count: int) -> dict[str, Any]:
    """Fill the queue with `count` messages, then one consumer acks each; figures of the drain."""
    address = instance.address
    await _fill(address, count)
    async with Client(f"worker-{backlog}") as client:
        await client.connect(address, timeout_s=30)
        hops = instance_hops(instance)
        cpu = process_cpu_s(pid_of(instance))
        own_cpu = time.process_time()
        started = time.monotonic()
        sub = await client.subscribe(QUEUE, max_backlog=backlog)
        got = 0
        async for message in sub:
            await message.ack()
            got += 1
            if got == count:
                break
        seconds = time.monotonic() - started
        own_cpu = time.process_time() - own_cpu
        await client.flush_acks()
        await client.ping()
        cpu = process_cpu_s(pid_of(instance)) - cpu
        after = instance_hops(instance)
        # The floor of one command's round trip on this stack: a flush with nothing pending.
        pings = [await client.ping() for _ in range(300)]
    return {"seconds": seconds, "cpu_s": cpu, "client_cpu_s": own_cpu, "hops": (hops, after),
            "ping_ms": sorted(pings)[len(pings) // 2]}  # fmt: skip


def redis_consumer(port: int, backlog: int, count: int) -> float:
    """XADD `count` messages, then XREADGROUP COUNT backlog + one XACK per read; seconds."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    stream = f"{TOPIC}-{backlog}-{time.monotonic_ns()}"
    pipe = client.pipeline(transaction=False)
    for index in range(count):
        pipe.xadd(stream, {"data": payload(1024, index)})
    pipe.execute()
    client.xgroup_create(stream, GROUP, id="0")
    got = 0
    started = time.monotonic()
    while got < count:
        reply = client.xreadgroup(GROUP, "worker", {stream: ">"}, count=backlog, block=10_000)
        ids = [message_id for message_id, _fields in reply[0][1]]
        client.xack(stream, GROUP, *ids)
        got += len(ids)
    seconds = time.monotonic() - started
    client.delete(stream)
    client.close()
    return seconds


def cli_consumer(instance: InstanceProcess, count: int) -> float:
    """`amps subscribe --ack` draining `count` messages: msg/s after its start-up (the time of
    a one-message run is subtracted)."""
    asyncio.run(_fill(instance.address, count))

    def run(messages: int) -> float:
        argv = [sys.executable, "-m", "amps", "subscribe", "--server", instance.address,
                "--topic", QUEUE, "--ack", "--max-backlog", "1",
                "--count", str(messages)]  # fmt: skip
        started = time.monotonic()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, env=process_env(),
                       timeout=600)  # fmt: skip
        return time.monotonic() - started

    return (count - 1) / (run(count - 1) - run(1))


async def _fill(address: str, count: int) -> None:
    async with Client("fill-cli") as pub:
        await pub.connect(address, timeout_s=30)
        for index in range(count):
            await pub.publish(TOPIC, payload(1024, index))
        await pub.flush(timeout_s=120)


def print_hops(result: dict[str, Any], count: int) -> None:
    """Where one message's round trip went, per message, from the instance's statistics."""
    before, after = result["hops"]
    round_trip_us = result["seconds"] / count * 1e6
    spans = []
    for key in HOPS:
        total_us = after[key]["total_us"] - before[key]["total_us"]
        times = after[key]["count"] - before[key]["count"]
        spans.append(f"{key} {total_us / count:.0f} us/msg ({times:,} times)")
    counters = {
        key: after[key] - before[key]
        for key in ("deliveries_after_ack", "deliveries_held_for_commit", "frames_idle",
                    "frames_coalesced")
    }  # fmt: skip
    print(f"    round trip {round_trip_us:.0f} us/msg (a ping's round trip: p50 "
          f"{result['ping_ms'] * 1000:.0f} us); instance CPU "
          f"{result['cpu_s'] / count * 1e6:.0f} us/msg, consumer CPU "
          f"{result['client_cpu_s'] / count * 1e6:.0f} us/msg", flush=True)  # fmt: skip
    print(f"    instance hops: {'; '.join(spans)}", flush=True)
    print(f"    {', '.join(f'{k} {v:,}' for k, v in counters.items())}", flush=True)


def bench_consumer(quick: bool, rounds: int, redis_port: int | None) -> None:
    counts = {1: 3_000, 10: 10_000, 100: 30_000} if quick else {1: 5_000, 10: 30_000,
                                                                 100: 100_000}  # fmt: skip
    with amps_instance() as instance:
        for backlog in BACKLOGS:
            count = counts[backlog]
            for round_ in range(rounds):
                result = asyncio.run(amps_consumer(instance, backlog, count))
                ours = count / result["seconds"]
                line = (f"one consumer, ack each, backlog {backlog:>3}, {count:,} x 1 KB: "
                        f"amps {ours:,.0f} msg/s")  # fmt: skip
                if redis_port is not None:
                    theirs = count / redis_consumer(redis_port, backlog, count)
                    line += (f", redis XREADGROUP COUNT {backlog} + XACK {theirs:,.0f} msg/s "
                             f"(amps/redis {ours / theirs:.2f})")  # fmt: skip
                print(line + (f" [round {round_ + 1}]" if rounds > 1 else ""), flush=True)
                if backlog == 1:
                    print_hops(result, count)
            if backlog == 1:
                cli = cli_consumer(instance, count)
                print(f"  amps subscribe --ack at backlog 1 (the queue default), {count:,} "
                      f"messages to a pipe: {cli:,.0f} msg/s after its start-up "
                      f"(library above: {ours:,.0f} msg/s; cli/library {cli / ours:.2f})",
                      flush=True)  # fmt: skip


# --------------------------------------------------------------------------- 2: latency


async def _amps_publisher(address: str, total: int, per_s: int, ready: Any, go: Any) -> int:
    async with Client("lat-pub") as client:
        await client.connect(address, timeout_s=30)
        await asyncio.to_thread(ready.wait, 60)
        await asyncio.to_thread(go.wait, 60)
        started = time.monotonic()
        sent = 0
        while sent < total:
            due = min(total, int((time.monotonic() - started) * per_s) + 1)
            while sent < due:
                await client.publish(TOPIC, payload(1024, sent, t=time.monotonic()))
                sent += 1
            await asyncio.sleep(0.0005)
        await client.flush(timeout_s=120)
    return sent


async def _amps_receiver(address: str, total: int, ready: Any, go: Any) -> list[float]:
    latencies = []
    async with Client("lat-con") as client:
        await client.connect(address, timeout_s=30)
        sub = await client.subscribe(QUEUE, max_backlog=100)
        await asyncio.to_thread(ready.wait, 60)
        async for message in sub:
            latencies.append(time.monotonic() - orjson.loads(message.data)["t"])
            await message.ack()
            if len(latencies) == total:
                break
    return latencies


def _redis_publisher(port: int, total: int, per_s: int, ready: Any, go: Any) -> int:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    ready.wait(60)
    go.wait(60)
    started = time.monotonic()
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - started) * per_s) + 1)
        if due > sent:
            pipe = client.pipeline(transaction=False)
            for index in range(sent, due):
                pipe.xadd(TOPIC, {"data": payload(1024, index, t=time.monotonic())})
            pipe.execute()
            sent = due
        time.sleep(0.0005)
    return sent


def _redis_receiver(port: int, total: int, ready: Any, go: Any) -> list[float]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    with contextlib.suppress(redis.ResponseError):  # the group exists from an earlier rate
        client.xgroup_create(TOPIC, GROUP, id="$", mkstream=True)
    ready.wait(60)
    latencies: list[float] = []
    while len(latencies) < total:
        reply = client.xreadgroup(GROUP, "worker", {TOPIC: ">"}, count=100, block=10_000)
        if not reply:
            break
        now = time.monotonic()
        ids = []
        for message_id, fields in reply[0][1]:
            latencies.append(now - orjson.loads(fields[b"data"])["t"])
            ids.append(message_id)
        client.xack(TOPIC, GROUP, *ids)
    return latencies


def _latency_main(kind: str, args: tuple[Any, ...], results: Any) -> None:
    runners: dict[str, Callable[..., Any]] = {
        "amps-publisher": lambda *a: asyncio.run(_amps_publisher(*a)),
        "amps-receiver": lambda *a: asyncio.run(_amps_receiver(*a)),
        "redis-publisher": _redis_publisher,
        "redis-receiver": _redis_receiver,
    }
    try:
        results.put(("ok", kind, runners[kind](*args)))
    except BaseException as error:  # reported to the parent, which raises it
        results.put(("error", kind, f"{type(error).__name__}: {error}"))


def latency_run(system: str, target: str | int, per_s: int, seconds: float) -> list[float]:
    """Publisher and receiver processes at `per_s`; latencies after a 1 s warm-up, sorted."""
    total = int(per_s * (seconds + 1.0))
    with workers() as group:
        ready, go = SPAWN.Barrier(3), SPAWN.Event()
        _start(group, f"{system}-receiver", (target, total, ready, go))
        _start(group, f"{system}-publisher", (target, total, per_s, ready, go))
        ready.wait(60)
        go.set()
        got = group.collect(2)
    return sorted(got[f"{system}-receiver"][per_s:])


def _start(group: Workers, kind: str, args: tuple[Any, ...]) -> None:
    child = SPAWN.Process(target=_latency_main, args=(kind, args, group.results), daemon=True)
    child.start()
    group.children.append(child)


def _summary(latencies: list[float]) -> str:
    p50, p99 = (percentile(latencies, f) * 1000 for f in (0.5, 0.99))
    return f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"


def bench_latency(quick: bool, redis_port: int | None) -> None:
    seconds = 3.0 if quick else 10.0
    for per_s in (1_000, 5_000):
        with amps_instance() as instance:
            ours = latency_run("amps", instance.address, per_s, seconds)
        line = (
            f"publish -> delivery at {per_s:,} msg/s, {len(ours):,} messages: amps {_summary(ours)}"
        )
        if redis_port is not None:
            theirs = latency_run("redis", redis_port, per_s, seconds)
            line += f"; redis {_summary(theirs)}"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--only", nargs="*", choices=["consumer", "latency"],
                        default=["consumer", "latency"])  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="consumer runs per backlog")
    args = parser.parse_args()
    print("The machine is shared with other jobs: compare amps and redis within one line.")
    missing = ensure_redis()
    if missing:
        print(f"redis: {missing}; amps figures only", flush=True)
    with contextlib.ExitStack() as stack:
        port = None if missing else stack.enter_context(redis_server())
        if "consumer" in args.only:
            bench_consumer(args.quick, args.rounds, port)
        if "latency" in args.only:
            bench_latency(args.quick, port)


if __name__ == "__main__":
    main()
