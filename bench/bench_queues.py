"""Queue figures over gRPC against real instance processes (issue 4; prints, asserts nothing).

`.venv/bin/python -m bench.bench_queues [--quick] [--only e2e|latency|memory|restart|fairness]`

1. end to end: one publisher process and four consumer processes (max_backlog 100, every message
   acked, acks batched by the client), 1 KB JSON, messages/s from the first publish to the last
   ack (the instance's `acked_count` reaching the total, polled every 20 ms);
2. publish-to-delivery latency at a steady 5,000 msg/s, and at 1,000 msg/s (the publisher stamps
   its monotonic clock into the payload; the consumers record receive - send);
3. memory per queued 100-byte message: instance RSS (`/proc/<pid>/status`) after queueing minus
   RSS after one warm-up message, with no queue, with a queue, and with `FileBackedMetadata`;
4. restart after SIGKILL with many messages queued and half of them acknowledged (killed at once,
   and 6 s after the acks so a queue snapshot exists), and with only the oldest one unacked:
   process start -> first delivery to a consumer that keeps retrying, and -> queue depth correct;
5. fairness (Q9): three consumers with max_backlog 2, 4, 10 on a proportional queue, measured
   delivery shares against the model's prediction.

Every instance runs in a temporary directory that is deleted afterwards; every wait has a
deadline so a stuck instance cannot hang `make bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import multiprocessing
import os
import queue
import re
import shutil
import sqlite3
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from amps.client import Client
from bench.common import percentile, rate, scrape
from tests.harness.instance import InstanceProcess, config_xml

TOPIC = "orders"
QUEUE = "work"
PHASE_TIMEOUT_S = 300.0
RESTART_TIMEOUT_S = 400.0
LATENCY_RATE_PER_S = 5_000
SPAWN = multiprocessing.get_context("spawn")


# --------------------------------------------------------------------------- instances


def queue_xml(*, backlog: int = 1000, extra: str = "") -> str:
    return (
        f"<SOW><Queue><Name>{QUEUE}</Name><UnderlyingTopic>{TOPIC}</UnderlyingTopic>"
        f"<MessageType>json</MessageType><LeasePeriod>300s</LeasePeriod>"
        f"<MaxPerSubscriptionBacklog>{backlog}</MaxPerSubscriptionBacklog>{extra}</Queue></SOW>"
    )


@contextlib.contextmanager
def queue_instance(prefix: str, extra: str | None = None) -> Iterator[InstanceProcess]:
    """A real instance with queue `work` over `orders` (or `extra` as given), deleted after."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    text = config_xml(name=prefix, journal_size="1GB",
                      extra=queue_xml() if extra is None else extra)  # fmt: skip
    instance = InstanceProcess(workdir, text)
    try:
        instance.start(timeout_s=120)
        yield instance
    except BaseException:
        print("instance output (tail):\n" + "".join(instance.output[-20:]), flush=True)
        raise
    finally:
        instance.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def queue_stats(
    admin_port: int, timeout_s: float = 10.0, *, patience_s: float = 0.0
) -> dict[str, Any]:
    """The queue's admin statistics. With `patience_s`, a poll that times out is asked again
    until that long has passed (an instance busy with a snapshot of a million messages on a
    loaded machine may not answer within `timeout_s`): the wait is printed, not fatal."""
    url = f"http://127.0.0.1:{admin_port}/amps/instance/queues/{QUEUE}.json"
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                stats: dict[str, Any] = orjson.loads(response.read())
        except TimeoutError:
            waited = time.monotonic() - started
            if waited > patience_s:
                raise
            print(f"  (admin poll unanswered for {waited:.0f} s; asking again)", flush=True)
            continue
        return stats


