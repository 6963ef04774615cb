"""A full-rate batch of kept frames is joined on the links' encoder thread, where CPython's
bytes.join copies without the GIL, and reaches the peer whole and in order with the batches
before and after it (issue 8, R1); any other batch is joined on the loop as before."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from amps.log import codec
from amps.log.journal import Journal
from amps.log.received import ChosenFrames, scan
from replication.convert import encode_batch
from replication.frames import Batch
from replication.link import JOIN_OFF_LOOP_BYTES, KEPT_FRAMES_BYTES, encoded
from tests.harness.memory_link import linked_pair

PAYLOAD = b'{"pad":"' + b"x" * 1000 + b'"}'
# Enough 1 KB publishes for one batch of at least JOIN_OFF_LOOP_BYTES (a read is at most 1000).
FULL_BATCH = JOIN_OFF_LOOP_BYTES // len(PAYLOAD) + 30


async def _committed(journal: Journal, count: int) -> Batch:
    records = tuple(
        journal.append_client_publish("orders", PAYLOAD, 7, seq, 1) for seq in range(1, count + 1)
    )
    await journal.commit()
    return Batch(1, records[-1].txid, records)


async def test_a_full_batch_of_kept_frames_is_joined_off_the_loop(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "j", instance_name="a", group="a")
    journal.keep_frames(KEPT_FRAMES_BYTES)
    try:
        with ThreadPoolExecutor(1) as encoder:
            batch = await _committed(journal, FULL_BATCH)
            pending = encoded(batch, (journal.frames,), encoder)
            assert isinstance(pending, asyncio.Future)
            joined = await pending
            assert len(joined) >= JOIN_OFF_LOOP_BYTES
            assert joined == encode_batch(batch, journal.frames) == encode_batch(batch)
            small = Batch(2, batch.records[9].txid, batch.records[:10])
            assert encoded(small, (journal.frames,), encoder) == encode_batch(small)
    finally:
        await journal.close()


async def test_a_batch_of_views_of_a_read_is_joined_on_the_loop(tmp_path: Path) -> None:
    # A catch-up's batch ships views of what it read: a join with them holds the GIL anywhere.
    journal = Journal.open(tmp_path / "j", instance_name="a", group="a")
    try:
        batch = await _committed(journal, FULL_BATCH)
        data = b"".join(codec.encode(record) for record in batch.records)
        frames = scan(data)
        chosen = Batch(1, batch.through_txid, ChosenFrames(frames, range(len(frames)), {}))
        with ThreadPoolExecutor(1) as encoder:
            joined = encoded(chosen, (), encoder)
        assert isinstance(joined, bytes)
        assert len(joined) >= JOIN_OFF_LOOP_BYTES
        assert joined == encode_batch(batch)
    finally:
        await journal.close()


async def test_batches_joined_off_the_loop_reach_the_peer_in_order(tmp_path: Path) -> None:
    async with linked_pair(tmp_path, sync=False) as pair:
        a, b, a_end = pair.a, pair.b, pair.a_end
        before = set(threading.enumerate())  # the encoder thread starts at its first batch
        total = 0
        for count in (FULL_BATCH, 3, FULL_BATCH, 1):  # full batches between small ones
            for _ in range(count):
                a.publish_internal("orders", PAYLOAD)
            total += count
        await pair.until(lambda: b.journal.durable_txid >= total, "every record on b")
        sent = [f for f in a_end.written if isinstance(f, Batch)]
        assert [len(f.records) for f in sent if len(f.records) >= 1000], "no full batch"
        throughs = [f.through_txid for f in sent]
        assert throughs == sorted(throughs)
        assert throughs[-1] == total
        assert [r.origin_txid for r in b.journal.read(1, total)] == list(range(1, total + 1))
        started = set(threading.enumerate()) - before
        assert any(t.name.startswith("link-encoder") for t in started), started
