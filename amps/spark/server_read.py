"""Reading a running instance into Arrow batches: bookmark replay between two log positions.

A position is a txid of the instance read. Planning asks each server where its replay ends now
(a probe subscription from `now`: its `completed` ack names the txid the replay went through).
A piece replays one server's topic from a bookmark spec, after txid `after`, through txid
`through`, over gRPC, so an executor anywhere that reaches the server can read it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from amps.client import Client, Message, Subscription
from amps.errors import InvalidOptions
from amps.spark.options import ReadOptions
from amps.spark.rows import messages_batch

BATCH_MESSAGES = 8192
CONNECT_TIMEOUT_S = 30.0
# A replay delivers without pause; a gap this long before its `completed` ack means trouble.
IDLE_TIMEOUT_S = 120.0
POLL_S = 0.05
ALL_TOPICS = ".*"


@dataclass(frozen=True)
class ServerPiece:
    """What one task replays: `server`'s records after txid `after` through txid `through`."""

    server: str
    after: int
    through: int
    start: str  # the bookmark spec the replay starts from


def _client(purpose: str) -> Client:
    # A fresh name each time: readers publish nothing, so no sequence numbers are at stake.
    return Client(f"spark-{purpose}-{uuid.uuid4().hex[:12]}")


async def _replay_end(server: str, topic: str) -> int:
    client = _client("probe")
    try:
        await client.connect(server, timeout_s=CONNECT_TIMEOUT_S)
        sub = await client.subscribe(topic or ALL_TOPICS, bookmark="0|1|")
        await sub.wait_completed(CONNECT_TIMEOUT_S)
        return sub.replayed_txid
    finally:
        await client.close()


def replay_end(server: str, topic: str) -> int:
    """The txid through which `server` would replay `topic` now (its dispatched end)."""
    return asyncio.run(_replay_end(server, topic))


def plan(servers: tuple[str, ...], options: ReadOptions) -> list[ServerPiece]:
    """One piece per server: from the `from` spec through each one's replay end now."""
    if not servers:
        raise InvalidOptions("option server: no host:port given")
    if options.end:
        raise InvalidOptions("option to: supported for journal reads only (load(path))")
    return [
        ServerPiece(server, 0, replay_end(server, options.topic), options.start or "0")
        for server in servers
    ]


async def _next_batch(sub: Subscription, through: int) -> tuple[list[Message], bool]:
    """Up to BATCH_MESSAGES messages at or below `through`, and whether the replay ended."""
    batch: list[Message] = []
    loop = asyncio.get_running_loop()
    idle_since = 0.0
    while len(batch) < BATCH_MESSAGES:
        # Once the replay completed, every replayed message is already buffered; until then a
        # short wait, so that a replay with nothing (more) to send is noticed by its ack.
        done = sub.completed
        message = await sub.get(0 if done else POLL_S)
        if message is None:
            if done:
                return batch, True
            idle_since = idle_since or loop.time()
            if loop.time() - idle_since > IDLE_TIMEOUT_S:
                raise TimeoutError(f"a replay stalled for {IDLE_TIMEOUT_S} s")
            continue
        idle_since = 0.0
        if message.txid > through:
            return batch, True
        batch.append(message)
    return batch, False


def read(piece: ServerPiece, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The piece's messages in txid order, as batches of at most BATCH_MESSAGES rows.

    One event loop per task, run once per batch: no thread hop per message.
    """
    if piece.through <= piece.after:
        return
    loop = asyncio.new_event_loop()
    client = _client("read")
    try:
        loop.run_until_complete(client.connect(piece.server, timeout_s=CONNECT_TIMEOUT_S))
        sub = loop.run_until_complete(
            client.subscribe(
                options.topic or ALL_TOPICS,
                bookmark=piece.start,
                filter=options.filter or None,
                options=f"after_txid={piece.after}",
            )
        )
        ended = False
        while not ended:
            batch, ended = loop.run_until_complete(_next_batch(sub, piece.through))
            if batch:
                yield messages_batch(batch)
    finally:
        loop.run_until_complete(client.close())
        loop.close()
