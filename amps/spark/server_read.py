"""Reading a running instance or cluster into Arrow batches, by origin instance.

The `server` option lists the instances of one deployment (a single instance, or a replicated
cluster): every read connects to the first that answers. A position is per *origin* instance:
for each origin, the origin txid of the last of its publishes read. Replicated records keep
their origin and origin txid on every instance, and each instance holds each origin's records
in origin order, so a range of positions is the same rows whoever serves it: a stream that
fails over to another instance resumes where it was, and a batch Spark re-runs reads the same
rows from any instance.

Planning asks an instance for positions with a `positions_only` subscription (it delivers
nothing; its completed ack names each origin's position, which the instance keeps in memory:
amps.server.positions). A piece replays one origin's
records (`only_origin`) in a range of positions, each delivery naming its origin (`origin`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from amps.client import Client, Message, Subscription
from amps.errors import InvalidOptions
from amps.spark.options import ReadOptions
from amps.spark.rows import messages_batch

BATCH_MESSAGES = 8192
CONNECT_TIMEOUT_S = 30.0
# A replay delivers without pause; a gap this long before its `completed` ack means trouble.
IDLE_TIMEOUT_S = 120.0
# An instance behind the positions a piece must reach (an asynchronous replica after a
# failover) is asked again until it has them, for this long at most.
CATCH_UP_TIMEOUT_S = 60.0
POLL_S = 0.05
ALL_TOPICS = ".*"
EPOCH = "0"


@dataclass(frozen=True)
class Positions:
    """Per origin instance, the origin txid of the last publish read; and the instance
    (address) they were taken on with its own txid they go through (a shortcut for reading
    on from there: another instance replays from `EPOCH` and keeps what lies after them)."""

    origins: Mapping[str, int] = field(default_factory=dict)
    server: str = ""
    txid: int = 0

    def offset(self) -> dict[str, Any]:
        """As a Spark offset (JSON)."""
        return {"origins": dict(sorted(self.origins.items())), "server": self.server,
                "txid": self.txid}  # fmt: skip

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any]) -> Positions:
        """From a Spark offset; an offset of another form (an older checkpoint) is refused."""
        try:
            origins = {str(k): int(v) for k, v in offset["origins"].items()}
            return cls(origins, str(offset["server"]), int(offset["txid"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InvalidOptions(
                f"stream offset {dict(offset)!r} is not per origin instance (a checkpoint of an "
                "older version): start the query with a new checkpointLocation"
            ) from None

    def after(self, other: Mapping[str, int]) -> Positions:
        """These positions moved on to `other`'s where it is further."""
        merged = dict(self.origins)
        for origin, txid in other.items():
            merged[origin] = max(merged.get(origin, 0), txid)
        return Positions(merged, self.server, self.txid)


@dataclass(frozen=True)
class ServerPiece:
    """What one task reads: `origin`'s publishes after `start` through `end`, from the first
    of `servers` that answers; `bookmark` is where a replay starts on an instance without the
    shortcut (the `from` option; EPOCH for streams)."""

    servers: tuple[str, ...]
    origin: str
    start: Positions
    end: Positions
    bookmark: str = EPOCH


def _client(purpose: str) -> Client:
    # A fresh name each time: readers publish nothing, so no sequence numbers are at stake.
    # No reconnect: a read cut short fails its task, and Spark's retry reads the same range.
    return Client(f"spark-{purpose}-{uuid.uuid4().hex[:12]}", reconnect=False)


def _replay_options(server: str, since: Positions, *extra: str) -> tuple[str, str]:
    """(bookmark, options) of a replay after `since` on `server`."""
    options = ["origin", *extra]
    if since.server == server and since.txid:
        options.append(f"after_txid={since.txid}")
    return EPOCH, ",".join(options)


