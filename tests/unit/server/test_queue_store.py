"""The queue store's prefetch: read in a thread at start, used only while it is still current."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from amps.server import queue_store
from amps.server.queue_store import QueueStore, prefetch


async def saved_store(path: Path, *snapshots: tuple[str, bytes]) -> None:
    store = await QueueStore.open(path)
    for wall_us, (queue, snapshot) in enumerate(snapshots, 1):
        await store.save(queue, "epoch", 10, snapshot, 20, wall_us)
    await store.close()


async def test_prefetched_load_equals_a_plain_load(tmp_path: Path) -> None:
    path = tmp_path / "queues.db"
    await saved_store(path, ("a", b"snapshot-a"), ("b", b"snapshot-b"))
    plain = await QueueStore.open(path)
    expected = await plain.load()
    await plain.close()

    prefetch(path)
    store = await QueueStore.open(path)
    assert store._prefetched is not None
    assert await store.load() == expected
    assert await store.load() == expected  # read again from the file the second time
    await store.close()
    assert not queue_store._prefetches


async def test_a_save_after_the_prefetch_is_not_missed(tmp_path: Path) -> None:
    path = tmp_path / "queues.db"
    await saved_store(path, ("a", b"old"))
    prefetch(path)
    # Wait for the prefetch to finish, then change the store behind it (as a process that
    # held the journal before this one could have, between the prefetch and the journal lock).
    await asyncio.wrap_future(queue_store._prefetches[str(path)])
    with contextlib.closing(sqlite3.connect(path)) as other:
        other.execute(
            "UPDATE queue_state SET low_water_txid = 11, snapshot = ?, updated_wall_us = 999",
            (b"new",),
        )
        other.commit()

    store = await QueueStore.open(path)
    loaded = await store.load()
    assert loaded["a"].snapshot == b"new"
    assert loaded["a"].low_water_txid == 11
    await store.close()


async def test_no_prefetch_without_a_file(tmp_path: Path) -> None:
    path = tmp_path / "queues.db"
    prefetch(path)
    assert not queue_store._prefetches
    store = await QueueStore.open(path)
    assert await store.load() == {}
    await store.close()


async def test_a_failed_prefetch_opens_as_usual(tmp_path: Path) -> None:
    path = tmp_path / "queues.db"
    path.write_bytes(b"not a database" * 100)
    prefetch(path)
    with pytest.raises(Exception, match="not a database"):
        await QueueStore.open(path)
    assert not queue_store._prefetches
