"""Replicated queue figures (issue 9), each beside the single-instance queue figure of the same
run. Prints; asserts nothing. The machine is shared: read the ratios.

`.venv/bin/python -m bench.bench_replicated_queues [--quick] [--messages N] [--queued N]
[--only throughput|restart] [--rounds N]`

1. end to end, one instance: one publisher and four consumers (backlog 100), 1 KB JSON, first
   publish to last ack (the reference);
2. the same with a sync peer b (queue replicated both ways), consumers on the owner a only;
   parts 1 and 2 also print each instance's CPU per message (user + sys, from the first
   publish to its queue being empty again) and the consumers', and the pair's CPU against the
   single instance's: on a shared machine the wall ratio moves with the load, this less;
3. consumers on both instances (two on a, two on b), publishes on a: the rate and the share
   the owner served locally (R3);
4. consumers only on b (every message transferred, R4/R5): messages/s, and publish-to-delivery
   p50/p99 of a transferred message at 1,000 msg/s;
5. restart after SIGKILL (`--only restart`, `--queued N`): N queued 100-byte messages, half
   published on a and half on b (two origins), a quarter acked on each instance (half in all),
   a killed at once and restarted: process start -> first delivery on a, and -> a's depth
   correct; beside the same for one instance with N queued and half acked (bench_queues's
   restart). Both restore their queue snapshot (the replicated one with its ownership) and
   replay the log after it; the line says how many records and where the snapshot stood.
   Then each is killed again once its stored snapshot is current (nothing to replay): the
   restore alone, whatever the snapshots' spacing left to replay the first time. Before the
   kill it prints what a's snapshots cost its loop over the fill and the acks (from a's log:
   amps/queue/snapshot_spacing.py spaces them). `--rounds N` repeats both N times.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.bench_queues import (
    PHASE_TIMEOUT_S,
    SPAWN,
    ack_messages,
    fill_and_sample,
    journal_txid,
    measure_restart,
    part,
    pid_of,
    process_cpu_s,
    publish_all,
    queue_instance,
    queue_stats,
    queue_xml,
    stored_snapshot_txid,
    wait_stat,
    workers,
)
from bench.common import percentile, rate
from tests.harness.cluster import Cluster, Link, cluster
from tests.harness.instance import InstanceProcess

# A snapshot of 500,000 messages spaces the next by 50 times its CPU cost (~30 s here).
SNAPSHOT_WAIT_S = 120.0
SNAPSHOTS = re.compile(r"snapshots since the start: (\d+), ([\d.]+) s of CPU")
COST = re.compile(r"snapshot of \d+ messages took ([\d.]+) s of CPU")


@contextlib.contextmanager
def replicated_pair() -> Iterator[Cluster]:
    """a <-> b, sync both ways, the queue on both (replicated: destinations take every topic)."""
    root = Path(tempfile.mkdtemp(prefix="bench-replicated-queues-"))
    running = cluster(root, ["a", "b"])
    try:
        running.start({"a": [Link("b")], "b": [Link("a")]}, {"a": queue_xml(), "b": queue_xml()})
        yield running
    finally:
        running.kill()
        shutil.rmtree(root, ignore_errors=True)


def run(
    publish_to: str,
    consumers: list[str],
    admin_port: int,
    total: int,
    per_s: float | None,
    measured: Sequence[InstanceProcess] = (),
) -> tuple[float, dict[str, dict[str, Any]]]:
    """One publisher at `publish_to`, one consumer per address in `consumers` (backlog 100);
    returns (seconds from the first publish to the owner's last ack seen, results). With
    `measured`, results["cpu"] holds each instance's CPU seconds (user + sys) from the start
    to its queue being empty again (a peer applies the owner's acks a moment later), and
    the consumers' CPU."""
    latency = per_s is not None
    warmup = int(per_s) if per_s is not None else 0
    with workers() as group:
        ready, go, stop = SPAWN.Barrier(len(consumers) + 2), SPAWN.Event(), SPAWN.Event()
        for i, address in enumerate(consumers):
            group.start("consumer", f"c{i}", address, f"rq-c{i}", 100, latency, ready, stop)
        group.start("publisher", "pub", publish_to, "rq-pub", total, 1024, per_s, warmup,
                    ready, go)  # fmt: skip
        ready.wait(60)
        acked_before = queue_stats(admin_port)["acked_count"]
        cpu = [process_cpu_s(pid_of(instance)) for instance in measured]
        go.set()
        done = wait_stat(admin_port, "acked_count", acked_before + total)
        for i, instance in enumerate(measured):
            wait_depth(instance.admin_port, 0)
            cpu[i] = process_cpu_s(pid_of(instance)) - cpu[i]
        stop.set()
        got = group.collect(len(consumers) + 1)
    got["cpu"] = {
        "instances": cpu,
        "consumers": sum(got[f"c{i}"]["cpu_s"] for i in range(len(consumers))),
    }
    return done - got["pub"]["started"], got


def cpu_line(got: dict[str, dict[str, Any]], names: list[str], total: int) -> str:
    """Instances' and consumers' CPU per message of one run, in microseconds."""
    cpu = got["cpu"]
    parts = [f"{n} {s / total * 1e6:.0f}" for n, s in zip(names, cpu["instances"], strict=True)]
    instances = sum(cpu["instances"]) / total * 1e6
    consumers = cpu["consumers"] / total * 1e6
    return (
        f"CPU us/message: {', '.join(parts)} (instances {instances:.0f}), consumers {consumers:.0f}"
    )


def wait_depth(admin_port: int, target: int) -> None:
    """Poll the queue's depth until it is at most `target` (peers' acks arrive asynchronously)."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while queue_stats(admin_port, patience_s=120)["queue_depth"] > target:
        if time.monotonic() > deadline:
            raise TimeoutError(f"queue depth still above {target:,}")
        time.sleep(0.05)


def restart_single(count: int) -> None:
    """The reference: one instance, `count` queued, half acked, killed at once; then again
    once its snapshot is current."""
    with queue_instance("rq-restart") as instance:
        fill_and_sample(instance, count, [count])
        ack_messages(instance, count // 2, hold_first=False)
        label = f"one instance, {count:,} queued, {count // 2:,} acked"
        measure_restart(instance, f"{label}, killed at once")
        restart_current(instance, label)


def restart_current(instance: InstanceProcess, label: str) -> None:
    """Killed again once the stored snapshot is at the journal's end (nothing to replay): the
    restore alone, whatever the last snapshot before the first kill missed."""
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while time.monotonic() < deadline:
        stored = stored_snapshot_txid(instance)
        if stored is not None and stored >= journal_txid(instance):
            measure_restart(instance, f"{label}, killed with its snapshot current")
            return
        time.sleep(0.5)
    print(f"  ({label}: no current snapshot within {SNAPSHOT_WAIT_S:.0f} s)", flush=True)


def restart_replicated(count: int) -> None:
    """a <-> b, half of `count` published on each, a quarter acked on each, a killed at once."""
    with replicated_pair() as pair:
        a, b = pair["a"], pair["b"]
        started = filling = time.monotonic()
        for instance in (a, b):
            publish_all(instance.address, count // 2, 100)
        wait_stat(a.admin_port, "queue_depth", count)
        wait_stat(b.admin_port, "queue_depth", count)
        took = time.monotonic() - started
        print(f"  filled {count:,} x 100 B on two origins: {rate(count, took)}", flush=True)
        started = time.monotonic()
        for instance in (a, b):
            ack_messages(instance, count // 4, hold_first=False)
        for instance in (a, b):
            wait_depth(instance.admin_port, count - 2 * (count // 4))
        print(f"  acked {rate(2 * (count // 4), time.monotonic() - started)} on both", flush=True)
        print(f"  {snapshot_cost(a, 'a', time.monotonic() - filling)}", flush=True)
        label = f"replicated, {count:,} queued from two origins, {2 * (count // 4):,} acked"
        measure_restart(a, f"{label}, killed at once")
        restart_current(a, label)


def snapshot_cost(instance: InstanceProcess, name: str, seconds: float) -> str:
    """The snapshots' CPU on the instance's loop since its start, as its last log line about
    a costly snapshot says (amps/server/queue_manager.py), per minute of `seconds`."""
    found = [m for line in instance.output if (m := SNAPSHOTS.search(line))]
    if not found:
        return "snapshots: no line about a costly one"
    taken, cpu_s = int(found[-1][1]), float(found[-1][2])
    costly = sorted(float(m[1]) for line in instance.output if (m := COST.search(line)))
    return (f"snapshots on {name} over the fill and the acks ({seconds:.0f} s): "
            f"{taken} taken, {cpu_s:.2f} s of CPU on its loop, {cpu_s / seconds * 60:.2f} s a "
            f"minute ({cpu_s / seconds:.1%}); the {len(costly)} over 0.1 s: median "
            f"{percentile(costly, 0.5):.3f} s, max {costly[-1]:.3f} s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parts = ["throughput", "restart"]
    parser.add_argument("--only", nargs="*", choices=parts, default=parts)
    parser.add_argument("--messages", type=int, default=None, help="throughput messages")
    parser.add_argument("--queued", type=int, default=None, help="restart messages")
    parser.add_argument("--rounds", type=int, default=1, help="restart rounds")
    args = parser.parse_args()
    total = args.messages or (20_000 if args.quick else 100_000)
    queued = args.queued or (100_000 if args.quick else 1_000_000)
    seconds = 5.0 if args.quick else 12.0
    if "throughput" in args.only:
        throughput(total, seconds)
    if "restart" in args.only:
        print(f"restart: {queued:,} queued messages of 100 B", flush=True)
        # As an installed broker has: bytecode for every module (else each restart compiles them).
        # The replication package too: without it every replicated restart compiled it.
        root = Path(__file__).resolve().parent.parent
        for package in ("amps", "replication"):
            compileall.compile_dir(root / package, quiet=1)
        for round_ in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"restart round {round_} of {args.rounds}", flush=True)
            with part("restart, one instance"):
                restart_single(queued)
            with part("restart, replicated"):
                restart_replicated(queued)


def throughput(total: int, seconds: float) -> None:
    """Parts 1-4."""
    print(f"bench_replicated_queues: {total:,} messages of 1 KB per run", flush=True)
    reference = reference_cpu = 0.0
    with part("single instance"), queue_instance("rq-single") as single:
        took, got = run(
            single.address, [single.address] * 4, single.admin_port, total, None, [single]
        )
        reference = total / took
        reference_cpu = sum(got["cpu"]["instances"])
        print(f"1. one instance, 4 consumers: {rate(total, took)} (the reference)", flush=True)
        print(f"   {cpu_line(got, ['single'], total)}", flush=True)
    with part("replicated"), replicated_pair() as pair:
        a, b = pair["a"], pair["b"]
        took, got = run(a.address, [a.address] * 4, a.admin_port, total, None, [a, b])
        print(f"2. sync peer, 4 consumers on the owner: {rate(total, took)}, "
              f"{total / took / reference:.2f}x the single instance", flush=True)  # fmt: skip
        pair_cpu = sum(got["cpu"]["instances"])
        print(f"   {cpu_line(got, ['a', 'b'], total)}; the pair's CPU "
              f"{pair_cpu / reference_cpu:.2f}x the single instance's", flush=True)  # fmt: skip
        took, got = run(a.address, [a.address] * 2 + [b.address] * 2, a.admin_port, total, None)
        local = got["c0"]["count"] + got["c1"]["count"]
        print(f"3. 2 consumers on the owner, 2 on the peer: {rate(total, took)} "
              f"({total / took / reference:.2f}x), {local / total:.1%} served by the owner",
              flush=True)  # fmt: skip
        took, _ = run(a.address, [b.address] * 4, a.admin_port, total, None)
        print(f"4. 4 consumers on the peer only (every message transferred): "
              f"{rate(total, took)} ({total / took / reference:.2f}x)", flush=True)  # fmt: skip
        paced = int(1_000 * (seconds + 1))
        started = time.monotonic()
        _, got = run(a.address, [b.address] * 4, a.admin_port, paced, 1_000.0)
        latencies = sorted(x for i in range(4) for x in got[f"c{i}"]["latencies"])
        p50, p99 = (percentile(latencies, f) * 1000 for f in (0.5, 0.99))
        print(f"   at 1,000 msg/s, publish -> delivery of a transferred message: p50 {p50:.1f} "
              f"ms, p99 {p99:.1f} ms ({len(latencies):,} messages, "
              f"{time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
        stats = queue_stats(b.admin_port)
        print(f"   b: transfer latency estimate {stats['transfer_latency_seconds'] * 1000:.0f} ms "
              f"(R4: how long a message waits before b asks), requests sent "
              f"{stats['transfer_requests_sent']:,}, unanswered "
              f"{stats['transfer_requests_unanswered']:,} (all parts)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
