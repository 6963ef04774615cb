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
from dataclasses import dataclass

from amps.queue.actions import Action, RemovalReason
from amps.queue.events import MessageRemoved
from amps.queue.state import QueueState
from amps.queue.table import BARRIER, NO_EXPIRY, REMOVED


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """Live messages as parallel columns (txid order), deferred acks, and the high-water txid."""

    high_water_txid: int
    txids: array[int]
    publisher_ids: array[int]
    seqs: array[int]
    timestamps_ms: array[int]
    priorities: array[int]
    barrier_flags: bytes
    expire_at_ms: array[int]
    deferred_acks: tuple[tuple[int, int, int], ...]
    """(publisher_id, seq, expires_at_ms)."""


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
    state.at_most_once_sent.pop(txid, None)
    slot = state.table.slot_of(txid)
    if slot >= 0 and state.table.state[slot] != REMOVED:
        state.remove(slot, event.reason, actions, event.expire_reasons, record=False)


def snapshot(state: QueueState) -> QueueSnapshot:
    """Export the live messages; O(live messages)."""
    table = state.table
    txids, publishers, seqs = array("q"), array("Q"), array("Q")
    stamps, priorities, expiries = array("q"), array("Q"), array("q")
    barriers = bytearray()
    for txid, publisher_id, seq in state.bookmarks.items():
        slot = table.slot_of(txid)
        if slot < 0 or table.state[slot] == REMOVED:
            continue
        txids.append(txid)
        publishers.append(publisher_id)
        seqs.append(seq)
        stamps.append(table.timestamp_ms[slot])
        priorities.append(0 if table.priority is None else table.priority[slot])
        barriers.append(1 if table.flags[slot] & BARRIER else 0)
        expiries.append(state.expire_at_ms(slot))
    deferred = tuple(sorted((p, s, at) for (p, s), at in state.deferred.items()))
    return QueueSnapshot(
        state.last_txid, txids, publishers, seqs, stamps, priorities, bytes(barriers),
        expiries, deferred,
    )  # fmt: skip


def restore(state: QueueState, snap: QueueSnapshot, shift_ms: int) -> None:
    """Load a snapshot into an empty engine state."""
    assert state.last_txid < 0
    assert len(state.table) == 0
    uniform = _expiry_is_uniform(state, snap)
    for i, txid in enumerate(snap.txids):
        expire_at_ms = snap.expire_at_ms[i]
        state.insert(
            txid,
            snap.publisher_ids[i],
            snap.seqs[i],
            snap.timestamps_ms[i] + shift_ms,
            snap.priorities[i],
            bool(snap.barrier_flags[i]),
            expire_at_ms if expire_at_ms == NO_EXPIRY else expire_at_ms + shift_ms,
            own_expiry=not uniform,
        )
    state.last_txid = max(state.last_txid, snap.high_water_txid)
    for publisher_id, seq, expires_at_ms in snap.deferred_acks:
        state.deferred[(publisher_id, seq)] = expires_at_ms + shift_ms
        heapq.heappush(state.deferred_heap, (expires_at_ms + shift_ms, publisher_id, seq))


def _expiry_is_uniform(state: QueueState, snap: QueueSnapshot) -> bool:
    """True when every expiry follows from the queue Expiration (no per-message column)."""
    base = state.policy.expiration_ms
    for stamp, at in zip(snap.timestamps_ms, snap.expire_at_ms, strict=True):
        if at != (NO_EXPIRY if base is None else stamp + base):
            return False
    return True
