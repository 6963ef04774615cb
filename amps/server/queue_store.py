"""The queue state store (AMPS `queues.ack`): recovery points and compact snapshots in SQLite.

The log stays the truth: a snapshot only lets a restart skip replaying the log behind the oldest
unacknowledged message (Q16, beyond AMPS). A snapshot is written only after everything it reflects
is durable in the journal, so it never claims more than the log can back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aiosqlite

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


class QueueStore:
    """One SQLite file beside the journal segments."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._db = connection

    @classmethod
    async def open(cls, path: Path) -> QueueStore:
        # No statement cache: a cached INSERT keeps its last parameters bound, so SQLite would
        # hold a copy of the last snapshot (the size of the queue) in memory until the next one.
        # A few statements every few seconds gain nothing from caching.
        connection = await aiosqlite.connect(path, cached_statements=0)
        await connection.execute("PRAGMA journal_mode=WAL")
        await connection.execute("PRAGMA synchronous=FULL")
        await connection.execute(SCHEMA)
        await connection.commit()
        return cls(connection)

    async def load(self) -> dict[str, StoredQueue]:
        rows = await self._db.execute_fetchall(
            "SELECT queue, recovery_point_setting, low_water_txid, snapshot, snapshot_txid"
            " FROM queue_state"
        )
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
