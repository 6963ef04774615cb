"""Replication benchmarks (issue 8): each figure next to the single-instance figure of the
same run, as a ratio. Prints; asserts nothing.

`.venv/bin/python -m bench.bench_replication [--quick] [--messages N] [--catch-up N]
[--only lag,latency,...]`

1. durable publish, 1 KB, one client process: alone, with one sync destination, with one
   async destination; with `--rounds N` each round is printed, then the median ratios;
2. persisted-ack latency at a steady 5,000 msg/s: alone and with one sync destination;
3. replication lag, each publish from accepted on A (its timestamp, taken before A's fsync) to
   durable on B, async destination, at a steady 5,000 msg/s: the headline is B's own
   `replicated_lag` hop from a run with only A, B and the publisher, which is the target's
   definition. Printed beside it: the same hop from a run with a subscriber process on each
   instance, and those subscribers' deliveries (stamped by the publisher when it sends, so
   they include the client -> A hop, and B's delivery comes after B's fsync and dispatch),
   next to publish -> live delivery on one instance at the same rate. At 5,000 msg/s the
   subscriber processes need a large share of the two cores the instances run on, so each
   process's CPU per message and the cores busy are printed too (the latency runs print them
   as well). Each batch's stages say where the tail goes (percentiles, `/amps/instance`
   hops): on A, from its first publish accepted to its commit handed to the journal's
   writer, the thread's hand-off, writes, fsync, return, dispatch and gRPC taking the batch;
   on B, from that same instant to the batch read (`arrival`), then the same stages from
   appended on B to durable there; both instances' garbage collector pauses and page faults;
   and the disk's own fsync in the same minute (an 8 KB append and fsync every 1.5 ms beside
   the journals), the floor of a lag that waits for two fsyncs in series. With `--rounds N`
   the p99s of every round are printed together at the end;
4. catch-up of an instance that missed N messages, against the origin's own epoch replay;
5. per record, in-process: what a link costs on each side (read, frame, decode, append), the
   old way (records encoded again, appended one at a time) beside the frames-as-logged way;
6. the live path's own CPU per batch in one process (bench/live_cycle.py): a sync link a -> b
   over an in-memory stream, five publishes per batch, both instances and their writer threads,
   no gRPC: two trees compared on a shared machine; and (`send`, bench/live_send.py) the
   sender's CPU per record of a full-rate batch, appends with and without the frames kept for
   a link, the batch's encoding and the drop of what it sent;
7. the peer a user would pick instead (when `nats-server` is installed or installable): a
   three-node NATS JetStream cluster on loopback, a replicas=3 file stream, 1 KB publishes
   with acks (window 1000), beside three instances of ours publishing on one with two sync
   destinations;
8. failover (bench/failover.py): ten SIGKILLs (`--kills N`) of a publisher's instance in the
   sync full mesh of deploy/amps-N.xml, kill -> publishing elsewhere and kill -> next persisted
   ack, p50 and max beside the downgrade action's Age, with Every/Age 100 ms / 500 ms and the
   deployed 500 ms / 2 s; then every instance's log checked for lost and duplicated messages.

The machine is shared with other work: read ratios, not absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from amps.client import Client
from amps.log.journal import Journal
from amps.log.records import Record
from bench.bench_backlog import instance_hops
from bench.bench_broker import (
    LATENCY_RATE_PER_S,
    TOPIC,
    _latency,
    _replay_raw,
    run_publishers,
)
from bench.common import json_payloads, metrics_text, percentile, scrape, temp_instance
from bench.failover import DEPLOYED, SHORT, failover
from bench.live_cycle import live_cycle
from bench.live_send import sender_costs
from bench.peers import ensure_nats, nats_cluster
from tests.harness.cluster import Cluster, Link, cluster, full_mesh
from tests.harness.instance import InstanceProcess

LAG_RATE_PER_S = 5_000
LATENCY_WARMUP_S = 1.0
LAG_TICK_S = 0.0005  # the lag publisher sends what is due this often (as bench_broker._latency)
LAG_TOPIC = "lag"
LIVE_RATE_PER_S = 1_000  # live traffic on a while b catches up (the figure)
CATCH_UP_POLL_S = 0.1
CATCH_UP_POLL_MIN_S = 0.005  # the catch-up's polls of b: from 1 s apart down to this
CATCH_UP_POLL_MAX_S = 1.0
SECTIONS = ("publish", "latency", "lag", "catch-up", "costs", "cycle", "send", "peer", "failover")
# The hops (amps.server.hops) printed as means: a frame of commands handled, deliveries waiting
# for and taken by gRPC, the sender's link hops and the receiver's receive -> durable.
HOPS = (
    "journal_handoff",
    "journal_return",
    "frame_handling",
    "outbox_wait",
    "frame_write",
    "link_send_wait",
    "link_write",
    "link_ack_wait",
    "replicated_durable",
)
# The lag run's probe of the disk itself (disk_fsync_ms).
DISK_PROBE_BYTES = 8000
DISK_PROBE_GAP_S = 0.0015
DISK_PROBE_SYNCS = 600
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


def latency_ms(address: str, seconds: float) -> tuple[float, float]:
    """Persisted-ack latency at LATENCY_RATE_PER_S: (p50, p99) in ms."""
    latencies = sorted(asyncio.run(_latency(address, seconds, warmup_s=LATENCY_WARMUP_S)))
    return percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000


async def _lag(source: str, targets: list[str], messages: int) -> list[dict[int, float]]:
    """Publish on `source` at LAG_RATE_PER_S, each message with its index and send time; each
    target's subscriber, a process of its own (so neither side's Python work delays the
    other's clock readings), reports when each index arrived. Per target: index -> lag in s
    (one machine: CLOCK_MONOTONIC is shared by its processes)."""
    command = [sys.executable, "-m", "bench.bench_replication", "--messages", str(messages)]
    subscribers = [
        await asyncio.create_subprocess_exec(
            *command, "--subscriber", target, stdout=asyncio.subprocess.PIPE
        )
        for target in targets
    ]
    try:
        for subscriber in subscribers:
            assert subscriber.stdout is not None
            async with asyncio.timeout(60):
                assert (await subscriber.stdout.readline()).strip() == b"ready"
        async with Client("bench-lag-pub") as pub:
            await pub.connect(source)
            # Paced as the persisted-ack latency run is: every LAG_TICK_S, what is due leaves
            # in one frame, each message stamped when it is sent. A sleep and a gRPC write per
            # message made this publisher alone cost ~150 us of CPU per message, three quarters
            # of a core at 5,000 msg/s: on two cores shared with a, b and two subscribers, it
            # measured the saturated machine more than the link.
            started = time.monotonic()
            sent = 0
            while sent < messages:
                due = min(messages, int((time.monotonic() - started) * LAG_RATE_PER_S) + 1)
                for index in range(sent, due):
                    data = {"i": index, "t": time.monotonic(), "pad": "x" * 1000}
                    await pub.publish(LAG_TOPIC, orjson.dumps(data))
                sent = due
                await asyncio.sleep(LAG_TICK_S)
            await pub.flush()
        results = []
        for subscriber in subscribers:
            async with asyncio.timeout(120):
                out, _ = await subscriber.communicate()
            results.append({int(i): lag for i, lag in orjson.loads(out)})
    finally:
        for subscriber in subscribers:
            if subscriber.returncode is None:
                subscriber.kill()
    return results


async def _subscribe(address: str, messages: int) -> None:
    """The subscriber process of `_lag`: prints "ready", then [[index, lag], ...]."""
    lags: list[tuple[int, float]] = []
    async with Client(f"bench-lag-sub-{os.getpid()}") as sub:
        await sub.connect(address)
        subscription = await sub.subscribe(LAG_TOPIC)
        print("ready", flush=True)
        async for message in subscription:
            received = time.monotonic()
            body = orjson.loads(message.data)
            lags.append((body["i"], received - body["t"]))
            if len(lags) >= messages:
                break
    sys.stdout.buffer.write(orjson.dumps(lags))


def fsync_mean_ms(before: dict[str, float], after: dict[str, float]) -> float:
    """The instance's mean fsync between two scrapes, in ms."""
    count = after["amps_journal_fsync_seconds_count"] - before["amps_journal_fsync_seconds_count"]
    total = after["amps_journal_fsync_seconds_sum"] - before["amps_journal_fsync_seconds_sum"]
    return total / count * 1000 if count else float("nan")


