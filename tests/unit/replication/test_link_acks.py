"""A destination acknowledges once per commit: the batches one fsync made durable are covered
by one ack (acks are cumulative), not one gRPC message each (issue 8, R1, L2).

Two real instances and their replicators in one event loop, linked by an in-memory stream that
carries what gRPC would (each frame serialised and decoded as on the wire), so the test decides
when the destination reads: two batches read back to back are appended before its commit callback
runs, and one commit makes both durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from amps.config import load_config
from amps.log.journal import Journal
from amps.server.instance import Instance
from replication.convert import decode_link_frame, from_pb
from replication.frames import Ack, Batch
from replication.link import Outgoing, Replicator, _serialize
from replication.link_core import LinkState

TIMEOUT_S = 10.0


def _config(name: str, destination: str | None) -> str:
    replication = ""
    if destination is not None:
        replication = (
            f"<Replication><Destination><Name>{destination}</Name><SyncType>async</SyncType>"
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
    """One side of an in-memory stream: what it writes goes through the wire format to the
    other side's reads, and is kept (decoded) for the test to look at. Every read and write
    notifies `changed`, which is all that moves a link's state."""

    def __init__(self, changed: asyncio.Condition) -> None:
        self.changed = changed
        self.inbox: asyncio.Queue[object] = asyncio.Queue()
        self.peer: _End | None = None
        self.written: list[object] = []
        self.hold = False  # the test delivers what is written (`release`)
        self.held: list[object] = []

    async def read(self) -> object:
        message = await self.inbox.get()
        await self._notify()
        return message

    def peer_names(self) -> set[str]:
        return set()

    async def write(self, message: Outgoing) -> None:
        assert self.peer is not None
        wire = decode_link_frame(_serialize(message))
        self.written.append(from_pb(wire))
        if self.hold:
            self.held.append(wire)
        else:
            self.peer.inbox.put_nowait(wire)
        await self._notify()

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def release(self) -> None:
        """Deliver everything held at once: the peer reads it back to back."""
        assert self.peer is not None
        for wire in self.held:
            self.peer.inbox.put_nowait(wire)
        self.held.clear()


async def _until(changed: asyncio.Condition, condition: Callable[[], bool], what: str) -> None:
    """Wait (bounded) until `condition` holds, checked after each read and write."""
    try:
        async with asyncio.timeout(TIMEOUT_S), changed:
            await changed.wait_for(condition)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_batches_made_durable_by_one_commit_are_acknowledged_once(tmp_path: Path) -> None:
    instances: list[Instance] = []
    replicators: list[Replicator] = []
    for name, destination in (("a", "b"), ("b", None)):
        journal = Journal.open(tmp_path / name / "j", instance_name=name, group=name)
        instance = Instance(load_config(_config(name, destination)), journal, lambda _exc: None)
        await instance.start(tmp_path / name)
        replicator = Replicator(instance.config, instance, tmp_path / name)
        instance.replicator = replicator
        instances.append(instance)
        replicators.append(replicator)
    a, b = instances
    sender, receiver = replicators
    changed = asyncio.Condition()
    a_end, b_end = _End(changed), _End(changed)
    a_end.peer, b_end.peer = b_end, a_end
    link = asyncio.ensure_future(sender._run(sender.cores["b"], a_end, dialled=True))
    accepted = asyncio.ensure_future(receiver.accept(b_end))
    try:
        core = sender.cores["b"]
        await _until(changed, lambda: core.state is LinkState.READY, "the link up")
        a_end.hold = True
        for n in (1, 2):  # two commits on a, two batches, held before b reads them
            a.publish_internal("orders", b'{"n":%d}' % n)
            await _until(
                changed,
                lambda n=n: sum(isinstance(f, Batch) for f in a_end.written) == n,  # type: ignore[misc]
                f"a's batch {n}",
            )
        a_end.release()
        await _until(changed, lambda: core.acked_through_txid >= 2, "both batches acknowledged")
        acks = [f for f in b_end.written if isinstance(f, Ack)]
        assert [ack.through_txid for ack in acks] == [2], acks
        assert b.journal.durable_txid == 2
    finally:
        link.cancel()
        accepted.cancel()
        await asyncio.gather(link, accepted, return_exceptions=True)
        for instance in instances:
            await instance.stop()
