"""One replicated queue on one instance: its queue engine, its ownership machine and its
transfer-latency estimator, glued into one sans-IO core (R2-R7, A4). [core]

Rules (read them before changing anything below):

Rule 1: facts in, actions out. Every input is a method named for what happened (a message was
        published or replicated in, a client acked, a peer removed, an ownership record or a
        transfer request arrived, time passed, reachability or the proxied switch changed); each
        returns the actions to perform, in order. No I/O, no clock: `now_ms` is an argument.
Rule 2: the owner of a message when it enters (epoch 0): `Queue`, the instance where a client
        published it (the record's origin); `GroupLocalQueue`, its `InitialOwner`;
        `LocalQueue` (or a queue on an instance without replication), this instance, always,
        and nothing of ownership runs. A barrier message (A3) is released by every instance
        that holds it (R6): it is never owned elsewhere and never transferred.
Rule 3: only messages owned here (or claimed here by proxy) are delivered here (R2). The engine
        holds the others too, for acks, barriers and a later transfer; the owner's local
        subscribers come first (R3), because the owner refuses a request while one of them
        can take the message (R5).
Rule 4: a transfer request (R4) goes out for a message owned elsewhere that waited here longer
        than the current estimate for its owner (`replication/latency.py`; the configured
        default until it has samples), when a local subscription with backlog room matches it;
        never more requests outstanding than the backlog room here.
Rule 5: only the owner removes a message for a reason of its own (Expiration, MaxDeliveries,
        MaxCancels): the engine never expires a message owned elsewhere, and a removal that a
        peer replicated (`removed_by_peer`) is applied silently (no record of this instance's
        own, no dead letter: the owner wrote those once).
Rule 6: the ordering contract of `Action` below: an `AppendOwnership` must be durable in the
        local log before any later `SendOwnership`, `Deliver` or `DeliverBarrier` of the same
        list is performed (and the engine's own rule for at-most-once removals holds).
Rule 7: a restart serves before it has indexed every message (Q16). A restore from a snapshot
        checks the whole snapshot and restores the engine, whose flags already say which
        messages are owned here, and the moved messages' ownership; each message's bookmark,
        ownership entry and place in the waiting order come in bounded steps
        (`restore_step`). Until the last step only a subscription, a disconnect and time
        (leases, expiry) are served, from the engine alone, and no transfer is requested;
        any other input, and any step that removes a message, finishes the index first;
        except a removal (this instance's own by txid, replayed from the log after the
        snapshot; a peer's by bookmark of messages all in the queue, replayed or live): it
        leaves the engine at once, so none is delivered, and the index takes it after its
        last message, in the order they came, as the `_removed_silently` step it would have
        been (so the restore ends as one that indexed everything first). A peer's removal
        naming a message not in the queue (an early ack, or one gone already) could depend
        on what the index has yet to learn: it finishes the index first.

Actions are the engine's (`Deliver`, `DeliverBarrier`, `RecordRemoval`, `PublishDeadLetter`)
and the ownership machine's `AppendOwnership`, `SendOwnership` and `SendTransferRequest`; its
`Offer` and `Withdraw` are performed here, on the engine, and never returned.

This is the API the server (`amps/server/queues.py`) and the cluster simulation
(`tests/simulation/`) drive; change it only together with both.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, compress, islice, repeat
from typing import NamedTuple, cast

from amps.config.model import QueueKind
from amps.queue import (
    Acked,
    AckedByFilter,
    ClientDisconnected,
    ExpireReason,
    MessagePublished,
    MessageRemoved,
    OwnershipMoved,
    QueueEngine,
    QueueSnapshot,
    RecordRemoval,
    RemovalReason,
    Subscribed,
    Unsubscribed,
)
from amps.queue import Action as EngineAction
from amps.queue.recovery import BookmarkRun
from replication.initial_owners import InitialOwners
from replication.latency import LatencyOptions, TransferLatencies
from replication.ownership import Action as OwnershipAction
from replication.ownership import (
    AppendOwnership,
    MessageKey,
    Offer,
    Ownership,
    OwnershipRecord,
    OwnershipRecorded,
    OwnershipSnapshot,
    OwnershipState,
    SendOwnership,
    SendTransferRequest,
    TakerWaiting,
    TransferKind,
    TransferRequested,
    Withdraw,
)

_NOT = bytes(b == 0 for b in range(256))  # a barrier flag -> 1 for a message ownership tracks

_BULK_CHECK_PUBLISHERS = 16  # beyond this many, `_check_bookmarks` looks up each removed key

RESTORE_STEP_MESSAGES = 8_192
"""Messages a staged restore indexes per step (~7 ms of CPU): the loop serves between steps,
and a client's request waits for at most one step at each of its turns on the loop."""

ReplicaAction = EngineAction | AppendOwnership | SendOwnership | SendTransferRequest
"""What the adapter performs, in list order. Ordering contract (raft `Ready`): every
`AppendOwnership` is durable in the local log before any later `SendOwnership`, `Deliver` or
`DeliverBarrier` of the same list is performed; a `RecordRemoval` with reason
`SENT_AT_MOST_ONCE` likewise before any later delivery (the engine's rule). `SendOwnership`
may be dropped by an adapter whose link replicates every durable record anyway."""

EngineInput = Subscribed | Unsubscribed | ClientDisconnected | MessageRemoved
"""Engine events the replica passes through unchanged (subscriptions and recovered removals)."""


