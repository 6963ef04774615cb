"""Replication benchmarks (issue 8): each figure next to the single-instance figure of the
same run, as a ratio. Prints; asserts nothing.

`.venv/bin/python -m bench.bench_replication [--quick] [--messages N] [--catch-up N]`

1. durable publish, 1 KB, one client process: alone, with one sync destination, with one
   async destination;
2. persisted-ack latency at a steady 5,000 msg/s: alone and with one sync destination;
3. replication lag (publish on A -> delivered live on B), async destination, steady rate, beside
   publish -> live delivery on one instance (its one fsync and no link) at the same rate;
4. catch-up of an instance that missed N messages, against the origin's own epoch replay;
5. per record, in-process: what a link costs on each side (read, frame, decode, append), the
   old way (records encoded again, appended one at a time) beside the frames-as-logged way;
6. the peer a user would pick instead (when `nats-server` is installed or installable): a
   three-node NATS JetStream cluster on loopback, a replicas=3 file stream, 1 KB publishes
   with acks (window 1000), beside three instances of ours publishing on one with two sync
   destinations.

The machine is shared with other work: read ratios, not absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from amps.client import Client
from bench.bench_broker import (
    LATENCY_RATE_PER_S,
    TOPIC,
    _latency,
    _replay_raw,
    run_publishers,
)
from bench.common import json_payloads, percentile, scrape, temp_instance
from bench.peers import ensure_nats, nats_cluster
from tests.harness.cluster import Cluster, Link, cluster, full_mesh
from tests.harness.instance import InstanceProcess

LAG_RATE_PER_S = 2_000
NATS_WINDOW = 1000  # JetStream publishes in flight, as the reference run
NATS_START_TIMEOUT_S = 30.0


@contextlib.contextmanager
def pair(sync: bool) -> Iterator[Cluster]:
    """Instances a -> b (one destination, sync or async), in a temporary directory."""
    root = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    running = cluster(root, ["a", "b"])
    try:
        running.start({"a": [Link("b", sync=sync)]})
        yield running
    finally:
        running.kill()
        shutil.rmtree(root, ignore_errors=True)


def publish_rate(address: str, messages: int, tag: str) -> float:
    total, seconds, _cpu, _frames = run_publishers(address, 1, messages, tag)
    return total / seconds


def latency_p99_ms(address: str, seconds: float) -> float:
    latencies = sorted(asyncio.run(_latency(address, seconds, warmup_s=1.0)))
    return percentile(latencies, 0.99) * 1000


async def _lag(source: str, target: str, messages: int) -> list[float]:
    """Publish on `source` at LAG_RATE_PER_S with the send time inside; receive live on
    `target`; each message's lag is receive time - send time (one machine, one clock)."""
    lags: list[float] = []
    async with Client("bench-lag-sub") as sub, Client("bench-lag-pub") as pub:
        await sub.connect(target)
        await pub.connect(source)
        subscription = await sub.subscribe("lag")

        async def receive() -> None:
            async for message in subscription:
                lags.append(time.monotonic() - orjson.loads(message.data)["t"])
                if len(lags) >= messages:
                    return

        receiver = asyncio.ensure_future(receive())
        started = time.monotonic()
        for index in range(messages):
            due = started + index / LAG_RATE_PER_S
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await pub.publish("lag", orjson.dumps({"t": time.monotonic(), "pad": "x" * 1000}))
        await asyncio.wait_for(receiver, 120)
    return sorted(lags)


