"""Client CPU per message against a real instance (issue 4; prints, asserts nothing).

`.venv/bin/python -m bench.bench_client [--messages N] [--rounds R] [--profile FILE]`

Each round, on one instance with queue `work` over `orders`: one publisher publishes N 1 KB JSON
messages and flushes (publisher µs of CPU per message), then one consumer (max_backlog 100,
client-batched acks, as in `bench_queues` end to end) drains and acks all of them with
`sub.get()` (consumer µs of CPU per message), then another drains N more with `async for`. CPU is
`time.process_time()` of this process (client threads included; the instance is another
process), so the figures hold on a busy machine where wall-clock rates do not. The best of the
rounds is printed. `--profile FILE` writes a cProfile of the last `sub.get()` consumer.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import time
from typing import Any

from amps.client import Client
from bench.bench_queues import QUEUE, TOPIC, queue_instance
from bench.common import json_payloads

BACKLOG = 100
TIMEOUT_S = 300.0
# Frames received and sent and acks sent by the last consumer of each mode.
frames: dict[str, tuple[int, int, int]] = {}


async def publish(address: str, name: str, count: int) -> float:
    """Publish `count` messages and flush; return µs of CPU per message."""
    payloads = json_payloads()
    async with Client(name) as client:
        await client.connect(address, timeout_s=30)
        cpu = time.process_time()
        publish = client.publish
        for index in range(count):
            await publish(TOPIC, payloads[index & 255])
        await client.flush(timeout_s=TIMEOUT_S)
        return (time.process_time() - cpu) / count * 1e6


async def consume(address: str, name: str, count: int, mode: str,
                  profile: cProfile.Profile | None = None) -> float:  # fmt: skip
    """Drain and ack `count` messages; return µs of CPU per message."""
    async with Client(name) as client:
        await client.connect(address, timeout_s=30)
        sub = await client.subscribe(QUEUE, max_backlog=BACKLOG)
        got = 0
        if profile is not None:
            profile.enable()
        cpu = time.process_time()
        if mode == "get":
            while got < count:
                message = await sub.get(timeout_s=0.02)
                if message is None:
                    await client.flush_acks()
                    continue
                got += 1
                await message.ack()
        else:
            async for message in sub:
                got += 1
                await message.ack()
                if got >= count:
                    break
        await client.flush_acks()
        spent = time.process_time() - cpu
        if profile is not None:
            profile.disable()
        stats = client.statistics()
        frames[mode] = (stats.frames_received, stats.frames_sent, stats.acks_sent)
        return spent / count * 1e6


def run(count: int, rounds: int, profile_path: str | None) -> None:
    best: dict[str, float] = {}
    with queue_instance("client") as instance:
        address = instance.address
        for round_index in range(rounds):
            figures: dict[str, Any] = {}
            for mode in ("get", "iter"):
                figures[f"publish ({mode} round)"] = asyncio.run(
                    publish(address, f"pub-{round_index}-{mode}", count)
                )
                last = round_index == rounds - 1 and mode == "get"
                profile = cProfile.Profile() if profile_path and last else None
                label = "consume, sub.get() + ack" if mode == "get" else "consume, async for + ack"
                figures[label] = asyncio.run(
                    consume(address, f"con-{round_index}-{mode}", count, mode, profile)
                )
                if profile is not None and profile_path:
                    profile.dump_stats(profile_path)
            print(f"round {round_index + 1}: " + ", ".join(f"{k} {v:.1f} us" for k, v in
                                                          figures.items()), flush=True)  # fmt: skip
            for key, value in figures.items():
                best[key] = min(best.get(key, value), value)
    print(f"best of {rounds}, {count:,} x 1 KB JSON, backlog {BACKLOG}, client CPU per message:")
    for key, value in best.items():
        print(f"  {key}: {value:.1f} us")
    for mode, (received, sent, acks) in frames.items():
        print(f"  last {mode} consumer: {received:,} frames received, {sent:,} sent, {acks:,} acks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", help="write a cProfile of the last sub.get() consumer")
    args = parser.parse_args()
    run(args.messages, args.rounds, args.profile)


if __name__ == "__main__":
    main()