@dataclass(frozen=True, slots=True)
class ReplicaOptions:
    """How one queue replicates here. `replicated=False` makes any kind behave as a
    `LocalQueue` (an instance without replication: no ownership cost at all)."""

    kind: QueueKind = "Queue"
    initial_owner: str | None = None  # GroupLocalQueue only
    replicated: bool = True
    request_timeout_ms: int = 5_000
    latency: LatencyOptions = field(default_factory=LatencyOptions)
    max_scan: int = 4_096  # waiting messages looked at per step for transfer requests

    def __post_init__(self) -> None:
        assert (self.kind == "GroupLocalQueue") == (self.initial_owner is not None)
        assert self.request_timeout_ms > 0
        assert self.max_scan > 0


@dataclass(frozen=True, slots=True)
class ReplicaStatistics:
    """Ownership counters and gauges of one queue on one instance (metrics, admin)."""

    owned: int  # messages owned here now (claimed by proxy included)
    owned_elsewhere: int  # messages held here that another instance owns
    transferred_in: int
    transferred_out: int
    requests_sent: int
    requests_granted: int  # granted by this instance
    requests_unanswered: int
    proxied_claims: int
    superseded_records: int
    proxied_transfer: bool
    latency_estimate_ms: int  # the highest of the owners' estimates, else the default
    latency_estimates_ms: dict[str, int]  # owner -> estimate


