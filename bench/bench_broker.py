"""Broker figures over gRPC against real instance processes (prints, asserts nothing).

`.venv/bin/python -m bench.bench_broker [--quick] [--replay-messages N] [--seconds S]`

1. durable publish with persisted acks, 1 KB JSON, from one client process and from four;
2. persisted-ack latency p50/p99 at a steady 5,000 msg/s (raw gRPC stub, explicit seqs);
3. fsyncs per message at full load (admin /metrics before and after);
4. replay throughput of an `epoch` bookmark subscription over 1,000,000 messages;
5. recovery time after SIGKILL with those messages in the journal.

Every instance runs in a temporary directory that is deleted afterwards; every phase has a
deadline so a stuck instance cannot hang `make bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import multiprocessing.synchronize
import os
import queue
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from amps.client import Client
from amps.v1 import client_pb2 as pb
from amps.v1 import client_pb2_grpc
from bench.common import json_payloads, percentile, rate, scrape, temp_instance
from tests.harness.instance import InstanceProcess

TOPIC = "bench"
PHASE_TIMEOUT_S = 120.0
LATENCY_RATE_PER_S = 5_000
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
]


# --------------------------------------------------------------------------- publishers


@dataclass(frozen=True, slots=True)
class PublishResult:
    """One client process: when it started and finished (monotonic, system-wide on Linux)."""

    name: str
    count: int
    started: float
    persisted: float
    frames_sent: int
    cpu_s: float


async def _publish(address: str, name: str, count: int, go: multiprocessing.synchronize.Event,
                   ready: multiprocessing.synchronize.Barrier) -> PublishResult:  # fmt: skip
    payloads = json_payloads()
    mask = len(payloads) - 1
    async with Client(name) as client:
        await client.connect(address, timeout_s=30)
        await asyncio.to_thread(ready.wait, 60)
        await asyncio.to_thread(go.wait, 60)
        started = time.monotonic()
        cpu_started = time.process_time()
        publish = client.publish
        for index in range(count):
            await publish(TOPIC, payloads[index & mask])
        await client.flush(timeout_s=PHASE_TIMEOUT_S)
        persisted = time.monotonic()
        frames = client.statistics().frames_sent
        cpu_s = time.process_time() - cpu_started
    return PublishResult(name, count, started, persisted, frames, cpu_s)


def _publisher_main(address: str, name: str, count: int, go: multiprocessing.synchronize.Event,
                    ready: multiprocessing.synchronize.Barrier,
                    results: multiprocessing.Queue[PublishResult | str]) -> None:  # fmt: skip
    try:
        results.put(asyncio.run(_publish(address, name, count, go, ready)))
    except BaseException as error:  # reported to the parent, which prints it
        results.put(f"{name}: {type(error).__name__}: {error}")


def run_publishers(
    address: str, processes: int, per_process: int, tag: str
) -> tuple[int, float, float, int]:
    """`processes` client processes each publish `per_process` messages and flush.

    Returns (messages, wall seconds, client CPU seconds summed over the processes, frames sent).
    """
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    ready = ctx.Barrier(processes + 1)
    results: multiprocessing.Queue[PublishResult | str] = ctx.Queue()
    children = [
        ctx.Process(
            target=_publisher_main,
            args=(address, f"bench-{tag}-{i}", per_process, go, ready, results),
            daemon=True,
        )
        for i in range(processes)
    ]
    for child in children:
        child.start()
    try:
        ready.wait(60)  # every client connected and logged on
        go.set()
        got: list[PublishResult] = []
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while len(got) < processes:
            try:
                item = results.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                missing = sorted({f"bench-{tag}-{i}" for i in range(processes)}
                                 - {r.name for r in got})  # fmt: skip
                raise RuntimeError(f"no result in time from {missing}") from None
            if isinstance(item, str):
                raise RuntimeError(item)
            got.append(item)
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    total = sum(r.count for r in got)
    seconds = max(r.persisted for r in got) - min(r.started for r in got)
    return total, seconds, sum(r.cpu_s for r in got), sum(r.frames_sent for r in got)


def bench_publish(instance: InstanceProcess, processes: int, seconds: float) -> None:
    """Items 1 and 3: calibrate N for about `seconds`, then measure rate and fsyncs/message."""
    warm_total, warm_s, _cpu, _frames = run_publishers(
        instance.address, processes, 20_000, f"w{processes}"
    )
    per_process = max(20_000, int(warm_total / warm_s * seconds * 1.3 / processes))
    before = scrape(instance.admin_port)
    server_cpu = process_cpu_s(instance)
    total, elapsed, client_cpu, frames = run_publishers(
        instance.address, processes, per_process, f"p{processes}"
    )
    server_cpu = process_cpu_s(instance) - server_cpu
    after = scrape(instance.admin_port)
    fsyncs = after["amps_journal_fsyncs_total"] - before["amps_journal_fsyncs_total"]
    txids = after["amps_journal_last_txid"] - before["amps_journal_last_txid"]
    acks = after["amps_persisted_acks_total"] - before["amps_persisted_acks_total"]
    label = "1 client process " if processes == 1 else f"{processes} client processes"
    print(f"publish+flush, {label}: {rate(total, elapsed)}", flush=True)
    print(
        f"  fsyncs: {fsyncs:,.0f} for {txids:,.0f} messages = {fsyncs / max(1, txids):.4f}/message "
        f"(1 per {txids / max(1, fsyncs):,.0f}); persisted acks sent {acks:,.0f}",
        flush=True,
    )
    print(
        f"  CPU: server {server_cpu:.2f} s ({server_cpu / total * 1e6:.1f} us/message, "
        f"{server_cpu / elapsed:.0%} of a core), clients {client_cpu:.2f} s "
        f"({client_cpu / total * 1e6:.1f} us/message); {total / max(1, frames):,.0f} "
        f"publishes per client frame",
        flush=True,
    )


def process_cpu_s(instance: InstanceProcess) -> float:
    """User+system CPU seconds of the instance process so far (Linux /proc)."""
    assert instance.process is not None
    fields = Path(f"/proc/{instance.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- raw gRPC stub


class RawStream:
    """A bare amps.v1 Connect stream: no publish store, no batching timer, explicit seqs."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        stub = client_pb2_grpc.AmpsStub(self.channel)  # type: ignore[no-untyped-call]
        self.call = stub.Connect()

    async def logon(self, name: str) -> int:
        logon = pb.Command(cmd_id="logon", ack_type="processed",
                           logon=pb.Logon(client_name=name, version="bench/0"))  # fmt: skip
        await self.call.write(pb.ClientFrame(commands=[logon]))
        while True:
            frame = await self.call.read()
            assert frame is not grpc.aio.EOF, "stream ended before the logon ack"
            for message in frame.messages:
                if message.WhichOneof("body") == "ack" and message.ack.cmd_id == "logon":
                    assert message.ack.status == "success", message.ack.reason
                    return int(message.ack.seq)

    async def close(self) -> None:
        await self.channel.close(grace=None)