def hop_means(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], names: tuple[str, ...]
) -> str:
    """Mean of each named hop between two reads of `/amps/instance` `hops`."""
    parts = []
    for name in names:
        count = after[name]["count"] - before[name]["count"]
        total_us = after[name]["total_us"] - before[name]["total_us"]
        mean = f"{total_us / count / 1000:.2f} ms" if count else "-"
        parts.append(f"{name} {mean} (x{count:,.0f})")
    return ", ".join(parts)


class Observed:
    """Hops, fsyncs and CPU of some instances around a measurement, and the CPU of this process
    and its children (the publisher, the subscriber processes): at 5,000 msg/s each process
    spends several times its CPU per message at full rate (little to batch), and whether the
    two cores are saturated says more about a latency than any hop."""

    def __init__(self, **instances: InstanceProcess) -> None:
        self.instances = instances
        self.before = {n: (instance_hops(i), scrape(i.admin_port)) for n, i in instances.items()}
        self.cpu_before = {n: cpu_times_s(i) for n, i in instances.items()}
        self.faults_before = {n: minor_faults(i) for n, i in instances.items()}
        self.clients_before = _clients_cpu_s()
        self.started = time.monotonic()

    def report(self, messages: int) -> str:
        seconds = time.monotonic() - self.started
        busy = sum(_cpu_s(self.clients_before, _clients_cpu_s()))
        parts = []
        for name, instance in self.instances.items():
            hops_before, metrics_before = self.before[name]
            hops_after, metrics_after = instance_hops(instance), scrape(instance.admin_port)
            cpu_after = cpu_times_s(instance)
            busy += sum(_cpu_s(self.cpu_before[name], cpu_after))
            cpu = _per_record_us(self.cpu_before[name], cpu_after, messages)
            fsync = fsync_mean_ms(metrics_before, metrics_after)
            names = tuple(
                n
                for n in HOPS
                if hops_after.get(n, {}).get("count", 0) > hops_before.get(n, {}).get("count", 0)
            )
            hops = hop_means(hops_before, hops_after, names)
            faults = (minor_faults(instance) - self.faults_before[name]) / messages
            parts.append(
                f"{name}: CPU {cpu} per message, {faults:.2f} page faults per message, "
                f"fsync {fsync:.2f} ms, {hops}"
            )
        clients = _per_record_us(self.clients_before, _clients_cpu_s(), messages)
        parts.append(f"clients (publisher and subscribers): CPU {clients} per message")
        parts.append(
            f"all of them: {busy / seconds:.2f} of the machine's {os.cpu_count()} cores busy "
            f"over {seconds:.1f} s"
        )
        return "; ".join(parts)