class QueueReplica:
    """One queue of one instance with ownership (R2-R7). No I/O, no clock."""

    def __init__(
        self,
        here: str,
        engine: QueueEngine,
        options: ReplicaOptions,
        *,
        ownership: Ownership | None = None,
    ) -> None:
        """`ownership` replaces the default machine (tests that break a rule on purpose)."""
        assert here
        self.here = here
        self.engine = engine
        self.options = options
        self.tracks_ownership = options.replicated and options.kind != "LocalQueue"
        timeout_ms = options.request_timeout_ms
        self._ownership = ownership or Ownership(here, request_timeout_ms=timeout_ms)
        assert self._ownership.here == here
        # What a staged restore has yet to index (`restored`, Rule 7); None otherwise.
        self._unindexed: _Unindexed | None = None
        self.latencies = TransferLatencies(options.latency)
        self._key_of: dict[int, MessageKey] = {}  # txid -> bookmark, messages in ownership
        # Messages owned elsewhere here, in arrival order: key -> (txid, arrived_ms, the owner
        # whose latency estimator tracks its arrival, "" for none).
        self._waiting: dict[MessageKey, tuple[int, int, str]] = {}
        # Requests sent and not answered yet, moved out of `_waiting` (same values), so a step
        # neither scans them nor looks at each one to learn which were answered.
        self._asked: dict[MessageKey, tuple[int, int, str]] = {}
        self._scan_deadline_ms: int | None = None
        # The initial owner of every message ownership tracks, as runs (snapshots).
        self._initial = InitialOwners()

    @classmethod
    def restored(
        cls,
        here: str,
        engine: QueueEngine,
        options: ReplicaOptions,
        owned: OwnershipSnapshot,
        initial: InitialOwners,
        snapshot: QueueSnapshot,
        now_ms: int,
    ) -> QueueReplica:
        """The replica around an engine restored from `snapshot` and the ownership `owned`
        and `initial` describe (Q16), its glue as replaying the log at `now_ms` leaves it:
        every message owned elsewhere waits from now, in txid order. ValueError if they do
        not describe the same messages.

        Staged (Rule 7): what is checked and what delivery needs is built now; the index of
        every message (its bookmark, its ownership entry, its place in the waiting order) is
        built by `restore_step`, a bounded step at a time, so a restarted instance serves its
        consumers first. Any input that needs the index finishes it at once."""
        replica = cls(here, engine, options)
        if not replica.tracks_ownership:
            raise ValueError("a queue without ownership has no ownership to restore")
        txids = snapshot.txids
        plain = snapshot.barrier_flags.translate(_NOT)  # 1 for each message ownership tracks
        tracked: Sequence[int] = txids
        if plain.count(0):
            tracked = array("q", compress(txids, plain))
        flags = snapshot.elsewhere_flags
        flags = bytes(compress(flags, plain)) if flags else bytes(len(tracked))
        runs = initial.runs_over(tracked)
        bookmarks = snapshot.bookmark_runs
        staged = not snapshot.unordered_bookmarks
        if staged:
            _check_bookmarks(bookmarks, len(txids), owned.removed)
        else:  # never written by a sane instance: each publisher's in txid order, indexed now
            every = snapshot.bookmark_of()
            if not set(owned.removed).isdisjoint(every.values()):
                raise ValueError("ownership snapshot holds a removed message")
            by_publisher: dict[int, list[tuple[int, int]]] = {}
            for txid, (publisher_id, seq) in sorted(every.items()):
                by_publisher.setdefault(publisher_id, []).append((txid, seq))
            bookmarks = tuple(
                BookmarkRun(p, array("Q", [s for _, s in rows]), array("q", [t for t, _ in rows]))
                for p, rows in by_publisher.items()
            )
        # The engine's view (owned elsewhere or not) is the machine's, message by message;
        # a waiting message's arrival is tracked by its owner's estimator while at epoch 0,
        # as a replay that saw each enter leaves it.
        expected = bytearray()
        for count, owner in runs:
            expected += bytes((owner != here,)) * count
        moved_keys = list(zip(owned.publisher_ids, owned.seqs, strict=True))
        moved_at: dict[int, str] = {}  # position in `tracked` -> the owner its wait tracks
        moved_initial: list[str] = []
        starts = list(accumulate((count for count, _ in runs), initial=0))
        for key, owner_index, epoch in zip(moved_keys, owned.owners, owned.epochs, strict=True):
            at = bisect_left(tracked, engine.txid_of(key) or 0)
            if at == len(tracked) or at in moved_at or engine.txid_of(key) != tracked[at]:
                raise ValueError(f"ownership snapshot moves message {key}, not in the queue")
            if owner_index >= len(owned.names):
                raise ValueError("ownership snapshot names an unknown owner or a negative epoch")
            owner = owned.names[owner_index]
            moved_at[at] = owner if epoch == 0 else ""
            moved_initial.append(runs[bisect_right(starts, at) - 1][1])
        ownership = Ownership.restore(
            here, owned, runs, moved_initial, request_timeout_ms=options.request_timeout_ms
        )
        for at, key in zip(moved_at, moved_keys, strict=True):
            expected[at] = not ownership.owned_here(key)
        if expected != flags:
            raise ValueError("ownership snapshot owns here a message the queue holds elsewhere")
        # The owners whose estimators track a waiting message's arrival (a moved message's,
        # its owner's at epoch 0): listed from now on, as an arrival lists them.
        positions = sorted(moved_at)
        waited = {owner for at, owner in moved_at.items() if flags[at]}
        for (count, owner), start in zip(runs, starts, strict=False):
            moved = positions[bisect_left(positions, start) : bisect_left(positions, start + count)]
            if flags.count(1, start, start + count) > sum(flags[at] for at in moved):
                waited.add(owner)
        for owner in waited - {"", here}:
            replica.latencies.of(owner)
        replica._ownership = ownership
        replica._initial = initial
        replica._unindexed = _Unindexed(
            tracked, flags, bookmarks, moved_at, positions, runs, starts, now_ms
        )
        if not staged:
            replica._index_all()
        return replica

    @property
    def restoring(self) -> bool:
        """Whether a staged restore still has messages to index (`restore_step`)."""
        return self._unindexed is not None

    def restore_step(self, now_ms: int) -> list[ReplicaAction]:
        """Index the next `RESTORE_STEP_MESSAGES` messages of a staged restore; after the last,
        ask for the waiting messages local subscribers could take (Rule 4)."""
        if self._unindexed is None:
            return []
        self._index_next()
        out: list[ReplicaAction] = []
        if self._unindexed is None:
            self._request_waiting(now_ms, out)
        return out

    @property
    def ownership(self) -> Ownership:
        """The ownership machine (a staged restore is finished first: its entries are whole)."""
        if self._unindexed is not None:
            self._index_all()
        return self._ownership

    def _index_all(self) -> None:
        """Finish a staged restore now (an input that needs the whole index came)."""
        while self._unindexed is not None:
            self._index_next()

    def _index_next(self) -> None:
        """One step of a staged restore: the next messages' index, or once every message is
        indexed, the next removals replayed meanwhile (Rule 7)."""
        pending = self._unindexed
        assert pending is not None
        if not pending.indexed:
            self._index_step(pending)
        else:
            self._apply_removals(pending)
        if pending.indexed and not pending.removals:
            self._unindexed = None

    def _apply_removals(self, pending: _Unindexed) -> None:
        """The glue of the removals a staged restore applied to the engine only, oldest
        first, about `RESTORE_STEP_MESSAGES` messages' worth: as each would have been
        applied with the index whole (Rule 7)."""
        budget = RESTORE_STEP_MESSAGES
        removals = pending.removals
        while removals and budget > 0:
            keys, txids, now_ms = removals.popleft()
            budget -= len(txids)
            if keys is None:
                self._own_removed(txids, now_ms)
            else:
                self._removed_silently(keys, now_ms, sample=True, known=txids)

    def _index_step(self, pending: _Unindexed) -> None:
        """Bookmarks, ownership entries and waiting places of the next messages in txid
        order (restored messages wait before any later arrival)."""
        tracked = pending.tracked
        first = pending.done
        last = min(len(tracked), first + RESTORE_STEP_MESSAGES)
        step = tracked[first:last]
        # This step's bookmarks, from each publisher's run: every message after the last
        # step's last tracked one up to this step's (barriers included, as a whole snapshot's
        # bookmarks hold them: a barrier's removal names it by txid), the rest at the end.
        key_of = self._key_of
        after = tracked[first - 1] if first else None
        through = step[-1] if last < len(tracked) else None
        for run in pending.bookmarks:
            run_txids = run.txids
            a = 0 if after is None else bisect_right(run_txids, after)
            b = len(run_txids) if through is None else bisect_right(run_txids, through)
            if a < b:
                pairs = zip(repeat(run.publisher_id), run.seqs[a:b])
                key_of.update(zip(run_txids[a:b], pairs, strict=True))
        try:
            keys = list(map(key_of.__getitem__, step))
        except KeyError:
            raise ValueError("the queue snapshot lacks a message's bookmark") from None
        # The runs of initial owners over this step, cut from the whole restore's.
        starts, runs = pending.starts, pending.runs
        index = bisect_right(starts, first) - 1
        step_runs: list[tuple[int, str]] = []
        while index < len(runs) and starts[index] < last:
            end = min(last, starts[index + 1])
            step_runs.append((end - max(first, starts[index]), runs[index][1]))
            index += 1
        self._ownership.restore_entries(keys, step_runs)
        flags = pending.flags[first:last]
        owners: list[str] = []
        for count, owner in step_runs:
            owners += repeat(owner, count)
        moved = pending.moved_positions
        for at in moved[bisect_left(moved, first) : bisect_left(moved, last)]:
            owners[at - first] = pending.moved_at[at]
        waits = zip(compress(step, flags), repeat(pending.now_ms), compress(owners, flags))
        self._waiting.update(zip(compress(keys, flags), waits))  # noqa: B905 (as long)
        pending.done = last
        # The last step also maps the bookmarks after the last tracked message (barriers),
        # so it runs even when no message is tracked at all.
        pending.indexed = last == len(tracked)

    def initial_owners(self, first_txid: int) -> InitialOwners:
        """The initial owners of the messages from `first_txid` on (a snapshot's), the older
        runs forgotten."""
        self._index_all()
        self._initial.prune(first_txid)
        return self._initial

    # -- queries ---------------------------------------------------------------------------

    def owner_of_new(self, origin: str) -> str:
        """Rule 2: the initial owner of a message that a client published on `origin`."""
        if not self.tracks_ownership:
            return self.here
        if self.options.kind == "GroupLocalQueue":
            assert self.options.initial_owner is not None
            return self.options.initial_owner
        return origin

    def owned_here(self, key: MessageKey) -> bool:
        """R2: whether this instance may deliver the message now."""
        self._index_all()
        if not self.tracks_ownership:
            return self.engine.txid_of(key) is not None
        return self.ownership.owned_here(key)

    def state_of(self, key: MessageKey) -> OwnershipState | None:
        self._index_all()
        return self.ownership.state_of(key) if self.tracks_ownership else None

    def statistics(self) -> ReplicaStatistics:
        counts = self._ownership.statistics()  # whole during a staged restore too
        estimates = self.latencies.estimates_ms()
        return ReplicaStatistics(
            owned=counts.owned,
            owned_elsewhere=self.engine.owned_elsewhere_count(),
            transferred_in=counts.transferred_in,
            transferred_out=counts.transferred_out,
            requests_sent=counts.requests_sent,
            requests_granted=counts.requests_granted,
            requests_unanswered=counts.requests_unanswered,
            proxied_claims=counts.proxied_claims,
            superseded_records=counts.superseded_records,
            proxied_transfer=self._ownership.proxied_transfer,
            latency_estimate_ms=max(estimates.values(), default=self.options.latency.default_ms),
            latency_estimates_ms=estimates,
        )

    def next_deadline_ms(self) -> int | None:
        """When `on_deadline` next has work (leases, expiry, requests), or None."""
        found = [
            d
            for d in (
                self.engine.next_deadline_ms(),
                self._ownership.next_deadline_ms() if self.tracks_ownership else None,
                self._scan_deadline_ms,
            )
            if d is not None
        ]
        return min(found, default=None)

    # -- facts -----------------------------------------------------------------------------

    def published(
        self, messages: Sequence[MessagePublished], origins: Sequence[str], now_ms: int
    ) -> list[ReplicaAction]:
        """Messages logged here, in txid order: `origins[i]` is the instance where a client
        published `messages[i]` (this one for a local publish). Replays at recovery too."""
        self._index_all()
        assert len(messages) == len(origins)
        if not self.tracks_ownership:
            return list(self.engine.handle_many(messages, now_ms))
        ownership = self.ownership
        entering: list[MessagePublished] = []
        for message, origin in zip(messages, origins, strict=True):
            key = (message.publisher_id, message.seq)
            known = ownership.state_of(key)
            if known is not None and known is not OwnershipState.REMOVED:
                continue  # entered already (a re-offer): the engine ignores it too
            owner = self.here if message.is_barrier else self.owner_of_new(origin)
            if not message.is_barrier:
                ownership.enter(key, owner)
                if ownership.state_of(key) is not OwnershipState.REMOVED:
                    self._initial.note(message.txid, owner)
            elsewhere = not message.is_barrier and not ownership.owned_here(key)
            if elsewhere != message.elsewhere:
                message = MessagePublished(
                    message.txid, message.publisher_id, message.seq, message.timestamp_ms,
                    message.priority, message.is_barrier, message.expiration_ms, elsewhere,
                )  # fmt: skip
            entering.append(message)
            self._key_of[message.txid] = key
            if elsewhere and ownership.state_of(key) is not OwnershipState.REMOVED:
                current = ownership.owner_of(key)
                assert current is not None
                self._waiting[key] = (message.txid, now_ms, current[0])
                self.latencies.of(current[0])  # its estimator, listed from the first message
        out: list[ReplicaAction] = []
        self._engine_actions(self.engine.handle_many(entering, now_ms), now_ms, out)
        self._request_waiting(now_ms, out)
        return out

    def published_plain(
        self,
        txids: list[int],
        publisher_ids: list[int],
        seqs: list[int],
        timestamps_ms: list[int],
        origins: list[str],
        now_ms: int,
    ) -> list[ReplicaAction]:
        """`published` of one `MessagePublished(txid, publisher_id, seq, timestamp_ms)` per
        row (no priority, barrier or expiration of its own), without building the events: the
        adapter's path for a step's durable publishes. One owner for the whole step (every
        publish of one origin, or a GroupLocalQueue) goes in bulk, on the owner and on a peer
        holding the copy; anything else as `published`."""
        self._index_all()
        engine = self.engine
        if not self.tracks_ownership:
            return list(engine.publish_plain(txids, publisher_ids, seqs, timestamps_ms, now_ms))
        owner = self.options.initial_owner
        if owner is None:  # Queue: the origin, if one for all
            owner = origins[0]
            if origins.count(owner) != len(origins):
                owner = None
        keys = list(zip(publisher_ids, seqs, strict=True))
        if owner is None or not self.ownership.enter_many(keys, owner):
            rows = zip(txids, publisher_ids, seqs, timestamps_ms, strict=True)
            return self.published([MessagePublished(*row) for row in rows], origins, now_ms)
        # One owner for the whole step: one run, whatever the order within it.
        initial = self._initial
        initial.note(min(txids), owner)
        initial.last_txid = max(initial.last_txid, max(txids))
        self._key_of.update(zip(txids, keys, strict=True))
        elsewhere = owner != self.here
        if elsewhere:
            self._waiting.update(zip(keys, zip(txids, repeat(now_ms), repeat(owner)), strict=True))
            self.latencies.of(owner)  # its estimator, listed from the first message
        actions = engine.publish_plain(
            txids, publisher_ids, seqs, timestamps_ms, now_ms, elsewhere=elsewhere
        )
        out: list[ReplicaAction] = []
        self._engine_actions(actions, now_ms, out)
        self._request_waiting(now_ms, out)
        return out

    def acked(self, event: Acked | AckedByFilter, now_ms: int) -> list[ReplicaAction]:
        """A client's `sow_delete` on this instance (Q10-Q12); its removal records replicate."""
        self._index_all()
        out: list[ReplicaAction] = []
        self._engine_actions(self.engine.handle(event, now_ms), now_ms, out)
        self._request_waiting(now_ms, out)
        return out

    def removed_by_peer(
        self,
        bookmarks: Iterable[MessageKey],
        now_ms: int,
        reason: RemovalReason = RemovalReason.ACKED,
        expire_reasons: ExpireReason = ExpireReason.TIME_LIMIT,
    ) -> list[ReplicaAction]:
        """A removal replicated from a peer (an ack anywhere, the owner's expiry, an
        at-most-once send): applied silently (Rule 5). An ack for a message not here yet is
        remembered (the deferred acks, DeferredAckExpiration). A barrier here is this
        instance's own to release or expire (Rule 2, R6): a peer's removal of it (an older
        peer replicated its barrier expiries) is ignored. During a staged restore, removals
        of messages all in the queue leave the engine now and the index later (Rule 7)."""
        keys = list(bookmarks)
        engine = self.engine
        if engine.policy.has_barrier:
            txid_of, is_barrier = engine.txid_of, engine.is_barrier
            keys = [k for k in keys if (t := txid_of(k)) is None or not is_barrier(t)]
        pending = self._unindexed
        if pending is not None and keys:
            in_queue = engine.txids_of(keys)
            if None not in in_queue:
                # Each is in the engine, so none is one the ownership remembers removed (a
                # removal leaves the engine at once): `not_removed` would keep them all.
                found = cast("list[int]", in_queue)
                pending.removals.append(_Removal(keys, found, now_ms))
                return self._removed_from_engine(found, reason, expire_reasons, now_ms)
        self._index_all()
        if self.tracks_ownership:
            # A message that already left here (or whose early ack is deferred already): the
            # engine's bookmark index may have forgotten it (compacted, or restored from a
            # snapshot of the live messages) and would take the removal for an early ack.
            keys = self.ownership.not_removed(keys)
        txids = self._removed_silently(keys, now_ms, sample=True)
        if txids and None not in txids:  # all here (the usual): by txid, in one pass
            found = cast("list[int]", txids)
            return self._removed_from_engine(found, reason, expire_reasons, now_ms)
        # By bookmark: an ack for a message not here yet is deferred.
        events = [
            MessageRemoved(reason, bookmark=key, expire_reasons=expire_reasons) for key in keys
        ]
        out: list[ReplicaAction] = []
        self._engine_actions(self.engine.handle_many(events, now_ms), now_ms, out)
        self._request_waiting(now_ms, out)
        return out

    def _removed_from_engine(
        self, txids: list[int], reason: RemovalReason, expire_reasons: ExpireReason, now_ms: int
    ) -> list[ReplicaAction]:
        """A peer's removal of messages all in the queue, once the glue knows (or will)."""
        actions = self.engine.remove_recovered(txids, reason, expire_reasons, now_ms)
        out: list[ReplicaAction] = []
        self._engine_actions(actions, now_ms, out)
        self._request_waiting(now_ms, out)
        return out

    def removed_recovered(
        self,
        txids: Sequence[int],
        reason: RemovalReason,
        expire_reasons: ExpireReason,
        now_ms: int,
    ) -> list[ReplicaAction]:
        """Recovery (Q16): this instance's own log says these messages already left. During
        a staged restore they leave the engine now and the index later (Rule 7)."""
        if self._unindexed is not None:
            txids = list(txids)
            self._unindexed.removals.append(_Removal(None, txids, now_ms))
        elif self.tracks_ownership:
            self._own_removed(txids, now_ms)
        out: list[ReplicaAction] = []
        actions = self.engine.remove_recovered(txids, reason, expire_reasons, now_ms)
        self._engine_actions(actions, now_ms, out)
        return out

    def ownership_recorded(self, record: OwnershipRecord, now_ms: int) -> list[ReplicaAction]:
        """A grant or claim read from a peer or replayed from the local log (R5, R7)."""
        return self.ownership_recorded_many([record], now_ms)

    def ownership_recorded_many(
        self, records: Iterable[OwnershipRecord], now_ms: int
    ) -> list[ReplicaAction]:
        """`ownership_recorded` of each record in turn, as one engine step."""
        self._index_all()
        if not self.tracks_ownership:
            return []
        out = self._due_first(now_ms)
        ownership = self.ownership
        moves: list[OwnershipMoved] = []
        for record in records:
            key = record.key
            asked = ownership.owner_of(key) if key in self._asked else None
            actions = ownership.handle(OwnershipRecorded(record), now_ms)
            self._ownership_actions(actions, now_ms, out, moves)
            if asked is not None:
                if ownership.owned_here(key):  # our request was granted (R4: ask sooner)
                    self.latencies.of(asked[0]).granted()
                else:
                    self._settle_asked(key)
        self._move(moves, now_ms, out)
        self._request_waiting(now_ms, out)
        return out

    def republished(self, key: MessageKey, origin: str, now_ms: int) -> list[ReplicaAction]:
        """A peer's copy of a message held here, published at `origin`, was discarded as a
        duplicate (L4): a publisher failed over and republished it (issue 9). For a `Queue`
        whose copy here has another epoch-0 owner, the lower origin name wins (ownership
        Rule 3), written to the log first so recovery and snapshots rebuild the choice."""
        self._index_all()
        if not self.tracks_ownership or self.options.kind != "Queue":
            return []
        current = self.ownership.owner_of(key)
        if current is None or current[1] != 0 or origin >= current[0]:
            return []  # removed, moved by a grant or claim, or the owner already wins
        record = OwnershipRecord(key, TransferKind.ORIGIN, origin, origin, 0)
        return [AppendOwnership(record), *self.ownership_recorded(record, now_ms)]

    def transfer_requested(
        self, key: MessageKey, requester: str, now_ms: int
    ) -> list[ReplicaAction]:
        """A peer asked for the message (R5): granted only for the first request while this
        instance owns it and no local subscriber can take it; otherwise silence."""
        return self.transfers_requested([key], requester, now_ms)

    def transfers_requested(
        self, keys: Iterable[MessageKey], requester: str, now_ms: int
    ) -> list[ReplicaAction]:
        """`transfer_requested` of each key in turn (one request frame), as one engine step."""
        self._index_all()
        if not self.tracks_ownership or requester == self.here:
            return []
        engine = self.engine
        handle = self.ownership.handle
        out = self._due_first(now_ms)
        moves: list[OwnershipMoved] = []
        for key in keys:
            txid = engine.txid_of(key)
            held = txid is not None and engine.held_here(txid)
            event = TransferRequested(key, requester, held)
            self._ownership_actions(handle(event, now_ms), now_ms, out, moves)
            self._settle_asked(key)
        self._move(moves, now_ms, out)
        return out

    def handle(self, event: EngineInput, now_ms: int) -> list[ReplicaAction]:
        """Subscriptions, disconnects and recovered removals, as the engine takes them. During
        a staged restore a subscription is served from the engine alone (Rule 7)."""
        if isinstance(event, MessageRemoved):
            self._index_all()
            if event.txid is not None:
                key = self._key_of.get(event.txid)
                keys = [] if key is None else [key]
            else:
                assert event.bookmark is not None
                keys = [event.bookmark]
            self._removed_silently(keys, now_ms)
        out: list[ReplicaAction] = []
        self._engine_actions(self.engine.handle(event, now_ms), now_ms, out)
        self._request_waiting(now_ms, out)
        return out

    def on_deadline(self, now_ms: int) -> list[ReplicaAction]:
        """Leases and expirations (engine), unanswered requests, and waiting messages that
        became old enough to ask for (R4)."""
        out: list[ReplicaAction] = []
        if self.tracks_ownership:
            due = self._ownership.next_deadline_ms()  # none during a staged restore
            if due is not None and due <= now_ms:
                moves: list[OwnershipMoved] = []
                self._ownership_actions(self.ownership.on_deadline(now_ms), now_ms, out, moves)
                self._move(moves, now_ms, out)
                self._requeue_refused()  # the requests that timed out were refused
        self._engine_actions(self.engine.on_deadline(now_ms), now_ms, out)
        self._request_waiting(now_ms, out)
        return out

    def reachability_changed(self, unreachable: Iterable[str], now_ms: int) -> list[ReplicaAction]:
        """The owners not heard from, by any path, within the configured interval (R7)."""
        self._index_all()
        self.ownership.unreachable = frozenset(unreachable) - {self.here}
        out: list[ReplicaAction] = []
        self._request_waiting(now_ms, out)
        return out

    def proxied_transfer_switched(self, enabled: bool, now_ms: int) -> list[ReplicaAction]:
        """An administrator switched proxied transfer for this queue here (R7). Switching it
        on moves nothing by itself; a waiting local taker then claims instead of asking."""
        self._index_all()
        self.ownership.proxied_transfer = enabled and self.tracks_ownership
        out: list[ReplicaAction] = []
        self._request_waiting(now_ms, out)
        return out

    def check_invariants(self) -> None:
        """Cross-checks of the engine, the machine and the glue; for tests and simulation."""
        self._index_all()
        self.engine.check_invariants()
        if not self.tracks_ownership:
            return
        self.ownership.check_invariants()
        assert not self._asked.keys() & self._waiting.keys()
        for key, (txid, _, _) in (*self._waiting.items(), *self._asked.items()):
            assert self.engine.txid_of(key) == txid, (key, txid)
            assert not self.ownership.owned_here(key), key
        for key in self._asked:
            assert self.ownership.state_of(key) is OwnershipState.REQUESTED, key
        for txid, key in self._key_of.items():
            if self.engine.txid_of(key) == txid and not self.engine.is_barrier(txid):
                assert self.engine.owned_here(txid) == self.ownership.owned_here(key), key

    # -- glue ------------------------------------------------------------------------------

    def _own_removed(self, txids: Sequence[int], now_ms: int) -> None:
        """`_removed_silently` of this instance's own removals by txid (those it indexed)."""
        key_of = self._key_of
        known = [t for t in txids if t in key_of]
        self._removed_silently(list(map(key_of.__getitem__, known)), now_ms, known=known)

    def _removed_silently(
        self,
        keys: list[MessageKey],
        now_ms: int,
        *,
        sample: bool = False,
        known: list[int] | None = None,
    ) -> list[int | None]:
        """Messages that leave without a record of this instance's own: the machine forgets
        them; a peer's ack of one that waited here is a latency sample (R4). Returns each
        one's txid in the queue here, or None (none at all without ownership). `known`: the
        keys' txids, when the caller has them (a removal record of this instance's own)."""
        if not self.tracks_ownership:
            return []
        asked = self._asked
        if asked and not asked.keys().isdisjoint(keys):
            return [self._removed_one(key, now_ms, sample) for key in keys]
        # The usual step (a peer's acks of messages that wait here): in bulk.
        waited = list(map(self._waiting.pop, keys, repeat(None)))
        if sample:
            self._sample(waited, now_ms)
        txids: list[int | None]
        if known is not None:
            txids = list(known)
        else:
            txid_of = self.engine.txid_of
            txids = [
                txid_of(key) if found is None else found[0]
                for key, found in zip(keys, waited, strict=True)
            ]
        key_of = self._key_of
        for txid in txids:
            if txid is not None:
                key_of.pop(txid, None)
        self._ownership.remove_many(keys)  # not the property: a staged restore's last steps
        return txids

    def _removed_one(self, key: MessageKey, now_ms: int, sample: bool) -> int | None:
        """`_removed_silently` of one message, which may be one we asked for."""
        asked = self._asked.pop(key, None)
        if asked is not None and sample:
            # It left elsewhere while we asked: the owner kept it for its own consumer
            # (a refusal, learned before the request times out).
            owner = self._ownership.owner_of(key)
            if owner is not None:
                self.latencies.of(owner[0]).refused()
        waited = asked or self._waiting.pop(key, None)
        if sample:
            self._sample([waited], now_ms)
        # A waiting or asked-for message is in the queue under the txid it waits with.
        txid = self.engine.txid_of(key) if waited is None else waited[0]
        if txid is not None:
            self._key_of.pop(txid, None)
        self._ownership.remove(key)
        return txid

    def _sample(self, waited: list[tuple[int, int, str] | None], now_ms: int) -> None:
        """R4: the waits of messages a replicated ack removed, to their owners' estimators
        (one owner per step, usually); a message whose wait no estimator tracks ("") none."""
        owners = {found[2] for found in waited if found is not None}
        owners.discard("")
        for owner in owners:
            waits = [
                max(0, now_ms - found[1])
                for found in waited
                if found is not None and found[2] == owner
            ]
            self.latencies.of(owner).acked_after(waits)

    def _engine_actions(
        self, actions: list[EngineAction], now_ms: int, out: list[ReplicaAction]
    ) -> None:
        """Pass the engine's actions on; a message that left tells the ownership machine."""
        if self._unindexed is not None and any(type(a) is RecordRemoval for a in actions):
            self._index_all()  # a staged restore's index must hold the message to forget it
        if self.tracks_ownership:
            pop = self._key_of.pop
            found = [pop(a.txid, None) for a in actions if type(a) is RecordRemoval]
            if None in found:
                found = [key for key in found if key is not None]
            keys = cast("list[MessageKey]", found)
            if keys:
                if self._waiting or self._asked:
                    for key in keys:
                        self._forget(key)
                self.ownership.remove_many(keys)
        out.extend(actions)

    def _ownership_actions(
        self,
        actions: list[OwnershipAction],
        now_ms: int,
        out: list[ReplicaAction],
        moves: list[OwnershipMoved],
    ) -> None:
        """Collect `Offer` and `Withdraw` as engine moves (performed by `_move`, once per step,
        so their deliveries come after every record of the step); pass the rest on, in order."""
        for action in actions:
            if isinstance(action, Offer):
                self._forget(action.key)
                moves.append(OwnershipMoved(action.key, owned_here=True))
            elif isinstance(action, Withdraw):
                moves.append(OwnershipMoved(action.key, owned_here=False))
                txid = self.engine.txid_of(action.key)
                if txid is not None:
                    self._waiting[action.key] = (txid, now_ms, "")
            else:
                out.append(action)
                if isinstance(action, (AppendOwnership, SendOwnership)):
                    self._after_record(action.record.key, now_ms)

    def _due_first(self, now_ms: int) -> list[ReplicaAction]:
        """The engine's work that is due (expiry, leases) before a step's ownership decisions,
        whose moves reach the engine only at the step's end: a message its owner expires now
        is removed (and its removal logged) before a grant could name it."""
        out: list[ReplicaAction] = []
        self._engine_actions(self.engine.on_deadline(now_ms), now_ms, out)
        return out

    def _move(self, moves: list[OwnershipMoved], now_ms: int, out: list[ReplicaAction]) -> None:
        """Perform a step's ownership moves on the engine, in order, as one engine step."""
        if moves:
            self._engine_actions(self.engine.handle_many(moves, now_ms), now_ms, out)

    def _after_record(self, key: MessageKey, now_ms: int) -> None:
        """A grant or claim was made here: keep `_waiting` in step with who owns the key."""
        if self.ownership.owned_here(key):
            self._forget(key)
            return
        txid = self.engine.txid_of(key)
        if txid is not None and key not in self._waiting and key not in self._asked:
            self._waiting[key] = (txid, now_ms, "")

    def _forget(self, key: MessageKey) -> None:
        """The message waits here no longer (owned here now, or gone)."""
        if self._asked.pop(key, None) is None:
            self._waiting.pop(key, None)

    def _settle_asked(self, key: MessageKey) -> None:
        """The machine handled an event for `key`: if it was asked for and the request is
        over without the message coming here (refused, or granted to another), the message
        goes to the back of the waiting order, so the next requests try other messages
        first (an owner that keeps one message for its own subscriber must not stall the
        rest). A grant to here already forgot it (`Offer`)."""
        waited = self._asked.get(key)
        if waited is not None and self.ownership.state_of(key) is not OwnershipState.REQUESTED:
            del self._asked[key]
            self._waiting[key] = waited

    def _requeue_refused(self) -> None:
        """`_settle_asked` for every outstanding request that timed out: a refusal (R4: the
        owner's estimator waits longer again)."""
        ownership = self.ownership
        requested = OwnershipState.REQUESTED
        for key in [k for k in self._asked if ownership.state_of(k) is not requested]:
            owner = ownership.owner_of(key)
            if owner is not None:
                self.latencies.of(owner[0]).refused()
            self._settle_asked(key)

    def _request_waiting(self, now_ms: int, out: list[ReplicaAction]) -> None:
        """Rule 4: ask the owners for waiting messages that local subscribers could take.

        Waiting messages are in arrival order, so the scan stops at the first one that has not
        waited long enough (one owner's later message may wait up to the difference of two
        owners' estimates longer than it would have to); at most `max_scan` are looked at.
        """
        self._scan_deadline_ms = None
        if not self._waiting or self._unindexed is not None:
            return  # a staged restore asks once its last step has put every message in order
        engine = self.engine
        ownership = self.ownership
        room = engine.free_backlog() - len(self._asked)
        if room <= 0:
            return  # a step that frees backlog (or a refusal) runs this again
        wanted: list[MessageKey] = []
        for key, (txid, arrived_ms, _) in islice(self._waiting.items(), self.options.max_scan):
            owner = ownership.owner_of(key)
            if owner is None:
                continue  # left meanwhile; `_forget` drops it
            ready_ms = arrived_ms + self.latencies.of(owner[0]).estimate_ms() + 1
            if now_ms < ready_ms:
                self._scan_deadline_ms = ready_ms
                break
            if engine.has_taker(txid):
                wanted.append(key)
                if len(wanted) >= room:
                    break
        requested = OwnershipState.REQUESTED
        waiting = self._waiting
        asked = self._asked
        moves: list[OwnershipMoved] = []
        for key in wanted:
            self._ownership_actions(ownership.handle(TakerWaiting(key), now_ms), now_ms, out, moves)
            if ownership.state_of(key) is requested:
                asked[key] = waiting.pop(key)
        self._move(moves, now_ms, out)


