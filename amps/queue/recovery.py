"""Recovery (Q15, Q16): rebuild from the log in one pass, or from a compact snapshot.

Replay: feed `MessagePublished` in txid order and, for each removal record the log holds, a
`MessageRemoved` (by txid or bookmark). No subscription exists during replay, so nothing is
delivered. Leases and delivery/cancel counts are not recovered (as in AMPS).

Snapshot: the live messages' columns plus deferred acks and the high-water txid. Restoring it
and then replaying only records after `high_water_txid` rebuilds the queue with work
proportional to the unacknowledged messages, not to the log length; `low_water_txid` is the
`queues.ack`-style recovery point when no snapshot is kept.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress, islice, repeat
from operator import itemgetter, le, lt

from amps.queue.actions import Action, ExpireReason, RemovalReason
from amps.queue.bookmarks import BookmarkIndex
from amps.queue.bulk import add_constant, and_bytes, or_bytes, select, sorted_members, xor_bytes
from amps.queue.columns import Column, as_array, column_bytes
from amps.queue.events import MessageRemoved
from amps.queue.state import QueueState
from amps.queue.table import (
    AVAILABLE,
    BARRIER,
    ELSEWHERE,
    IN_RETURNED,
    INACTIVE,
    LIVE_MASK,
    NO_EXPIRY,
    OUT_OF_ORDER_EXPIRY,
    REMOVED,
)


@dataclass(frozen=True, slots=True)
class BookmarkRun:
    """One publisher's bookmarks of live messages: seqs and txids, both increasing."""

    publisher_id: int
    seqs: array[int]
    txids: array[int]


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """Live messages as parallel columns (txid order), their bookmarks per publisher, deferred
    acks, and the high-water txid."""

    high_water_txid: int
    txids: array[int]
    timestamps_ms: array[int]
    priorities: array[int]
    barrier_flags: bytes
    expire_at_ms: array[int]
    bookmark_runs: tuple[BookmarkRun, ...]
    """By publisher id; with `unordered_bookmarks`, each live message's bookmark once."""
    unordered_bookmarks: tuple[tuple[int, int, int], ...]
    """(publisher_id, seq, txid) of bookmarks out of their publisher's order (should not
    happen), in txid order."""
    deferred_acks: tuple[tuple[int, int, int], ...]
    """(publisher_id, seq, expires_at_ms)."""
    hints: int = 0
    """What the taker knew about the columns (HINT_*), so restore need not check it row by
    row; 0 (an older snapshot) makes restore verify everything itself."""
    elsewhere_flags: bytes = b""
    """1 for each message another instance owns (R2: kept, never delivered here), 0 else;
    empty when none is (always, for a queue that is not replicated). Not in AQS3: the
    replicated queue's snapshot (`replication/queue_snapshot.py`) stores it."""

    def bookmark_of(self) -> dict[int, tuple[int, int]]:
        """txid -> (publisher_id, seq) of every live message (slow; for tests and tools)."""
        found = {t: (p, s) for p, s, t in self.unordered_bookmarks}
        for run in self.bookmark_runs:
            pairs = zip(repeat(run.publisher_id), run.seqs)
            found.update(zip(run.txids, pairs, strict=True))
        return found


HINT_SEQS_IN_ORDER = 1
"""Each publisher's seqs increase in txid order (no out-of-order bookmark entry); AQS2 only,
where bookmarks were columns in txid order."""
HINT_EXPIRIES_IN_ORDER = 2
"""No message's expiry is earlier than an older message's (no out-of-order expiry)."""
HINT_EXPIRY_DERIVED = 4
"""Every expiry is timestamp + the queue Expiration (or none without one)."""


