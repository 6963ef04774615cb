"""A replicated queue's snapshot: its engine and its ownership at one log position, so a
restart restores both and replays only the log after it (issue 9, Q16, R2-R5). [core]

Rules:

Rule 1: one snapshot, one position. The engine's part and the ownership part are taken in
        the same step, after every record up to the position was applied (publishes, this
        instance's removals and grants, the peers' removals and records logged here), so
        replaying the log after the position rebuilds what a replay of the whole log would.
Rule 2: never trusted past the log. `reflects_txid` is the journal's last txid when the
        snapshot was taken: everything it reflects is at or before it. The store keeps a
        snapshot only once that is durable; a log that ends before it (cut, damaged, or
        another journal) makes the caller replay instead.
Rule 3: bad bytes are a `SnapshotFormatError` (a CRC32C covers the body), and a snapshot of
        another instance, kind or `InitialOwner` is refused: the caller replays the log.
Rule 4: what is not kept is what a replay would not rebuild either: leases (as in AMPS),
        requests in flight (never logged: a lost one is a refusal), counters and latency
        samples.

Rule 5: it costs what changed, not the size of the queue: the ownership of a message no
        record moved is its initial owner at epoch 0, stored as runs of (first txid, owner)
        (`replication/initial_owners.py`); only the moved messages are stored one by one.
        So it is cheap enough to take at every checkpoint, and the log left to replay at a
        restart stays short.

Layout ("ARQ2", little-endian): magic, u32 CRC32C of the body; the body: reflects_txid,
here, kind, InitialOwner, the engine's AQS3 snapshot (`amps/queue/snapshot_codec.py`) and its
elsewhere flags, the ownership (names, the live count, the moved messages' columns: publisher
ids, seqs, epochs, states, owners), the initial owners' runs (names, first txids, owners), the
early records, the removed keys, the peers' acks waiting here with the txid that logged them,
and the newest origin txid logged here per origin. "ARQ1" (one row per live message) is an
older format: refused, so the log is replayed.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

import google_crc32c

from amps.queue import QueueEngine, QueuePolicy, QueueSnapshot
from amps.queue.columns import ColumnFactory
from amps.queue.snapshot_codec import (
    SnapshotFormatError,
    decode_column,
    decode_snapshot,
    encode_column,
    encode_snapshot,
)
from replication.initial_owners import InitialOwners
from replication.ownership import (
    MessageKey,
    OwnershipRecord,
    OwnershipSnapshot,
    OwnershipState,
    TransferKind,
)
from replication.queue_replica import QueueReplica, ReplicaOptions

MAGIC = b"ARQ2"
_OLDER = (b"ARQ1",)
_HEAD = struct.Struct("<4sI")  # magic, CRC32C of the body
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_EARLY = struct.Struct("<QQBHHq")  # publisher id, seq, kind, by, owner, epoch
_DEFERRED = struct.Struct("<QQq")  # publisher id, seq, txid of the record that logged it
_KINDS = (TransferKind.GRANT, TransferKind.CLAIM, TransferKind.ORIGIN)  # codes: append only
_SAME_STATE = {
    state: OwnershipState.OWNED_ELSEWHERE
    if state in (OwnershipState.GRANTED, OwnershipState.REQUESTED)
    else state
    for state in OwnershipState
}


@dataclass(frozen=True, slots=True)
class ReplicaSnapshot:
    """One replicated queue here at one log position (see the module rules)."""

    here: str
    kind: str
    initial_owner: str  # "" unless a GroupLocalQueue
    reflects_txid: int
    queue: QueueSnapshot
    taken_mono_ms: int
    taken_wall_us: int
    ownership: OwnershipSnapshot
    initial_starts: array[int]
    """The initial owners' runs: the first txid of each, increasing."""
    initial_owners: tuple[str, ...]
    """The owner of each run."""
    deferred_logged: tuple[tuple[int, int, int], ...]
    """(publisher id, seq, txid of the record that logged it) of peers' acks waiting here."""
    marks: tuple[tuple[str, int], ...]
    """(origin instance, newest origin txid of this queue's records logged here)."""


