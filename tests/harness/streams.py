"""Reading subscriptions in tests: bounded in count and in time."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from amps.client import Client, Message

TIMEOUT_S = 30.0


async def take(subscription: Any, count: int, timeout_s: float = TIMEOUT_S) -> list[Message]:
    """The next `count` messages of a subscription; TimeoutError if they do not all come."""
    out: list[Message] = []

    async def run() -> None:
        async for message in subscription:
            out.append(message)
            if len(out) >= count:
                return

    await asyncio.wait_for(run(), timeout_s)
    return out


async def more_within(subscription: Any, quiet_s: float) -> list[Message]:
    """Whatever else arrives within quiet_s (an extra message would be a duplicate)."""
    extra: list[Message] = []

    async def run() -> None:
        # Appended one by one: the wait is cut by a timeout, and what came before must stay.
        async for message in subscription:
            extra.append(message)  # noqa: PERF401

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(run(), quiet_s)
    return extra


async def replay_ids(
    address: str, topic: str, count: int, *, timeout_s: float = 90.0, quiet_s: float = 0.5
) -> list[int]:
    """The `id` of every message an epoch replay of `topic` returns: `count` of them, plus any
    extra that shows up within quiet_s."""
    async with Client(f"replay-check-{topic}") as reader:
        await reader.connect(address)
        subscription = await reader.subscribe(topic, bookmark="epoch")
        messages = await take(subscription, count, timeout_s)
        messages += await more_within(subscription, quiet_s)
    return [message.json()["id"] for message in messages]


async def queue_ids(address: str, queue: str, count: int, *, timeout_s: float = 30.0) -> list[int]:
    """The sorted `id` of the first `count` messages a queue delivers (not acknowledged: the
    subscription asks for a backlog of `count`)."""
    async with Client(f"queue-check-{queue}") as reader:
        await reader.connect(address)
        subscription = await reader.subscribe(queue, max_backlog=count)
        messages = await take(subscription, count, timeout_s)
    return sorted(message.json()["id"] for message in messages)