def on_message_removed(
    state: QueueState, event: MessageRemoved, now_ms: int, actions: list[Action]
) -> None:
    """Replay a removal found in the log: silently, it is already recorded."""
    txid = event.txid
    if txid is None:
        assert event.bookmark is not None
        publisher_id, seq = event.bookmark
        txid = state.bookmarks.find(publisher_id, seq)
        if txid is None:
            unseen = not state.bookmarks.seen(publisher_id, seq)
            if event.reason is RemovalReason.ACKED and unseen:
                state.defer_ack(publisher_id, seq, now_ms)  # the ack came before its message
            return
    # Like the ack that frees the backlog of a sent at-most-once message (Q7): a removal
    # replayed while its subscription is still there (replication) must not leave it held.
    state.release_sent(txid)
    slot = state.table.slot_of(txid)
    if slot >= 0 and state.table.state[slot] != REMOVED:
        state.remove(slot, event.reason, actions, event.expire_reasons, record=False)


def remove_recovered(
    state: QueueState,
    txids: Iterable[int],
    reason: RemovalReason,
    expire_reasons: ExpireReason,
    actions: list[Action],
) -> None:
    """Replay many removals by txid at once: the same end state as one `on_message_removed`
    each, with one tight loop over the rows and the counts and the table head fixed up once.

    Plain rows (AVAILABLE never delivered, or INACTIVE; no barrier; or AVAILABLE and owned by
    another instance, in no list: a peer's copy that its owner's acks remove, R2) are marked
    here; any other row (leased, returned, delivered, a barrier) goes through
    `QueueState.remove`.
    """
    table = state.table
    rows = table.txid
    row_state = table.state
    flags = table.flags
    delivered = table.delivery_count
    priority = table.priority
    sent = state.at_most_once_sent
    base = table.base
    head = table.head  # may fall behind table.head below: it then finds a REMOVED row
    count = len(rows)
    fresh_left: dict[int, int] = {}  # priority -> fresh rows removed here
    gone: set[int] = set()  # txids of the fresh rows removed here
    fresh = inactive = elsewhere = 0
    plain = None if sent else _remove_plain_rows(state, txids)
    if plain is not None:
        inactive, elsewhere, fresh, gone = plain
        txids = ()
    for txid in txids:
        if sent and txid in sent:
            state.release_sent(txid)  # as on_message_removed does
        slot = txid - base
        if not (head <= slot < count and rows[slot] == txid):
            slot = table.slot_of(txid)
            if slot < 0:
                continue
        kind = row_state[slot]
        if kind == REMOVED:
            continue
        if kind == INACTIVE and not flags[slot] & BARRIER:
            row_state[slot] = REMOVED
            inactive += 1
        elif kind == AVAILABLE and flags[slot] & _SLOW_FLAGS == ELSEWHERE:
            row_state[slot] = REMOVED
            flags[slot] ^= ELSEWHERE
            elsewhere += 1
        elif kind == AVAILABLE and not flags[slot] & _SLOW_FLAGS and not delivered[slot]:
            row_state[slot] = REMOVED
            gone.add(txid)
            if priority is None:
                fresh += 1
            else:
                row_priority = priority[slot]
                fresh_left[row_priority] = fresh_left.get(row_priority, 0) + 1
        else:
            state.remove(slot, reason, actions, expire_reasons, record=False)
    if fresh:
        fresh_left[0] = fresh
    removed = inactive + elsewhere + sum(fresh_left.values())
    if not removed:
        return
    table.removed_count += removed
    head = table.head
    while head < count and row_state[head] == REMOVED:
        head += 1
    table.head = head
    state.inactive_count -= inactive
    state.elsewhere_count -= elsewhere
    state.active_count -= removed - inactive - elsewhere
    state.removals_since_check += removed
    state._count_removal(reason, expire_reasons, removed)
    for level_priority, left in fresh_left.items():
        level = state.levels[level_priority]
        level.fresh_live -= left
        column = level.fresh  # as leave_available would: move the head past removed rows
        at = level.head
        while at < len(column) and (column[at] in gone or not state.valid_fresh(column[at])):
            at += 1
        level.head = at


