"""Two real instances and their replicators in one event loop, `a` replicating to `b`, linked
by an in-memory stream that carries what gRPC would (each frame serialised, then decoded by the
link's own deserializer), so a test or a benchmark decides when each side reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from amps.config import load_config
from amps.log.journal import Journal
from amps.server.instance import Instance
from replication.convert import decode_link_frame, from_pb
from replication.link import Outgoing, Replicator, _serialize
from replication.link_core import LinkCore, LinkState

TIMEOUT_S = 30.0


def config(name: str, destination: str | None, *, sync: bool) -> str:
    """An instance that records every topic, with one destination (or none)."""
    replication = ""
    if destination is not None:
        replication = (
            f"<Replication><Destination><Name>{destination}</Name>"
            f"<SyncType>{'sync' if sync else 'async'}</SyncType>"
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


class MemoryEnd:
    """One side of an in-memory stream: what it writes goes through the wire format to the
    other side's reads, and is kept (decoded) for a test to look at. Every read and write
    notifies `changed`, which is all that moves a link's state; so does the reader asking for
    its next frame (it has handled the one before)."""

    def __init__(self, changed: asyncio.Condition) -> None:
        self.changed = changed
        self.inbox: asyncio.Queue[object] = asyncio.Queue()
        self.peer: MemoryEnd | None = None
        self.written: list[object] = []
        self.keep_written = True
        self.hold = False  # the test delivers what is written (`release`)
        self.held: list[object] = []

    async def read(self) -> object:
        await self._notify()
        message = await self.inbox.get()
        await self._notify()
        return message

    def peer_names(self) -> set[str]:
        return set()

    async def write(self, message: Outgoing) -> None:
        assert self.peer is not None
        wire = decode_link_frame(_serialize(message))
        if self.keep_written:
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


@dataclass
class LinkedPair:
    a: Instance
    b: Instance
    a_end: MemoryEnd  # what a writes
    b_end: MemoryEnd  # what b writes
    core: LinkCore  # a's link to b
    changed: asyncio.Condition

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait (bounded) until `condition` holds, checked after each read and write."""
        try:
            async with asyncio.timeout(TIMEOUT_S), self.changed:
                await self.changed.wait_for(condition)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}") from None


@asynccontextmanager
async def linked_pair(root: Path, *, sync: bool) -> AsyncIterator[LinkedPair]:
    """a -> b (sync or async) over an in-memory stream, the link up."""
    instances: list[Instance] = []
    replicators: list[Replicator] = []
    for name, destination in (("a", "b"), ("b", None)):
        journal = Journal.open(root / name / "j", instance_name=name, group=name)
        instance = Instance(
            load_config(config(name, destination, sync=sync)), journal, lambda _exc: None
        )
        await instance.start(root / name)
        replicator = Replicator(instance.config, instance, root / name)
        instance.replicator = replicator
        instances.append(instance)
        replicators.append(replicator)
    sender, receiver = replicators
    changed = asyncio.Condition()
    a_end, b_end = MemoryEnd(changed), MemoryEnd(changed)
    a_end.peer, b_end.peer = b_end, a_end
    link = asyncio.ensure_future(sender._run(sender.cores["b"], a_end, dialled=True))
    accepted = asyncio.ensure_future(receiver.accept(b_end))
    a, b = instances
    pair = LinkedPair(a, b, a_end, b_end, sender.cores["b"], changed)
    try:
        await pair.until(lambda: pair.core.state is LinkState.READY, "the link up")
        yield pair
    finally:
        link.cancel()
        accepted.cancel()
        await asyncio.gather(link, accepted, return_exceptions=True)
        for instance in instances:
            await instance.stop()
            await instance.journal.close()
