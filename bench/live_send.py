"""The sender's own per-record costs on the live path, in one process (issue 8): a journal
appends and commits a batch of 1 KB publishes with its frames kept for a link, and without;
then the link's batch of them is encoded as the stream writes it (`encode_batch`, the kept
frames shipped as appended) and the frames sent are dropped. Process CPU per record, best of
`rounds`: what a destination adds to the publishing instance's loop, without gRPC and without
the neighbours' share of the machine, so two trees compare on a shared one.

`.venv/bin/python -m bench.bench_replication --only send [--rounds N]` (journal in TMPDIR).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from amps.log.journal import Journal
from amps.log.records import PublishRecord
from amps.server.app import fix_malloc_mmap_threshold
from replication.convert import encode_batch
from replication.frames import Batch
from replication.link import KEPT_FRAMES_BYTES

BATCH_RECORDS = 950  # a link's batch of 1 KB publishes (1 MiB)
PAYLOAD = b'{"pad":"' + b"x" * 1000 + b'"}'
STEPS = ("append, frames kept", "append, none kept", "encode", "drop")


class _Publisher:
    """Appends batches of publishes of one publisher to a journal and commits them."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.seq = 0

    async def batch(self, keep: bool) -> tuple[list[PublishRecord], float]:
        """A committed batch, and the CPU seconds its appends and the commit's start took."""
        journal = self.journal
        journal.keep_frames(KEPT_FRAMES_BYTES if keep else 0)
        started = time.process_time()
        records = [
            journal.append_client_publish("orders", PAYLOAD, 7, seq, 1)
            for seq in range(self.seq + 1, self.seq + 1 + BATCH_RECORDS)
        ]
        journal.start_commit()  # frames are kept as the commit starts
        seconds = time.process_time() - started
        self.seq += BATCH_RECORDS
        await journal.commit()
        return records, seconds


async def _costs(root: Path, rounds: int) -> dict[str, float]:
    """The best CPU seconds per record of each step over `rounds`."""
    journal = Journal.open(root / "journal", instance_name="a", group="a")
    publisher = _Publisher(journal)
    best = dict.fromkeys(STEPS, float("inf"))
    try:
        for _ in range(rounds):
            _records, seconds = await publisher.batch(keep=False)
            best["append, none kept"] = min(best["append, none kept"], seconds)
            records, seconds = await publisher.batch(keep=True)
            best["append, frames kept"] = min(best["append, frames kept"], seconds)
            batch = Batch(1, records[-1].txid, tuple(records))
            started = time.process_time()
            encode_batch(batch, journal.frames)
            best["encode"] = min(best["encode"], time.process_time() - started)
            started = time.process_time()
            journal.drop_frames_before(batch.through_txid + 1)
            best["drop"] = min(best["drop"], time.process_time() - started)
        return {step: seconds / BATCH_RECORDS for step, seconds in best.items()}
    finally:
        await journal.close()


def sender_costs(rounds: int = 20) -> None:
    """Print the sender's CPU per record on the live path, step by step."""
    fix_malloc_mmap_threshold()
    root = Path(tempfile.mkdtemp(prefix="bench-send-"))
    try:
        costs = asyncio.run(_costs(root, rounds))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"live path's sender in one process ({BATCH_RECORDS} x 1 KB per batch, best of "
        f"{rounds}): CPU per record: "
        + ", ".join(f"{step} {seconds * 1e6:.3f} us" for step, seconds in costs.items()),
        flush=True,
    )
