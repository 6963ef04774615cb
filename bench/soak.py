"""A steady-state soak through a queue (issue 11 item 8): does anything grow with the messages
that passed rather than with the messages still held? Prints, asserts nothing.

`.venv/bin/python -m bench.soak [--rate N] [--size B] [--seconds S] [--remove-journals AGE]
[--actions FILE] [--journal-size SIZE]`

One publisher process sends `--size`-byte JSON messages at `--rate` per second to `orders`, the
underlying topic of the built-in default queue `work` (LeasePeriod 30s, backlog 100); one
consumer process acks every message (the client batches acks), so the queue depth stays near
0. Every `--sample-s` seconds the instance's RSS (/proc/<pid>/status VmRSS), the bytes in its
journal directory and the queue's acked count are sampled. After a warm-up (`--warmup-messages`
acked: the 32 MiB record cache fills in ~110,000 100-byte messages) a least-squares line
through the samples gives the slopes per million acked messages: a bounded instance shows an
RSS slope near 0, and a journal slope near 0 once journals are removed (`--remove-journals
AGE` adds `amps-action-do-remove-journal` with that Age under a 1 s `amps-action-on-schedule`;
`--actions FILE` adds any `<Actions>` element instead). Without removal the journal grows with
every message, as the log is the truth until something removes it.

The issue's figures: 10 minutes at 5,000 msg/s of 100 B (`--seconds 600`): RSS 93 -> 116 MB,
~8 bytes per message (a queue's fresh list kept each delivered txid: fixed), and the journal
56 MB a minute with nothing that removes journals. `make bench` runs 60 s.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from amps.client import Client
from bench.bench_queues import payload, pid_of, queue_stats, status_kib
from tests.harness.instance import InstanceProcess, config_xml

TOPIC = "orders"
QUEUE = "work"
DEFAULT_QUEUE = (
    "<SOW><Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>orders</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue></SOW>"
)
SPAWN = multiprocessing.get_context("spawn")


def removal_actions(age: str) -> str:
    """Remove journals at least `age` old, checked every second (never what a queue needs)."""
    return (
        "<Actions><Action>"
        "<On><Module>amps-action-on-schedule</Module><Options><Every>1s</Every></Options></On>"
        "<Do><Module>amps-action-do-remove-journal</Module>"
        f"<Options><Age>{age}</Age></Options></Do>"
        "</Action></Actions>"
    )


async def _publish(address: str, rate: float, size: int, seconds: float, stop: Any) -> int:
    """Paced publishes until `seconds` pass; returns how many (all persisted)."""
    messages = [payload(size, i) for i in range(256)]
    async with Client("soak-pub") as client:
        await client.connect(address, timeout_s=30)
        started = time.monotonic()
        sent = 0
        while not stop.is_set():
            elapsed = time.monotonic() - started
            if elapsed >= seconds:
                break
            due = int(elapsed * rate) + 1
            while sent < due:
                await client.publish(TOPIC, messages[sent & 255])
                sent += 1
            await asyncio.sleep(0.002)
        await client.flush(timeout_s=120)
    return sent


async def _consume(address: str, stop: Any) -> int:
    """Ack every message of the queue until told to stop; returns how many."""
    got = 0
    async with Client("soak-con") as client:
        await client.connect(address, timeout_s=30)
        subscription = await client.subscribe(QUEUE, max_backlog=100)
        while not stop.is_set():
            try:
                message = await asyncio.wait_for(subscription.get(), 0.5)
            except TimeoutError:
                continue
            if message is None:
                raise RuntimeError("the queue subscription ended before the soak did")
            await message.ack()
            got += 1
        await client.flush_acks()
    return got


def _worker(kind: str, args: tuple[Any, ...], results: Any) -> None:
    runner = _publish if kind == "publisher" else _consume
    results.put((kind, asyncio.run(runner(*args))))


def journal_bytes(directory: Path) -> int:
    """Bytes of every file under the journal directory (segments, summaries, queues.db)."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if not spread:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def soak(args: argparse.Namespace) -> None:
    actions = ""
    if args.actions:
        actions = Path(args.actions).read_text()
    elif args.remove_journals:
        actions = removal_actions(args.remove_journals)
    workdir = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    text = config_xml(name="soak", journal_size=args.journal_size, extra=DEFAULT_QUEUE + actions)
    instance = InstanceProcess(workdir, text)
    results: Any = SPAWN.Queue()
    stop = SPAWN.Event()
    children = []
    samples: list[tuple[float, int, int, int, int]] = []  # (t, acked, rss, journal, depth)
    try:
        instance.start(timeout_s=120)
        pid = pid_of(instance)
        journal = workdir / "journal"
        for kind, child_args in (
            ("consumer", (instance.address, stop)),
            ("publisher", (instance.address, args.rate, args.size, args.seconds, stop)),
        ):
            child = SPAWN.Process(target=_worker, args=(kind, child_args, results), daemon=True)
            child.start()
            children.append(child)
        started = time.monotonic()
        deadline = started + args.seconds
        while time.monotonic() < deadline:
            time.sleep(args.sample_s)
            stats = queue_stats(instance.admin_port)
            samples.append((
                time.monotonic() - started, stats["acked_count"],
                status_kib(pid)["VmRSS"] * 1024, journal_bytes(journal), stats["queue_depth"],
            ))  # fmt: skip
        published = results.get(timeout=180)
        stop.set()
        consumed = results.get(timeout=60)
        counts = dict([published, consumed])
    finally:
        stop.set()
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
        instance.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    report(args, samples, counts)