def _remove_plain_rows(
    state: QueueState, txids: Iterable[int]
) -> tuple[int, int, int, set[int]] | None:
    """`remove_recovered`'s loop over many rows at once, when every row is a plain one (or
    REMOVED already) and they lie close together (`MessageTable.select_rows`): their states
    and flags changed a whole slice at a time. Returns (inactive, elsewhere, fresh, the fresh
    rows' txids), or None, changing nothing, for the loop to do it row by row."""
    table = state.table
    if not isinstance(txids, (list, array)):
        return None
    selected = table.select_rows(txids, live=False)
    if selected is None:
        return None
    first, mask = selected
    end = first + len(mask)
    rows, row_state, flags, delivered = table.txid, table.state, table.flags, table.delivery_count
    assert isinstance(rows, array)  # select_rows takes in-memory columns only
    assert isinstance(row_state, bytearray)
    if not isinstance(flags, bytearray) or not isinstance(delivered, array):
        return None
    states, row_flags = bytes(row_state[first:end]), bytes(flags[first:end])
    kinds = or_bytes(states.translate(_STATE_HIGH), row_flags).translate(_PLAIN_KIND)
    picked = bytes(compress(kinds, mask))
    if picked.count(_SLOW):
        return None
    fresh_count = picked.count(_FRESH)
    fresh_mask = b""
    if fresh_count:
        if table.priority is not None:
            return None
        fresh_mask = and_bytes(mask, kinds.translate(_FRESH_ONE))
        if any(compress(delivered[first:end], fresh_mask)):
            return None
    # REMOVED where picked; ELSEWHERE cleared where a picked row was owned elsewhere.
    row_state[first:end] = _where(mask, bytes((REMOVED,)) * len(mask), states)
    elsewhere_bits = and_bytes(mask.translate(_FULL_IF_ONE), kinds.translate(_ELSEWHERE_BIT))
    flags[first:end] = xor_bytes(row_flags, elsewhere_bits)
    gone: set[int] = set(compress(rows[first:end], fresh_mask)) if fresh_count else set()
    return picked.count(_INACTIVE), picked.count(_ELSEWHERE), fresh_count, gone


def _where(mask: bytes, chosen: bytes, other: bytes) -> bytes:
    """`chosen[i] if mask[i] else other[i]` for a mask of 0 and 1 bytes."""
    count = len(mask)
    ones = int.from_bytes(mask.translate(_FULL_IF_ONE), "little")
    picked = int.from_bytes(chosen, "little") & ones
    kept = int.from_bytes(other, "little") & ~ones
    return (picked | kept).to_bytes(count, "little")


def snapshot(state: QueueState) -> QueueSnapshot:
    """Export the live messages; O(live messages), whole columns at a time (no call per row)."""
    table = state.table
    head = table.head
    count = table.live_count
    if table.removed_count == head:  # no holes after the head: the columns' tails as they are
        keep = None
    else:
        keep = column_bytes(table.state, head).translate(LIVE_MASK)

    def pick(column: Column, typecode: str) -> array[int]:
        rows = as_array(column, typecode, head)  # one buffer copy
        return rows if keep is None else select(rows, keep)

    txids = pick(table.txid, "q")
    stamps = pick(table.timestamp_ms, "q")
    assert len(txids) == count
    if table.priority is None:
        priorities = array("Q", bytes(8 * count))
    else:
        priorities = pick(table.priority, "Q")
    flags = pick(table.flags, "B").tobytes()
    barriers = flags.translate(_BARRIER_MASK)
    elsewhere = flags.translate(_ELSEWHERE_MASK) if state.elsewhere_count else b""
    hints = 0
    if 1 not in flags.translate(_OUT_OF_ORDER_MASK):
        hints |= HINT_EXPIRIES_IN_ORDER
    if table.expire_at_ms is not None:
        expiries = pick(table.expire_at_ms, "q")
    else:
        hints |= HINT_EXPIRY_DERIVED
        if state.policy.expiration_ms is None:
            expiries = array("q", [NO_EXPIRY]) * count
        else:
            expiries = add_constant(stamps, state.policy.expiration_ms)
    table_txids = as_array(table.txid, "q", head) if keep is not None else txids
    runs, unordered, indexed = _bookmarks_of(state.bookmarks, txids, table_txids, keep)
    if indexed is not None:  # a duplicate bookmark hid a row (never in a sane log): drop it
        txids, stamps, priorities, expiries = (
            array(c.typecode, compress(c, indexed)) for c in (txids, stamps, priorities, expiries)
        )
        barriers = bytes(compress(barriers, indexed))
        elsewhere = bytes(compress(elsewhere, indexed))
    deferred = tuple(sorted((p, s, at) for (p, s), at in state.deferred.items()))
    return QueueSnapshot(
        state.last_txid, txids, stamps, priorities, barriers, expiries, runs, unordered,
        deferred, hints, elsewhere,
    )  # fmt: skip


