"""Who owns each message of one replicated queue, as seen from one instance (R2-R5, R7). [core]

Rules (h11 style; read them before changing anything below):

Rule 1: only this file decides who owns a message. The queue engine asks it through the
        `owned_here` hook; the adapter turns its actions into log records and link frames.
Rule 2: this file does not know which instance it runs on beyond the name `here` and peer names.
Rule 3: every message has an owner and an epoch. The initial owner holds epoch 0 (`Queue`: the
        instance where a client published it; `GroupLocalQueue`: its `InitialOwner`). Every
        grant or proxied claim writes a record with the epoch one higher. Of two records for
        one message the higher epoch wins on every instance, then the lower owner name, so all
        copies converge on one owner whatever order the records arrive in (seed 004's warning:
        a proxied claim racing a grant; the loser may already have delivered it: that duplicate
        is the documented one). A publisher that fails over republishes a message its dead
        instance logged but had not acked, so two copies of one message may each have an
        epoch-0 owner (their origins): every instance sees both (one is discarded as an L4
        duplicate, whose origin the adapter reports), and an ORIGIN record (epoch 0, written
        by and naming the lower origin) makes the lower name win there too, durably.
Rule 4: the first-request rule (R5). The owner grants only the first request it receives while
        it owns the message, and only when the message is neither leased here nor takeable by a
        local subscriber. A refusal is silence and does not use the first request up; once it
        granted, it owns nothing to grant (state GRANTED) and later requests are silence.
Rule 5: the ordering contract (written again on `Action`): an `AppendOwnership` must be durable
        in the local log before any later `SendOwnership` or `Offer` of the same list is
        performed. A grant sent but not logged would let two instances deliver the message
        after a crash.
Rule 6: proxied transfer (R7) acts only when it is enabled for the queue here and the current
        owner is in `unreachable` (the adapter's reachability table). Enabling it moves nothing:
        only a waiting local taker or a peer's request does.
Rule 7: an illegal (state, event) pair raises `OwnershipProtocolError` and changes nothing.

States of a message here (`OwnershipState`):

- OWNED_HERE: this instance owns it (initial owner, or a grant named it); it may deliver it.
- CLAIMED_BY_PROXY: this instance took it by a proxied claim; it may deliver it.
- OWNED_ELSEWHERE: another instance owns it; it is not delivered here.
- REQUESTED: owned elsewhere and this instance asked the owner for it; a refusal is silence,
  so after `request_timeout_ms` it is OWNED_ELSEWHERE again and may be asked for again.
- GRANTED: this instance owned it (or proxied for its owner) and granted it away.
- REMOVED: acknowledged or removed anywhere; nothing moves it any more.
"""

from __future__ import annotations

import heapq
from array import array
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import repeat
from operator import attrgetter, itemgetter

from amps.errors import OwnershipProtocolError

MessageKey = tuple[int, int]
"""A message's name on every instance: its bookmark (publisher id, sequence), as acks name it."""


class OwnershipState(Enum):
    OWNED_HERE = "owned_here"
    OWNED_ELSEWHERE = "owned_elsewhere"
    REQUESTED = "requested"
    GRANTED = "granted"
    CLAIMED_BY_PROXY = "claimed_by_proxy"
    REMOVED = "removed"


class TransferKind(Enum):
    GRANT = "grant"  # the owner (or a proxy) gives the message to `owner`
    CLAIM = "claim"  # a proxy takes the message for itself (R7)
    ORIGIN = "origin"  # a second epoch-0 owner: a copy published there too (issue 9)


@dataclass(frozen=True, slots=True)
class OwnershipRecord:
    """A grant or claim as logged and replicated: `by` wrote it, `owner` owns from `epoch` on."""

    key: MessageKey
    kind: TransferKind
    by: str
    owner: str
    epoch: int


# -- events: facts, in the past tense ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageEntered:
    """The queue took a message; `owner` is its initial owner (epoch 0)."""

    key: MessageKey
    owner: str


@dataclass(frozen=True, slots=True)
class TakerWaiting:
    """A local subscription with backlog room matches the message and it has waited here
    longer than the owner's transfer latency (R4). The adapter decides both conditions."""

    key: MessageKey