async def _probe(
    servers: tuple[str, ...], topic: str, since: Positions, bookmark: str
) -> Positions:
    client = _client("probe")
    try:
        await client.connect(list(servers), timeout_s=CONNECT_TIMEOUT_S)
        server = client.statistics().connected_server or servers[0]
        start, options = _replay_options(server, since, "positions_only")
        if bookmark != EPOCH and not since.server:
            start = bookmark
        sub = await client.subscribe(topic or ALL_TOPICS, bookmark=start, options=options)
        await sub.wait_completed(IDLE_TIMEOUT_S)
        moved = since.after(sub.origins)
        return Positions(moved.origins, server, sub.replayed_txid)
    finally:
        await client.close()


def probe(
    servers: tuple[str, ...], topic: str, since: Positions, bookmark: str = EPOCH
) -> Positions:
    """Where every origin stands now on the first instance of `servers` that answers, read on
    from `since` (from `bookmark` when `since` names no instance)."""
    return asyncio.run(_probe(servers, topic, since, bookmark))


def pieces(
    servers: tuple[str, ...], start: Positions, end: Positions, bookmark: str = EPOCH
) -> list[ServerPiece]:
    """One piece per origin with publishes after `start` through `end`."""
    return [
        ServerPiece(servers, origin, start, end, bookmark)
        for origin, txid in sorted(end.origins.items())
        if txid > start.origins.get(origin, 0)
    ]


def plan(servers: tuple[str, ...], options: ReadOptions) -> list[ServerPiece]:
    """A batch read: from the `from` spec through each origin's position now."""
    if not servers:
        raise InvalidOptions("option server: no host:port given")
    if options.end:
        raise InvalidOptions("option to: supported for journal reads only (load(path))")
    bookmark = options.start or EPOCH
    end = probe(servers, options.topic, Positions(), bookmark)
    return pieces(servers, Positions(), end, bookmark)


async def _replayed(sub: Subscription) -> tuple[list[Message], bool]:
    """Up to BATCH_MESSAGES replayed messages, and whether the replay ended."""
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
        if done and message.txid > sub.replayed_txid:
            return batch, True  # live after the replay: not ours
        batch.append(message)
    return batch, False


def read(piece: ServerPiece, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The piece's rows in origin order, as batches of at most BATCH_MESSAGES rows.

    One event loop per task, run once per batch: no thread hop per message.
    """
    low = piece.start.origins.get(piece.origin, 0)
    high = piece.end.origins.get(piece.origin, 0)
    if high <= low:
        return
    loop = asyncio.new_event_loop()
    client = _client("read")
    try:
        loop.run_until_complete(client.connect(list(piece.servers), timeout_s=CONNECT_TIMEOUT_S))
        server = client.statistics().connected_server or piece.servers[0]
        since = piece.start
        deadline = loop.time() + CATCH_UP_TIMEOUT_S
        reached = low
        while reached < high:
            bookmark, replay = _replay_options(server, since, f"only_origin={piece.origin}")
            if not since.server and piece.bookmark != EPOCH:
                bookmark = piece.bookmark
            sub = loop.run_until_complete(
                client.subscribe(
                    options.topic or ALL_TOPICS, bookmark=bookmark,
                    filter=options.filter or None, options=replay,
                )
            )  # fmt: skip
            ended = False
            while not ended:
                messages, ended = loop.run_until_complete(_replayed(sub))
                kept = [m for m in messages if reached < m.origin_txid <= high]
                if kept:
                    reached = kept[-1].origin_txid
                    yield messages_batch(kept)
            reached = max(reached, min(high, sub.origins.get(piece.origin, 0)))
            loop.run_until_complete(client.unsubscribe(sub.sub_id))
            if reached < high:
                # This instance is behind the range (a replica after a failover): ask again
                # from where it got to, until it has caught up.
                if loop.time() > deadline:
                    raise TimeoutError(
                        f"{server} holds {piece.origin}'s publishes through origin txid "
                        f"{reached}, not {high}, after {CATCH_UP_TIMEOUT_S} s"
                    )
                since = Positions({piece.origin: reached}, server, sub.replayed_txid)
                loop.run_until_complete(asyncio.sleep(POLL_S * 10))
    finally:
        loop.run_until_complete(client.close())
        loop.close()