def _bookmarks_of(
    bookmarks: BookmarkIndex, txids: array[int], table_txids: array[int], keep: bytes | None
) -> tuple[tuple[BookmarkRun, ...], tuple[tuple[int, int, int], ...], bytes | None]:
    """The index's runs and out-of-order entries cut to the live `txids` (increasing), and
    None, or a mask of the txids indexed if some are not. `txids` are the rows of
    `table_txids` that `keep` selects (all of them without `keep`).

    The index keeps entries of removed messages until its own compaction. Entries older than
    the oldest live message are a prefix of each run (one bisect). Without out-of-order
    entries each live message is in one run once, so if the later entries number the live
    messages they are them; a single run holding the table's rows, holes and all, is cut by
    `keep`; otherwise each run (increasing) is looked up in the live txids (increasing) by
    binary search (`bulk.sorted_members`), or, with out-of-order entries, through a set of
    them, in C (no Python call per entry either way).
    """
    runs, unordered = bookmarks.export()
    if not txids:
        return (), (), None
    first = txids[0]
    starts = {p: bisect_left(run.txids, first) for p, run in runs.items()}
    entries = sum(len(runs[p].txids) - start for p, start in starts.items())
    live: set[int] | None = None
    later: list[tuple[int, int, int]] = []
    if len(runs) == 1 and not unordered and keep is not None and entries == len(table_txids):
        ((publisher_id, run),) = runs.items()
        start = starts[publisher_id]
        run_txids = as_array(run.txids, "q", start)
        if run_txids == table_txids:  # the usual case: one publisher, removed rows not compacted
            seqs = array("Q", compress(as_array(run.seqs, "Q", start), keep))
            return (BookmarkRun(publisher_id, seqs, txids),), (), None
    filtered = bool(unordered) or entries != len(txids)
    if unordered:
        live = set(txids)
        later = [(p, s, t) for (p, s), t in unordered.items() if t in live]
    out = []
    for publisher_id in sorted(runs):
        run = runs[publisher_id]
        start = starts[publisher_id]
        run_txids = as_array(run.txids, "q", start)
        if not filtered:
            run_seqs = as_array(run.seqs, "Q", start)
        else:
            if live is None:
                mask = sorted_members(run_txids, txids)
            else:
                mask = bytes(map(live.__contains__, run_txids))
            run_txids = select(run_txids, mask)  # the live entries come in runs, mostly
            run_seqs = select(as_array(run.seqs, "Q", start), mask)
        if run_txids:
            out.append(BookmarkRun(publisher_id, run_seqs, run_txids))
    later.sort(key=itemgetter(2))
    indexed: bytes | None = None
    if len(later) + sum(len(kept.txids) for kept in out) != len(txids):
        found = {e[2] for e in later}
        for kept in out:
            found.update(kept.txids)
        indexed = bytes(map(found.__contains__, txids))
    return tuple(out), tuple(later), indexed