def _cpu_s(before: tuple[float, float], after: tuple[float, float]) -> tuple[float, float]:
    return after[0] - before[0], after[1] - before[1]


def _clients_cpu_s() -> tuple[float, float]:
    """(user, system) CPU seconds of this process and its finished children (subscribers)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + children.ru_utime, own.ru_stime + children.ru_stime


def _proc_stat(process: InstanceProcess) -> list[str]:
    assert process.process is not None
    return Path(f"/proc/{process.process.pid}/stat").read_text().rsplit(")", 1)[1].split()


def acks_and_batches(instance: InstanceProcess, peer: str) -> tuple[int, int]:
    """Acks `instance` has sent for `peer`'s batches, and the batches it received (admin view)."""
    url = f"http://127.0.0.1:{instance.admin_port}/amps/instance/replication.json"
    with urllib.request.urlopen(url, timeout=10) as response:
        links: list[dict[str, Any]] = orjson.loads(response.read())["links"]
    link: dict[str, Any] = next((link for link in links if link["peer"] == peer), {})
    return int(link.get("acks_sent", 0)), int(link.get("batches_received", 0))


def cpu_times_s(process: InstanceProcess) -> tuple[float, float]:
    """(user, system) CPU seconds an instance process has used so far (Linux /proc): unlike
    rates, CPU per record hardly moves with what else the shared machine runs."""
    fields = _proc_stat(process)
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def minor_faults(process: InstanceProcess) -> int:
    """Minor page faults of an instance process so far: memory the allocator handed back to
    the kernel and touched again (each costs system time)."""
    return int(_proc_stat(process)[7])


def _per_record_us(before: tuple[float, float], after: tuple[float, float], count: int) -> str:
    user, system = ((b - a) / count * 1e6 for a, b in zip(before, after, strict=True))
    return f"{user + system:.1f} us ({user:.1f} user + {system:.1f} sys)"


def _cores_busy(before: tuple[float, float], after: tuple[float, float], seconds: float) -> str:
    """How much of a core a process used over `seconds` (all its threads): below 1 while the
    other side or the machine holds it up."""
    return f"{(sum(after) - sum(before)) / seconds:.2f}"


class _LiveTraffic:
    """Publishes 1 KB messages on `address` at `rate_per_s` in a thread of its own until
    stopped: the issue's catch-up runs while live traffic continues."""

    def __init__(self, address: str, rate_per_s: int) -> None:
        self._address = address
        self._rate = rate_per_s
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.sent = 0
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._started = threading.Event()

    def __enter__(self) -> _LiveTraffic:
        self._thread.start()
        self._started.wait(30)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        payload = orjson.dumps({"live": True, "pad": "x" * 1000})
        async with Client("bench-live") as client:
            await client.connect(self._address)
            self._started.set()
            started = time.monotonic()
            while not self._stop.is_set():
                due = started + self.sent / self._rate
                delay = due - time.monotonic()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), delay)
                    continue
                await client.publish("live", payload)
                self.sent += 1


def _replay(a: InstanceProcess, expected: int) -> tuple[float, float, float]:
    """a's epoch replay of `TOPIC` (raw stream, deliveries counted): msg/s, CPU us per record
    and minor faults per record of a."""
    cpu, faults = cpu_times_s(a), minor_faults(a)
    count, seconds = asyncio.run(_replay_raw(a.address, expected))
    cpu_after, faults_after = cpu_times_s(a), minor_faults(a)
    cpu_us = sum(cpu_after) - sum(cpu)
    return count / seconds, cpu_us / count * 1e6, (faults_after - faults) / count


def _wait_caught_up(b: InstanceProcess, target: int, started: float) -> int:
    """Until b's log reaches `target`; the polls made. Answering /metrics costs b CPU (every
    100 ms it was ~6 % of b's samples during a catch-up), so b is asked again after about half
    the time its rate so far needs for the rest, CATCH_UP_POLL_MAX_S at most and
    CATCH_UP_POLL_MIN_S at least: few polls, and the last ones close together (they bound the
    error on the time)."""
    polls = 0
    while True:
        reached = int(scrape(b.admin_port)["amps_journal_last_txid"])
        polls += 1
        if reached >= target:
            return polls
        elapsed = time.monotonic() - started
        rest_s = (target - reached) * elapsed / reached if reached > 0 else CATCH_UP_POLL_S
        time.sleep(min(CATCH_UP_POLL_MAX_S, max(CATCH_UP_POLL_MIN_S, rest_s / 2)))