class _Removal(NamedTuple):
    """A removal a staged restore applied to the engine only; the index takes it later."""

    keys: list[MessageKey] | None  # a peer's, by bookmark; None for this instance's own
    txids: list[int]  # the messages' txids (a peer's: each one's in the queue here)
    now_ms: int


@dataclass(slots=True)
class _Unindexed:
    """What a staged restore has yet to index: `tracked[done:]`, then `removals` (Rule 7)."""

    tracked: Sequence[int]  # the txids of the messages ownership tracks, increasing
    flags: bytes  # 1 for each owned elsewhere (waiting here)
    bookmarks: tuple[BookmarkRun, ...]  # each publisher's bookmarks, txids increasing
    moved_at: dict[int, str]  # position of a moved message -> the owner its wait tracks
    moved_positions: list[int]  # sorted
    runs: list[tuple[int, str]]  # initial owners over `tracked`: (count, owner)
    starts: list[int]  # each run's first position, and the end
    now_ms: int  # when the restored messages started to wait
    done: int = 0
    indexed: bool = False  # the last step ran
    removals: deque[_Removal] = field(default_factory=deque)  # oldest first


def _check_bookmarks(
    bookmarks: Sequence[BookmarkRun], count: int, removed: Sequence[MessageKey]
) -> None:
    """What a staged restore's steps rely on, checked before anything is served: the runs
    (one per publisher, its seqs and txids increasing as the engine's index keeps them) name
    `count` messages, none of them one the ownership remembers removed. ValueError otherwise
    (the caller replays the log)."""
    if sum(len(run.txids) for run in bookmarks) != count:
        raise ValueError("the queue snapshot lacks a message's bookmark")
    runs = {run.publisher_id: run for run in bookmarks if run.seqs}
    if len(runs) != len(bookmarks) or any(len(r.seqs) != len(r.txids) for r in bookmarks):
        raise ValueError("the queue snapshot's bookmarks do not pair up")
    if not removed:
        return
    removed_publishers, removed_seqs = zip(*removed, strict=True)
    publishers = set(removed_publishers).intersection(runs)
    if len(publishers) > _BULK_CHECK_PUBLISHERS:  # a pass per publisher would cost more
        for publisher_id, seq in removed:
            live = runs.get(publisher_id)
            if live is not None and live.seqs[0] <= seq <= live.seqs[-1]:
                at = bisect_left(live.seqs, seq)
                if live.seqs[at] == seq:
                    raise ValueError("ownership snapshot holds a removed message")
        return
    for publisher_id in publishers:  # each publisher's removed seqs against its live ones
        seqs = set(compress(removed_seqs, map(publisher_id.__eq__, removed_publishers)))
        live_seqs = runs[publisher_id].seqs
        first = bisect_left(live_seqs, min(seqs))
        last = bisect_right(live_seqs, max(seqs), first)
        if not seqs.isdisjoint(live_seqs[first:last]):
            raise ValueError("ownership snapshot holds a removed message")