@dataclass(frozen=True, slots=True)
class TransferRequested:
    """A peer asked for the message. `held_here`: it is leased here or a local subscriber can
    take it now (then the owner refuses, R5)."""

    key: MessageKey
    requester: str
    held_here: bool


@dataclass(frozen=True, slots=True)
class OwnershipRecorded:
    """A grant or claim was read: replicated from a peer, or replayed from the local log."""

    record: OwnershipRecord


@dataclass(frozen=True, slots=True)
class RequestExpired:
    """This instance's request went unanswered for `request_timeout_ms` (from `on_deadline`)."""

    key: MessageKey


@dataclass(frozen=True, slots=True)
class Removed:
    """The message left the queue (acked anywhere, expired or dead-lettered by its owner)."""

    key: MessageKey


Event = (
    MessageEntered | TakerWaiting | TransferRequested | OwnershipRecorded | RequestExpired | Removed
)

# -- the transition table ---------------------------------------------------------------

S = OwnershipState
_OWNED = (S.OWNED_HERE, S.CLAIMED_BY_PROXY)
_LIVE = (S.OWNED_HERE, S.OWNED_ELSEWHERE, S.REQUESTED, S.GRANTED, S.CLAIMED_BY_PROXY)
_RECORD_TARGETS = frozenset({S.OWNED_HERE, S.CLAIMED_BY_PROXY, S.GRANTED, S.OWNED_ELSEWHERE})

TRANSITIONS: dict[tuple[OwnershipState, type[Event]], frozenset[OwnershipState]] = {
    # A message enters once; an ack that came first (deferred) leaves it removed.
    (S.REMOVED, MessageEntered): frozenset({S.REMOVED}),
    # A waiting local taker: ask the owner, or claim by proxy when it is unreachable (R4, R7).
    (S.OWNED_ELSEWHERE, TakerWaiting): frozenset({S.REQUESTED, S.CLAIMED_BY_PROXY}),
    (S.GRANTED, TakerWaiting): frozenset({S.REQUESTED, S.CLAIMED_BY_PROXY}),
    (S.REQUESTED, TakerWaiting): frozenset({S.REQUESTED, S.CLAIMED_BY_PROXY}),
    (S.REMOVED, TakerWaiting): frozenset({S.REMOVED}),
    # A peer's request: the owner grants the first one it can (R5); a proxy grants for an
    # unreachable owner (R7); everything else is silence (the state stays).
    (S.OWNED_HERE, TransferRequested): frozenset({S.GRANTED, S.OWNED_HERE}),
    (S.CLAIMED_BY_PROXY, TransferRequested): frozenset({S.GRANTED, S.CLAIMED_BY_PROXY}),
    (S.OWNED_ELSEWHERE, TransferRequested): frozenset({S.GRANTED, S.OWNED_ELSEWHERE}),
    (S.REQUESTED, TransferRequested): frozenset({S.GRANTED, S.REQUESTED}),
    (S.GRANTED, TransferRequested): frozenset({S.GRANTED}),
    (S.REMOVED, TransferRequested): frozenset({S.REMOVED}),
    # A grant or claim read from a peer or the log: the winner by Rule 3 decides the state.
    **{(s, OwnershipRecorded): _RECORD_TARGETS | {s} for s in _LIVE},
    (S.REMOVED, OwnershipRecorded): frozenset({S.REMOVED}),
    (S.REQUESTED, RequestExpired): frozenset({S.OWNED_ELSEWHERE}),
    **{(s, Removed): frozenset({S.REMOVED}) for s in (*_LIVE, S.REMOVED)},
}
"""(state, event type) -> the states it may lead to; a pair not here is a protocol error.
OWNED_HERE and CLAIMED_BY_PROXY never see `TakerWaiting` (the engine delivers what it owns),
and only REQUESTED has a request to expire."""


# -- actions: imperatives, in list order --------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendOwnership:
    """Write the grant or claim to the local log (it replicates like every record)."""

    record: OwnershipRecord


@dataclass(frozen=True, slots=True)
class SendOwnership:
    """Send the logged record to every instance holding the queue (R5)."""

    record: OwnershipRecord


@dataclass(frozen=True, slots=True)
class SendTransferRequest:
    """Ask `owner` for the message (forwarded by passthrough when it is not a neighbour)."""

    key: MessageKey
    owner: str


