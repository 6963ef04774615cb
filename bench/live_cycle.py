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
from pathlib import Path

from amps.config import load_config
from amps.log.journal import Journal
from amps.server.instance import Instance
from replication.convert import decode_link_frame
from replication.link import Outgoing, Replicator, _serialize
from replication.link_core import LinkState

TIMEOUT_S = 30.0


def _config(name: str, destination: str | None) -> str:
    replication = ""
    if destination is not None:
        replication = (
            f"<Replication><Destination><Name>{destination}</Name><SyncType>sync</SyncType>"
            "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>"
            "<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9</InetAddr>"
            "</Transport></Destination></Replication>"
        )
    return f"""<AMPSConfig><Name>{name}</Name>
<Transports>
  <Transport><Name>clients</Name><Type>grpc</Type><InetAddr>0</InetAddr></Transport>
  <Transport><Name>peers</Name><Type>amps-replication</Type><InetAddr>0</InetAddr></Transport>
</Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
{replication}
</AMPSConfig>"""


class _End:
    """One side of an in-memory stream; every read notifies `changed`."""

    def __init__(self, changed: asyncio.Condition) -> None:
        self.changed = changed
        self.inbox: asyncio.Queue[object] = asyncio.Queue()
        self.peer: _End | None = None

    async def read(self) -> object:
        # The reader asks for the next frame once it has handled the one before: now.
        async with self.changed:
            self.changed.notify_all()
        return await self.inbox.get()

    def peer_names(self) -> set[str]:
        return set()

    async def write(self, message: Outgoing) -> None:
        assert self.peer is not None
        self.peer.inbox.put_nowait(decode_link_frame(_serialize(message)))


async def _cycles(root: Path, cycles: int, per_batch: int, rounds: int) -> float:
    """CPU seconds per cycle, best of `rounds`."""
    instances: list[Instance] = []
    replicators: list[Replicator] = []
    for name, destination in (("a", "b"), ("b", None)):
        journal = Journal.open(root / name / "j", instance_name=name, group=name)
        instance = Instance(load_config(_config(name, destination)), journal, lambda _exc: None)
        await instance.start(root / name)
        replicator = Replicator(instance.config, instance, root / name)
        instance.replicator = replicator
        instances.append(instance)
        replicators.append(replicator)
    a, _b = instances
    sender, receiver = replicators
    changed = asyncio.Condition()
    a_end, b_end = _End(changed), _End(changed)
    a_end.peer, b_end.peer = b_end, a_end
    link = asyncio.ensure_future(sender._run(sender.cores["b"], a_end, dialled=True))
    accepted = asyncio.ensure_future(receiver.accept(b_end))
    core = sender.cores["b"]
    payload = b'{"pad":"' + b"x" * 1000 + b'"}'
    try:
        async with asyncio.timeout(TIMEOUT_S), changed:
            await changed.wait_for(lambda: core.state is LinkState.READY)
        best = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(cycles):
                for _ in range(per_batch):
                    a.publish_internal("orders", payload)
                target = a.journal.last_txid
                async with asyncio.timeout(TIMEOUT_S), changed:
                    await changed.wait_for(lambda t=target: core.acked_through_txid >= t)
            best = min(best, time.process_time() - started)
        return best / cycles
    finally:
        link.cancel()
        accepted.cancel()
        await asyncio.gather(link, accepted, return_exceptions=True)
        for instance in instances:
            await instance.stop()
            await instance.journal.close()


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