def take(
    replica: QueueReplica,
    *,
    reflects_txid: int,
    taken_mono_ms: int,
    taken_wall_us: int,
    deferred_logged: dict[MessageKey, int],
    marks: dict[str, int],
) -> ReplicaSnapshot:
    """The replica's state now (Rule 1: the caller knows every record up to its position is
    applied)."""
    options = replica.options
    queue = replica.engine.snapshot()
    initial = replica.initial_owners(queue.txids[0] if queue.txids else queue.high_water_txid)
    disordered = initial.disordered  # runs that cannot place every message: none stored
    return ReplicaSnapshot(
        here=replica.here,
        kind=options.kind,
        initial_owner=options.initial_owner or "",
        reflects_txid=reflects_txid,
        queue=queue,
        taken_mono_ms=taken_mono_ms,
        taken_wall_us=taken_wall_us,
        ownership=replica.ownership.snapshot(),
        initial_starts=array("q", () if disordered else initial.starts),
        initial_owners=() if disordered else tuple(initial.owners),
        deferred_logged=tuple(sorted((p, s, t) for (p, s), t in deferred_logged.items())),
        marks=tuple(sorted(marks.items())),
    )


def restore(
    snap: ReplicaSnapshot,
    here: str,
    policy: QueuePolicy,
    options: ReplicaOptions,
    shift_ms: int,
    now_ms: int,
    *,
    columns: ColumnFactory | None = None,
) -> QueueReplica:
    """The replica `snap` describes, its times moved by `shift_ms`; ValueError (with the
    reason) if it is not this instance's queue as configured now or does not hold together."""
    if snap.here != here:
        raise ValueError(f"it was taken on instance {snap.here!r}, not {here!r}")
    initial_owner = options.initial_owner or ""
    if (snap.kind, snap.initial_owner) != (options.kind, initial_owner):
        raise ValueError(
            f"it was taken of a {snap.kind} (InitialOwner {snap.initial_owner or 'none'}), "
            f"the queue is a {options.kind} (InitialOwner {initial_owner or 'none'}) now"
        )
    engine = QueueEngine.restore(policy, snap.queue, shift_ms, columns=columns)
    initial = InitialOwners(snap.initial_starts, snap.initial_owners)
    return QueueReplica.restored(here, engine, options, snap.ownership, initial, snap.queue, now_ms)


def recovered_view(replica: QueueReplica) -> tuple[object, ...]:
    """What a restart must rebuild, to compare a restore with a replay (tests, simulation):
    the engine's messages (which owned elsewhere, which barriers) and the keys of its deferred
    acks (their expiry counts from when each was read, live or replayed), each message's
    ownership state, owner and epoch, the early records, the removed keys, and the glue's
    bookmarks and waiting messages (requests in flight aside: never logged). GRANTED counts
    as OWNED_ELSEWHERE: a live instance that asks for a message it granted away forgets that
    it granted it (REQUESTED, then OWNED_ELSEWHERE once unanswered), which a replay of its
    grant does not; the two differ only in whether a proxy answers a request for it (R7)."""
    replica.check_invariants()
    queue = replica.engine.snapshot()
    own = replica.ownership.snapshot()
    waiting = {**replica._waiting, **replica._asked}
    return (
        list(queue.txids), queue.bookmark_of(), queue.barrier_flags, queue.elsewhere_flags,
        [d[:2] for d in queue.deferred_acks], queue.high_water_txid,
        {key: (_SAME_STATE[state], owner, epoch)
         for key, (state, owner, epoch) in replica.ownership.view().items()},
        {r.key: r for r in own.early}, set(own.removed), replica._key_of,
        {key: value[0] for key, value in waiting.items()},
    )  # fmt: skip