@dataclass(frozen=True, slots=True)
class Offer:
    """The message is owned here now: the engine may deliver it."""

    key: MessageKey


@dataclass(frozen=True, slots=True)
class Withdraw:
    """The message is no longer owned here: the engine must not deliver it again."""

    key: MessageKey


Action = AppendOwnership | SendOwnership | SendTransferRequest | Offer | Withdraw
"""Ordering contract (raft `Ready`): every `AppendOwnership` in a list must be durable in the
local log before any `SendOwnership` or `Offer` after it in the same list is performed.
`Withdraw` is local and immediate; `SendTransferRequest` is never logged (a lost request is a
refusal, and the requester asks again)."""


@dataclass(frozen=True, slots=True)
class OwnershipStatistics:
    """Counters and gauges of one queue's ownership here (metrics and `amps admin queues`)."""

    owned: int
    transferred_in: int
    transferred_out: int
    requests_sent: int
    requests_granted: int
    requests_unanswered: int
    proxied_claims: int
    superseded_records: int


@dataclass(frozen=True, slots=True)
class OwnershipSnapshot:
    """The ownership state of one queue here, so a restart restores it instead of replaying
    the log (Q16). Sparse: every live message holds its initial owner at epoch 0 (the caller
    knows which: `restore`'s `initial`) except the *moved* ones, those a grant, claim or
    origin record changed, stored here as columns; so taking it costs what changed, not the
    size of the queue.

    A request in flight is not kept: requests are never logged, and a lost one is a refusal
    (REQUESTED is stored as OWNED_ELSEWHERE). Counters start again from zero."""

    names: tuple[str, ...]
    """Instance names; `owners` and the records' instances are indexes into it."""
    live: int
    """Live messages tracked (entered and not removed), moved or not."""
    publisher_ids: array[int]
    """The moved messages' keys, their states, owners and epochs, as columns."""
    seqs: array[int]
    states: bytes
    """One `STATE_CODES` index per moved message."""
    owners: array[int]
    epochs: array[int]
    early: tuple[OwnershipRecord, ...]
    """Grants and claims that came before their message, oldest first."""
    removed: tuple[MessageKey, ...]
    """Removed messages remembered (late events for them are not unknown), oldest first."""


STATE_CODES = (
    OwnershipState.OWNED_HERE,
    OwnershipState.OWNED_ELSEWHERE,
    OwnershipState.GRANTED,
    OwnershipState.CLAIMED_BY_PROXY,
)
"""The states a snapshot stores, by code (REQUESTED is stored as OWNED_ELSEWHERE)."""
_CODE_OF = {state: code for code, state in enumerate(STATE_CODES)}
_CODE_OF[OwnershipState.REQUESTED] = _CODE_OF[OwnershipState.OWNED_ELSEWHERE]
_BAD_CODES = bytes(0 if b < len(STATE_CODES) else 1 for b in range(256))


@dataclass(slots=True)
class _Entry:
    state: OwnershipState
    owner: str
    epoch: int
    request_deadline_ms: int = 0


def wins(record: OwnershipRecord, epoch: int, owner: str) -> bool:
    """Rule 3: does `record` beat the current (epoch, owner)? Higher epoch, then lower name."""
    return record.epoch > epoch or (record.epoch == epoch and record.owner < owner)