def wait_stat(admin_port: int, key: str, target: int, timeout_s: float = PHASE_TIMEOUT_S,
              every_s: float = 0.02) -> float:  # fmt: skip
    """Poll the queue's `key` until it is >= target; return the monotonic time it was seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = queue_stats(admin_port, patience_s=120)[key]
        now = time.monotonic()
        if value >= target:
            return now
        if now > deadline:
            raise RuntimeError(f"queue {key} stayed at {value:,} (waiting for {target:,})")
        time.sleep(every_s)


def status_kib(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile of a process in KiB (Linux /proc)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            values[key] = int(rest.split()[0])
    return values


def pid_of(instance: InstanceProcess) -> int:
    assert instance.process is not None
    return instance.process.pid


# --------------------------------------------------------------------------- payloads


def payload(size: int, index: int, **fields: Any) -> bytes:
    """A JSON document of about `size` bytes (exact when `fields` have a fixed width)."""
    head = {"id": index, "symbol": "IBM", **fields, "pad": ""}
    base = len(orjson.dumps(head))
    head["pad"] = "x" * max(0, size - base)
    return orjson.dumps(head)


# --------------------------------------------------------------------------- worker processes


async def _publisher(address: str, name: str, count: int, size: int, per_s: float | None,
                     warmup: int, ready: Any, go: Any) -> dict[str, Any]:  # fmt: skip
    """Publish `count` messages (as fast as possible, or paced at `per_s` with a send stamp)."""
    fixed = [payload(size, i) for i in range(256)]
    async with Client(name) as client:
        await client.connect(address, timeout_s=30)
        await asyncio.to_thread(ready.wait, 60)
        await asyncio.to_thread(go.wait, 60)
        started = time.monotonic()
        publish = client.publish
        if per_s is None:
            for index in range(count):
                await publish(TOPIC, fixed[index & 255])
        else:
            sent = 0
            while sent < count:
                due = min(count, int((time.monotonic() - started) * per_s) + 1)
                while sent < due:
                    stamp = {"t": time.monotonic(), "w": int(sent < warmup)}
                    await publish(TOPIC, payload(size, sent, **stamp))
                    sent += 1
                await asyncio.sleep(0.0005)
        await client.flush(timeout_s=PHASE_TIMEOUT_S)
        return {"started": started, "flushed": time.monotonic(), "count": count}


async def _consumer(address: str, name: str, backlog: int, latency: bool, ready: Any,
                    stop: Any) -> dict[str, Any]:  # fmt: skip
    """Ack every message (client-batched acks); flush pending acks whenever idle for 20 ms."""
    latencies: list[float] = []
    count = 0
    async with Client(name) as client:
        await client.connect(address, timeout_s=30)
        sub = await client.subscribe(QUEUE, max_backlog=backlog)
        await asyncio.to_thread(ready.wait, 60)
        cpu = time.process_time()
        while True:
            message = await sub.get(timeout_s=0.02)
            if message is None:
                await client.flush_acks()
                if stop.is_set():
                    break
                continue
            count += 1
            if latency:
                now = time.monotonic()
                body = orjson.loads(message.data)
                if not body["w"]:
                    latencies.append(now - body["t"])
            await message.ack()
        return {"count": count, "latencies": latencies, "cpu_s": time.process_time() - cpu}


async def _acker(address: str, name: str, count: int, hold_first: bool, ready: Any,
                 stop: Any) -> dict[str, Any]:  # fmt: skip
    """Ack the first `count` messages delivered (keeping the very first one leased if asked)."""
    acked = 0
    async with Client(name, ack_batch_size=500) as client:
        await client.connect(address, timeout_s=30)
        sub = await client.subscribe(QUEUE, max_backlog=1000)
        await asyncio.to_thread(ready.wait, 60)
        first = True
        while acked < count:
            message = await sub.get(timeout_s=PHASE_TIMEOUT_S)
            if message is None:
                break
            if first and hold_first:
                first = False
                continue
            first = False
            await message.ack()
            acked += 1
        await client.flush_acks()
        await asyncio.to_thread(stop.wait, PHASE_TIMEOUT_S)
    return {"acked": acked}


async def _waiter(address: str, name: str, ready: Any, go: Any) -> dict[str, Any]:
    """After `go`: retry connect+subscribe until a first message is delivered (restart)."""
    await asyncio.to_thread(ready.wait, 60)
    await asyncio.to_thread(go.wait, 60)
    attempt = 0
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    host, port = address.rsplit(":", 1)
    while time.monotonic() < deadline:
        # A TCP probe first: a refused gRPC channel would put the process-wide subchannel into
        # gRPC's reconnect backoff (1 s and more), which would measure the client, not the queue.
        try:
            await asyncio.open_connection(host, int(port))
        except OSError:
            await asyncio.sleep(0.005)
            continue
        attempt += 1
        client = Client(f"{name}-{attempt}", reconnect=False, logon_timeout_s=1.0)
        try:
            await client.connect(address, timeout_s=1.0)
            sub = await client.subscribe(QUEUE, max_backlog=1)
            message = await sub.get(timeout_s=60)
            if message is not None:
                return {"first": time.monotonic(), "attempts": attempt}
        except Exception:  # not up yet: try again at once
            await asyncio.sleep(0.01)
        finally:
            with contextlib.suppress(Exception):
                await client.close()
    return {"first": None, "attempts": attempt}


async def _fair_consumer(address: str, name: str, backlog: int, mode: str, value: float,
                         times: Any, ready: Any, go: Any) -> dict[str, Any]:  # fmt: skip
    """Fairness: `hold` acks each message `value` s after it arrived (all held at once);
    `rate` acks the oldest held message every 1/`value` s (a serial worker)."""
    loop = asyncio.get_running_loop()
    counted = 0
    held: deque[Any] = deque()
    async with Client(name, ack_batch_size=1) as client:
        await client.connect(address, timeout_s=30)
        sub = await client.subscribe(QUEUE, max_backlog=backlog)
        await asyncio.to_thread(ready.wait, 60)
        await asyncio.to_thread(go.wait, 60)
        window = (times[0], times[1])

        timers: list[asyncio.TimerHandle] = []

        def ack_later(message: Any) -> None:
            # Acks are batched per 1 and sent at once: ack() finishes without awaiting anything.
            with contextlib.suppress(Exception):  # StopIteration: done; or closed meanwhile
                message.ack().send(None)

        async def ticker() -> None:
            due = time.monotonic()
            while True:
                due += 1.0 / value
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if held:
                    await held.popleft().ack()

        tick = loop.create_task(ticker()) if mode == "rate" else None
        while time.monotonic() < window[1]:
            message = await sub.get(timeout_s=max(0.01, window[1] - time.monotonic()))
            if message is None:
                continue
            now = time.monotonic()
            if window[0] <= now < window[1]:
                counted += 1
            if mode == "hold":
                timers.append(loop.call_later(value, ack_later, message))
            else:
                held.append(message)
        if tick is not None:
            tick.cancel()
        for timer in timers:
            timer.cancel()
    return {"counted": counted, "backlog": backlog}


def _worker_main(kind: str, name: str, args: tuple[Any, ...], results: Any) -> None:
    runners: dict[str, Callable[..., Any]] = {
        "publisher": _publisher,
        "consumer": _consumer,
        "acker": _acker,
        "waiter": _waiter,
        "fair": _fair_consumer,
    }
    try:
        results.put(("ok", name, asyncio.run(runners[kind](*args))))
    except BaseException as error:  # reported to the parent, which raises it
        results.put(("error", name, f"{type(error).__name__}: {error}"))


class Workers:
    """Spawned worker processes reporting one result each on a shared queue."""

    def __init__(self) -> None:
        self.results: Any = SPAWN.Queue()
        self.children: list[Any] = []

    def start(self, kind: str, name: str, *args: Any) -> None:
        child = SPAWN.Process(target=_worker_main, args=(kind, name, args, self.results),
                              daemon=True)  # fmt: skip
        child.start()
        self.children.append(child)

    def collect(self, count: int, timeout_s: float = PHASE_TIMEOUT_S) -> dict[str, Any]:
        """`count` workers' results by name: what each worker's function returned (a dict of
        figures, or a receiver's latencies), unpickled from the results queue."""
        got: dict[str, Any] = {}
        deadline = time.monotonic() + timeout_s
        while len(got) < count:
            try:
                item = self.results.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                alive = [c.name for c in self.children if c.is_alive()]
                raise RuntimeError(f"no result in {timeout_s:.0f} s (have {sorted(got)}, "
                                   f"{len(alive)} workers alive)") from None  # fmt: skip
            status, name, value = item
            if status != "ok":
                raise RuntimeError(f"{name}: {value}")
            got[name] = value
        return got

    def close(self) -> None:
        for child in self.children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
                child.join(timeout=5)


@contextlib.contextmanager
def workers() -> Iterator[Workers]:
    group = Workers()
    try:
        yield group
    finally:
        group.close()


def publish_all(address: str, total: int, size: int, processes: int = 2) -> tuple[int, float]:
    """Publish `total` messages of `size` bytes from `processes` client processes and flush;
    return (messages, seconds from the first publish to the last flush)."""
    with workers() as group:
        ready, go = SPAWN.Barrier(processes + 1), SPAWN.Event()
        for i in range(processes):
            share = total // processes + (i < total % processes)
            group.start("publisher", f"fill-{i}", address, f"fill-{i}", share, size, None, 0,
                        ready, go)  # fmt: skip
        ready.wait(60)
        go.set()
        got = group.collect(processes)
    started = min(r["started"] for r in got.values())
    return sum(r["count"] for r in got.values()), max(r["flushed"] for r in got.values()) - started


# --------------------------------------------------------------------------- 1, 2: end to end


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Results = dict[str, dict[str, Any]]


def run_pub_consumers(instance: InstanceProcess, total: int, per_s: float | None, warmup: int,
                      latency: bool) -> tuple[float, float, Results, float]:  # fmt: skip
    """One publisher and four consumers (backlog 100); returns (first publish, last ack seen,
    results, instance CPU seconds)."""
    address = instance.address
    with workers() as group:
        ready, go, stop = SPAWN.Barrier(6), SPAWN.Event(), SPAWN.Event()
        for i in range(4):
            group.start("consumer", f"c{i}", address, f"q-c{i}", 100, latency, ready, stop)
        group.start("publisher", "pub", address, "q-pub", total, 1024, per_s, warmup, ready, go)
        ready.wait(60)
        acked_before = queue_stats(instance.admin_port)["acked_count"]
        cpu = process_cpu_s(pid_of(instance))
        go.set()
        done = wait_stat(instance.admin_port, "acked_count", acked_before + total)
        cpu = process_cpu_s(pid_of(instance)) - cpu
        stop.set()
        got = group.collect(5)
    return got["pub"]["started"], done, got, cpu


def bench_e2e(instance: InstanceProcess, total: int) -> None:
    started, done, got, cpu = run_pub_consumers(instance, total, None, 0, latency=False)
    seconds = done - started
    counts = [got[f"c{i}"]["count"] for i in range(4)]
    client_cpu = sum(got[f"c{i}"]["cpu_s"] for i in range(4))
    print(f"end to end, 1 publisher + 4 consumers (backlog 100, batched acks), 1 KB JSON: "
          f"{rate(total, seconds)} first publish -> last ack", flush=True)  # fmt: skip
    print(f"  publisher flushed after {got['pub']['flushed'] - started:.2f} s; per consumer "
          f"{', '.join(f'{c:,}' for c in counts)}; instance CPU {cpu:.2f} s "
          f"({cpu / total * 1e6:.0f} us/message, {cpu / seconds:.0%} of a core); consumers "
          f"{client_cpu / total * 1e6:.0f} us/message", flush=True)  # fmt: skip


def bench_latency(instance: InstanceProcess, seconds: float, per_s: int,
                  warmup_s: float = 1.0) -> None:  # fmt: skip
    total = int(per_s * (seconds + warmup_s))
    warmup = int(per_s * warmup_s)
    _started, _done, got, cpu = run_pub_consumers(instance, total, per_s, warmup, latency=True)
    latencies = sorted(x for i in range(4) for x in got[f"c{i}"]["latencies"])
    ms = [percentile(latencies, f) * 1000 for f in (0.5, 0.9, 0.99, 0.999, 1.0)]
    print(f"publish -> delivery latency at {per_s:,} msg/s, 4 consumers, {len(latencies):,} "
          f"messages after {warmup_s:.0f} s warm-up: p50 {ms[0]:.2f} ms, p90 {ms[1]:.2f} ms, "
          f"p99 {ms[2]:.2f} ms, p99.9 {ms[3]:.2f} ms, max {ms[4]:.2f} ms "
          f"(instance {cpu / (seconds + warmup_s):.0%} of a core)", flush=True)  # fmt: skip


# --------------------------------------------------------------------------- 3: memory

RECORD_CACHE_BYTES = 64 * 1024 * 1024
RECORD_CACHE_OVERHEAD = 200  # amps.server.record_cache accounting per record


def journal_txid(instance: InstanceProcess) -> int:
    return int(scrape(instance.admin_port)["amps_journal_last_txid"])


def fill_and_sample(instance: InstanceProcess, count: int, marks: list[int],
                    size: int = 100) -> list[tuple[int, dict[str, int]]]:  # fmt: skip
    """Publish `count` messages, sampling the instance's RSS at each mark (and before)."""
    pid = pid_of(instance)
    base_txid = journal_txid(instance)
    samples = []
    done = 0
    started = time.monotonic()
    for mark in marks:
        publish_all(instance.address, mark - done, size)
        done = mark
        deadline = time.monotonic() + 60
        while journal_txid(instance) < base_txid + mark and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        samples.append((mark, status_kib(pid)))
    print(f"  filled {count:,} x {size} B: {rate(count, time.monotonic() - started)}", flush=True)
    return samples


def bench_memory(label: str, extra: str, count: int, quick: bool,
                 then: Callable[[InstanceProcess], None] | None = None) -> None:  # fmt: skip
    with queue_instance(f"mem-{label.split()[0]}", extra) as instance:
        publish_all(instance.address, 1, 100, processes=1)  # warm-up message
        time.sleep(1.0)
        base = status_kib(pid_of(instance))
        fractions = (2, 3, 4) if quick else (1, 2, 3, 4)
        samples = fill_and_sample(instance, count, [count * k // 4 for k in fractions])
        last_count, last = samples[-1]
        mid_count, mid = next((c, s) for c, s in samples if c >= count // 2)
        gross = (last["VmRSS"] - base["VmRSS"]) * 1024 / count
        anon = (last["RssAnon"] - base["RssAnon"]) * 1024 / count
        slope = (last["VmRSS"] - mid["VmRSS"]) * 1024 / max(1, last_count - mid_count)
        cached = RECORD_CACHE_BYTES // (100 + RECORD_CACHE_OVERHEAD)
        depth = ""
        if "<Queue>" in extra:
            depth = f", queue_depth {queue_stats(instance.admin_port)['queue_depth']:,}"
        print(f"memory, {label}: {gross:.0f} bytes/message gross ({anon:.0f} anonymous) at "
              f"{count:,} queued (RSS {base['VmRSS'] / 1024:.0f} -> {last['VmRSS'] / 1024:.0f} "
              f"MiB{depth}); {slope:.0f} bytes/message between {mid_count:,} and {last_count:,} "
              f"(record cache full from ~{cached:,} records, so this slope excludes it)",
              flush=True)  # fmt: skip
        if then is not None:
            then(instance)


# --------------------------------------------------------------------------- 4: restart

RECOVERED = re.compile(
    r"queues recovered from (\d+) log records in ([\d.]+) s(?: \(([\d.]+) s CPU\))?"
)
SPACED = re.compile(r"snapshot of \d+ messages took")
RESTORED = re.compile(r"snapshot restored at txid \d+ .*?in ([\d.]+) s CPU")


def stored_snapshot_txid(instance: InstanceProcess) -> int | None:
    """The queue snapshot's txid in queues.db (None if none is stored)."""
    path = next(instance.workdir.rglob("queues.db"), None)
    if path is None:
        return None
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        query = "SELECT snapshot_txid, snapshot IS NOT NULL FROM queue_state WHERE queue = ?"
        row = db.execute(query, (QUEUE,)).fetchone()
    return None if row is None or not row[1] else int(row[0])


def ack_messages(instance: InstanceProcess, count: int, hold_first: bool) -> float:
    """A consumer acks `count` delivered messages (optionally keeping the first one leased);
    returns the seconds until the instance counted them all. The consumer then disconnects."""
    with workers() as group:
        ready, stop = SPAWN.Barrier(2), SPAWN.Event()
        group.start("acker", "acker", instance.address, "q-acker", count, hold_first, ready, stop)
        before = queue_stats(instance.admin_port, patience_s=120)["acked_count"]
        ready.wait(60)
        started = time.monotonic()
        done = wait_stat(instance.admin_port, "acked_count", before + count, every_s=0.05)
        stop.set()
        group.collect(1)
    return done - started


def restart_pinned(instance: InstanceProcess) -> None:
    """Start again on the same ports (as `InstanceProcess.restart`, with a longer ready wait)."""
    port, admin = instance.port, instance.admin_port
    text = instance.config_text
    text = text.replace("<Type>grpc</Type><InetAddr>127.0.0.1:0</InetAddr>",
                        f"<Type>grpc</Type><InetAddr>127.0.0.1:{port}</InetAddr>")  # fmt: skip
    text = text.replace("<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>",
                        f"<Admin><InetAddr>127.0.0.1:{admin}</InetAddr></Admin>")  # fmt: skip
    instance.config_text = text
    deadline = time.monotonic() + 10
    while True:
        try:
            instance.start(timeout_s=RESTART_TIMEOUT_S)
            return
        except RuntimeError:
            if time.monotonic() > deadline:  # the port may linger briefly after a kill
                raise
            time.sleep(0.2)


def measure_restart(instance: InstanceProcess, label: str) -> None:
    """SIGKILL, start again on the same ports; time to first delivery and to the full depth."""
    expected = queue_stats(instance.admin_port, patience_s=120)["queue_depth"]
    snapshot = stored_snapshot_txid(instance)
    last_txid = journal_txid(instance)
    seen: dict[str, float] = {}
    with workers() as group:
        ready, go = SPAWN.Barrier(2), SPAWN.Event()
        group.start("waiter", "waiter", instance.address, f"q-wait-{label[:8]}", ready, go)
        ready.wait(60)
        time.sleep(0.5)  # the waiter is in its retry loop
        spaced = [line.strip() for line in instance.output if SPACED.search(line)]
        instance.kill()
        started = time.monotonic()
        go.set()

        def poll() -> None:
            deadline = started + RESTART_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    depth = queue_stats(instance.admin_port, timeout_s=1.0)["queue_depth"]
                except (OSError, urllib.error.URLError, KeyError, ValueError):
                    time.sleep(0.005)
                    continue
                seen.setdefault("admin", time.monotonic())
                seen["depth"] = depth
                if depth == expected:
                    seen["full"] = time.monotonic()
                    return
                time.sleep(0.005)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        restart_pinned(instance)
        ready_at = time.monotonic()
        first = group.collect(1, RESTART_TIMEOUT_S + 30)["waiter"]
        poller.join(RESTART_TIMEOUT_S)
    recovered = next((m for line in instance.output if (m := RECOVERED.search(line))), None)
    replay = (f"replayed {int(recovered[1]):,} log records in {float(recovered[2]):.2f} s"
              if recovered else "no recovery line")  # fmt: skip
    if recovered and recovered[3]:
        restored = [float(m[1]) for line in instance.output if (m := RESTORED.search(line))]
        snapshot_cpu = f", snapshot restore {sum(restored):.2f} s CPU" if restored else ""
        replay += f" ({float(recovered[3]):.2f} s CPU{snapshot_cpu})"
    full = f"{seen['full'] - started:.2f} s" if "full" in seen else f"not reached ({seen})"
    first_s = f"{first['first'] - started:.2f} s" if first["first"] else "none"
    print(f"restart after SIGKILL, {label}: first delivery {first_s}, depth {expected:,} "
          f"available {full} (ready line {ready_at - started:.2f} s; {replay}; snapshot at "
          f"txid {snapshot if snapshot is not None else 'none'} of {last_txid:,})",
          flush=True)  # fmt: skip
    if spaced:  # snapshots spaced beyond a checkpoint before the kill: the last one said so
        print(f"  before the kill ({len(spaced)} such lines): {spaced[-1]}", flush=True)


def restart_half(instance: InstanceProcess) -> None:
    """Half of what is queued acknowledged: killed at once, then again with a fresh snapshot."""
    depth = queue_stats(instance.admin_port)["queue_depth"]
    half = depth // 2
    seconds = ack_messages(instance, half, hold_first=False)
    print(f"  acked {rate(half, seconds)}", flush=True)
    measure_restart(instance, f"{depth:,} queued, {half:,} acked, killed at once")
    ack_messages(instance, 1, hold_first=False)  # something new for the next snapshot
    time.sleep(6.0)
    measure_restart(instance, f"{depth:,} queued, {half + 1:,} acked, killed 6 s later")


def restart_behind(count: int) -> None:
    """Only the oldest message unacknowledged, behind `count` - 1 acknowledged ones."""
    with queue_instance("behind") as instance:
        fill_and_sample(instance, count, [count])
        seconds = ack_messages(instance, count - 1, hold_first=True)
        print(f"  acked all but the oldest: {rate(count - 1, seconds)}", flush=True)
        measure_restart(instance, f"oldest of {count:,} unacked, killed at once")
        ack_messages(instance, 0, hold_first=False)
        time.sleep(6.0)
        measure_restart(instance, f"oldest of {count:,} unacked, killed 6 s later")


# --------------------------------------------------------------------------- 5: fairness


def bench_fairness(seconds: float, warmup_s: float) -> None:
    backlogs = (2, 4, 10)
    extra = queue_xml(backlog=10, extra="<FairnessModel>proportional</FairnessModel>")
    hold_s, per_s = 0.02, 100.0
    scenarios = (
        ("each message held 20 ms (acks concurrent)", "hold", hold_s,
         [b / sum(backlogs) for b in backlogs]),
        ("each consumer acks 100/s, one at a time", "rate", per_s, [1 / 3] * 3),
    )  # fmt: skip
    needed = (sum(backlogs) / hold_s + 3 * per_s) * (seconds + warmup_s + 2)
    with queue_instance("fair", extra) as instance:
        publish_all(instance.address, int(needed * 1.3), 100, processes=1)
        for label, mode, value, predicted in scenarios:
            with workers() as group:
                ready, go, times = SPAWN.Barrier(4), SPAWN.Event(), SPAWN.Array("d", 2)
                for b in backlogs:
                    group.start("fair", f"b{b}", instance.address, f"q-fair-{mode}-{b}", b, mode,
                                value, times, ready, go)  # fmt: skip
                ready.wait(60)
                times[0] = time.monotonic() + warmup_s
                times[1] = times[0] + seconds
                go.set()
                got = group.collect(3, seconds + warmup_s + 60)
            left = queue_stats(instance.admin_port)["deliverable_count"]
            counts = [got[f"b{b}"]["counted"] for b in backlogs]
            total = max(1, sum(counts))
            shares = [c / total for c in counts]
            worst = max(abs(s - p) for s, p in zip(shares, predicted, strict=True))
            print(f"fairness (proportional, backlogs 2/4/10), {label}: delivered "
                  f"{', '.join(f'{c:,}' for c in counts)} in {seconds:.0f} s = shares "
                  f"{', '.join(f'{s:.1%}' for s in shares)}; model "
                  f"{', '.join(f'{p:.1%}' for p in predicted)}; largest difference "
                  f"{worst * 100:.1f} points ({left:,} still deliverable: saturated)",
                  flush=True)  # fmt: skip


# --------------------------------------------------------------------------- main


@contextlib.contextmanager
def part(name: str) -> Iterator[None]:
    """Run one part; a failure is printed and the next part still runs."""
    started = time.monotonic()
    try:
        yield
    except Exception as error:
        print(f"{name}: FAILED after {time.monotonic() - started:.0f} s: "
              f"{type(error).__name__}: {error}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes)")
    parts = ["e2e", "latency", "memory", "restart", "fairness"]
    parser.add_argument("--only", nargs="*", choices=parts, default=parts)
    parser.add_argument("--messages", type=int, default=None, help="end-to-end messages")
    parser.add_argument("--queued", type=int, default=None, help="memory/restart messages")
    args = parser.parse_args()
    quick = args.quick
    e2e_total = args.messages or (50_000 if quick else 200_000)
    queued = args.queued or (300_000 if quick else 1_000_000)
    print(f"bench_queues: {'quick' if quick else 'full'}; queue {QUEUE!r} over {TOPIC!r}",
          flush=True)  # fmt: skip
    # As an installed broker has: bytecode for every module (else each restart compiles them).
    compileall.compile_dir(Path(__file__).resolve().parent.parent / "amps", quiet=1)
    if "e2e" in args.only or "latency" in args.only:
        with part("end to end / latency"), queue_instance("e2e") as instance:
            if "e2e" in args.only:
                bench_e2e(instance, e2e_total)
            if "latency" in args.only:
                for per_s in (LATENCY_RATE_PER_S, 1_000):
                    bench_latency(instance, 5.0 if quick else 12.0, per_s)
    if "memory" in args.only:
        with part("memory, no queue"):
            bench_memory("no queue (journal and record cache only)", "", queued, quick)
        with part("memory, FileBackedMetadata"):
            file_backed = queue_xml(extra="<FileBackedMetadata>enabled</FileBackedMetadata>")
            bench_memory("FileBackedMetadata enabled", file_backed, queued, quick)
    if "memory" in args.only or "restart" in args.only:
        then = restart_half if "restart" in args.only else None
        with part("memory, queue / restart"):
            bench_memory("queue", queue_xml(), queued, quick, then=then)
    if "restart" in args.only:
        with part("restart, oldest unacked"):
            restart_behind(queued)
    if "fairness" in args.only:
        with part("fairness"):
            bench_fairness(4.0 if quick else 10.0, 1.0 if quick else 2.0)


if __name__ == "__main__":
    try:
        main()
    except queue.Empty:
        raise SystemExit("bench_queues: a worker process did not report in time") from None