def restore(state: QueueState, snap: QueueSnapshot, shift_ms: int) -> None:
    """Load a snapshot into an empty engine state, whole columns at a time.

    The result equals inserting each message in txid order (`QueueState.insert`), which the
    unit tests check against that reference; only out-of-order cases (a publisher's seqs not
    increasing, expiries not increasing, many priorities) take a loop over their rows.
    """
    assert state.last_txid < 0
    assert len(state.table) == 0
    count = len(snap.txids)
    policy = state.policy
    table = state.table
    columns = state.columns
    txids = snap.txids
    base = policy.expiration_ms
    uniform = bool(snap.hints & HINT_EXPIRY_DERIVED) or _expiry_is_uniform(base, snap)
    stamps = _shifted(snap.timestamps_ms, shift_ms)
    if uniform:  # derived from the (shifted) timestamps, never stored
        expiries = None if base is None else add_constant(stamps, base)
    else:
        expiries = _shifted(snap.expire_at_ms, shift_ms)
    rows = _row_states(snap, count, policy.target_queue_depth)
    # -- the table
    table.txid = columns("q", txids)
    table.timestamp_ms = columns("q", stamps)
    table.state = columns("B", rows.states)
    if rows.elsewhere:
        barriers = bytes(snap.barrier_flags).translate(_BARRIER_FLAG)
        flags = bytearray(or_bytes(barriers, snap.elsewhere_flags.translate(_ELSEWHERE_FLAG)))
    else:
        flags = bytearray(bytes(snap.barrier_flags).translate(_BARRIER_FLAG))
    table.delivery_count = columns("H", bytes(2 * count))
    table.cancel_count = columns("H", bytes(2 * count))
    table.lease_sub = columns("i", array("i", [-1]) * count)
    if table.priority is not None:
        table.priority = columns("Q", snap.priorities)
    if not uniform:
        assert expiries is not None
        table.expire_at_ms = columns("q", expiries)
    table.base = txids[-1] - (count - 1) if count else 0  # as compact() aims it
    # -- expiry order (as `_track_expiry` would have found it, message by message)
    if expiries is not None:
        in_order = bool(snap.hints & HINT_EXPIRIES_IN_ORDER)
        _track_expiries(state, txids, expiries, flags, in_order=in_order)
    table.flags = columns("B", flags)
    # -- counts, barriers, levels, bookmarks
    state.counters.entered_total += count
    state.active_count = rows.active
    state.inactive_count = count - rows.elsewhere - rows.active
    state.elsewhere_count = rows.elsewhere
    state.activation_slot = rows.activation_slot
    if snap.barrier_flags.count(0) != count:
        state.barriers.extend(compress(txids, snap.barrier_flags))
    if rows.fresh is None:
        fresh, fresh_priorities = txids, snap.priorities
    else:
        fresh = select(txids, rows.fresh)
        fresh_priorities = select(snap.priorities, rows.fresh)
    _fill_levels(state, fresh, fresh_priorities, snap.priorities)
    _fill_bookmarks(state, snap)
    if count:
        state.last_txid = txids[-1]
    state.last_txid = max(state.last_txid, snap.high_water_txid)
    for publisher_id, seq, expires_at_ms in snap.deferred_acks:
        state.deferred[(publisher_id, seq)] = expires_at_ms + shift_ms
        heapq.heappush(state.deferred_heap, (expires_at_ms + shift_ms, publisher_id, seq))


def _shifted(times: array[int], shift_ms: int) -> array[int]:
    """Times moved by `shift_ms`; NO_EXPIRY stays NO_EXPIRY."""
    if not shift_ms:
        return times
    if not _holds_no_expiry(times):
        return add_constant(times, shift_ms)
    return array("q", [t if t == NO_EXPIRY else t + shift_ms for t in times])


def _holds_no_expiry(times: array[int]) -> bool:
    """`NO_EXPIRY in times`, searched for as bytes first (at memchr speed, not an int compared
    per item); only a match, maybe across two words, is confirmed item by item."""
    return _NO_EXPIRY_BYTES in times.tobytes() and NO_EXPIRY in times


def _expiry_is_uniform(base: int | None, snap: QueueSnapshot) -> bool:
    """True when every expiry follows from the queue Expiration (no per-message column)."""
    if base is None:
        return snap.expire_at_ms.count(NO_EXPIRY) == len(snap.expire_at_ms)
    if _holds_no_expiry(snap.expire_at_ms):
        return False
    return add_constant(snap.timestamps_ms, base) == snap.expire_at_ms


