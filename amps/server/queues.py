"""The thin adapter around the sans-IO queue engines (issue 4): events in, actions executed.

One `QueueDriver` per configured queue. It turns durable publishes, subscribes, acks and
disconnects into engine events with `now_ms` from the event loop's monotonic clock, executes the
actions in contract order (removal records appended, and durable, before any later delivery),
and re-arms one timer at `engine.next_deadline_ms()`. No queue policy is decided here.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import repeat
from time import perf_counter_ns
from typing import TYPE_CHECKING

from amps import errors
from amps.config import QueueConfig
from amps.expr import ExprKind, Filter, Priority, compile_filter, compile_priority
from amps.log.bookmarks import Bookmark as LogBookmark
from amps.log.bookmarks import bookmark_pairs
from amps.log.codec import PublishHead
from amps.log.records import PublishRecord, QueueAction, QueueRecord, TransferRecord
from amps.queue import (
    Acked,
    AckedByFilter,
    AckOption,
    ClientDisconnected,
    Deliver,
    DeliverBarrier,
    ExpireReason,
    MessagePublished,
    MessageRemoved,
    PublishDeadLetter,
    QueueEngine,
    QueuePolicy,
    QueueSnapshot,
    QueueStatistics,
    RecordRemoval,
    RemovalReason,
    Subscribed,
    Unsubscribed,
)
from amps.queue.snapshot_spacing import SnapshotSpacing
from amps.queue.subscriptions import effective_backlog
from amps.server.file_columns import FileColumnFactory
from amps.server.wire import QueueDeliveryEncoder
from replication import queue_snapshot
from replication.latency import LatencyOptions
from replication.ownership import AppendOwnership, SendOwnership, SendTransferRequest, TransferKind
from replication.queue_replica import (
    QueueReplica,
    ReplicaAction,
    ReplicaOptions,
    ReplicaStatistics,
)
from replication.transfers import from_log, to_log

if TYPE_CHECKING:
    from amps.server.host import QueueHost
    from amps.server.session import Session

log = logging.getLogger("amps.queues")

# isinstance against a union built on each call is four times slower than against a tuple.
_DELIVERIES = (Deliver, DeliverBarrier)
# Where one step's deliveries to one subscription go: its session's entries' append, and its
# encoder's encode.
_Target = tuple[
    Callable[[bytes], None], Callable[[bytes, int, int, int, int, int, int, bytes], bytes]
]

REMOVAL_RECORD: dict[RemovalReason, QueueAction] = {
    RemovalReason.ACKED: QueueAction.ACK,
    RemovalReason.EXPIRED: QueueAction.EXPIRED,
    RemovalReason.SENT_AT_MOST_ONCE: QueueAction.DELIVERED_AT_MOST_ONCE,
    RemovalReason.BARRIER_DELIVERED: QueueAction.BARRIER_RELEASED,
}
RECORD_REMOVAL = {action: reason for reason, action in REMOVAL_RECORD.items()}
RECORD_REMOVAL[QueueAction.EXPIRE] = RemovalReason.EXPIRED
RECORD_REMOVAL[QueueAction.BARRIER_EXPIRED] = RemovalReason.EXPIRED
_REMOVED_WHEN_SENT = (QueueAction.DELIVERED_AT_MOST_ONCE, QueueAction.BARRIER_RELEASED)
# R7: how often the owners' reachability is looked at while proxied transfer is on (how long
# an owner may be silent first is Replication/ReachabilityInterval).
REACHABILITY_CHECK_MS = 500


def _stamps_ms(stamps_us: Sequence[int], wall_us: int, now_ms: int) -> list[int]:
    """Log timestamps (UTC us) as times on the engine's monotonic clock: as old now as they
    were when read (a timestamp from the future counts as now)."""
    if not stamps_us or max(stamps_us) <= wall_us:  # the usual case: no max() per message
        return [now_ms - (wall_us - stamp) // 1000 for stamp in stamps_us]
    return [now_ms - max(0, (wall_us - stamp) // 1000) for stamp in stamps_us]


def _origin_runs(origins: list[str]) -> list[slice]:
    """The runs of equal origins in `origins`, in order."""
    runs = []
    start = 0
    for index in range(1, len(origins) + 1):
        if index == len(origins) or origins[index] != origins[start]:
            runs.append(slice(start, index))
            start = index
    return runs


def policy_for(config: QueueConfig) -> QueuePolicy:
    """The engine's view of a queue's configuration."""
    return QueuePolicy(
        semantics=config.semantics,
        lease_period_ms=config.lease_period_ms,
        expiration_ms=config.expiration_ms,
        max_backlog=config.max_backlog,
        max_per_subscription_backlog=config.max_per_subscription_backlog,
        max_cancels=config.max_cancels,
        max_deliveries=config.max_deliveries,
        fairness=config.fairness_model,
        leasing=config.leasing,
        target_queue_depth=config.target_queue_depth,
        deferred_ack_expiration_ms=config.deferred_ack_expiration_ms,
        has_priority=config.priority is not None,
        has_barrier=config.barrier_expression is not None,
    )


_ACK_LIST_RE = re.compile(r"(?:[0-9]{1,19}\|[0-9]{1,19}\|,)*[0-9]{1,19}\|[0-9]{1,19}\|")
_RECORD_KEYS: dict[tuple[RemovalReason, ExpireReason, bool], tuple[QueueAction, str]] = {}


def _record_key(
    reason: RemovalReason, expire_reasons: ExpireReason, barrier: bool = False
) -> tuple[QueueAction, str]:
    """The QueueRecord (action, reason text) of a removal (cached: Flag arithmetic is slow).
    A barrier's expiry is `BARRIER_EXPIRED`: like its release, it stays on this instance (R6)."""
    key = _RECORD_KEYS.get((reason, expire_reasons, barrier))
    if key is None:
        queue_action = REMOVAL_RECORD[reason]
        if expire_reasons & ExpireReason.FORCED_EXPIRE:
            queue_action = QueueAction.EXPIRE
        if barrier and reason is RemovalReason.EXPIRED:
            queue_action = QueueAction.BARRIER_EXPIRED
        text = expire_reasons.reason_text() if expire_reasons else ""
        key = _RECORD_KEYS[(reason, expire_reasons, barrier)] = (queue_action, text)
    return key