def cpu_s(process: InstanceProcess) -> float:
    """User + system CPU seconds an instance process has used so far (Linux /proc): unlike
    rates, CPU per record hardly moves with what else the shared machine runs."""
    assert process.process is not None
    fields = Path(f"/proc/{process.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def catch_up(messages: int) -> None:
    """b misses `messages` (killed), then restarts: how fast it catches up from a, against
    a's own epoch replay of the same log (raw stream, deliveries counted); and the CPU each
    side spends per record caught up, against a's CPU per record replayed."""
    with pair(sync=False) as running:
        a, b = running["a"], running["b"]
        b.kill()
        rate_in = publish_rate(a.address, messages, "fill")
        target = int(scrape(a.admin_port)["amps_journal_last_txid"])
        restart_started = time.monotonic()
        b.restart(kill=True)
        started = time.monotonic()  # b is up: from here on it is catching up
        cpu_a, cpu_b = cpu_s(a), cpu_s(b)
        restart_s = started - restart_started
        while int(scrape(b.admin_port)["amps_journal_last_txid"]) < target:
            time.sleep(0.02)
        catch_up_s = time.monotonic() - started
        cpu_a, cpu_b = cpu_s(a) - cpu_a, cpu_s(b) - cpu_b
        cpu_replay = cpu_s(a)
        count, replay_s = asyncio.run(_replay_raw(a.address, target))
        cpu_replay = cpu_s(a) - cpu_replay
        print(
            f"catch-up of {target:,} messages: {target / catch_up_s:,.0f} msg/s "
            f"(from b's ready line; its restart took {restart_s:.1f} s) vs a's epoch replay "
            f"{count / replay_s:,.0f} msg/s: "
            f"{(target / catch_up_s) / (count / replay_s):.2f}x (filled at {rate_in:,.0f} msg/s); "
            f"CPU per record: a {cpu_a / target * 1e6:.1f} us + b {cpu_b / target * 1e6:.1f} us "
            f"(b polled for its txid every 20 ms) vs a's epoch replay "
            f"{cpu_replay / count * 1e6:.1f} us",
            flush=True,
        )


def link_costs(count: int) -> None:
    """Per-record costs of a link's steps in-process, on one journal per side, same run."""
    from amps.log.journal import Journal
    from amps.v1 import replication_pb2 as pb
    from replication.convert import from_pb, to_pb
    from replication.frames import Batch

    payload = orjson.dumps({"pad": "x" * 1000})
    root = Path(tempfile.mkdtemp(prefix="bench-link-"))
    try:

        def journal(name: str) -> Journal:
            return Journal.open(
                root / name, segment_size_bytes=64 << 20, instance_name=name, group="g"
            )

        async def run() -> None:
            sender = journal("a")
            sender.keep_frames(count * 2048)
            for seq in range(1, count + 1):
                sender.append_client_publish(TOPIC, payload, 1, seq, seq)
            await sender.commit()
            timings: dict[str, float] = {}
            opened: list[Journal] = [sender]

            def timed(name: str, step: Callable[[], object]) -> object:
                # The best of three: the machine is shared, a single pass measures neighbours.
                best = float("inf")
                for _ in range(3):
                    started = time.perf_counter()
                    result = step()
                    best = min(best, time.perf_counter() - started)
                timings[name] = best / count * 1e6
                return result

            read_frames: dict[int, bytes] = {}
            records = timed("read (decode)", lambda: sender.read(1, count))
            timed("read with frames", lambda: sender.read(1, count, read_frames))
            assert isinstance(records, list)
            batches = [
                Batch(1, chunk[-1].txid, tuple(chunk))
                for chunk in (records[i : i + 1000] for i in range(0, count, 1000))
            ]
            wire = timed("frame, encoded", lambda: [to_pb(b).SerializeToString() for b in batches])
            timed(
                "frame, as logged",
                lambda: [to_pb(b, sender.frames).SerializeToString() for b in batches],
            )
            assert isinstance(wire, list)
            received = timed("decode", lambda: [from_pb(pb.LinkFrame.FromString(w)) for w in wire])
            assert isinstance(received, list)

            def one_at_a_time() -> None:
                one = journal(f"one{len(opened)}")
                opened.append(one)
                for batch in received:
                    for r in batch.records:
                        one.append_publish(
                            topic=r.topic, data=r.data, publisher_id=r.publisher_id,
                            seq=r.seq, timestamp_us=r.timestamp_us,
                            correlation_id=r.correlation_id, expiration_s=r.expiration_s,
                            origin_instance=r.origin_instance, origin_group=r.origin_group,
                            origin_txid=r.origin_txid,
                        )  # fmt: skip

            def per_batch() -> None:
                bulk = journal(f"bulk{len(opened)}")
                opened.append(bulk)
                for batch in received:
                    bulk.append_replicated(batch.records)

            timed("append, one at a time", one_at_a_time)
            timed("append, per batch", per_batch)
            for j in opened:
                await j.close()
            print(
                f"link per record, in-process, {count:,} x 1 KB: "
                + "; ".join(f"{name} {us:.1f} us" for name, us in timings.items()),
                flush=True,
            )

        asyncio.run(run())
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _nats_publish(urls: list[str], messages: int) -> float:
    """Publish `messages` 1 KB JSON documents to a replicas=3 file stream with acks, at most
    NATS_WINDOW unacknowledged; msg/s from the first publish to the last ack."""
    import nats  # a benchmark peer, installed by ensure_nats: not a dependency of amps
    from nats.js.api import StorageType

    connection = await nats.connect(servers=urls)
    try:
        stream = connection.jetstream(publish_async_max_pending=NATS_WINDOW)
        # JetStream takes the stream once the cluster has elected its meta leader.
        deadline = time.monotonic() + NATS_START_TIMEOUT_S
        while True:
            try:
                await stream.add_stream(
                    name="BENCH", subjects=[TOPIC], storage=StorageType.FILE, num_replicas=3
                )
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        payloads = json_payloads()
        mask = len(payloads) - 1
        for index in range(NATS_WINDOW):  # warm-up: the stream's leader and its followers
            await stream.publish_async(TOPIC, payloads[index & mask])
        await stream.publish_async_completed()
        publish = stream.publish_async
        started = time.monotonic()
        futures = [await publish(TOPIC, payloads[index & mask]) for index in range(messages)]
        await stream.publish_async_completed()
        seconds = time.monotonic() - started
        failed = sum(1 for f in futures if f.exception() is not None)
        if failed:
            raise RuntimeError(f"NATS JetStream refused {failed} of {messages} publishes")
        return messages / seconds
    finally:
        await connection.close()


def peer_comparison(messages: int) -> None:
    """NATS JetStream (three nodes, replicas=3) beside three instances of ours, one of them
    publishing with two sync destinations (the full mesh of `make cluster`), same run."""
    missing = ensure_nats()
    if missing is not None:
        print(f"NATS JetStream comparison skipped: {missing}", flush=True)
        return
    with nats_cluster(3) as urls:
        rate_nats = asyncio.run(_nats_publish(urls, messages))
    root = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    running = cluster(root, ["a", "b", "c"])
    try:
        running.start(full_mesh(["a", "b", "c"]))
        rate_ours = publish_rate(running["a"].address, messages, "mesh")
    finally:
        running.kill()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"three nodes, 1 KB, one client: NATS JetStream replicas=3 file stream, acks with "
        f"window {NATS_WINDOW}: {rate_nats:,.0f} msg/s; ours, two sync destinations (full "
        f"mesh): {rate_ours:,.0f} msg/s ({rate_ours / rate_nats:.2f}x NATS)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--messages", type=int, default=None, help="publishes per rate run")
    parser.add_argument("--catch-up", type=int, default=None, help="messages b misses")
    parser.add_argument("--seconds", type=float, default=None, help="latency run length")
    args = parser.parse_args()
    messages = args.messages or (20_000 if args.quick else 100_000)
    missed = args.catch_up or (50_000 if args.quick else 1_000_000)
    seconds = args.seconds or (3.0 if args.quick else 6.0)
    print(f"bench_replication: 1 KB JSON, topic {TOPIC!r}; shared machine: read the ratios")
    with temp_instance("alone") as alone:
        rate_alone = publish_rate(alone.address, messages, "alone")
        p99_alone = latency_p99_ms(alone.address, seconds)
        # The lag's reference: publish -> live delivery on one instance (one fsync, no link).
        local = asyncio.run(_lag(alone.address, alone.address, messages // 2))
    with pair(sync=True) as running:
        rate_sync = publish_rate(running["a"].address, messages, "sync")
        p99_sync = latency_p99_ms(running["a"].address, seconds)
    with pair(sync=False) as running:
        rate_async = publish_rate(running["a"].address, messages, "async")
        lags = asyncio.run(_lag(running["a"].address, running["b"].address, messages // 2))
    print(
        f"durable publish, 1 client: alone {rate_alone:,.0f} msg/s; one sync destination "
        f"{rate_sync:,.0f} msg/s ({rate_sync / rate_alone:.2f}x); one async destination "
        f"{rate_async:,.0f} msg/s ({rate_async / rate_alone:.2f}x)",
        flush=True,
    )
    print(
        f"persisted-ack p99 at {LATENCY_RATE_PER_S:,} msg/s: alone {p99_alone:.2f} ms; one sync "
        f"destination {p99_sync:.2f} ms ({p99_sync / p99_alone:.2f}x)",
        flush=True,
    )
    lag_ms = [percentile(lags, f) * 1000 for f in (0.5, 0.99, 1.0)]
    local_ms = [percentile(local, f) * 1000 for f in (0.5, 0.99, 1.0)]
    print(
        f"replication lag (publish on a -> live delivery on b, async) at {LAG_RATE_PER_S:,} "
        f"msg/s over {len(lags):,}: p50 {lag_ms[0]:.1f} ms, p99 {lag_ms[1]:.1f} ms, "
        f"max {lag_ms[2]:.1f} ms; on one instance (publish -> live delivery, no link): p50 "
        f"{local_ms[0]:.1f} ms, p99 {local_ms[1]:.1f} ms, max {local_ms[2]:.1f} ms",
        flush=True,
    )
    catch_up(missed)
    link_costs(messages)
    peer_comparison(messages)


if __name__ == "__main__":
    main()