async def _latency(address: str, seconds: float, warmup_s: float) -> list[float]:
    """Publish at LATENCY_RATE_PER_S; a seq's latency ends when an ack covering it arrives."""
    payloads = json_payloads()
    mask = len(payloads) - 1
    stream = RawStream(address)
    base = await stream.logon("bench-latency")
    total = int(LATENCY_RATE_PER_S * (seconds + warmup_s))
    sent_at: list[float] = [0.0] * (total + 1)
    latencies: list[float] = []
    skip = int(LATENCY_RATE_PER_S * warmup_s)
    done = asyncio.Event()

    async def read_acks() -> None:
        acked = 0
        while acked < total:
            frame = await stream.call.read()
            if frame is grpc.aio.EOF:
                return
            now = time.monotonic()
            for message in frame.messages:
                ack = message.ack
                if ack.ack_type != "persisted" or ack.status != "success":
                    continue
                upto = int(ack.seq) - base
                first = max(acked + 1, skip + 1)
                latencies.extend(now - sent_at[index] for index in range(first, upto + 1))
                acked = max(acked, upto)
        done.set()

    reader = asyncio.create_task(read_acks())
    started = time.monotonic()
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - started) * LATENCY_RATE_PER_S) + 1)
        if due > sent:
            commands = [
                pb.Command(ack_type="persisted", publish=pb.Publish(
                    topic=TOPIC, data=payloads[index & mask], seq=base + index))
                for index in range(sent + 1, due + 1)
            ]  # fmt: skip
            now = time.monotonic()
            for index in range(sent + 1, due + 1):
                sent_at[index] = now
            await stream.call.write(pb.ClientFrame(commands=commands))
            sent = due
        await asyncio.sleep(0.0005)
    async with asyncio.timeout(30):
        await done.wait()
    await reader
    await stream.close()
    return latencies


def bench_latency(instance: InstanceProcess, seconds: float) -> None:
    """Item 2: persisted-ack latency at a steady 5,000 msg/s."""
    before = scrape(instance.admin_port)
    latencies = asyncio.run(_latency(instance.address, seconds, warmup_s=1.0))
    after = scrape(instance.admin_port)
    latencies.sort()
    fsyncs = after["amps_journal_fsyncs_total"] - before["amps_journal_fsyncs_total"]
    txids = after["amps_journal_last_txid"] - before["amps_journal_last_txid"]
    ms = [percentile(latencies, f) * 1000 for f in (0.5, 0.9, 0.99, 0.999, 1.0)]
    print(
        f"persisted-ack latency at {LATENCY_RATE_PER_S:,} msg/s over {len(latencies):,} messages: "
        f"p50 {ms[0]:.2f} ms, p90 {ms[1]:.2f} ms, p99 {ms[2]:.2f} ms, p99.9 {ms[3]:.2f} ms, "
        f"max {ms[4]:.2f} ms ({txids / max(1, fsyncs):.1f} messages/fsync)",
        flush=True,
    )


