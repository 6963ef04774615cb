"""A destination acknowledges once per commit: the batches one fsync made durable are covered
by one ack (acks are cumulative), not one gRPC message each (issue 8, R1, L2).

Two real instances and their replicators in one event loop, linked by an in-memory stream
(tests/harness/memory_link.py), so the test decides when the destination reads: two batches
read back to back are appended before its commit callback runs, and one commit makes both
durable.
"""

from __future__ import annotations

from pathlib import Path

from replication.frames import Ack, Batch
from tests.harness.memory_link import linked_pair


async def test_batches_made_durable_by_one_commit_are_acknowledged_once(tmp_path: Path) -> None:
    async with linked_pair(tmp_path, sync=False) as pair:
        a, b, a_end, core = pair.a, pair.b, pair.a_end, pair.core
        a_end.hold = True
        for n in (1, 2):  # two commits on a, two batches, held before b reads them
            a.publish_internal("orders", b'{"n":%d}' % n)
            await pair.until(
                lambda n=n: sum(isinstance(f, Batch) for f in a_end.written) == n,  # type: ignore[misc]
                f"a's batch {n}",
            )
        a_end.release()
        await pair.until(lambda: core.acked_through_txid >= 2, "both batches acknowledged")
        acks = [f for f in pair.b_end.written if isinstance(f, Ack)]
        assert [ack.through_txid for ack in acks] == [2], acks
        assert b.journal.durable_txid == 2