def is_replica_snapshot(data: bytes) -> bool:
    """Whether stored bytes are a replicated queue's snapshot (to say so in a log line)."""
    return data[:4] == MAGIC or data[:4] in _OLDER


# -- bytes ------------------------------------------------------------------------------


def encode(snap: ReplicaSnapshot) -> bytes:
    """The snapshot as bytes for the queue state store."""
    own = snap.ownership
    parts = [
        _I64.pack(snap.reflects_txid),
        _text(snap.here),
        _text(snap.kind),
        _text(snap.initial_owner),
    ]
    queue = encode_snapshot(snap.queue, snap.taken_mono_ms, snap.taken_wall_us)
    parts += [_U64.pack(len(queue)), queue]
    parts += [_U32.pack(len(snap.queue.elsewhere_flags)), snap.queue.elsewhere_flags]
    parts.append(_U16.pack(len(own.names)))
    parts += [_text(name) for name in own.names]
    index = {name: i for i, name in enumerate(own.names)}
    parts += [
        _U32.pack(own.live),
        _U32.pack(len(own.states)),
        encode_column(own.publisher_ids, "Q"),
        encode_column(own.seqs, "Q"),
        encode_column(own.epochs, "q"),
        own.states,
        encode_column(own.owners, "H"),
    ]
    runs = tuple(sorted(set(snap.initial_owners)))
    run_index = {name: i for i, name in enumerate(runs)}
    parts.append(_U16.pack(len(runs)))
    parts += [_text(name) for name in runs]
    parts += [
        _U32.pack(len(snap.initial_starts)),
        encode_column(snap.initial_starts, "q"),
        encode_column(array("H", map(run_index.__getitem__, snap.initial_owners)), "H"),
        _U32.pack(len(own.early)),
    ]
    parts += [
        _EARLY.pack(*r.key, _KINDS.index(r.kind), index[r.by], index[r.owner], r.epoch)
        for r in own.early
    ]
    removed_pubs = array("Q", (k[0] for k in own.removed))
    removed_seqs = array("Q", (k[1] for k in own.removed))
    parts += [
        _U32.pack(len(own.removed)),
        encode_column(removed_pubs, "Q"),
        encode_column(removed_seqs, "Q"),
    ]
    parts.append(_U32.pack(len(snap.deferred_logged)))
    parts += [_DEFERRED.pack(*item) for item in snap.deferred_logged]
    parts.append(_U32.pack(len(snap.marks)))
    for origin, txid in snap.marks:
        parts += [_text(origin), _I64.pack(txid)]
    body = b"".join(parts)
    return _HEAD.pack(MAGIC, google_crc32c.value(body)) + body