def catch_up(messages: int) -> float:
    """b misses `messages` (killed), then restarts while live traffic goes on at
    LIVE_RATE_PER_S on a: how fast it catches up from a, against a's own epoch replay of the
    same log (raw stream, deliveries counted) measured just before and just after (the
    reference is their mean: on a shared machine it moves within a minute); and the CPU and
    minor page faults each side spends per record caught up, against a's per record replayed.
    Returns the ratio."""
    with pair(sync=False) as running:
        a, b = running["a"], running["b"]
        b.kill()
        rate_in = publish_rate(a.address, messages, "fill")
        filled = int(scrape(a.admin_port)["amps_journal_last_txid"])
        before = _replay(a, filled)
        target = int(scrape(a.admin_port)["amps_journal_last_txid"])
        with _LiveTraffic(a.address, LIVE_RATE_PER_S) as live:
            restart_started = time.monotonic()
            b.restart(kill=True)
            started = time.monotonic()  # b is up: from here on it is catching up
            cpu_a, cpu_b = cpu_times_s(a), cpu_times_s(b)
            faults_a, faults_b = minor_faults(a), minor_faults(b)
            restart_s = started - restart_started
            polls = _wait_caught_up(b, target, started)
            catch_up_s = time.monotonic() - started
            cpu_a_after, cpu_b_after = cpu_times_s(a), cpu_times_s(b)
            faults_a_after, faults_b_after = minor_faults(a), minor_faults(b)
        after = _replay(a, filled)
    rate = target / catch_up_s
    reference = (before[0] + after[0]) / 2
    print(
        f"catch-up of {target:,} messages: {rate:,.0f} msg/s "
        f"(from b's ready line; its restart took {restart_s:.1f} s; live traffic on a at "
        f"{LIVE_RATE_PER_S:,} msg/s meanwhile, {live.sent:,} sent) vs a's epoch replay "
        f"{reference:,.0f} msg/s (mean of {before[0]:,.0f} before and {after[0]:,.0f} after): "
        f"{rate / reference:.2f}x (filled at {rate_in:,.0f} msg/s)\n"
        f"  CPU per record caught up: a {_per_record_us(cpu_a, cpu_a_after, target)} + "
        f"b {_per_record_us(cpu_b, cpu_b_after, target)} (b polled for its txid {polls} "
        f"times) vs a's epoch replay {before[1]:.1f} us before, "
        f"{after[1]:.1f} us after\n"
        f"  cores busy while catching up: a {_cores_busy(cpu_a, cpu_a_after, catch_up_s)}, "
        f"b {_cores_busy(cpu_b, cpu_b_after, catch_up_s)} (load average "
        f"{os.getloadavg()[0]:.1f})\n"
        f"  minor page faults per record: a {(faults_a_after - faults_a) / target:.3f}, "
        f"b {(faults_b_after - faults_b) / target:.3f}; a's epoch replay {before[2]:.3f} "
        f"before, {after[2]:.3f} after",
        flush=True,
    )
    return rate / reference


def link_costs(count: int) -> None:
    """Per-record costs of a link's steps in-process, on one journal per side, same run."""
    from amps.log import codec
    from amps.log.received import ReceivedFrames
    from amps.publishing import PublishingCore
    from amps.server.app import fix_malloc_mmap_threshold
    from amps.v1 import replication_pb2 as pb
    from replication.convert import decode_link_frame, from_pb, to_pb
    from replication.frames import Batch

    # The allocator as an instance sets it: a kilobyte frame's copy costs what it costs there.
    fix_malloc_mmap_threshold()
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
                # The best of three, in CPU time (this process, the journal's writer thread
                # included): the machine is shared, wall time measures the neighbours.
                best = float("inf")
                for _ in range(3):
                    started = time.process_time()
                    result = step()
                    best = min(best, time.process_time() - started)
                timings[name] = best / count * 1e6
                return result

            read_frames: dict[int, bytes] = {}
            records = timed("read (decode)", lambda: sender.read(1, count))
            timed("read with frames", lambda: sender.read(1, count, read_frames))
            timed("sender, as records (read, decode, route, LinkFrame)", lambda: _send_all(
                sender, count, frames=False))  # fmt: skip
            timed("sender, as frames (read, route on heads, LinkFrame bytes)", lambda: _send_all(
                sender, count, frames=True))  # fmt: skip
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
            # What the receiver does now: check the batch, build no record (ReceivedFrames).
            received = timed(
                "receive (checked, no records)",
                lambda: [from_pb(pb.LinkFrame.FromString(w)) for w in wire],
            )
            assert isinstance(received, list)
            decoded = timed(
                "decode into records",
                lambda: [tuple(codec.decode(b.records.data)[0]) for b in received],
            )
            assert isinstance(decoded, list)

            def as_frames() -> None:
                frames = journal(f"frames{len(opened)}")
                opened.append(frames)
                publishing: PublishingCore[str] = PublishingCore("frames", frames.marks)
                for batch in received:
                    frames.append_received(
                        batch.records, publishing.admit_received(batch.records.heads)
                    )

            def one_at_a_time() -> None:
                one = journal(f"one{len(opened)}")
                opened.append(one)
                for records in decoded:
                    for r in records:
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
                for records in decoded:
                    bulk.append_replicated(records)

            timed("append records, one at a time", one_at_a_time)
            timed("append records, per batch", per_batch)
            timed("append as frames, de-duplicated (the receiver now)", as_frames)

            async def receiver() -> None:
                # What b does per batch while catching up, batch after batch: the LinkFrame's
                # bytes read, checked, de-duplicated, appended, and each batch's commit started
                # (the writer thread's write and fsync count: process CPU time).
                into = journal(f"receiver{len(opened)}")
                opened.append(into)
                publishing: PublishingCore[str] = PublishingCore("receiver", into.marks)
                for w in wire:
                    batch = from_pb(decode_link_frame(w))
                    assert isinstance(batch, Batch)
                    frames = batch.records
                    assert isinstance(frames, ReceivedFrames)
                    into.append_received(frames, publishing.admit_received(frames.heads))
                    into.start_commit()
                await into.commit()

            best = float("inf")
            for _ in range(3):
                started = time.process_time()
                await receiver()
                best = min(best, time.process_time() - started)
            timings["receiver, batch after batch (check, de-dup, append, commit)"] = (
                best / count * 1e6
            )
            for j in opened:
                await j.close()
            print(
                f"link CPU per record, in-process, {count:,} x 1 KB: "
                + "; ".join(f"{name} {us:.1f} us" for name, us in timings.items()),
                flush=True,
            )

        asyncio.run(run())
    finally:
        shutil.rmtree(root, ignore_errors=True)