class Ownership:
    """The ownership machine of one replicated queue on the instance `here`. No I/O, no clock."""

    def __init__(
        self,
        here: str,
        *,
        request_timeout_ms: int,
        max_early_records: int = 65_536,
        max_removed_remembered: int = 65_536,
    ) -> None:
        assert here
        assert request_timeout_ms > 0
        assert max_early_records > 0
        assert max_removed_remembered > 0
        self.here = here
        self.request_timeout_ms = request_timeout_ms
        self.proxied_transfer = False  # R7, switched by an administrator
        self.unreachable: frozenset[str] = frozenset()  # owners not heard from lately (R7)
        self._entries: dict[MessageKey, _Entry] = {}
        # Records for messages not entered yet (a grant can overtake the publish on another
        # path); applied when the message enters. Bounded: the oldest is dropped first.
        self._early: OrderedDict[MessageKey, OwnershipRecord] = OrderedDict()
        self._max_early = max_early_records
        # Removed messages, so late events for them are told apart from unknown ones.
        self._removed: OrderedDict[MessageKey, None] = OrderedDict()
        self._max_removed = max_removed_remembered
        self._deadlines: list[tuple[int, MessageKey]] = []
        # A restore shares one entry among the messages of equal (state, owner, epoch), so it
        # builds no object per message; a shared entry is copied before it changes.
        self._shared: dict[int, _Entry] = {}  # id -> entry, kept alive so ids stay unique
        self._plain: dict[tuple[OwnershipState, str], _Entry] = {}  # enter_many's, shared
        # Live messages a record moved from their initial owner at epoch 0: what a snapshot
        # stores (the rest it derives from the queue's messages and their origins).
        self._moved: set[MessageKey] = set()
        self._unrestored = 0  # live messages a restore has yet to add (`restore_entries`)
        self._owned = 0
        self._transferred_in = 0
        self._transferred_out = 0
        self._requests_sent = 0
        self._requests_granted = 0
        # Every request sent ends answered (granted to here) or unanswered (Rule 4: anything
        # else within the timeout, refusal being silence); the rest are outstanding.
        self._requests_answered = 0
        self._requests_unanswered = 0
        self._proxied_claims = 0
        self._superseded = 0

    # -- queries ---------------------------------------------------------------------------

    def state_of(self, key: MessageKey) -> OwnershipState | None:
        """The message's state here, or None if it never entered (or was forgotten)."""
        entry = self._entries.get(key)
        if entry is not None:
            return entry.state
        return S.REMOVED if key in self._removed else None

    def owned_here(self, key: MessageKey) -> bool:
        """The engine's hook (R2): only messages owned here are delivered."""
        entry = self._entries.get(key)
        return entry is not None and entry.state in (S.OWNED_HERE, S.CLAIMED_BY_PROXY)

    def owner_of(self, key: MessageKey) -> tuple[str, int] | None:
        """(owner, epoch) of a live message."""
        entry = self._entries.get(key)
        return None if entry is None else (entry.owner, entry.epoch)

    def not_removed(self, keys: list[MessageKey]) -> list[MessageKey]:
        """The keys whose state is not REMOVED, in order (usually all: one C-level check)."""
        removed = self._removed
        if removed.keys().isdisjoint(keys):
            return keys
        entries = self._entries
        return [key for key in keys if key in entries or key not in removed]

    def moved(self) -> Collection[MessageKey]:
        """The live messages a grant, claim or origin record moved from their initial owner
        at epoch 0 (what a snapshot stores of each)."""
        return self._moved

    def awaits(self, key: MessageKey) -> bool:
        """Whether a grant or claim for the message came before it and waits for it here."""
        return key in self._early

    def live_count(self) -> int:
        """Messages whose ownership is tracked here (entered and not removed)."""
        return len(self._entries) + self._unrestored

    def statistics(self) -> OwnershipStatistics:
        return OwnershipStatistics(
            owned=self._owned,
            transferred_in=self._transferred_in,
            transferred_out=self._transferred_out,
            requests_sent=self._requests_sent,
            requests_granted=self._requests_granted,
            requests_unanswered=self._requests_unanswered,
            proxied_claims=self._proxied_claims,
            superseded_records=self._superseded,
        )

    # -- events ----------------------------------------------------------------------------

    def handle(self, event: Event, now_ms: int) -> list[Action]:
        """Apply one event; return what the adapter must do, in order (see `Action`)."""
        state = self._state_for(event)
        if state is not None and (state, type(event)) not in TRANSITIONS:
            raise OwnershipProtocolError(
                f"{type(event).__name__} for message {event_key(event)} in state "
                f"{state.value} on {self.here}"
            )
        actions: list[Action] = []
        match event:
            case MessageEntered():
                self._on_entered(event)
            case TakerWaiting():
                self._on_taker_waiting(event, now_ms, actions)
            case TransferRequested():
                self._on_requested(event, actions)
            case OwnershipRecorded():
                self._on_recorded(event.record, actions)
            case RequestExpired():
                self._on_request_expired(event)
            case Removed():
                self._on_removed(event)
        if state is not None:
            after = self.state_of(event_key(event))
            assert after in TRANSITIONS[(state, type(event))], (state, event, after)
        return actions

    def enter(self, key: MessageKey, owner: str) -> None:
        """`handle(MessageEntered(key, owner))` for a message unknown here or removed (the
        hot path: every message; those are the only legal states, so no table look-up)."""
        entry = self._entries.get(key)
        if entry is not None:
            raise OwnershipProtocolError(
                f"MessageEntered for message {key} in state {entry.state.value} on {self.here}"
            )
        self._on_entered(MessageEntered(key, owner))

    def enter_many(self, keys: list[MessageKey], owner: str) -> bool:
        """`enter(key, owner)` of each key, in bulk, when every key is new here (neither
        entered, nor removed, nor awaited by an early record) and appears once: the usual
        publish step. False, changing nothing, otherwise (then enter them one by one)."""
        entries = self._entries
        if (
            not entries.keys().isdisjoint(keys)
            or (self._removed and not self._removed.keys().isdisjoint(keys))
            or (self._early and not self._early.keys().isdisjoint(keys))
            or len(set(keys)) != len(keys)
        ):
            return False
        assert owner
        here = owner == self.here
        state = S.OWNED_HERE if here else S.OWNED_ELSEWHERE
        # One entry shared by every message entered alike (copied before one changes, as a
        # restore shares them): no object per message.
        entry = self._plain.get((state, owner))
        if entry is None:
            entry = self._plain[(state, owner)] = _Entry(state, owner, 0)
            self._shared[id(entry)] = entry
        entries.update(zip(keys, repeat(entry)))
        if here:
            self._owned += len(keys)
        return True

    def remove(self, key: MessageKey) -> None:
        """`handle(Removed(key))` (the hot path: every ack; legal in every state)."""
        early = self._early
        if early:
            early.pop(key, None)
        entry = self._entries.pop(key, None)
        if entry is not None:
            state = entry.state
            if state in _OWNED:
                self._owned -= 1
            elif state is S.REQUESTED:
                self._requests_unanswered += 1  # it left while we asked: never granted to us
        moved = self._moved
        if moved:
            moved.discard(key)
        removed = self._removed
        if key in removed:
            removed.move_to_end(key)
            return
        removed[key] = None
        if len(removed) > self._max_removed:
            removed.popitem(last=False)

    def remove_many(self, keys: list[MessageKey]) -> None:
        """`remove(key)` of each key, in bulk when none is removed already and none appears
        twice (the usual step of acks)."""
        removed = self._removed
        if (
            self._early
            or (removed and not removed.keys().isdisjoint(keys))
            or len(set(keys)) != len(keys)
        ):
            for key in keys:
                self.remove(key)
            return
        popped = list(map(self._entries.pop, keys, repeat(None)))
        outstanding = self._requests_sent - self._requests_answered - self._requests_unanswered
        if self._owned or outstanding:
            states = list(map(attrgetter("state"), filter(None, popped)))
            self._owned -= states.count(S.OWNED_HERE) + states.count(S.CLAIMED_BY_PROXY)
            self._requests_unanswered += states.count(S.REQUESTED)  # never granted to us
        if self._moved:
            self._moved.difference_update(keys)
        removed.update(dict.fromkeys(keys))
        for _ in range(len(removed) - self._max_removed):
            removed.popitem(last=False)

    def next_deadline_ms(self) -> int | None:
        """When the earliest outstanding request goes unanswered, or None."""
        while self._deadlines:
            deadline_ms, key = self._deadlines[0]
            entry = self._entries.get(key)
            live = entry is not None and entry.state is S.REQUESTED
            if live and entry is not None and entry.request_deadline_ms == deadline_ms:
                return deadline_ms
            heapq.heappop(self._deadlines)
        return None

    def on_deadline(self, now_ms: int) -> list[Action]:
        """Expire the requests whose time has come (they were refused: silence)."""
        actions: list[Action] = []
        while (deadline_ms := self.next_deadline_ms()) is not None and deadline_ms <= now_ms:
            _, key = heapq.heappop(self._deadlines)
            actions.extend(self.handle(RequestExpired(key), now_ms))
        return actions

    def check_invariants(self) -> None:
        """Counts agree with the entries; every entry's fields fit its state."""
        owned = requested = 0
        for key, entry in self._entries.items():
            assert entry.state is not S.REMOVED
            assert key not in self._removed
            assert entry.epoch >= 0
            if entry.state in (S.OWNED_HERE, S.CLAIMED_BY_PROXY):
                owned += 1
                assert entry.owner == self.here
            else:
                assert entry.owner != self.here, (key, entry)
            if entry.state is S.REQUESTED:
                assert entry.request_deadline_ms > 0
                requested += 1
            # A snapshot stores only the moved: every other entry is its initial ownership.
            assert key in self._moved or (entry.epoch == 0 and entry.state is not S.GRANTED)
        assert self._moved <= self._entries.keys()
        assert owned == self._owned
        answered = self._requests_answered + self._requests_unanswered
        assert self._requests_sent == answered + requested
        assert len(self._early) <= self._max_early
        assert len(self._removed) <= self._max_removed

    def view(self) -> dict[MessageKey, tuple[OwnershipState, str, int]]:
        """Every live message's (state, owner, epoch); slow, for tests and the simulation."""
        return {key: (e.state, e.owner, e.epoch) for key, e in self._entries.items()}

    def snapshot(self) -> OwnershipSnapshot:
        """The state to restore after a restart: the moved messages only (O(moved))."""
        assert not self._unrestored, "a restore not finished (restore_entries)"
        entries = self._entries
        keys = sorted(self._moved)
        rows = list(map(entries.__getitem__, keys))
        early = tuple(self._early.values())
        names = {self.here, *map(attrgetter("owner"), rows)}
        names.update(n for r in early for n in (r.by, r.owner))
        ordered = tuple(sorted(names))
        index = {name: i for i, name in enumerate(ordered)}
        return OwnershipSnapshot(
            names=ordered,
            live=len(entries),
            publisher_ids=array("Q", map(itemgetter(0), keys)),
            seqs=array("Q", map(itemgetter(1), keys)),
            states=bytes(map(_CODE_OF.__getitem__, map(attrgetter("state"), rows))),
            owners=array("H", map(index.__getitem__, map(attrgetter("owner"), rows))),
            epochs=array("q", map(attrgetter("epoch"), rows)),
            early=early,
            removed=tuple(self._removed),
        )

    @classmethod
    def restore(
        cls,
        here: str,
        snap: OwnershipSnapshot,
        initial: Sequence[tuple[int, str]],
        moved_initial: Sequence[str],
        *,
        request_timeout_ms: int,
        max_early_records: int = 65_536,
        max_removed_remembered: int = 65_536,
    ) -> Ownership:
        """A machine in the state `snap` describes over live messages whose initial owners
        are `initial`, runs of (count, owner) in the order they entered; `moved_initial`: the
        initial owner of each moved message, in the snapshot's order. It knows the moved
        messages now; `restore_entries` adds the others, in order, in steps (a restart serves
        its consumers before it has built one entry per message). ValueError if they do not
        describe one (a damaged snapshot: the caller replays the log instead)."""
        machine = cls(
            here,
            request_timeout_ms=request_timeout_ms,
            max_early_records=max_early_records,
            max_removed_remembered=max_removed_remembered,
        )
        count = sum(map(itemgetter(0), initial))
        if snap.live != count:
            raise ValueError(
                f"ownership snapshot tracks {snap.live} messages, the queue holds {count}"
            )
        names = snap.names
        moved_count = len(snap.states)
        columns = (snap.publisher_ids, snap.seqs, snap.owners, snap.epochs, moved_initial)
        if any(len(c) != moved_count for c in columns):
            raise ValueError("ownership snapshot columns differ in length")
        if moved_count and (max(snap.owners) >= len(names) or min(snap.epochs) < 0):
            raise ValueError("ownership snapshot names an unknown owner or a negative epoch")
        if 1 in snap.states.translate(_BAD_CODES):
            raise ValueError("ownership snapshot has an unknown state")
        owned = sum(run for run, owner in initial if owner == here)
        entries = machine._entries
        keys_moved = zip(snap.publisher_ids, snap.seqs, strict=True)
        moved = zip(keys_moved, snap.states, snap.owners, snap.epochs, moved_initial, strict=True)
        for key, code, owner_index, epoch, first_owner in moved:
            state, owner = STATE_CODES[code], names[owner_index]
            if key in entries:
                raise ValueError(f"ownership snapshot moves message {key}, not held once here")
            if (state in _OWNED) != (owner == here):
                raise ValueError("ownership snapshot owns messages here that name another owner")
            owned += (state in _OWNED) - (first_owner == here)
            entries[key] = _Entry(state, owner, epoch)
        machine._moved = set(entries)
        machine._owned = owned
        machine._unrestored = count - moved_count
        for record in snap.early[-max_early_records:]:
            machine._early[record.key] = record
        machine._removed = OrderedDict.fromkeys(snap.removed[-max_removed_remembered:])
        if not machine._removed.keys().isdisjoint(entries.keys()):
            raise ValueError("ownership snapshot holds a removed message")
        return machine

    @property
    def restoring(self) -> bool:
        """Whether `restore_entries` has messages left to add."""
        return self._unrestored > 0

    def restore_entries(self, keys: list[MessageKey], initial: Sequence[tuple[int, str]]) -> None:
        """Add the next live messages of a restore, `keys` in the order they entered, whose
        initial owners are the runs `initial` (the moved among them keep their restored
        state). A key twice is a ValueError (a damaged snapshot)."""
        entries = self._entries
        shared = self._plain
        rows: list[_Entry] = []
        for run, owner in initial:
            state = S.OWNED_HERE if owner == self.here else S.OWNED_ELSEWHERE
            # Equal entries are shared until one changes (`_unshared`): no object per message.
            entry = shared.get((state, owner))
            if entry is None:
                entry = shared[(state, owner)] = _Entry(state, owner, 0)
                self._shared[id(entry)] = entry
            rows.extend(repeat(entry, run))
        moved = self._moved
        kept = {key: entries[key] for key in moved.intersection(keys)} if moved else {}
        before = len(entries)
        entries.update(zip(keys, rows, strict=True))
        entries.update(kept)
        added = len(entries) - before
        if added != len(keys) - len(kept) or added > self._unrestored:
            raise ValueError("ownership snapshot names a message twice")
        self._unrestored -= added

    # -- handlers --------------------------------------------------------------------------

    def _state_for(self, event: Event) -> OwnershipState | None:
        """The state the table is consulted with; None where the message is unknown here."""
        key = event_key(event)
        state = self.state_of(key)
        if state is None:
            if isinstance(event, (TakerWaiting, RequestExpired)):
                raise OwnershipProtocolError(
                    f"{type(event).__name__} for message {key}, unknown on {self.here}"
                )
            return None
        if isinstance(event, TransferRequested) and event.requester == self.here:
            raise OwnershipProtocolError(f"{self.here} cannot request message {key} from itself")
        if isinstance(event, OwnershipRecorded):
            record = event.record
            origin = record.kind is TransferKind.ORIGIN
            if not record.owner or not record.by or (record.epoch < 1) != origin:
                raise OwnershipProtocolError(f"malformed ownership record {record}")
        return state

    def _on_entered(self, event: MessageEntered) -> None:
        if event.key in self._removed:
            return  # acked before it arrived: it never becomes available
        assert event.owner
        here = event.owner == self.here
        state = S.OWNED_HERE if here else S.OWNED_ELSEWHERE
        self._entries[event.key] = _Entry(state, event.owner, 0)
        self._owned += here
        early = self._early.pop(event.key, None)
        if early is not None:
            self._on_recorded(early, [])  # nothing was offered yet, so no action is owed

    def _on_taker_waiting(self, event: TakerWaiting, now_ms: int, actions: list[Action]) -> None:
        entry = self._entries.get(event.key)
        if entry is None:
            return  # removed: a late wish
        assert entry.owner != self.here
        if self.proxied_transfer and entry.owner in self.unreachable:
            record = OwnershipRecord(
                event.key, TransferKind.CLAIM, self.here, self.here, entry.epoch + 1
            )
            self._apply(event.key, entry, record)
            self._proxied_claims += 1
            actions += [AppendOwnership(record), SendOwnership(record), Offer(event.key)]
            return
        if entry.state is S.REQUESTED:
            return  # asked already; the answer or the timeout comes
        entry = self._unshared(event.key, entry)
        entry.state = S.REQUESTED
        entry.request_deadline_ms = max(1, now_ms + self.request_timeout_ms)
        heapq.heappush(self._deadlines, (entry.request_deadline_ms, event.key))
        self._requests_sent += 1
        actions.append(SendTransferRequest(event.key, entry.owner))

    def _on_requested(self, event: TransferRequested, actions: list[Action]) -> None:
        entry = self._entries.get(event.key)
        if entry is None or entry.state is S.GRANTED or event.requester == entry.owner:
            return  # removed, first request used up, or a stale request: silence
        if entry.state in (S.OWNED_HERE, S.CLAIMED_BY_PROXY):
            if event.held_here:
                return  # R5: a local subscriber comes first; refusal is silence
        elif not (self.proxied_transfer and entry.owner in self.unreachable):
            return  # not ours to give (R7 only for an unreachable owner)
        record = OwnershipRecord(
            event.key, TransferKind.GRANT, self.here, event.requester, entry.epoch + 1
        )
        was_owned = entry.state in (S.OWNED_HERE, S.CLAIMED_BY_PROXY)
        self._apply(event.key, entry, record)
        self._requests_granted += 1
        if was_owned:
            actions.append(Withdraw(event.key))
        actions += [AppendOwnership(record), SendOwnership(record)]

    def _on_recorded(self, record: OwnershipRecord, actions: list[Action]) -> None:
        key = record.key
        if key in self._removed:
            return
        entry = self._entries.get(key)
        if entry is None:
            self._remember_early(record)
            return
        if not wins(record, entry.epoch, entry.owner):
            if (record.epoch, record.owner) != (entry.epoch, entry.owner):
                self._superseded += 1  # a losing claim or grant (Rule 3)
            return
        was_owned = entry.state in (S.OWNED_HERE, S.CLAIMED_BY_PROXY)
        entry = self._apply(key, entry, record)
        now_owned = entry.state in (S.OWNED_HERE, S.CLAIMED_BY_PROXY)
        if was_owned and not now_owned:
            actions.append(Withdraw(key))
        elif now_owned and not was_owned:
            actions.append(Offer(key))

    def _on_request_expired(self, event: RequestExpired) -> None:
        entry = self._unshared(event.key, self._entries[event.key])
        entry.state = S.OWNED_ELSEWHERE
        entry.request_deadline_ms = 0
        self._requests_unanswered += 1

    def _on_removed(self, event: Removed) -> None:
        self.remove(event.key)

    # -- shared transitions ----------------------------------------------------------------

    def _apply(self, key: MessageKey, entry: _Entry, record: OwnershipRecord) -> _Entry:
        """Make `record` the message's ownership here (the caller checked that it wins);
        returns the entry (a copy if it was shared)."""
        entry = self._unshared(key, entry)
        self._moved.add(key)
        was_owned = entry.state in (S.OWNED_HERE, S.CLAIMED_BY_PROXY)
        if entry.state is S.REQUESTED:  # our request is over: a grant to us answers it
            if record.kind is TransferKind.GRANT and record.owner == self.here:
                self._requests_answered += 1
            else:
                self._requests_unanswered += 1
        entry.owner = record.owner
        entry.epoch = record.epoch
        entry.request_deadline_ms = 0
        if record.owner == self.here:
            claimed = record.kind is TransferKind.CLAIM and record.by == self.here
            entry.state = S.CLAIMED_BY_PROXY if claimed else S.OWNED_HERE
        elif record.by == self.here:
            entry.state = S.GRANTED
        else:
            entry.state = S.OWNED_ELSEWHERE
        now_owned = entry.state in (S.OWNED_HERE, S.CLAIMED_BY_PROXY)
        self._owned += now_owned - was_owned
        if was_owned and not now_owned:
            self._transferred_out += 1
        elif now_owned and not was_owned:
            self._transferred_in += 1
        assert self._owned >= 0
        return entry

    def _unshared(self, key: MessageKey, entry: _Entry) -> _Entry:
        """The entry of `key`, copied first if a restore shares it among several messages."""
        if self._shared and id(entry) in self._shared:
            entry = self._entries[key] = _Entry(entry.state, entry.owner, entry.epoch)
        return entry

    def _remember_early(self, record: OwnershipRecord) -> None:
        held = self._early.get(record.key)
        if held is None or wins(record, held.epoch, held.owner):
            self._early[record.key] = record
        if len(self._early) > self._max_early:
            self._early.popitem(last=False)


def event_key(event: Event) -> MessageKey:
    """The message an event is about."""
    if isinstance(event, OwnershipRecorded):
        return event.record.key
    return event.key
