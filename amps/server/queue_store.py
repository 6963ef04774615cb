"""The queue state store (AMPS `queues.ack`): recovery points and compact snapshots in SQLite.

The log stays the truth: a snapshot only lets a restart skip replaying the log behind the oldest
unacknowledged message (Q16, beyond AMPS). A snapshot is written only after everything it reflects
is durable in the journal, so it never claims more than the log can back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

log = logging.getLogger("amps.queue_store")

# The store's file name beside the journal segments (AMPS calls it queues.ack).
STORE_FILE_NAME = "queues.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS queue_state (
    queue TEXT PRIMARY KEY,
    recovery_point_setting TEXT NOT NULL,
    low_water_txid INTEGER NOT NULL,
    snapshot BLOB,
    snapshot_txid INTEGER NOT NULL DEFAULT 0,
    updated_wall_us INTEGER NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class StoredQueue:
    """What the store remembers of one queue."""

    recovery_point_setting: str
    low_water_txid: int
    snapshot: bytes | None
    snapshot_txid: int


LOAD_QUERY = (
    "SELECT queue, recovery_point_setting, low_water_txid, snapshot, snapshot_txid FROM queue_state"
)
# What changes with every save: a prefetched load is used only if this still reads the same.
VERSION_QUERY = "SELECT queue, low_water_txid, snapshot_txid, updated_wall_us FROM queue_state"

_Rows = list[tuple[Any, ...]]
_Prefetched = tuple[sqlite3.Connection, _Rows, _Rows]
_prefetches: dict[str, concurrent.futures.Future[_Prefetched]] = {}


def _connect(path: Path) -> sqlite3.Connection:
    # No statement cache: a cached INSERT keeps its last parameters bound, so SQLite would
    # hold a copy of the last snapshot (the size of the queue) in memory until the next one.
    # A few statements every few seconds gain nothing from caching. The connection moves from
    # the thread that opens it to aiosqlite's thread (one thread at a time uses it).
    connection = sqlite3.connect(path, cached_statements=0, check_same_thread=False)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute(SCHEMA)
        connection.commit()
    except BaseException:
        connection.close()
        raise
    return connection


def _key(path: Path) -> str:
    return os.path.abspath(path)


def prefetch(path: Path) -> None:
    """Open the store and read it in a thread now, while the instance imports its modules and
    recovers its journal (SQLite reads without holding the GIL); `QueueStore.open` and `load`
    then take what was read, unless the store changed since. Does nothing if the file is
    absent (a first start has nothing to read) or a prefetch of it is already under way."""
    key = _key(path)
    if key in _prefetches or not os.path.exists(key):
        return
    future: concurrent.futures.Future[_Prefetched] = concurrent.futures.Future()

    def read() -> None:
        try:
            connection = _connect(Path(key))
            try:
                rows = connection.execute(LOAD_QUERY).fetchall()
                versions = connection.execute(VERSION_QUERY).fetchall()
            except BaseException:
                connection.close()
                raise
        except BaseException as exc:  # reported to open(), which opens again as usual
            future.set_exception(exc)
        else:
            future.set_result((connection, rows, versions))

    _prefetches[key] = future
    threading.Thread(target=read, name="queue-store-prefetch", daemon=True).start()


def set_aside(path: Path, wall_us: int) -> Path:
    """Rename an unreadable store (and its WAL files) out of the way; the new name."""
    aside = path.with_name(f"{path.name}.damaged-{wall_us // 1_000_000}")
    for suffix in ("", "-wal", "-shm"):
        source = path.with_name(path.name + suffix)
        if source.exists():
            source.replace(aside.with_name(aside.name + suffix))
    return aside


class QueueStore:
    """One SQLite file beside the journal segments."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._db = connection
        self._prefetched: _Rows | None = None

    @classmethod
    async def open(cls, path: Path) -> QueueStore:
        future = _prefetches.pop(_key(path), None)
        if future is not None:
            store = await cls._from_prefetch(future)
            if store is not None:
                return store

        # Opened before aiosqlite sees it: when aiosqlite's own connect fails, its thread
        # reports its stop to the event loop later, possibly after that loop has closed.
        connection = await asyncio.to_thread(_connect, path)
        return cls(await aiosqlite.Connection(lambda: connection, iter_chunk_size=64))

    @classmethod
    async def _from_prefetch(
        cls, future: concurrent.futures.Future[_Prefetched]
    ) -> QueueStore | None:
        try:
            connection, rows, versions = await asyncio.wrap_future(future)
        except Exception as exc:
            log.debug("queue store prefetch failed (%s); opening it again", exc)
            return None
        store = cls(await aiosqlite.Connection(lambda: connection, iter_chunk_size=64))
        # Nothing else writes the store while this instance holds the journal lock, but the
        # prefetch began before that lock was taken: use it only if no save came in between.
        if [tuple(row) for row in await store._db.execute_fetchall(VERSION_QUERY)] == versions:
            store._prefetched = rows
        return store

    async def load(self) -> dict[str, StoredQueue]:
        rows: Iterable[Any] | None = self._prefetched
        self._prefetched = None
        if rows is None:
            rows = await self._db.execute_fetchall(LOAD_QUERY)
        return {row[0]: StoredQueue(row[1], row[2], row[3], row[4]) for row in rows}

    async def save(
        self,
        queue: str,
        setting: str,
        low_water_txid: int,
        snapshot: bytes | None,
        snapshot_txid: int,
        wall_us: int,
    ) -> None:
        await self._db.execute(
            "INSERT INTO queue_state VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(queue) DO UPDATE SET"
            " recovery_point_setting=excluded.recovery_point_setting,"
            " low_water_txid=excluded.low_water_txid, snapshot=excluded.snapshot,"
            " snapshot_txid=excluded.snapshot_txid, updated_wall_us=excluded.updated_wall_us",
            (queue, setting, low_water_txid, snapshot, snapshot_txid, wall_us),
        )
        await self._db.commit()

    async def save_low_water(
        self, queue: str, setting: str, low_water_txid: int, wall_us: int
    ) -> None:
        """Move the recovery point only; a stored snapshot stays as it is."""
        await self._db.execute(
            "INSERT INTO queue_state (queue, recovery_point_setting, low_water_txid,"
            " snapshot, snapshot_txid, updated_wall_us) VALUES (?, ?, ?, NULL, 0, ?)"
            " ON CONFLICT(queue) DO UPDATE SET"
            " recovery_point_setting=excluded.recovery_point_setting,"
            " low_water_txid=excluded.low_water_txid, updated_wall_us=excluded.updated_wall_us",
            (queue, setting, low_water_txid, wall_us),
        )
        await self._db.commit()

    async def close(self) -> None:
        await self._db.close()