def _track_expiries(
    state: QueueState,
    txids: array[int],
    expiries: array[int],
    flags: bytearray,
    *,
    in_order: bool,
) -> None:
    """Mark messages whose expiry is earlier than an older one's (the sweep skips them)."""
    count = len(expiries)
    if in_order or all(map(le, expiries, islice(expiries, 1, None))):
        last = count - 1
        while last >= 0 and expiries[last] == NO_EXPIRY:
            last -= 1
        if last >= 0:
            state.expiry_max_seen_ms = max(state.expiry_max_seen_ms, expiries[last])
        return
    max_seen = state.expiry_max_seen_ms
    heap = state.expiry_heap
    for slot, expire_at_ms in enumerate(expiries):
        if expire_at_ms == NO_EXPIRY:
            continue
        if expire_at_ms < max_seen:
            flags[slot] |= OUT_OF_ORDER_EXPIRY
            heap.append((expire_at_ms, txids[slot]))
        else:
            max_seen = expire_at_ms
    heapq.heapify(heap)
    state.expiry_max_seen_ms = max_seen


@dataclass(frozen=True, slots=True)
class _Rows:
    """How restored rows start: `states` per row; `fresh` marks the rows that join their
    level's fresh list (None: every row does); counts as `QueueState` keeps them."""

    states: bytes
    fresh: bytes | None
    active: int
    elsewhere: int
    activation_slot: int


def _row_states(snap: QueueSnapshot, count: int, target: int | None) -> _Rows:
    """As `QueueState.insert` leaves the rows, in txid order: a row owned elsewhere is
    AVAILABLE and in no level; of the others the first `target` (TargetQueueDepth, A4) are
    AVAILABLE and fresh, the rest INACTIVE; `activation_slot` follows the last activated."""
    marks = snap.elsewhere_flags
    elsewhere = marks.count(1) if marks else 0
    if not elsewhere:
        active = count if target is None else min(count, target)
        states = bytes([AVAILABLE]) * active + bytes([INACTIVE]) * (count - active)
        fresh = None if active == count else bytes([1]) * active + bytes(count - active)
        return _Rows(states, fresh, active, 0, active)
    owned = marks.translate(_NOT_ONE)  # 1 for each row owned here
    active = count - elsewhere if target is None else min(count - elsewhere, target)
    slot = -1
    if target is None:
        slot = owned.rfind(1)
    else:
        for _ in range(active):  # the slot of the last activated row
            slot = owned.find(1, slot + 1)
    cut = slot + 1
    states = bytes([AVAILABLE]) * cut + owned[cut:].translate(_INACTIVE_IF_ONE)
    return _Rows(states, owned[:cut] + bytes(count - cut), active, elsewhere, cut)


def _fill_levels(
    state: QueueState, txids: array[int], priorities: array[int], all_priorities: array[int]
) -> None:
    """`txids` (with their `priorities`) join their level's fresh list, in txid order; every
    priority in `all_priorities` has its level, as inserting each message makes it."""
    if state.table.priority is None:
        level = state.level0
        level.fresh = state.columns("q", txids)
        level.fresh_live = len(txids)
        return
    for priority in sorted(set(all_priorities)):
        state.level_for(priority)
    distinct = sorted(set(priorities))
    groups: dict[int, array[int]]
    if len(distinct) <= 1:
        groups = {distinct[0]: txids} if distinct else {}
    elif len(distinct) <= _BULK_LEVELS:  # one C-level pass per level
        groups = {p: array("q", compress(txids, map(p.__eq__, priorities))) for p in distinct}
    else:
        lists: dict[int, list[int]] = {p: [] for p in distinct}
        for txid, priority in zip(txids, priorities, strict=True):
            lists[priority].append(txid)
        groups = {p: array("q", t) for p, t in lists.items()}
    for priority, fresh in groups.items():
        level = state.levels[priority]
        level.fresh = state.columns("q", fresh)
        level.fresh_live = len(fresh)


def _fill_bookmarks(state: QueueState, snap: QueueSnapshot) -> None:
    """The index `BookmarkIndex.add` would build from the messages in txid order: the runs as
    they are, unless some bookmark is out of its publisher's order (then one `add` each)."""
    index = state.bookmarks
    if not snap.unordered_bookmarks:
        runs = {r.publisher_id: index.new_run(r.seqs, r.txids) for r in snap.bookmark_runs}
        max_seq = {r.publisher_id: r.seqs[-1] for r in snap.bookmark_runs}
        index.load(runs, {}, max_seq)
        return
    for txid, (publisher_id, seq) in sorted(snap.bookmark_of().items()):
        index.add(publisher_id, seq, txid)