def parse_ack_bookmarks(text: str) -> list[tuple[int, int]]:
    """`pub|seq|,pub|seq|` -> [(publisher_id, seq)]; anything else is InvalidBookmark.

    The usual `digits|digits|` item is split directly (no regex, no Bookmark object); anything
    else goes through `Bookmark.parse`, which accepts or rejects it with its reason.
    """
    if _ACK_LIST_RE.fullmatch(text):
        # The usual list, checked at once: no split per item; 19 digits stay below 2**64.
        # parts: [pub, seq, ",pub", seq, ..., ",pub", seq, ""]
        parts = text.split("|")
        seqs = list(map(int, parts[1::2]))
        first = parts[0]
        others = parts[2:-1:2]
        if others.count("," + first) == len(others):
            # One publisher (written alike each time), the usual case: one int() for it.
            publisher_id = int(first)
            if publisher_id:
                return list(zip(repeat(publisher_id), seqs, strict=False))
        else:
            publishers = list(map(int, text.replace(",", "").split("|")[0:-1:2]))
            if 0 not in publishers:
                return list(zip(publishers, seqs, strict=True))
    found: list[tuple[int, int]] = []
    append = found.append
    for item in text.split(","):
        parts = item.split("|")
        if len(parts) == 3 and not parts[2]:
            pub, seq = parts[0], parts[1]
            if (
                0 < len(pub) <= 19
                and 0 < len(seq) <= 19
                and pub.isascii()
                and seq.isascii()
                and pub.isdigit()
                and seq.isdigit()
                and pub != "0" * len(pub)
            ):
                append((int(pub), int(seq)))  # < 10**19 < 2**64: in range
                continue
        item = item.strip()
        if not item:
            continue
        bookmark = LogBookmark.parse(item)
        append((bookmark.publisher_id, bookmark.seq))
    if not found:
        raise errors.InvalidBookmark("no bookmark given to acknowledge")
    return found


def ack_option(options: str) -> AckOption:
    if not options:
        return AckOption.NONE  # the usual plain ack
    words = {w.strip() for w in options.split(",") if w.strip()}
    unknown = words - {"cancel", "expire"}
    if unknown or len(words) > 1:
        raise errors.InvalidOptions(f"sow_delete options {options!r}: expected cancel or expire")
    if "cancel" in words:
        return AckOption.CANCEL
    if "expire" in words:
        return AckOption.EXPIRE
    return AckOption.NONE