def report(
    args: argparse.Namespace,
    samples: list[tuple[float, int, int, int, int]],
    counts: dict[str, int],
) -> None:
    steady = [s for s in samples if s[1] >= args.warmup_messages]
    if len(steady) < 3:
        print(f"soak: only {len(steady)} samples after the warm-up; run longer", flush=True)
        print(f"  samples (s, acked, RSS, journal, depth): {samples}", flush=True)
        return
    acked = steady[-1][1] - steady[0][1]
    elapsed = steady[-1][0] - steady[0][0]
    rss = slope([(s[1] / 1e6, s[2] / 1e6) for s in steady])
    disk = slope([(s[1] / 1e6, s[3] / 1e6) for s in steady])
    removal = (
        f"actions from {args.actions}" if args.actions
        else f"journals removed at Age {args.remove_journals}" if args.remove_journals
        else "no journal removal"
    )  # fmt: skip
    print(
        f"soak, {args.rate:,.0f} msg/s x {args.size} B for {args.seconds:.0f} s through queue "
        f"{QUEUE!r} ({removal}; JournalSize {args.journal_size}): published "
        f"{counts.get('publisher', 0):,}, acked {counts.get('consumer', 0):,}; max depth "
        f"{max(s[4] for s in samples):,}",
        flush=True,
    )
    print(
        f"  after {args.warmup_messages:,} warm-up messages, {acked:,} acked in {elapsed:.0f} s: "
        f"RSS {steady[0][2] / 1e6:.1f} -> {steady[-1][2] / 1e6:.1f} MB, slope "
        f"{rss:+.2f} MB per million messages ({rss:+.2f} bytes/message); journal "
        f"{steady[0][3] / 1e6:.1f} -> {steady[-1][3] / 1e6:.1f} MB, slope {disk:+.1f} MB per "
        f"million messages",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=5_000.0, help="messages per second")
    parser.add_argument("--size", type=int, default=100, help="message bytes")
    parser.add_argument("--seconds", type=float, default=60.0, help="duration (issue: 600)")
    parser.add_argument("--sample-s", type=float, default=2.0, help="seconds between samples")
    parser.add_argument(
        "--warmup-messages", type=int, default=150_000, help="acked before the fit starts"
    )
    parser.add_argument("--journal-size", default="16MB", help="JournalSize (segment size)")
    parser.add_argument("--remove-journals", metavar="AGE", help="remove journals this old")
    parser.add_argument("--actions", metavar="FILE", help="an <Actions> element to add")
    soak(parser.parse_args())


if __name__ == "__main__":
    main()