class _JournalView:
    """A journal as a link core reads it: as frames (the links now) or as records with each
    one's frame kept (the links before), for `_send_all`."""

    def __init__(self, journal: Journal, *, frames: bool) -> None:
        self.journal = journal
        self.as_frames = frames
        self.kept: dict[int, bytes] = {}

    @property
    def first_txid(self) -> int:
        return self.journal.first_txid

    @property
    def durable_txid(self) -> int:
        return self.journal.durable_txid

    def read(self, from_txid: int, max_records: int) -> Sequence[Record]:
        if self.as_frames:
            return self.journal.read_frames(from_txid, max_records)
        return self.journal.read(from_txid, max_records, self.kept)


def _send_all(journal: Journal, count: int, *, frames: bool) -> int:
    """What a sender does to catch a peer up from the start of `journal` (a link core routing
    every read to a destination that takes everything, each batch serialised as the gRPC
    stream writes it); the bytes serialised."""
    from amps.config.model import DestinationConfig
    from replication.convert import encode_batch, to_pb
    from replication.frames import PROTOCOL_VERSION, Batch, Digest, Hello
    from replication.link_core import (
        Connected,
        FrameReceived,
        LinkCore,
        LinkLimits,
        Send,
    )
    from replication.positions import PositionBook
    from replication.routing import Route

    view = _JournalView(journal, frames=frames)
    route = Route("a", DestinationConfig("b", "b", "async", (), (), ".*"))
    # One step sends it all: no window and no per-step bound (a catch-up's is one batch).
    limits = LinkLimits(
        window_batches=count,
        window_bytes=1 << 40,
        catch_up_window_bytes=1 << 40,
        max_reads_per_step=count,
        catch_up_batches_per_step=count,
    )
    core = LinkCore("a", "g", view, {"b": route}, PositionBook(), "b", limits=limits)
    core.handle(Connected(dialled=True), 0)
    actions = core.handle(
        FrameReceived(Hello(PROTOCOL_VERSION, "b", "b", "a", "g", Digest(False))), 0
    )
    sent = 0
    for action in actions:
        if isinstance(action, Send) and isinstance(action.frame, Batch):
            if frames:
                sent += len(encode_batch(action.frame))
            else:
                sent += len(to_pb(action.frame, view.kept).SerializeToString())
    assert core.statistics(0).records_sent == count, core.statistics(0)
    return sent


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
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the publish, lag, latency, catch-up, costs and send runs",
    )
    parser.add_argument("--kills", type=int, default=10, help="failover: SIGKILLs per schedule")
    parser.add_argument("--subscriber", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscriber:
        asyncio.run(_subscribe(args.subscriber, args.messages))
        return
    messages = args.messages or (20_000 if args.quick else 100_000)
    missed = args.catch_up or (50_000 if args.quick else 1_000_000)
    seconds = args.seconds or (3.0 if args.quick else 6.0)
    only = set(args.only.split(","))
    assert only <= set(SECTIONS), f"--only takes {', '.join(SECTIONS)}"
    print(f"bench_replication: 1 KB JSON, topic {TOPIC!r}; shared machine: read the ratios")
    if "publish" in only:
        rates = [publish_rates(messages) for _ in range(args.rounds)]
        if len(rates) > 1:
            print(
                f"durable publish over {len(rates)} rounds: median sync "
                f"{statistics.median(sync for sync, _ in rates):.2f}x, async "
                f"{statistics.median(asynchronous for _, asynchronous in rates):.2f}x (each "
                f"round: {', '.join(f'{sync:.2f}x / {asy:.2f}x' for sync, asy in rates)})",
                flush=True,
            )
    lags: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        if "latency" in only:
            persisted_ack_latency(seconds)
        if "lag" in only:
            lags.append(replication_lag(max(messages // 2, LAG_RATE_PER_S)))
    if len(lags) > 1:
        print(
            f"replication lag p99 over {len(lags)} rounds, accepted on a -> durable on b (ms, "
            f"target <= 10): {', '.join(f'{lean:.1f}' for lean, _ in lags)}; the same with "
            f"subscriber processes: {', '.join(f'{loaded:.1f}' for _, loaded in lags)}",
            flush=True,
        )
    ratios: list[float] = []
    for _ in range(args.rounds):
        if "catch-up" in only:
            ratios.append(catch_up(missed))
        if "costs" in only:
            link_costs(messages)
        if "cycle" in only:
            live_cycle()
    if "send" in only:
        sender_costs(max(args.rounds, 20))
    if len(ratios) > 1:
        print(
            f"catch-up over {len(ratios)} rounds: median {statistics.median(ratios):.2f}x of "
            f"the epoch replay (each round: {', '.join(f'{r:.2f}x' for r in ratios)})",
            flush=True,
        )
    if "peer" in only:
        peer_comparison(messages)
    if "failover" in only:
        for schedule in (SHORT, DEPLOYED):
            failover(args.kills, schedule)


def publish_rates(messages: int) -> tuple[float, float]:
    """Item 1: durable publish, alone and with one sync / one async destination; the sync and
    async ratios to alone."""
    cpu: dict[str, str] = {}
    with temp_instance("alone") as alone:
        before_alone = cpu_times_s(alone)
        rate_alone = publish_rate(alone.address, messages, "alone")
        cpu["alone"] = _per_record_us(before_alone, cpu_times_s(alone), messages)
    rates: dict[str, float] = {}
    for kind in ("sync", "async"):
        with pair(sync=kind == "sync") as running:
            a, b = running["a"], running["b"]
            before = cpu_times_s(a), cpu_times_s(b)
            rates[kind] = publish_rate(a.address, messages, kind)
            wait_replicated(a, b)
            cpu[kind] = (
                f"a {_per_record_us(before[0], cpu_times_s(a), messages)}, "
                f"b {_per_record_us(before[1], cpu_times_s(b), messages)}"
            )
    rate_sync, rate_async = rates["sync"], rates["async"]
    print(
        f"durable publish, 1 client: alone {rate_alone:,.0f} msg/s; one sync destination "
        f"{rate_sync:,.0f} msg/s ({rate_sync / rate_alone:.2f}x); one async destination "
        f"{rate_async:,.0f} msg/s ({rate_async / rate_alone:.2f}x); CPU per message: alone "
        f"{cpu['alone']}; sync {cpu['sync']}; async {cpu['async']}",
        flush=True,
    )
    return rate_sync / rate_alone, rate_async / rate_alone


def persisted_ack_latency(seconds: float) -> None:
    """Item 2: persisted-ack p99 at a steady rate, alone and with one sync destination (a's
    persisted ack waits for b's fsync and b's ack)."""
    messages = int(LATENCY_RATE_PER_S * (seconds + LATENCY_WARMUP_S))
    with temp_instance("alone") as alone:
        observed = Observed(alone=alone)
        fsyncs_before = fsync_buckets(alone.admin_port)
        p50_alone, p99_alone = latency_ms(alone.address, seconds)
        alone_hops = observed.report(messages)
        alone_fsync = fsync_quantiles(fsyncs_before, fsync_buckets(alone.admin_port))
    with pair(sync=True) as running:
        a, b = running["a"], running["b"]
        observed = Observed(a=a, b=b)
        before_a, before_b = fsync_buckets(a.admin_port), fsync_buckets(b.admin_port)
        p50_sync, p99_sync = latency_ms(a.address, seconds)
        sync_hops = observed.report(messages)
        # What the sync destination adds, per batch: a's records durable -> b's ack, and
        # within it b's receive -> durable; and each side's fsyncs (two, in series).
        a_hops, b_hops = instance_hops(a), instance_hops(b)
        acked = hop_quantiles(observed.before["a"][0], a_hops, "link_acked", "batches")
        durable_b = hop_quantiles(observed.before["b"][0], b_hops, "replicated_durable", "batches")
        # Stage by stage: b's durable is mostly its commit's wait and fsync (docs/benchmarks.md,
        # "The sync persisted ack's ceiling and its hops"); a's commit is slower than alone's.
        b_stages = stages_ms(observed.before["b"][0], b_hops, "replicated_stages")
        a_stages = stages_ms(observed.before["a"][0], a_hops, "replicated_send_stages")
        fsyncs = (
            f"a {fsync_quantiles(before_a, fsync_buckets(a.admin_port))}, "
            f"b {fsync_quantiles(before_b, fsync_buckets(b.admin_port))}"
        )
    print(
        f"persisted-ack p99 at {LATENCY_RATE_PER_S:,} msg/s: alone {p99_alone:.2f} ms; one sync "
        f"destination {p99_sync:.2f} ms ({p99_sync / p99_alone:.2f}x); p50 alone "
        f"{p50_alone:.2f} ms, sync {p50_sync:.2f} ms ({p50_sync / p50_alone:.2f}x)\n"
        f"  sync, per batch: a's records durable -> b's ack (a's hop link_acked): {acked}; "
        f"within it b's batch received -> durable (b's replicated_durable): {durable_b}\n"
        f"  b's stages per batch (p50 / p99): {b_stages}\n"
        f"  a's stages per batch (p50 / p99): {a_stages}\n"
        f"  fsyncs (bucket bounds of amps_journal_fsync_seconds): alone {alone_fsync}; {fsyncs}\n"
        f"  {alone_hops}\n  {sync_hops}",
        flush=True,
    )


def fsync_buckets(admin_port: int) -> dict[float, float]:
    """The instance's amps_journal_fsync_seconds buckets: upper bound -> cumulative count."""
    buckets: dict[float, float] = {}
    for line in metrics_text(admin_port).splitlines():
        if line.startswith("amps_journal_fsync_seconds_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(bound)] = float(line.rsplit(" ", 1)[1])
    return buckets


def fsync_quantiles(before: dict[float, float], after: dict[float, float]) -> str:
    """p50 and p99 of the fsyncs between two reads of the buckets, each as its bucket's upper
    bound (coarse: 0.5, 1, 2, 5, 10 ms, ...)."""
    counts = sorted((bound, count - before.get(bound, 0.0)) for bound, count in after.items())
    total = counts[-1][1] if counts else 0.0
    if not total:
        return "-"
    found = []
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        bound = next(b for b, cumulative in counts if cumulative >= fraction * total)
        found.append(f"{label} <= {bound * 1000:g} ms")
    return f"{', '.join(found)} over {total:,.0f}"


def replication_lag(messages: int) -> tuple[float, float]:
    """Item 3: each publish from accepted on a to durable on b, async, at LAG_RATE_PER_S: b's
    own `replicated_lag` from a run with only a, b and the publisher (the headline), and from
    a run with subscriber processes on both, whose deliveries are printed beside the same
    publish -> live delivery on one instance. Returns the two p99s in ms (headline first)."""
    with temp_instance("alone") as alone:
        observed = Observed(alone=alone)
        (local,) = asyncio.run(_lag(alone.address, [alone.address], messages))
        alone_hops = observed.report(messages)
    with pair(sync=False) as running:
        a, b = running["a"], running["b"]
        observed = Observed(a=a, b=b)
        on_a, on_b = asyncio.run(_lag(a.address, [a.address, b.address], messages))
        wait_replicated(a, b)
        pair_hops = observed.report(messages)
        b_hops = instance_hops(b)
        held = replicated_lag_ms(observed.before["b"][0], b_hops)
        held_p99 = replicated_lag_p99_ms(observed.before["b"][0], b_hops)
        stages = stages_ms(observed.before["b"][0], b_hops, "replicated_stages")
        a_hops = instance_hops(a)
        sent = stages_ms(observed.before["a"][0], a_hops, "replicated_send_stages")
        transit = transit_ms(observed.before["a"][0], a_hops, observed.before["b"][0], b_hops)
        pauses = {
            n: gc_pauses_ms(observed.before[n][0], instance_hops(i))
            for n, i in (("a", a), ("b", b))
        }
        # The same without subscriber processes: b's own figure, with only a, b and the
        # publisher on the machine's cores.
        before, a_before = instance_hops(b), instance_hops(a)
        acks_before = acks_and_batches(b, "a")
        lean_observed = Observed(a=a, b=b)
        asyncio.run(_lag(a.address, [], messages))
        wait_replicated(a, b)
        lean_hops = lean_observed.report(messages)
        acks_after = acks_and_batches(b, "a")
        acks, batches = acks_after[0] - acks_before[0], acks_after[1] - acks_before[1]
        lean_hops += f"; b sent {acks:,} acks for {batches:,} of a's batches"
        lean_after = instance_hops(b)
        lean = replicated_lag_ms(before, lean_after)
        lean_p99 = replicated_lag_p99_ms(before, lean_after)
        lean_stages = stages_ms(before, lean_after, "replicated_stages")
        lean_a = instance_hops(a)
        lean_sent = stages_ms(a_before, lean_a, "replicated_send_stages")
        lean_transit = transit_ms(a_before, lean_a, before, lean_after)
        # The disk's own fsync in the same minute, beside the journals: the floor of a lag
        # that waits for two of them in series.
        disk = disk_fsync_ms(running.root)
    added = sorted(on_b[i] - on_a[i] for i in on_b if i in on_a)

    def ms(values: list[float]) -> str:
        ordered = sorted(values)
        quantiles = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        return ", ".join(f"{n} {percentile(ordered, q) * 1000:.1f}" for n, q in quantiles)

    lag_p99 = percentile(sorted(on_b.values()), 0.99)
    local_p99 = percentile(sorted(local.values()), 0.99)
    # The headline is the target's own definition, publish accepted on a -> durable on b, as b
    # times it (each record's timestamp is taken when a accepts the publish, before its fsync),
    # from the run without subscriber processes: a subscriber's delivery on b comes after b's
    # fsync and its dispatch, is stamped by the publisher before a has the publish, and the two
    # subscriber processes load the cores the instances run on. Printed beside it.
    print(
        f"replication lag at {LAG_RATE_PER_S:,} msg/s, async, {len(on_b):,} messages, in ms "
        f"(target p99 <= 10):\n"
        f"  publish accepted on a -> durable on b (b's hops replicated_lag, to ~4.4 %; a, b and "
        f"the publisher only): {lean}\n"
        f"  a's stages per batch, from its first publish accepted on a: {lean_sent}\n"
        f"  b's stages per batch (arrival: its first publish accepted on a -> read on b): "
        f"{lean_stages}\n  {lean_transit}\n  {lean_hops}\n"
        f"  this disk, outside the broker, an {DISK_PROBE_BYTES:,}-byte append and fsync every "
        f"{DISK_PROBE_GAP_S * 1000:g} ms, {DISK_PROBE_SYNCS} times: {disk}\n"
        f"  with a subscriber process on a and one on b, the same figure: {held}\n"
        f"  and each subscriber's delivery, from the publisher's send: on b "
        f"{ms(list(on_b.values()))}; on a {ms(list(on_a.values()))}; one instance alone, "
        f"publish -> live delivery "
        f"(one fsync, no link) {ms(list(local.values()))} (b's p99 {lag_p99 / local_p99:.2f}x "
        f"of it)\n"
        f"  per message, delivery on b - delivery on a (the link, b's append and fsync): "
        f"{ms(added)}\n"
        f"  a's stages per batch: {sent}\n"
        f"  b's stages per batch: {stages}\n"
        f"  {transit}\n"
        f"  garbage collector pauses (ms): "
        f"{'; '.join(f'{n}: {p}' for n, p in pauses.items())}\n"
        f"  {alone_hops}\n  {pair_hops}",
        flush=True,
    )
    return lean_p99, held_p99


def wait_replicated(a: InstanceProcess, b: InstanceProcess) -> None:
    """Until b's log is as long as a's (async: b's share lands after a's acks)."""
    target = int(scrape(a.admin_port)["amps_journal_last_txid"])
    while int(scrape(b.admin_port)["amps_journal_last_txid"]) < target:
        time.sleep(CATCH_UP_POLL_S)


def replicated_lag_ms(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Percentiles of the `replicated_lag` hop between two reads of an instance's hops."""
    return hop_quantiles(before, after, "replicated_lag", "publishes")


def hop_quantiles(before: dict[str, Any], after: dict[str, Any], name: str, unit: str) -> str:
    """Percentiles of a histogram hop between two reads of an instance's hops."""
    if "buckets" not in after.get(name, {}):
        return f"- (an instance without the {name} histogram)"
    found = histogram_ms(before.get(name, {"buckets": {}, "total_us": 0}), after[name])
    return f"{found} {unit}" if found != "-" else found


def histogram_quantiles_us(
    old: dict[str, Any], new: dict[str, Any], quantiles: Sequence[float]
) -> tuple[list[int], int]:
    """Each percentile of one hops histogram between two reads of it, read as its bucket's
    upper bound in us, and the count (no percentiles when it is 0)."""
    counts = {
        bound: count - old["buckets"].get(bound, 0) for bound, count in new["buckets"].items()
    }
    bounds = sorted((b for b, c in counts.items() if c and b != "inf"), key=int)
    ordered = [(int(b), counts[b]) for b in bounds]
    if counts.get("inf", 0) > 0:
        ordered.append((int(new["max_us"]), counts["inf"]))
    total = sum(count for _, count in ordered)
    found = []
    for fraction in quantiles if total else ():
        seen = 0
        for bound, count in ordered:
            seen += count
            if seen >= fraction * total:
                found.append(bound)
                break
    return found, total


def histogram_ms(
    old: dict[str, Any], new: dict[str, Any], quantiles: Sequence[float] = (0.5, 0.9, 0.99)
) -> str:
    """Percentiles and mean, in ms, of one hops histogram between two reads of it (each
    percentile read as its bucket's upper bound), and the count."""
    found, total = histogram_quantiles_us(old, new, quantiles)
    if not total:
        return "-"
    parts = [f"p{q * 100:g} {us / 1000:.1f}" for q, us in zip(quantiles, found, strict=True)]
    mean = (new["total_us"] - old["total_us"]) / total / 1000
    return f"{', '.join(parts)}, mean {mean:.2f} ms over {total:,}"


def replicated_lag_p99_ms(before: dict[str, Any], after: dict[str, Any]) -> float:
    """The p99 of the `replicated_lag` hop between two reads of an instance's hops (nan
    without it)."""
    if "buckets" not in after.get("replicated_lag", {}):
        return float("nan")
    old = before.get("replicated_lag", {"buckets": {}, "total_us": 0})
    found, _total = histogram_quantiles_us(old, after["replicated_lag"], (0.99,))
    return found[0] / 1000 if found else float("nan")


def stages_ms(before: dict[str, Any], after: dict[str, Any], key: str) -> str:
    """An instance's `replicated_stages` (a replicated batch's time on its receiver, stage by
    stage; `arrival` from its first record's timestamp at its origin) or `replicated_send_stages`
    (on its sender) between two reads of its hops."""
    if key not in after:
        return f"- (an instance without the {key} hops)"
    old, new = before[key], after[key]
    return "; ".join(f"{name} {histogram_ms(old[name], new[name], (0.5, 0.99))}" for name in new)


def disk_fsync_ms(directory: Path) -> str:
    """Percentiles of DISK_PROBE_SYNCS appends of DISK_PROBE_BYTES (a commit of ~7 x 1 KB),
    each fsynced, DISK_PROBE_GAP_S apart, in a file of `directory`."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    durations: list[float] = []
    try:
        chunk = b"x" * DISK_PROBE_BYTES
        for _ in range(DISK_PROBE_SYNCS):
            os.write(fd, chunk)
            started = time.perf_counter()
            os.fsync(fd)
            durations.append(time.perf_counter() - started)
            time.sleep(DISK_PROBE_GAP_S)
    finally:
        os.close(fd)
        path.unlink()
    ordered = sorted(durations)
    quantiles = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
    found = ", ".join(f"{n} {percentile(ordered, q) * 1000:.2f}" for n, q in quantiles)
    return f"{found}, mean {sum(ordered) / len(ordered) * 1000:.2f} ms"


def transit_ms(
    a_before: dict[str, Any],
    a_after: dict[str, Any],
    b_before: dict[str, Any],
    b_after: dict[str, Any],
) -> str:
    """A batch's way from a's link (gRPC took it) to b's read, as a mean: b's `arrival` less
    a's stages (means add up; percentiles do not)."""
    if "replicated_send_stages" not in a_after or "replicated_stages" not in b_after:
        return "-"

    def mean_us(before: dict[str, Any], after: dict[str, Any]) -> float:
        count = after["count"] - before["count"]
        return (after["total_us"] - before["total_us"]) / count if count else 0.0

    sent, old_sent = a_after["replicated_send_stages"], a_before["replicated_send_stages"]
    on_a = sum(mean_us(old_sent[n], sent[n]) for n in sent)
    arrival = mean_us(
        b_before["replicated_stages"]["arrival"], b_after["replicated_stages"]["arrival"]
    )
    return (
        f"means: a's stages {on_a / 1000:.2f} ms, b's arrival {arrival / 1000:.2f} ms: "
        f"{(arrival - on_a) / 1000:.2f} ms from a's gRPC write to b's read"
    )


def gc_pauses_ms(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The garbage collector's pauses per generation between two reads of an instance's hops."""
    if "gc_pauses" not in after:
        return "-"
    old, new = before["gc_pauses"], after["gc_pauses"]
    parts = []
    for generation, histogram in new.items():
        found = histogram_ms(old[generation], histogram, (0.99,))
        if found != "-":
            parts.append(f"gen{generation} {found}, max {histogram['max_us'] / 1000:.1f}")
    return "; ".join(parts) or "none"


if __name__ == "__main__":
    main()