class QueueDriver:
    """Runs one queue's engine: the one loop of STYLE.md §4.2, without a task of its own."""

    def __init__(self, config: QueueConfig, instance: QueueHost) -> None:
        self.config = config
        self.name = config.name
        self.instance = instance
        policy = policy_for(config)
        # Q17: per-message columns in a memory-mapped file under <journal>/queues/.
        self.file_columns: FileColumnFactory | None = None
        if config.file_backed_metadata:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.name)
            self.file_columns = FileColumnFactory(
                instance.journal.directory / "queues" / f"{safe}.meta"
            )
            policy = replace(policy, columns=self.file_columns)
        self.engine = QueueEngine(policy)
        self.filter: Filter | None = (
            compile_filter(config.filter, ExprKind.QUEUE_FILTER) if config.filter else None
        )
        self.priority: Priority | None = (
            compile_priority(config.priority) if config.priority else None
        )
        self.barrier: Filter | None = (
            compile_filter(config.barrier_expression, ExprKind.BARRIER)
            if config.barrier_expression
            else None
        )
        # (client_id, sub_id) -> engine sub id; engine sub id -> (session, sub_id)
        self.subscribers: dict[str, tuple[Session, str]] = {}
        # txid -> UTC microseconds of its last delivery, until its removal record names it
        # (the engine's clock is monotonic; the log's times are UTC).
        self.delivered_us: dict[int, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms: int | None = None
        self.dead_letters: list[Callable[[PublishRecord, ExpireReason], None]] = []
        # Checkpoints: whether anything changed since the last one, and when to snapshot next.
        self.dirty = True
        self.snapshot_spacing = SnapshotSpacing()
        # The recovery point queues.db holds (what a restart replays from), None before one.
        self.saved_low_water_txid: int | None = None
        # Queue deliveries: one encoder per sub_id (topic = this queue's name, encoded once).
        self._topic = self.name.encode()
        self._encoders: dict[str, QueueDeliveryEncoder] = {}
        # R7: a replicated queue spans instances; proxied transfer is an administrator's switch
        # for this instance only, off at every start (see set_proxied_transfer).
        self.replicated = instance.config.replicates_queue(config)
        self.proxied_transfer = False
        # R2-R7: a replicated queue runs its engine inside the ownership glue; any other queue
        # (single instance, LocalQueue) drives the engine directly, at no ownership cost.
        self.replica: QueueReplica | None = None
        # Peers' acks waiting for their message (deferred) -> the txid of the record that
        # logged the ack here: the recovery point stays before it, so it survives a restart.
        self._deferred_logged: dict[tuple[int, int], int] = {}
        # Peers' grants and claims logged here before the publish they name (they came by
        # another path) -> the txid that logged them: the recovery point stays before them
        # while the message waits or is queued, so a replay from it still sees them.
        self._early_logged: dict[tuple[int, int], int] = {}
        if self.replicated:
            self.replica = QueueReplica(
                instance.name,
                self.engine,
                ReplicaOptions(
                    kind=config.kind,
                    initial_owner=config.initial_owner,
                    request_timeout_ms=config.transfer_request_timeout_ms,
                    latency=LatencyOptions(default_ms=config.default_transfer_latency_ms),
                ),
            )

    def set_proxied_transfer(self, enabled: bool) -> None:
        """R7: while an owner is unreachable, claim its messages for local takers and grant
        requests for them. Enabling moves nothing by itself. Not persisted: a restart starts
        with it off, so a forgotten switch never outlives the incident it was turned on for."""
        assert self.replicated
        assert self.replica is not None
        if enabled != self.proxied_transfer:
            log.warning(
                "proxied transfer %s for queue %s by an administrator%s",
                "enabled" if enabled else "disabled",
                self.name,
                ": messages of an unreachable owner may be claimed here" if enabled else "",
            )
        self.proxied_transfer = enabled
        now_ms = self.instance.now_ms()
        self._check_reachability(now_ms)
        self.run(self.replica.proxied_transfer_switched(enabled, now_ms), now_ms)

    def ownership_statistics(self) -> ReplicaStatistics | None:
        """Ownership counters of a replicated queue (metrics, admin); None for any other."""
        return None if self.replica is None else self.replica.statistics()

    def oldest_needed_txid(self) -> int:
        """The journal lifecycle's hold: the queue's unacknowledged messages, and what a restart
        from the recovery point stored in queues.db would replay (Q16)."""
        low_water = self.low_water_txid()
        if self.saved_low_water_txid is not None:
            low_water = min(low_water, self.saved_low_water_txid)
        return low_water + 1

    def low_water_txid(self) -> int:
        """The newest txid before which a restart needs nothing of this queue (Q16): its
        unacknowledged messages, the logged peers' acks still waiting for their message, and
        the peers' grants and claims logged before the publish they name while that message
        waits for its publish or is queued."""
        low_water = self.engine.low_water_txid()
        waiting = self._deferred_logged
        if waiting:
            for key in [k for k in waiting if not self.engine.is_deferred(k)]:
                del waiting[key]
            if waiting:
                low_water = min(low_water, min(waiting.values()) - 1)
        early = self._early_logged
        if early and self.replica is not None:
            ownership = self.replica.ownership
            for key in [k for k in early if not ownership.owner_of(k) and not ownership.awaits(k)]:
                del early[key]
            if early:
                low_water = min(low_water, min(early.values()) - 1)
        return low_water

    def restore(self, snapshot: QueueSnapshot, shift_ms: int) -> None:
        """Start from a stored snapshot (before any event was handled). A replicated queue
        restores its ownership with it: `restore_replica`."""
        assert self.replica is None
        self.engine = QueueEngine.restore(self.engine.policy, snapshot, shift_ms)

    def take_replica_snapshot(
        self, reflects_txid: int, marks: dict[str, int]
    ) -> queue_snapshot.ReplicaSnapshot:
        """A replicated queue's engine and ownership now (the caller knows every record up
        to the snapshot's position is applied), with the peers' acks waiting here."""
        assert self.replica is not None
        return queue_snapshot.take(
            self.replica,
            reflects_txid=reflects_txid,
            taken_mono_ms=self.instance.now_ms(),
            taken_wall_us=self.instance.wall_us(),
            # The records that hold the recovery point back, whatever holds them: a restore
            # hands each kind its own and `low_water_txid` drops what is not of its kind.
            deferred_logged={**self._early_logged, **self._deferred_logged},
            marks=marks,
        )

    def restore_replica(self, snap: queue_snapshot.ReplicaSnapshot, shift_ms: int) -> None:
        """Start a replicated queue from its snapshot (before any event was handled);
        ValueError, changing nothing, if it is not this queue's as configured now."""
        assert self.replica is not None
        replica = queue_snapshot.restore(
            snap, self.instance.name, self.engine.policy, self.replica.options, shift_ms,
            self.instance.now_ms(),
        )  # fmt: skip
        self.replica = replica
        self.engine = replica.engine
        self._deferred_logged = {(p, s): txid for p, s, txid in snap.deferred_logged}
        self._early_logged = dict(self._deferred_logged)

    @property
    def restoring(self) -> bool:
        """Whether a staged restore of this replicated queue still has messages to index."""
        return self.replica is not None and self.replica.restoring

    def restore_step(self) -> None:
        """One bounded step of a staged restore (Rule 7 of replication/queue_replica.py)."""
        assert self.replica is not None
        now_ms = self.instance.now_ms()
        self.run(self.replica.restore_step(now_ms), now_ms)

    # -- events -------------------------------------------------------------------------------

    def on_published(self, record: PublishRecord, now_ms: int, *, recovering: bool = False) -> None:
        """A durable publish on an underlying topic (Q1, A1)."""
        self.publish_many([record], now_ms, recovering=recovering)

    @property
    def reads_heads(self) -> bool:
        """True when a publish's head is all this queue needs of it (no expression to run)."""
        return self.filter is None and self.priority is None and self.barrier is None

    def publish_many(
        self, records: list[PublishRecord], now_ms: int, *, recovering: bool = False
    ) -> None:
        """Durable publishes (one group commit's worth) as one engine step."""
        if self.replica is not None:
            here = self.instance.name
            if self.reads_heads and not any(r.expiration_s for r in records):
                # Columns, no event per message (the replica's bulk path, as below).
                wall_us = self.instance.wall_us()
                from_origin = [r.origin_instance or here for r in records]
                runs = [slice(None)]
                if recovering and self.replica.options.kind == "Queue":
                    runs = _origin_runs(from_origin)
                for run in runs:
                    # A replay has no subscriber to deliver to: each origin's run is one
                    # bulk step (one owner), as the live steps that logged them mostly were.
                    rows = records[run]
                    replicated = self.replica.published_plain(
                        [r.txid for r in rows], [r.publisher_id for r in rows],
                        [r.seq for r in rows],
                        _stamps_ms([r.timestamp_us for r in rows], wall_us, now_ms),
                        from_origin[run], now_ms,
                    )  # fmt: skip
                    self.run(replicated, now_ms, recovering=recovering)
                return
            events: list[MessagePublished] = []
            origins: list[str] = []
            for record in records:
                event = self._event_for(record, now_ms)
                if event is not None:
                    events.append(event)
                    origins.append(record.origin_instance or here)
            if events:
                self.run(
                    self.replica.published(events, origins, now_ms), now_ms, recovering=recovering
                )
            return
        if self.reads_heads:
            # The usual queue: no expression to evaluate, one wall-clock read per step.
            wall_us = self.instance.wall_us()
            if not any(r.expiration_s for r in records):
                # Columns, no event per message (the engine's bulk path).
                actions = self.engine.publish_plain(
                    [r.txid for r in records], [r.publisher_id for r in records],
                    [r.seq for r in records],
                    _stamps_ms([r.timestamp_us for r in records], wall_us, now_ms),
                    now_ms,
                )  # fmt: skip
                self.run(actions, now_ms, recovering=recovering)
                return
            # Positional arguments (txid, publisher_id, seq, timestamp_ms, priority, is_barrier,
            # expiration_ms): a third cheaper than keywords, per message.
            events = [
                MessagePublished(
                    r.txid, r.publisher_id, r.seq,
                    now_ms - max(0, (wall_us - r.timestamp_us) // 1000), 0, False,
                    r.expiration_s * 1000 if r.expiration_s else None,
                )
                for r in records
            ]  # fmt: skip
        else:
            events = [e for e in (self._event_for(r, now_ms) for r in records) if e is not None]
        if events:
            self.run(self.engine.handle_many(events, now_ms), now_ms, recovering=recovering)

    def publish_heads(self, heads: list[PublishHead], now_ms: int) -> None:
        """Recovery (Q16): replayed publishes as `Journal.read_heads` gives them, one engine
        step, when `reads_heads`: no record built, no event per message unless it has an
        expiration of its own. Not for a replicated queue (it needs each record's origin)."""
        assert self.reads_heads
        assert self.replica is None
        txids, stamps_us, _topics, publisher_ids, seqs, expirations_s = zip(*heads, strict=True)
        stamps_ms = _stamps_ms(stamps_us, self.instance.wall_us(), now_ms)
        if any(expirations_s):
            rows = zip(txids, publisher_ids, seqs, stamps_ms, expirations_s, strict=True)
            events = [
                MessagePublished(t, p, s, ms, 0, False, e * 1000 or None) for t, p, s, ms, e in rows
            ]
            actions = self.engine.handle_many(events, now_ms)
        else:
            actions = self.engine.publish_plain(
                list(txids), list(publisher_ids), list(seqs), stamps_ms, now_ms
            )
        self.run(actions, now_ms, recovering=True)

    def _event_for(self, record: PublishRecord, now_ms: int) -> MessagePublished | None:
        """The engine event for a publish, or None when the queue Filter rejects it."""
        priority = 0
        is_barrier = False
        if self.filter is not None or self.priority is not None or self.barrier is not None:
            message = self.instance.expr_message(record)
            if self.filter is not None and not self.filter.matches(message):
                return None
            if self.priority is not None:
                # rank() keeps NULL/NaN below a real 0 (A2); the engine orders by one u64 key.
                present, key = self.priority.rank(message)
                priority = min(key + 1, (1 << 64) - 1) if present else 0
            if self.barrier is not None:
                is_barrier = self.barrier.matches(message)
        age_ms = max(0, (self.instance.wall_us() - record.timestamp_us) // 1000)
        return MessagePublished(
            txid=record.txid,
            publisher_id=record.publisher_id,
            seq=record.seq,
            timestamp_ms=now_ms - age_ms,
            priority=priority,
            is_barrier=is_barrier,
            expiration_ms=record.expiration_s * 1000 if record.expiration_s else None,
        )

    def on_recovered_removal(self, record: QueueRecord, now_ms: int) -> None:
        """Recovery (Q16): the log says these messages already left the queue (by txid when
        this instance wrote it, by bookmark when a peer did and it was logged here)."""
        reason = RECORD_REMOVAL.get(record.action)
        if reason is None:
            return
        expire = ExpireReason.TIME_LIMIT
        if record.action == QueueAction.EXPIRE:
            expire = ExpireReason.FORCED_EXPIRE
        if record.bookmarks:  # a peer's, or an ack made here that waited for its message
            self.apply_peer_removal(record, now_ms, recovering=True)
        if not record.txids:
            return
        actions: Sequence[ReplicaAction]
        if self.replica is not None:
            actions = self.replica.removed_recovered(record.txids, reason, expire, now_ms)
        else:
            actions = self.engine.remove_recovered(record.txids, reason, expire, now_ms)
        self.run(actions, now_ms, recovering=True)

    def on_transfer(self, record: TransferRecord, now_ms: int, *, recovering: bool) -> None:
        """A grant or claim (R5, R7) replayed from the log at recovery (this instance's own
        and those of others)."""
        self.run(self._transfer_actions([record], now_ms), now_ms, recovering=recovering)

    def apply_replicated(
        self, records: Sequence[QueueRecord | TransferRecord | PublishRecord]
    ) -> None:
        """Peers' removals and ownership records, logged here and durable now, and the origins
        of their publishes discarded as duplicates (issue 9), in one step."""
        now_ms = self.instance.now_ms()
        actions: list[ReplicaAction] = []
        transfers: list[TransferRecord] = []  # a run of them, applied in one replica step
        for record in records:
            if isinstance(record, TransferRecord):
                transfers.append(record)
                continue
            if transfers:
                actions += self._transfer_actions(transfers, now_ms)
                transfers = []
            if isinstance(record, PublishRecord):
                if self.replica is not None:
                    key = (record.publisher_id, record.seq)
                    actions += self.replica.republished(key, record.origin_instance, now_ms)
                continue
            actions += self._removal_actions(record, now_ms)
        if transfers:
            actions += self._transfer_actions(transfers, now_ms)
        self.run(actions, now_ms)

    def _transfer_actions(
        self, records: Sequence[TransferRecord], now_ms: int
    ) -> Sequence[ReplicaAction]:
        if self.replica is None:
            return []
        ownerships = []
        ownership, txid_of = self.replica.ownership, self.engine.txid_of
        for record in records:
            try:
                ownerships.append(from_log(record))
            except errors.OwnershipProtocolError as exc:
                log.error("queue %s: %s; ignored", self.name, exc.message)
                continue
            # Logged before the publish it names (or that publish is not here yet): a replay
            # from after this record would not see it (Q16).
            key = ownerships[-1].key
            queued = txid_of(key)
            if (queued is None and ownership.state_of(key) is None) or (
                queued is not None and queued > record.txid
            ):
                self._early_logged.setdefault(key, record.txid)
        return self.replica.ownership_recorded_many(ownerships, now_ms)

    def apply_peer_removal(self, record: QueueRecord, now_ms: int, *, recovering: bool) -> None:
        """R1, R2: a peer's removal (an ack anywhere, the owner's expiry, an at-most-once
        send), by bookmark: applied silently (the owner wrote the dead letter once); an ack for
        a message not here yet waits in the deferred acks (DeferredAckExpiration)."""
        self.run(self._removal_actions(record, now_ms), now_ms, recovering=recovering)

    def _removal_actions(self, record: QueueRecord, now_ms: int) -> Sequence[ReplicaAction]:
        reason = RECORD_REMOVAL.get(record.action)
        if reason is None or not record.bookmarks:
            return []
        expire = ExpireReason.TIME_LIMIT
        if record.action == QueueAction.EXPIRE:
            expire = ExpireReason.FORCED_EXPIRE
        pairs = bookmark_pairs(record.bookmarks)
        actions: Sequence[ReplicaAction]
        if self.replica is not None:
            actions = self.replica.removed_by_peer(pairs, now_ms, reason, expire)
        else:
            events = [MessageRemoved(reason, bookmark=p, expire_reasons=expire) for p in pairs]
            actions = self.engine.handle_many(events, now_ms)
        if self.engine.deferred_ack_count():  # none waits (the usual): no look-up per ack
            is_deferred = self.engine.is_deferred
            for pair in pairs:
                if is_deferred(pair):
                    self._deferred_logged.setdefault(pair, record.txid)
        return actions

    def transfer_requested(self, keys: Sequence[tuple[int, int]], requester: str) -> None:
        """R5: a peer asks for messages (each granted only for the first request while this
        instance owns it, or proxies for its unreachable owner, and no local subscriber can
        take it; otherwise silence), in one step."""
        if self.replica is None:
            return
        now_ms = self.instance.now_ms()
        self._check_reachability(now_ms)
        self.run(self.replica.transfers_requested(keys, requester, now_ms), now_ms)

    def subscribe(
        self, session: Session, sub_id: str, flt: Filter | None, max_backlog: int | None
    ) -> None:
        """A queue subscription (Q4, Q8); the caller acks it with `granted_backlog`."""
        key = f"{session.client_id}/{sub_id}"
        matches = None
        if flt is not None:
            matches = self._predicate(flt)
        self.subscribers[key] = (session, sub_id)
        now_ms = self.instance.now_ms()
        event = Subscribed(key, session.client_id, max_backlog, matches)
        self.run(self._handle(event, now_ms), now_ms)

    def granted_backlog(self, max_backlog: int | None) -> int:
        """Q8: what the subscribe ack reports as `max_backlog=N`."""
        return effective_backlog(max_backlog, self.config.max_per_subscription_backlog)

    def unsubscribe(self, session: Session, sub_id: str) -> None:
        key = f"{session.client_id}/{sub_id}"
        if self.subscribers.pop(key, None) is None:
            return
        now_ms = self.instance.now_ms()
        self.run(self._handle(Unsubscribed(key, session.client_id), now_ms), now_ms)

    def disconnected(self, session: Session) -> None:
        """Q6: every lease of the client is broken at once."""
        prefix = f"{session.client_id}/"
        for key in [k for k in self.subscribers if k.startswith(prefix)]:
            del self.subscribers[key]
        now_ms = self.instance.now_ms()
        self.run(self._handle(ClientDisconnected(session.client_id), now_ms), now_ms)

    def _handle(
        self, event: Subscribed | Unsubscribed | ClientDisconnected, now_ms: int
    ) -> Sequence[ReplicaAction]:
        if self.replica is not None:
            return self.replica.handle(event, now_ms)
        return self.engine.handle(event, now_ms)

    def ack(self, session: Session, bookmarks: str, flt: Filter | None, options: str) -> int:
        """Q10–Q12: acknowledge by bookmark list or filter; returns how many left the queue."""
        started_ns = perf_counter_ns()
        option = ack_option(options)
        now_ms = self.instance.now_ms()
        if flt is not None:
            event: Acked | AckedByFilter = AckedByFilter(
                session.client_id, self._predicate(flt), option
            )
        else:
            pairs = parse_ack_bookmarks(bookmarks)
            # A replicated queue's message may be on its way from another instance (a consumer
            # that failed over acks it here first): the engine defers the ack until it comes.
            if not self.replicated:
                self._check_published(pairs)
            event = Acked(session.client_id, pairs, option)
        statistics = self.instance.statistics
        delivered = statistics.delivered
        if self.replica is not None:
            waiting = self.engine.deferred_ack_count()
            removed = self.run(self.replica.acked(event, now_ms), now_ms)
            if self.engine.deferred_ack_count() > waiting:
                assert isinstance(event, Acked)
                self._log_deferred(event.bookmarks)
        else:
            removed = self.run(self.engine.handle(event, now_ms), now_ms)
        # The deliveries this ack made room for went out in its own step: no timer, no commit.
        hops = statistics.hops
        hops.deliveries_after_ack += statistics.delivered - delivered
        hops.queue_ack_step.add(perf_counter_ns() - started_ns)
        return removed

    def _log_deferred(self, pairs: Sequence[tuple[int, int]]) -> None:
        """A client's ack of a replicated queue's message not here yet waits in the deferred
        acks, which leave no removal record: it is logged by bookmark, so it replicates (the
        message may be on its way to every instance) and survives a restart here."""
        fresh = [p for p in pairs if self.engine.is_deferred(p) and p not in self._deferred_logged]
        if not fresh:
            return
        self.instance.append_record(
            QueueRecord(
                txid=0,
                timestamp_us=self.instance.wall_us(),
                queue=self.name,
                action=QueueAction.ACK,
                bookmarks=tuple(LogBookmark(p, s) for p, s in fresh),
            ),
            soon=True,
        )
        txid = self.instance.journal.last_txid
        for pair in fresh:
            self._deferred_logged[pair] = txid

    def _check_published(self, pairs: list[tuple[int, int]]) -> None:
        """UnknownBookmark for the first bookmark never published to this instance."""
        marks = self.instance.journal.marks
        # One high-water look-up per publisher (acks name few publishers, many seqs).
        highest = dict(pairs)  # each publisher once (C loops, no Python one per pair)
        if len(highest) == 1:
            highest[pairs[0][0]] = max(pairs)[1]  # one publisher: the highest pair
        else:
            highest = {}
            for publisher_id, seq in pairs:
                if seq > highest.get(publisher_id, -1):
                    highest[publisher_id] = seq
        if any(seq > marks.high_water(p) for p, seq in highest.items()):
            for publisher_id, seq in pairs:  # name the first unknown one, in list order
                if seq > marks.high_water(publisher_id):
                    raise errors.UnknownBookmark(
                        f"bookmark {publisher_id}|{seq}| was never published to this instance"
                    )

    def deliverable(self, limit: int) -> list[PublishRecord]:
        """Q19: the messages a `sow` of the queue returns; nothing is leased."""
        records = []
        for txid in self.engine.deliverable(limit):
            record = self.instance.records.get(txid)
            if record is not None:
                records.append(record)
        return records

    def statistics(self) -> QueueStatistics:
        return self.engine.statistics(self.instance.now_ms())

    # -- actions ------------------------------------------------------------------------------

    def run(
        self, actions: Sequence[ReplicaAction], now_ms: int, *, recovering: bool = False
    ) -> int:
        """Execute actions in contract order, re-arm the timer; returns the removals."""
        self.dirty = True
        removed = 0
        if actions:
            removed = self._execute(actions, now_ms, recovering)
        self._arm_timer()
        return removed

    def _execute(self, actions: Sequence[ReplicaAction], now_ms: int, recovering: bool) -> int:
        # Removal records of one step are grouped into one QueueRecord per (action, reason),
        # written before any later dead-letter publish and before the step's held deliveries.
        # Per record: its txids and, in parallel, their last delivery times and counts.
        removals: dict[tuple[QueueAction, str], tuple[list[int], list[int], list[int]]] = {}
        # The last removal's reasons and record key (enum hashing is slow; steps repeat one).
        last_reason: RemovalReason | None = None
        last_expire: ExpireReason | None = None
        key = (QueueAction.ACK, "")
        appended = False
        removed = 0
        now_deliver: list[Deliver | DeliverBarrier] = []
        held: list[Deliver | DeliverBarrier] = []
        requests: dict[str, list[tuple[int, int]]] = {}  # owner -> keys asked for (R4)
        # the txids of `key` (one list per key in `removals`), their delivery times and counts
        txids: list[int] = []
        delivered: list[int] = []
        counts: list[int] = []
        delivered_us = self.delivered_us
        for action in actions:
            # isinstance of the exact class is the cheapest test, and narrows the type.
            if isinstance(action, RecordRemoval):
                removed += 1
                # Replaying the log: what the log already says is not written again.
                if not recovering:
                    reason, expire_reasons = action.reason, action.expire_reasons
                    if (
                        reason is not last_reason
                        or expire_reasons is not last_expire
                        or action.barrier
                        or not removals
                    ):
                        last_reason, last_expire = reason, expire_reasons
                        if action.barrier:  # its record is not the next removal's
                            last_reason = None
                        key = _record_key(reason, expire_reasons, action.barrier)
                        found = removals.get(key)
                        if found is None:
                            found = removals[key] = ([], [], [])
                        txids, delivered, counts = found
                    txid = action.txid
                    txids.append(txid)
                    delivered.append(delivered_us.pop(txid, 0))
                    counts.append(action.delivery_count)
                    # Only a message that left at-most-once must be on disk before anything
                    # after it is sent (else a crash could send it twice). A lost ack record
                    # only lets its message return, which at-least-once allows: waiting for
                    # its fsync would add a commit round to every refill of a backlog.
                    if reason is RemovalReason.SENT_AT_MOST_ONCE:
                        appended = True
            elif isinstance(action, _DELIVERIES):
                if appended:
                    held.append(action)  # after the removal records are durable
                else:
                    now_deliver.append(action)
            elif isinstance(action, PublishDeadLetter):
                if removals:  # keep the journal order: removals so far, then the dead letter
                    self._append_removals(removals)
                    removals = {}
                self._dead_letter(action)
            elif isinstance(action, AppendOwnership):
                # R5, R7: a grant or claim is durable before anything after it is sent; the
                # link replicates it from the log (only durable records leave).
                if not recovering:
                    if removals:
                        self._append_removals(removals)
                        removals = {}
                    claim = action.record.kind is TransferKind.CLAIM
                    self.instance.append_record(
                        to_log(
                            self.name, action.record, proxied=claim,
                            timestamp_us=self.instance.wall_us(),
                        )
                    )  # fmt: skip
                    appended = True
            elif isinstance(action, SendTransferRequest):
                if not recovering:  # one frame per owner for the step's requests
                    requests.setdefault(action.owner, []).append(action.key)
            elif isinstance(action, SendOwnership):
                pass  # the link sends the logged record (see AppendOwnership)
        if removals:
            self._append_removals(removals)
        if requests:
            replicator = self.instance.replicator
            for owner, keys in requests.items():
                if replicator is not None:
                    replicator.send_transfer_request(self.name, keys, owner)
        if now_deliver:
            self._deliver_many(now_deliver, now_ms)
        if held:
            self.instance.statistics.hops.deliveries_held_for_commit += len(held)
            self.instance.when_durable(lambda: self._deliver_held(held))
        return removed

    def _deliver_held(self, held: list[Deliver | DeliverBarrier]) -> None:
        self._deliver_many(held, self.instance.now_ms())

    def _append_removals(
        self, removals: dict[tuple[QueueAction, str], tuple[list[int], list[int], list[int]]]
    ) -> None:
        """One QueueRecord per (action, reason) naming every txid (recovery reads them all),
        with each one's last delivery time and delivery count (the queue report reads them)."""
        timestamp_us = self.instance.wall_us()
        for (queue_action, reason), (txids, delivered, counts) in removals.items():
            if queue_action in _REMOVED_WHEN_SENT:  # this removal is its (one) delivery
                delivered = [timestamp_us] * len(txids)
                counts = [1] * len(txids)
            self.instance.append_record(
                QueueRecord(
                    txid=0,
                    timestamp_us=timestamp_us,
                    queue=self.name,
                    action=queue_action,
                    txids=tuple(txids),
                    reason=reason,
                    delivered_us=tuple(delivered),
                    deliveries=tuple(counts),
                ),
                # A lost removal record only lets its message come back (at-least-once); an
                # at-most-once removal is waited for through when_durable before any delivery.
                soon=True,
            )

    def _deliver_many(self, actions: list[Deliver | DeliverBarrier], now_ms: int) -> None:
        """Encode the deliveries of one step and queue them per session (one put per session)."""
        cache = self.instance.records
        cached = cache.records.get  # the usual hit without a call to the cache
        # sub key -> (append to its session's entries, its encoder's encode), for this step
        targets: dict[str, _Target | None] = {}
        out: dict[Session, list[bytes]] = {}
        wall_us = 0
        sent = 0
        # A step leases runs of messages to one subscription until one deadline: the target
        # and the lease field of the last Deliver are reused.
        last_key: str | None = None
        target: _Target | None = None
        last_deadline_ms: int | None = None
        lease_us = 0
        # An at-most-once message is removed before it is sent: no removal will collect it.
        delivered_us = None if self.engine.policy.at_most_once else self.delivered_us
        damaged: list[int] = []
        for action in actions:
            txid = action.txid
            record = cached(txid) or cache.get(txid)
            if record is None:
                if cache.is_unreadable(txid):  # damage is reported once, by the cache
                    damaged.append(txid)
                else:
                    log.error("queue %s: message txid %d is not in the journal", self.name, txid)
                continue
            correlation_id = record.correlation_id
            if type(action) is Deliver:
                key = action.sub_id
                if key != last_key:
                    last_key = key
                    if key in targets:
                        target = targets[key]
                    else:
                        target = targets[key] = self._target(key, out)
                if target is None:
                    # The engine learns of the disconnect next; the lease returns.
                    continue
                if delivered_us is not None:
                    if not wall_us:
                        wall_us = self.instance.wall_us()
                    delivered_us[txid] = wall_us
                deadline_ms = action.lease_deadline_ms
                if deadline_ms != last_deadline_ms:
                    last_deadline_ms = deadline_ms
                    if deadline_ms is None:
                        lease_us = 0
                    else:
                        if not wall_us:
                            wall_us = self.instance.wall_us()
                        lease_us = wall_us + (deadline_ms - now_ms) * 1000
                append, encode = target
                append(
                    encode(
                        record.data, record.publisher_id, record.seq, txid, record.timestamp_us,
                        lease_us, action.delivery_count,
                        correlation_id.encode() if correlation_id else b"",
                    )
                )  # fmt: skip
                sent += 1
                continue
            assert isinstance(action, DeliverBarrier)
            for _client_id, key in action.subscriptions:
                if key in targets:
                    found = targets[key]
                else:
                    found = targets[key] = self._target(key, out)
                if found is None:
                    continue
                append, encode = found
                append(
                    encode(
                        record.data, record.publisher_id, record.seq, txid, record.timestamp_us,
                        0, 1, correlation_id.encode() if correlation_id else b"",
                    )
                )  # fmt: skip
                sent += 1
        for session, entries in out.items():
            if len(entries) == 1:
                session.send_entry(entries[0])
            elif entries:
                session.send_entries(entries)
        self.instance.statistics.delivered += sent
        if damaged:
            # Out of this step: the removal frees backlog, which starts deliveries of its own.
            asyncio.get_running_loop().call_soon(self._remove_damaged, damaged)

    def _remove_damaged(self, txids: list[int]) -> None:
        """Messages whose journal record is damaged cannot be sent to anyone: they leave the
        queue as expired (forced), recorded with the reason, instead of being leased again and
        again and holding a subscription's backlog each time (issue 11)."""
        now_ms = self.instance.now_ms()
        remove = (
            self.engine.remove_recovered if self.replica is None else self.replica.removed_recovered
        )
        actions = remove(txids, RemovalReason.EXPIRED, ExpireReason.FORCED_EXPIRE, now_ms)
        self.instance.append_record(
            QueueRecord(
                txid=0,
                timestamp_us=self.instance.wall_us(),
                queue=self.name,
                action=QueueAction.EXPIRE,
                txids=tuple(txids),
                reason="damaged journal record",
            ),
            soon=True,
        )
        log.error(
            "queue %s: %d message(s) removed, their journal records are damaged (txids %s)",
            self.name,
            len(txids),
            ", ".join(map(str, txids[:10])) + (", ..." if len(txids) > 10 else ""),
        )
        self.run(actions, now_ms)  # deliveries the freed backlog allows (their records too)

    def _target(self, key: str, out: dict[Session, list[bytes]]) -> _Target | None:
        """Where one step's deliveries to subscription `key` go; None if it is gone."""
        found = self.subscribers.get(key)
        if found is None:
            return None
        session, sub_id = found
        entries = out.get(session)
        if entries is None:
            entries = out[session] = []
        return entries.append, self._encoder(sub_id).encode

    def _encoder(self, sub_id: str) -> QueueDeliveryEncoder:
        """The delivery encoder of a sub_id (topic = this queue's name, encoded once)."""
        encoder = self._encoders.get(sub_id)
        if encoder is None:
            if len(self._encoders) >= 4096:
                self._encoders.clear()
            encoder = self._encoders[sub_id] = QueueDeliveryEncoder(self._topic, sub_id)
        return encoder

    def _dead_letter(self, action: PublishDeadLetter) -> None:
        record = self.instance.records.get(action.txid)
        if record is None:
            return
        for publish in self.dead_letters:
            publish(record, action.reasons)

    def _predicate(self, flt: Filter) -> Callable[[int], bool]:
        records = self.instance.records
        expr_message = self.instance.expr_message

        def matches(txid: int) -> bool:
            record = records.get(txid)
            return record is not None and flt.matches(expr_message(record))

        return matches

    # -- timer --------------------------------------------------------------------------------

    def _next_deadline_ms(self) -> int | None:
        if self.replica is None:
            return self.engine.next_deadline_ms()
        deadline_ms = self.replica.next_deadline_ms()
        if self.proxied_transfer:  # R7: look at the owners' reachability now and then
            check_ms = self.instance.now_ms() + REACHABILITY_CHECK_MS
            deadline_ms = check_ms if deadline_ms is None else min(deadline_ms, check_ms)
        return deadline_ms

    def _check_reachability(self, now_ms: int) -> None:
        """R7: tell the replica which instances were not heard from, by any path, lately."""
        replicator = self.instance.replicator
        if self.replica is None or replicator is None or not self.proxied_transfer:
            return
        owners = set(self.replica.latencies.estimates_ms())
        if self.config.initial_owner:
            owners.add(self.config.initial_owner)
        replication = self.instance.config.replication
        assert replication is not None  # a replicated queue has destinations
        interval_ms = replication.reachability_interval_ms
        unreachable = replicator.unreachable(owners, now_ms, interval_ms)
        self.replica.reachability_changed(unreachable, now_ms)

    def _arm_timer(self) -> None:
        deadline_ms = self._next_deadline_ms()
        if deadline_ms == self._timer_at_ms:
            return
        if (
            deadline_ms is not None
            and self._timer_at_ms is not None
            and deadline_ms > self._timer_at_ms
        ):
            # Later than the armed timer (an ack moved the oldest lease on, nearly every step):
            # that timer fires early, finds nothing due and re-arms then. One early wake-up
            # instead of a cancel and a new timer per step.
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at_ms = deadline_ms
        if deadline_ms is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(deadline_ms / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ms = None
        self.on_deadline(self.instance.now_ms())

    def on_deadline(self, now_ms: int) -> None:
        """Do what is due now, writing what it decides (the timer; recovery once the log is
        replayed, Q16)."""
        if self.replica is not None:
            self._check_reachability(now_ms)
            self.run(self.replica.on_deadline(now_ms), now_ms)
        else:
            self.run(self.engine.on_deadline(now_ms), now_ms)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