def decode(data: bytes) -> ReplicaSnapshot:
    """The snapshot `encode` wrote; SnapshotFormatError for anything else (Rule 3)."""
    if len(data) < _HEAD.size:
        raise SnapshotFormatError("replicated queue snapshot is truncated")
    magic, crc = _HEAD.unpack_from(data, 0)
    if magic in _OLDER:
        raise SnapshotFormatError(
            f"replicated queue snapshot of an older format ({magic.decode()}, now {MAGIC.decode()})"
        )
    if magic != MAGIC:
        raise SnapshotFormatError("not a replicated queue snapshot")
    view = memoryview(data)
    if google_crc32c.value(data[_HEAD.size :]) != crc:
        raise SnapshotFormatError("replicated queue snapshot is damaged (CRC32C mismatch)")
    reader = _Reader(data, view, _HEAD.size)
    reflects_txid = reader.unpack(_I64)[0]
    here, kind, initial_owner = reader.text(), reader.text(), reader.text()
    queue, mono_ms, wall_us = decode_snapshot(reader.view_of(reader.unpack(_U64)[0]))
    elsewhere = reader.take(reader.unpack(_U32)[0])
    if elsewhere and len(elsewhere) != len(queue.txids):
        raise SnapshotFormatError("replicated queue snapshot: elsewhere flags do not match")
    names = tuple(reader.text() for _ in range(reader.unpack(_U16)[0]))
    live = reader.unpack(_U32)[0]
    count = reader.unpack(_U32)[0]
    publisher_ids = reader.column(count, "Q")
    seqs = reader.column(count, "Q")
    epochs = reader.column(count, "q")
    states = reader.take(count)
    owners = reader.column(count, "H")
    run_names = tuple(reader.text() for _ in range(reader.unpack(_U16)[0]))
    run_count = reader.unpack(_U32)[0]
    initial_starts = reader.column(run_count, "q")
    run_owners = reader.column(run_count, "H")
    if run_count and max(run_owners) >= len(run_names):
        raise SnapshotFormatError("replicated queue snapshot: a run names an unknown owner")
    initial_owners = tuple(map(run_names.__getitem__, run_owners))
    early = []
    for _ in range(reader.unpack(_U32)[0]):
        publisher_id, seq, kind_code, by, owner, epoch = reader.unpack(_EARLY)
        if kind_code >= len(_KINDS) or max(by, owner) >= len(names):
            raise SnapshotFormatError("replicated queue snapshot: an early record is malformed")
        key = (publisher_id, seq)
        early.append(OwnershipRecord(key, _KINDS[kind_code], names[by], names[owner], epoch))
    removed_count = reader.unpack(_U32)[0]
    removed_pubs = reader.column(removed_count, "Q")
    removed_seqs = reader.column(removed_count, "Q")
    deferred = []
    for _ in range(reader.unpack(_U32)[0]):
        publisher_id, seq, txid = reader.unpack(_DEFERRED)
        deferred.append((publisher_id, seq, txid))
    marks = tuple((reader.text(), reader.unpack(_I64)[0]) for _ in range(reader.unpack(_U32)[0]))
    if reader.offset != len(data):
        raise SnapshotFormatError("replicated queue snapshot length does not match its contents")
    ownership = OwnershipSnapshot(
        names, live, publisher_ids, seqs, states, owners, epochs, tuple(early),
        tuple(zip(removed_pubs, removed_seqs, strict=True)),
    )  # fmt: skip
    queue = QueueSnapshot(
        queue.high_water_txid, queue.txids, queue.timestamps_ms, queue.priorities,
        queue.barrier_flags, queue.expire_at_ms, queue.bookmark_runs,
        queue.unordered_bookmarks, queue.deferred_acks, queue.hints, elsewhere,
    )  # fmt: skip
    return ReplicaSnapshot(
        here, kind, initial_owner, reflects_txid, queue, mono_ms, wall_us, ownership,
        initial_starts, initial_owners, tuple(deferred), marks,
    )  # fmt: skip


def _text(value: str) -> bytes:
    raw = value.encode()
    return _U16.pack(len(raw)) + raw


class _Reader:
    """Reads the body front to back; every short read is a SnapshotFormatError."""

    def __init__(self, data: bytes, view: memoryview, offset: int) -> None:
        self.data = data
        self.view = view
        self.offset = offset

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        if self.offset + layout.size > len(self.data):
            raise SnapshotFormatError("replicated queue snapshot is truncated")
        values = layout.unpack_from(self.data, self.offset)
        self.offset += layout.size
        return values

    def take(self, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise SnapshotFormatError("replicated queue snapshot is truncated")
        self.offset += size
        return bytes(self.view[self.offset - size : self.offset])

    def view_of(self, size: int) -> memoryview:
        """`take` without the copy: the queue's part, read in place (tens of MB)."""
        if self.offset + size > len(self.data):
            raise SnapshotFormatError("replicated queue snapshot is truncated")
        self.offset += size
        return self.view[self.offset - size : self.offset]

    def text(self) -> str:
        raw = self.take(self.unpack(_U16)[0])
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise SnapshotFormatError("replicated queue snapshot: a name is not UTF-8") from None

    def column(self, count: int, typecode: str) -> array[int]:
        values, self.offset = decode_column(self.view, self.offset, count, typecode)
        return values