def bookmark_runs_of(
    publisher_ids: array[int], seqs: array[int], txids: array[int], *, in_order: bool
) -> tuple[tuple[BookmarkRun, ...], tuple[tuple[int, int, int], ...]]:
    """Bookmarks given as columns in txid order (snapshots before AQS3) as runs per publisher,
    or, if some publisher's seqs do not increase, every one as out of order (`in_order`: the
    taker knew they do)."""
    if not txids:
        return (), ()
    if publisher_ids.count(publisher_ids[0]) == len(publisher_ids):
        distinct = [publisher_ids[0]]
    else:
        distinct = sorted(set(publisher_ids))
    runs = []
    if len(distinct) <= _BULK_PUBLISHERS:
        for publisher_id in distinct:
            if len(distinct) == 1:
                run_seqs, run_txids = seqs, txids
            else:
                mask = bytes(map(publisher_id.__eq__, publisher_ids))
                run_seqs = array("Q", compress(seqs, mask))
                run_txids = array("q", compress(txids, mask))
            if not in_order and not all(map(lt, run_seqs, islice(run_seqs, 1, None))):
                break
            runs.append(BookmarkRun(publisher_id, run_seqs, run_txids))
        else:
            return tuple(runs), ()
    return (), tuple(zip(publisher_ids, seqs, txids, strict=True))


_BULK_LEVELS = 16
_NO_EXPIRY_BYTES = array("q", [NO_EXPIRY]).tobytes()
_SLOW_FLAGS = BARRIER | IN_RETURNED | ELSEWHERE
_BULK_PUBLISHERS = 64
# flags byte -> 1 if BARRIER is set, and snapshot barrier byte -> BARRIER flag
_BARRIER_MASK = bytes(1 if b & BARRIER else 0 for b in range(256))
_BARRIER_FLAG = bytes(BARRIER if b else 0 for b in range(256))
_OUT_OF_ORDER_MASK = bytes(1 if b & OUT_OF_ORDER_EXPIRY else 0 for b in range(256))
_ELSEWHERE_MASK = bytes(1 if b & ELSEWHERE else 0 for b in range(256))
_NOT_ONE = bytes(0 if b == 1 else 1 for b in range(256))
_INACTIVE_IF_ONE = bytes(INACTIVE if b == 1 else AVAILABLE for b in range(256))
# What `remove_recovered` does with a row, by its state (high nibble) and flags (low nibble):
# the three plain kinds its loop marks itself, one already REMOVED (skipped), or any other
# (`QueueState.remove`'s work: leased, returned, delivered before, a barrier).
_SLOW, _SKIP, _INACTIVE, _ELSEWHERE, _FRESH = range(5)
assert max(BARRIER, IN_RETURNED, OUT_OF_ORDER_EXPIRY, ELSEWHERE) < 16


def _plain_kind(state_flags: int) -> int:
    row_state, flags = state_flags >> 4, state_flags & 15
    if row_state == REMOVED:
        return _SKIP
    if row_state == INACTIVE and not flags & BARRIER:
        return _INACTIVE
    if row_state == AVAILABLE and flags & _SLOW_FLAGS == ELSEWHERE:
        return _ELSEWHERE
    if row_state == AVAILABLE and not flags & _SLOW_FLAGS:
        return _FRESH  # if never delivered: checked on the delivery counts
    return _SLOW


_STATE_HIGH = bytes((b << 4) & 0xFF for b in range(256))
_PLAIN_KIND = bytes(_plain_kind(b) for b in range(256))
_FRESH_ONE = bytes(1 if b == _FRESH else 0 for b in range(256))
_ELSEWHERE_BIT = bytes(ELSEWHERE if b == _ELSEWHERE else 0 for b in range(256))
_FULL_IF_ONE = bytes(0xFF if b == 1 else 0 for b in range(256))
# snapshot elsewhere byte -> ELSEWHERE flag (1 marks a row owned elsewhere, as `_row_states`
# counts them; a barrier is never owned elsewhere)
_ELSEWHERE_FLAG = bytes(ELSEWHERE if b == 1 else 0 for b in range(256))
