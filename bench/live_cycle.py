"""The live replication path's own CPU per batch, in one process (issue 8): two real instances
and their replicators in one event loop, a sync link a -> b over an in-memory stream that
carries each frame as gRPC would (serialised, then decoded by the link's own deserializer).
Each cycle: a appends `per_batch` publishes, commits them, its link sends one batch, b appends
and commits it and acknowledges, a reads the ack. Process CPU per cycle (both instances, their
journals' writer threads), best of `rounds`: what our code costs per batch without gRPC and
without the neighbours' share of the machine, so two trees can be compared on a shared one.

`.venv/bin/python -m bench.bench_replication --only cycle [--rounds N]` (journals in TMPDIR).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path

from replication.link_core import LinkCore
from tests.harness.memory_link import linked_pair


def acked_through(core: LinkCore, txid: int) -> bool:
    """Whether the link has the peer's ack of everything through `txid`."""
    return core.acked_through_txid >= txid


async def _cycles(root: Path, cycles: int, per_batch: int, rounds: int) -> float:
    """CPU seconds per cycle, best of `rounds`."""
    payload = b'{"pad":"' + b"x" * 1000 + b'"}'
    async with linked_pair(root, sync=True) as pair:
        a, core = pair.a, pair.core
        pair.a_end.keep_written = pair.b_end.keep_written = False
        best = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(cycles):
                for _ in range(per_batch):
                    a.publish_internal("orders", payload)
                target = a.journal.last_txid
                await pair.until(partial(acked_through, core, target), "the ack")
            best = min(best, time.process_time() - started)
        return best / cycles


def live_cycle(cycles: int = 2000, per_batch: int = 5, rounds: int = 3) -> None:
    """Print the live path's CPU per batch and per message, in one process."""
    root = Path(tempfile.mkdtemp(prefix="bench-cycle-"))
    try:
        per_cycle_s = asyncio.run(_cycles(root, cycles, per_batch, rounds))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"live path in one process (a -> b, sync, in-memory stream, {per_batch} x 1 KB per "
        f"batch, {cycles:,} batches, best of {rounds}): CPU {per_cycle_s * 1e6:.0f} us per "
        f"batch, {per_cycle_s * 1e6 / per_batch:.1f} us per message (both instances, no gRPC)",
        flush=True,
    )
