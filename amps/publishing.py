"""Publishing's decisions (L2-L6), one pure core for local and replicated publishes. [core]

Rule 1 (L6): one connection at a time holds a client name. A logon with a name held by another
  connection of the same user replaces that connection (the adapter disconnects it, "name in
  use"); with another user it is refused and nothing changes.
Rule 2 (L5): a publish without a sequence number is numbered by the instance, after the highest
  number seen, under a publisher id derived from the client name and the instance name, so it
  can never clash with the client's own numbering.
Rule 3 (L4): a (publisher, seq) at or below that publisher's high-water mark is a duplicate:
  not appended, still acknowledged, unless the instance replicates and it is one of the
  publisher's gaps (a seq skipped below the mark that the log does not hold: replication
  brought a later one first, as after a chained failover; amps.log.dedup): that one is taken,
  once. An instance that does not replicate keeps L4 to the letter: nothing can reach it out
  of its publisher's order, so a number below the mark is a client's replay. Local publishes
  and replicated ones meet the same marks, so a client that fails over and republishes adds
  nothing.
Rule 4 (L3, L2): a connection is owed a persisted ack for the highest sequence number of every
  frame whose records are durable here and held by every sync (not downgraded) destination;
  one ack covers everything before it, and an ack never goes backwards.

This module does no I/O and reads no clock. Ordering contract: `sequence` and `admit_replicated`
advance the publisher marks as they decide, so the adapter must append every publish they let
through, in the order given, before it asks for the next decision.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from amps import errors
from amps.log.bookmarks import publisher_id_for, server_publisher_id_for
from amps.log.dedup import PublisherMarks
from amps.log.received import one_publisher_run
from amps.log.records import PublishRecord
from amps.names import name_problem

__all__ = [
    "PublishingCore",
    "PublishingStatistics",
    "check_client_name",
    "persisted_through",
]

Connection = TypeVar("Connection", bound=Hashable)


def check_client_name(client_name: str) -> None:
    """A client name a logon may use, or InvalidOptions naming what is wrong."""
    if not client_name:
        raise errors.InvalidOptions("no client name")
    if (problem := name_problem(client_name, spaces=True)) is not None:
        raise errors.InvalidOptions(f"client name: expected {problem}")


def persisted_through(durable_txid: int, sync_acked_txids: Iterable[int]) -> int:
    """L2: the txid through which publishes may be acked as persisted: durable here and held by
    every sync destination (the positions the adapter passes: not downgraded ones)."""
    limit = durable_txid
    for acked in sync_acked_txids:
        if acked < limit:
            limit = acked
    return limit


@dataclass(frozen=True, slots=True)
class PublishingStatistics:
    """Counters for metrics and the admin interface."""

    duplicates: int
    persisted_acks: int
    gaps: int  # L4 gaps held now (amps.log.dedup)
    gaps_forgotten: int  # past GAP_LIMIT, since start
    connections_owed_acks: int
    client_names: int


class _Owed:
    """What one connection is owed: (txid appended last, highest seq) per frame, oldest first."""

    __slots__ = ("acked_seq", "pending")

    def __init__(self, acked_seq: int) -> None:
        self.pending: deque[tuple[int, int]] = deque()
        self.acked_seq = acked_seq


class PublishingCore(Generic[Connection]):
    """Client names, publisher sequencing and de-duplication, and persisted acks of one
    instance. `marks` are the log's publisher marks (the journal recovers and advances them)."""

    __slots__ = (
        "_duplicates",
        "_name_of",
        "_names",
        "_owed",
        "_persisted_acks",
        "_waiting",
        "gaps",
        "instance",
        "marks",
    )

    def __init__(self, instance_name: str, marks: PublisherMarks, gaps: bool = True) -> None:
        self.instance = instance_name
        self.marks = marks
        # Rule 3: whether a client's publish may fill a gap (only where replication can bring
        # a publisher's numbers out of order).
        self.gaps = gaps
        # client name -> (connection, user id)
        self._names: dict[str, tuple[Connection, str]] = {}
        self._name_of: dict[Connection, str] = {}
        self._owed: dict[Connection, _Owed] = {}
        # Connections with frames not yet acked: the only ones a release visits.
        self._waiting: set[Connection] = set()
        self._duplicates = 0
        self._persisted_acks = 0

    # -- Rule 1: client names ------------------------------------------------------------------

    def logon(self, connection: Connection, client_name: str, user_id: str) -> Connection | None:
        """Bind `client_name` to `connection`; returns the connection it replaces (the adapter
        disconnects it), or None. NameInUse when another user holds the name (nothing changes)."""
        check_client_name(client_name)
        holder = self._names.get(client_name)
        replaced = None
        if holder is not None and holder[0] != connection:
            if holder[1] != user_id:
                raise errors.NameInUse(f"client name {client_name!r} is in use by another user")
            replaced = holder[0]
            del self._name_of[replaced]
        previous = self._name_of.get(connection)
        if previous is not None and previous != client_name:
            del self._names[previous]  # a second logon on one connection, under another name
        self._names[client_name] = (connection, user_id)
        self._name_of[connection] = client_name
        return replaced

    def logged_on(self, connection: Connection, client_name: str) -> int:
        """The publisher id of a connection that just logged on. Its logon ack names the last seq
        the log holds from it (`acked_seq`), and no persisted ack goes below that."""
        publisher_id = publisher_id_for(client_name)
        seq = self.marks.high_water(publisher_id)
        owed = self._owed.get(connection)
        if owed is None:
            self._owed[connection] = _Owed(seq)
        else:
            owed.acked_seq = seq
        return publisher_id

    def disconnected(self, connection: Connection) -> None:
        """The connection ended: its name is free (if it still held it), nothing more is owed."""
        client_name = self._name_of.pop(connection, None)
        if client_name is not None:
            del self._names[client_name]
        self._owed.pop(connection, None)
        self._waiting.discard(connection)

    def holder(self, client_name: str) -> Connection | None:
        """The connection that holds `client_name`, if any."""
        holder = self._names.get(client_name)
        return None if holder is None else holder[0]

    # -- Rules 2 and 3: sequencing and de-duplication ------------------------------------------

    def sequence(self, publisher_id: int, own_seq: int, client_name: str) -> tuple[int, int] | None:
        """The (publisher id, seq) a recorded publish is appended under, or None for a duplicate
        (L4: discarded, still acked). `own_seq` 0: the instance numbers it (L5)."""
        if not own_seq:
            publisher_id = server_publisher_id_for(client_name, self.instance)
            own_seq = self.marks.next_seq(publisher_id)
        if (
            not self.gaps and own_seq <= self.marks.high_water(publisher_id)
        ) or not self.marks.claim(publisher_id, own_seq):
            self._duplicates += 1
            return None
        return publisher_id, own_seq

    def internal_sequence(self) -> tuple[int, int]:
        """(publisher id, seq) of a publish the instance makes itself (dead letters)."""
        publisher_id = server_publisher_id_for("", self.instance)
        seq = self.marks.next_seq(publisher_id)
        self.marks.advance(publisher_id, seq)
        return publisher_id, seq

    def admit_replicated(
        self, records: Sequence[PublishRecord], discarded: list[PublishRecord] | None = None
    ) -> list[PublishRecord]:
        """The publishes of a peer's batch this log does not hold yet, in order (Rule 3: a
        resend after a broken link, or a republish that reached two instances, is skipped).
        The skipped ones go to `discarded`: a replicated queue needs their origins (issue 9)."""
        claim = self.marks.claim
        if discarded is None:
            kept = [record for record in records if claim(record.publisher_id, record.seq)]
        else:
            kept = []
            for record in records:
                (kept if claim(record.publisher_id, record.seq) else discarded).append(record)
        self._duplicates += len(records) - len(kept)
        return kept

    def admit_received(
        self,
        heads: Sequence[tuple[int, ...]],
        discarded: list[int] | None = None,
        *,
        run: tuple[int, int, int] | None = None,
    ) -> list[int]:
        """`admit_replicated` over the fixed fields of a peer's publishes as received
        (amps.log.received.Head: publisher id and seq at 6 and 7): the indices of the new ones;
        those of the skipped ones go to `discarded`. `run`: `one_publisher_run(heads)` when
        the caller has it (None: looked for here)."""
        if run is None:
            run = one_publisher_run(heads)
        if run is not None and self.marks.claim_run(*run):
            return list(range(len(heads)))  # all new: one step, not a claim per record
        claim = self.marks.claim
        kept = [index for index, head in enumerate(heads) if claim(head[6], head[7])]
        if len(kept) != len(heads):
            self._duplicates += len(heads) - len(kept)
            if discarded is not None:
                discarded += sorted(set(range(len(heads))).difference(kept))
        return kept

    # -- Rule 4: persisted acks ----------------------------------------------------------------

    def expect_ack(self, connection: Connection, last_txid: int, seq: int) -> None:
        """A frame of `connection` was handled: ack `seq` once `last_txid` may be acked."""
        owed = self._owed.get(connection)
        if owed is None:
            owed = self._owed[connection] = _Owed(0)
        pending = owed.pending
        assert not pending or pending[-1][0] <= last_txid, "frames are handled in log order"
        pending.append((last_txid, seq))
        self._waiting.add(connection)

    def release(self, through_txid: int) -> list[tuple[Connection, int]]:
        """The persisted acks due now that everything through `through_txid` may be acked (see
        `persisted_through`): one (connection, seq) per connection, conflated (L3)."""
        if not self._waiting:
            return []
        due: list[tuple[Connection, int]] = []
        done: list[Connection] = []
        owed_by = self._owed
        for connection in self._waiting:
            owed = owed_by[connection]
            pending = owed.pending
            seq = 0
            while pending and pending[0][0] <= through_txid:
                frame_seq = pending.popleft()[1]
                if frame_seq > seq:
                    seq = frame_seq
            if seq > owed.acked_seq:
                owed.acked_seq = seq
                due.append((connection, seq))
            if not pending:
                done.append(connection)
        self._waiting.difference_update(done)
        self._persisted_acks += len(due)
        return due

    def owes(self, connection: Connection) -> bool:
        """Whether `connection` has frames whose persisted ack is still to come."""
        return connection in self._waiting

    def acked_seq(self, connection: Connection) -> int:
        """The highest seq `connection` was acked as persisted (or told at logon)."""
        owed = self._owed.get(connection)
        return 0 if owed is None else owed.acked_seq

    # -- observation ---------------------------------------------------------------------------

    def statistics(self) -> PublishingStatistics:
        return PublishingStatistics(
            duplicates=self._duplicates,
            persisted_acks=self._persisted_acks,
            gaps=self.marks.gap_count(),
            gaps_forgotten=self.marks.forgotten_gaps,
            connections_owed_acks=len(self._waiting),
            client_names=len(self._names),
        )

    def check_invariants(self) -> None:
        """Cross-checks for tests: waiting connections are exactly those owed something, and
        each connection's frames are in log order."""
        for connection, owed in self._owed.items():
            assert bool(owed.pending) == (connection in self._waiting), connection
            txids = [txid for txid, _seq in owed.pending]
            assert txids == sorted(txids), connection
            assert owed.acked_seq >= 0
        assert self._waiting <= self._owed.keys()
        assert {c: n for n, (c, _user) in self._names.items()} == self._name_of