# --------------------------------------------------------------------------- replay, recovery


async def _replay_raw(address: str, expected: int) -> tuple[int, float]:
    """Epoch replay with a raw stub: count deliveries until the `completed` ack."""
    stream = RawStream(address)
    await stream.logon("bench-replay-raw")
    request = pb.Subscribe(topic=TOPIC, sub_id="r", bookmark="epoch")
    subscribe = pb.Command(cmd_id="s", ack_type="processed,completed", subscribe=request)
    started = time.monotonic()
    await stream.call.write(pb.ClientFrame(commands=[subscribe]))
    count = 0
    completed = False
    while not completed:
        frame = await stream.call.read()
        assert frame is not grpc.aio.EOF, "stream ended during the replay"
        for message in frame.messages:
            kind = message.WhichOneof("body")
            if kind == "delivery":
                count += 1
            elif kind == "ack" and message.ack.ack_type == "completed":
                completed = True
    seconds = time.monotonic() - started
    await stream.close()
    return count, seconds


async def _replay_client(address: str, expected: int) -> tuple[int, float]:
    """Epoch replay through the asyncio Client, touching every message's data."""
    async with Client("bench-replay-client") as client:
        await client.connect(address, timeout_s=30)
        started = time.monotonic()
        sub = await client.subscribe(TOPIC, bookmark="epoch")
        count = 0
        size = 0
        async for message in sub:
            count += 1
            size += len(message.data)
            if count >= expected:
                break
        return count, time.monotonic() - started


async def _logon_time(address: str) -> None:
    async with Client("bench-recovery") as client:
        await client.connect(address, timeout_s=60)


def fill(instance: InstanceProcess, messages: int) -> None:
    """Publish until the journal holds `messages` publishes (4 client processes)."""
    have = int(scrape(instance.admin_port)["amps_journal_last_txid"])
    missing = messages - have
    if missing > 0:
        total, seconds, _cpu, _frames = run_publishers(
            instance.address, 4, -(-missing // 4), "fill"
        )
        print(f"filled the journal: {rate(total, seconds)}", flush=True)


def bench_replay_and_recovery(instance: InstanceProcess, messages: int) -> None:
    """Items 4 and 5 on one journal of `messages` 1 KB publishes."""
    fill(instance, messages)
    in_journal = int(scrape(instance.admin_port)["amps_journal_last_txid"])
    for label, run in (("raw gRPC stub", _replay_raw), ("asyncio Client", _replay_client)):
        count, seconds = asyncio.run(asyncio.wait_for(run(instance.address, in_journal),
                                                      PHASE_TIMEOUT_S))  # fmt: skip
        print(f"epoch replay ({label}): {rate(count, seconds)}", flush=True)

    instance.kill()
    started = time.monotonic()
    instance.start(timeout_s=120)
    ready = time.monotonic()
    asyncio.run(asyncio.wait_for(_logon_time(instance.address), 60))
    logged_on = time.monotonic()
    recovered = int(scrape(instance.admin_port)["amps_journal_last_txid"])
    print(
        f"recovery after SIGKILL with {in_journal:,} messages: ready line {ready - started:.2f} s, "
        f"first connect+logon {logged_on - started:.2f} s (last_txid {recovered:,} after restart)",
        flush=True,
    )


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200,000-message replay journal")
    parser.add_argument("--replay-messages", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None, help="length of each timed run")
    parser.add_argument("--only", choices=["publish", "latency", "replay"], default=None)
    args = parser.parse_args()
    replay_messages = args.replay_messages or (200_000 if args.quick else 1_000_000)
    seconds = args.seconds or (5.0 if args.quick else 6.0)
    print(f"bench_broker: 1 KB JSON, topic {TOPIC!r}, timed runs of ~{seconds:.0f} s", flush=True)
    if args.only in (None, "publish", "latency"):
        with temp_instance("publish") as instance:
            if args.only in (None, "publish"):
                bench_publish(instance, 1, seconds)
                bench_publish(instance, 4, seconds)
            if args.only in (None, "latency"):
                bench_latency(instance, seconds * 2)
    if args.only in (None, "replay"):
        with temp_instance("replay") as instance:
            bench_replay_and_recovery(instance, replay_messages)


if __name__ == "__main__":
    try:
        main()
    except queue.Empty:
        raise SystemExit("bench_broker: a client process did not report in time") from None
