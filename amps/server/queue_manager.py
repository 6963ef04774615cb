"""All queues of an instance: routing of publishes (A1), queue subscriptions, acks, sow,
dead letters (AMPS-REFERENCE §5.1) and recovery from the log (Q16)."""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amps import errors
from amps.config import ActionConfig, ActionStep, QueueConfig
from amps.expr import ExprKind, Filter, compile_filter
from amps.log.bookmarks import parse_bookmark_spec
from amps.log.records import PublishRecord, QueueRecord, TransferRecord
from amps.queue import ExpireReason
from amps.queue.snapshot_codec import SnapshotFormatError, decode_snapshot, encode_snapshot
from amps.queue.snapshot_spacing import QueueChanges
from amps.server.convert import success_ack
from amps.server.queue_store import STORE_FILE_NAME, QueueStore, StoredQueue, set_aside
from amps.server.queues import QueueDriver
from amps.v1 import client_pb2 as pb
from replication import queue_snapshot

if TYPE_CHECKING:
    from amps.server.host import QueueHost
    from amps.server.session import Session
    from replication.frames import TransferRequest

log = logging.getLogger("amps.queues")

ON_EXPIRE = "amps-action-on-sow-expire-message"
DO_PUBLISH = "amps-action-do-publish-message"
RECOVERY_BATCH_RECORDS = 5_000
CHECKPOINT_INTERVAL_S = 5.0
# How often the replay bound of amps/queue/snapshot_spacing.py is looked at between checkpoints.
CHECK_S = 0.5
# Between two steps of a staged restore's index (Rule 7 of replication/queue_replica.py).
INDEX_PAUSE_S = 0.001
SOW_DEFAULT_LIMIT = 100_000


class QueueManager:
    """Owns one QueueDriver per configured queue."""

    def __init__(self, instance: QueueHost, queues: tuple[QueueConfig, ...]) -> None:
        self.instance = instance
        self.drivers: dict[str, QueueDriver] = {q.name: QueueDriver(q, instance) for q in queues}
        self._routes: dict[str, list[QueueDriver]] = {}
        self.store: QueueStore | None = None
        self._stored: dict[str, StoredQueue] = {}
        self._checkpointer: asyncio.Task[None] | None = None
        # Snapshots taken since the start and their CPU on the loop, attempts not stored
        # included (said in the log lines).
        self.snapshots = 0
        self.snapshots_cpu_s = 0.0
        self._indexer: asyncio.Task[None] | None = None
        # R9: per (origin instance, queue), the newest origin txid of a queue or transfer
        # record logged here. Each path carries one origin's records of one queue in origin
        # order, so an older one is a copy that came by another path: not logged or forwarded
        # again (no loop, nothing applied twice).
        self._record_marks: dict[tuple[str, str], int] = {}
        # Peers' records logged here, applied once durable (their log txid set), in order.
        self._to_apply: list[tuple[QueueDriver, QueueRecord | TransferRecord | PublishRecord]] = []

    def __contains__(self, name: str) -> bool:
        return name in self.drivers

    def publish_target(self, topic: str) -> str:
        """A1: a publish to a queue's name is stored on its DefaultPublishTarget."""
        driver = self.drivers.get(topic)
        return topic if driver is None else driver.config.default_publish_target

    def routes(self, topic: str) -> list[QueueDriver]:
        """The queues a publish on `topic` enters (one publish may feed several, A1)."""
        found = self._routes.get(topic)
        if found is None:
            found = [d for d in self.drivers.values() if d.config.matches_underlying(topic)]
            if len(self._routes) > 100_000:
                self._routes.clear()
            self._routes[topic] = found
        return found

    def on_durable(self, records: list[PublishRecord], now_ms: int) -> None:
        """The publishes one group commit made durable, one engine step per queue."""
        if not self.drivers:
            return
        batches: dict[QueueDriver, list[PublishRecord]] = {}
        # Runs of records share a topic: its batches are looked up once per run.
        last_topic: str | None = None
        targets: list[list[PublishRecord]] = []
        for record in records:
            if record.topic != last_topic:
                last_topic = record.topic
                targets = [batches.setdefault(d, []) for d in self.routes(last_topic)]
            for batch in targets:
                batch.append(record)
        for driver, batch in batches.items():
            driver.publish_many(batch, now_ms)

    # -- commands -----------------------------------------------------------------------------

    def driver(self, topic: str) -> QueueDriver:
        driver = self.drivers.get(topic)
        if driver is None:
            raise errors.NotAQueue(f"topic {topic!r} is not a queue")
        return driver

    def subscribe(self, session: Session, command: pb.Command, sub_id: str) -> None:
        request = command.subscribe
        driver = self.driver(request.topic)
        flt = compile_filter(request.filter) if request.filter else None
        max_backlog = _max_backlog(request)
        key = f"{session.client_id}/{sub_id}"
        if key in driver.subscribers:
            if "replace" not in request.options.split(","):
                raise errors.InvalidOptions(f"subscription {sub_id!r} already exists")
            driver.unsubscribe(session, sub_id)
        session.queue_subscriptions[sub_id] = driver.name
        # The processed ack goes first, so the client knows the subscription before deliveries.
        granted = driver.granted_backlog(max_backlog)
        session.send(
            success_ack(
                cmd_id=command.cmd_id,
                ack_type="processed",
                sub_id=sub_id,
                options=f"max_backlog={granted}",
            )
        )
        driver.subscribe(session, sub_id, flt, max_backlog)

    def unsubscribe(self, session: Session, sub_id: str) -> bool:
        name = session.queue_subscriptions.pop(sub_id, None)
        if name is None:
            return False
        self.drivers[name].unsubscribe(session, sub_id)
        return True

    def disconnected(self, session: Session) -> None:
        if session.client_id:
            for driver in self.drivers.values():
                driver.disconnected(session)

    def sow_delete(self, session: Session, command: pb.Command) -> None:
        """Q10: acknowledge by bookmark list or by filter (exactly one of them)."""
        # Each protobuf field read builds a new object (the bookmark list: a copy): read once.
        request = command.sow_delete
        driver = self.driver(request.topic)
        bookmarks = request.bookmark
        filter_text = request.filter
        if bool(bookmarks) == bool(filter_text):
            raise errors.InvalidOptions(
                "sow_delete command only supports one of: filter, sow_keys, bookmark, or data"
            )
        flt = compile_filter(filter_text, ExprKind.SOW_DELETE_FILTER) if filter_text else None
        removed = driver.ack(session, bookmarks, flt, request.options)
        requested_acks = command.ack_type
        if requested_acks:
            for ack_type in ("processed", "completed", "stats"):
                if ack_type in requested_acks:
                    session.send(
                        success_ack(
                            cmd_id=command.cmd_id,
                            ack_type=ack_type,
                            records_deleted=removed,
                            matches=removed,
                        )
                    )

    def replicated_record(self, record: QueueRecord | TransferRecord) -> None:
        """R1, R5, R9: a peer's queue removal or ownership record. Logged here with its origin
        (so it survives a restart and passthrough forwards it), then applied once durable (after
        the publishes logged before it reached the queue). Nothing when the queue is not a
        replicated queue here (a LocalQueue never is), or when it is a copy already logged."""
        driver = self.drivers.get(record.queue)
        if driver is None or driver.replica is None or not self._is_news(record):
            return
        instance = self.instance
        logged = instance.append_record(replace(record, txid=0), soon=True)
        if not self._to_apply:
            instance.when_durable(self._apply_durable)
        self._to_apply.append((driver, logged))

    def hears_republished(self, topic: str) -> bool:
        """Whether a peer's publish on `topic` discarded as a duplicate matters here
        (`republished`): only a replicated queue over that topic hears of it (a queue's name
        is not its underlying topic)."""
        return any(driver.replica is not None for driver in self.routes(topic))

    def republished(self, copies: Sequence[PublishRecord]) -> None:
        """Issue 9: peers' publishes discarded here as duplicates (L4) of copies logged here. A
        replicated `Queue` hears their origins once its own copy reached it (after what was
        appended so far is durable), and its lower origin wins (`QueueReplica.republished`)."""
        instance = self.instance
        for copy in copies:
            # The queues over its topic (a queue's name is not its underlying topic).
            for driver in self.routes(copy.topic):
                if driver.replica is None:
                    continue
                if not self._to_apply:
                    instance.when_durable(self._apply_durable)
                self._to_apply.append((driver, replace(copy, txid=instance.journal.last_txid)))

    def _apply_durable(self) -> None:
        """Apply the peers' records that are durable here now, one step per queue and run."""
        durable = self.instance.dispatched_txid
        pending = self._to_apply
        split = 0
        while split < len(pending) and pending[split][1].txid <= durable:
            split += 1
        ready, self._to_apply = pending[:split], pending[split:]
        if self._to_apply:
            self.instance.when_durable(self._apply_durable)
        start = 0
        for end in range(1, len(ready) + 1):
            if end == len(ready) or ready[end][0] is not ready[start][0]:
                ready[start][0].apply_replicated([record for _, record in ready[start:end]])
                start = end

    def _is_news(self, record: QueueRecord | TransferRecord) -> bool:
        mark = (record.origin_instance, record.queue)
        if record.origin_txid <= self._record_marks.get(mark, 0):
            return False
        self._record_marks[mark] = record.origin_txid
        return True

    def transfer_requested(self, request: TransferRequest, *, proxy: bool) -> None:
        """R4, R5, R7: a peer's transfer request reached this instance: the owner answers it;
        a non-owner only when proxied transfer is on for the queue here."""
        driver = self.drivers.get(request.queue)
        if driver is None or (proxy and not driver.proxied_transfer):
            return
        driver.transfer_requested(request.keys, request.requester)

    def sow(self, session: Session, command: pb.Command) -> None:
        """Q19: the queue's deliverable messages, read-only."""
        from amps.server.wire import delivery_entry

        request = command.sow
        driver = self.driver(request.topic)
        flt: Filter | None = compile_filter(request.filter) if request.filter else None
        limit = request.top_n or SOW_DEFAULT_LIMIT
        query_id = request.query_id or command.cmd_id
        session.send(pb.ServerMessage(group_begin=pb.GroupBegin(query_id=query_id)))
        count = 0
        for record in driver.deliverable(SOW_DEFAULT_LIMIT):
            if count >= limit:
                break
            if flt is not None and not flt.matches(self.instance.expr_message(record)):
                continue
            session.send_entry(
                delivery_entry(
                    topic=driver.name,
                    data=record.data,
                    bookmark=f"{record.publisher_id}|{record.seq}|",
                    txid=record.txid,
                    timestamp_us=record.timestamp_us,
                    query_id=query_id,
                    queue=True,
                )
            )
            count += 1
        session.send(
            pb.ServerMessage(group_end=pb.GroupEnd(query_id=query_id, records_returned=count))
        )
        session.send(
            success_ack(
                cmd_id=command.cmd_id,
                ack_type="processed",
                query_id=query_id,
                records_returned=count,
            )
        )

    # -- dead letters -------------------------------------------------------------------------

    def wire_actions(self, actions: tuple[ActionConfig, ...]) -> None:
        """Connect on-expire triggers to publish actions (dead-letter topics)."""
        for action in actions:
            for on in action.on:
                if on.module != ON_EXPIRE:
                    continue
                pattern = re.compile(on.option("Topic") or ".*")
                for driver in self.drivers.values():
                    if pattern.search(driver.name):
                        for do in action.do:
                            if do.module == DO_PUBLISH:
                                driver.dead_letters.append(self._publisher(driver.name, do))

    def _publisher(
        self, queue: str, step: ActionStep
    ) -> Callable[[PublishRecord, ExpireReason], None]:
        topic = step.option("Topic") or ""
        template = step.option("Data") or "{{AMPS_DATA}}"

        def publish(record: PublishRecord, reasons: ExpireReason) -> None:
            data = render_template(template, queue, record, reasons.reason_text())
            self.instance.publish_internal(topic, data)

        return publish

    # -- recovery and checkpoints ------------------------------------------------------------

    async def open_store(self, directory: Path) -> None:
        """Open the queue state store beside the journal and read what it remembers.

        A store that is not a readable SQLite database is set aside (renamed with the suffix
        `.damaged-<time>`) and started afresh: it only speeds recovery up, and the queues are
        rebuilt from the log as if it were missing.
        """
        path = directory / STORE_FILE_NAME
        try:
            self.store = await QueueStore.open(path)
            self._stored = await self.store.load()
        except sqlite3.DatabaseError as exc:
            if self.store is not None:
                await self.store.close()
            aside = set_aside(path, self.instance.wall_us())
            log.warning(
                "queue store %s is unreadable (%s): set aside as %s; rebuilding the queues "
                "from the journal",
                path,
                exc,
                aside.name,
            )
            self.store = await QueueStore.open(path)
            self._stored = await self.store.load()

    def recover(self) -> int:
        """Q16: each queue starts from its snapshot, its recovery point or its configured
        RecoveryPoint; one replay from the oldest start serves all. Returns records read."""
        if not self.drivers:
            return 0
        journal = self.instance.journal
        now_ms = self.instance.now_ms()
        starts: dict[str, int] = {}
        for name, driver in self.drivers.items():
            starts[name] = self._start_for(driver, now_ms)
        # The snapshots are in the engines now; holding their bytes would double the memory.
        self._stored.clear()
        position = min(starts.values())
        count = 0
        for driver in self.drivers.values():
            driver.engine.defer_compaction(True)
            # No time-driven work while replaying: what expired while the instance was down
            # leaves after the whole log is read, with its removal record and dead letter.
            driver.engine.defer_deadlines(True)
        # Queues without expressions need only each publish's head: no record built, no data
        # copied, and the engine takes them as columns (~3x faster per record).
        heads = all(d.reads_heads and d.replica is None for d in self.drivers.values())
        read: Callable[[int, int], list[Any]] = journal.read_heads if heads else journal.read
        while position <= journal.last_txid:
            records = read(position, RECOVERY_BATCH_RECORDS)
            if not records:
                break
            batches: dict[QueueDriver, list[Any]] = {}
            count += len(records)
            # Runs of publishes share a topic: its queues and batches are looked up once per run.
            last_topic: str | None = None
            targets: list[tuple[list[Any], int]] = []
            for record in records:
                if type(record) is tuple:  # a PublishHead: (txid, timestamp_us, topic, ...)
                    txid, topic = record[0], record[2]
                elif isinstance(record, PublishRecord):
                    txid, topic = record.txid, record.topic
                else:
                    if isinstance(record, (QueueRecord, TransferRecord)):
                        if record.origin_instance != self.instance.name:
                            self._is_news(record)  # the marks of what is logged here
                        owner = self.drivers.get(record.queue)
                        if owner is not None and record.txid >= starts[owner.name]:
                            # Publishes before a removal must be in the engine before it.
                            pending = batches.get(owner)
                            if pending:
                                _replay(owner, pending, now_ms, heads=heads)
                                pending.clear()
                            if isinstance(record, QueueRecord):
                                owner.on_recovered_removal(record, now_ms)
                            else:
                                owner.on_transfer(record, now_ms, recovering=True)
                    continue
                if topic != last_topic:
                    last_topic = topic
                    targets = [
                        (batches.setdefault(d, []), starts[d.name]) for d in self.routes(topic)
                    ]
                for batch, start in targets:
                    if txid >= start:
                        batch.append(record)
            for driver, batch in batches.items():
                if batch:
                    _replay(driver, batch, now_ms, heads=heads)
            last = records[-1]
            position = (last[0] if type(last) is tuple else last.txid) + 1
        now_ms = self.instance.now_ms()
        for driver in self.drivers.values():
            driver.engine.defer_compaction(False)
            driver.engine.defer_deadlines(False)
            driver.on_deadline(now_ms)  # a live step: its removals are written (and replicate)
        return count

    def _start_for(self, driver: QueueDriver, now_ms: int) -> int:
        """The first txid this queue must replay (and restore its snapshot if it has one)."""
        journal = self.instance.journal
        setting = driver.config.recovery_point
        stored = self._stored.get(driver.name)
        if stored is None or stored.recovery_point_setting != setting:
            return self._configured_start(setting)
        driver.saved_low_water_txid = stored.low_water_txid
        if stored.snapshot is not None and driver.replica is not None:
            start = self._restore_replica(driver, stored, now_ms)
            if start is not None:
                return start
        elif stored.snapshot is not None and stored.snapshot_txid + 1 >= journal.first_txid:
            try:
                snapshot, taken_mono_ms, taken_wall_us = decode_snapshot(stored.snapshot)
            except SnapshotFormatError as exc:
                log.warning(
                    "queue %s: snapshot unusable (%s%s); replaying the log from txid %d",
                    driver.name,
                    exc,
                    ", it was taken while the queue was replicated"
                    if queue_snapshot.is_replica_snapshot(stored.snapshot)
                    else "",
                    max(stored.low_water_txid + 1, journal.first_txid),
                )
            else:
                # Ages carry over: a message that was 5 s old at the snapshot is 5 s older now.
                elapsed_ms = max(0, (self.instance.wall_us() - taken_wall_us) // 1000)
                driver.restore(snapshot, now_ms - elapsed_ms - taken_mono_ms)
                return max(stored.snapshot_txid, snapshot.high_water_txid) + 1
        return max(stored.low_water_txid + 1, journal.first_txid)

    def _restore_replica(self, driver: QueueDriver, stored: StoredQueue, now_ms: int) -> int | None:
        """Restore a replicated queue's engine and ownership from its snapshot and return the
        first txid to replay; None (with a log line saying why) when the snapshot cannot be
        trusted: the caller replays the log from the queue's low water instead."""
        assert stored.snapshot is not None
        started = time.process_time()
        journal = self.instance.journal
        fallback = max(stored.low_water_txid + 1, journal.first_txid)
        reason = None
        snap = None
        if not queue_snapshot.is_replica_snapshot(stored.snapshot):
            reason = "it was taken while the queue was not replicated"
        elif stored.snapshot_txid + 1 < journal.first_txid:
            reason = f"the journal no longer holds txid {stored.snapshot_txid + 1} after it"
        else:
            try:
                snap = queue_snapshot.decode(stored.snapshot)
            except SnapshotFormatError as exc:
                reason = str(exc)
        if snap is not None and snap.reflects_txid > journal.last_txid:
            # Rule 2 of replication/queue_snapshot.py: never trusted past what the log holds.
            reason = (
                f"it reflects the log up to txid {snap.reflects_txid} but the journal ends "
                f"at txid {journal.last_txid}"
            )
            snap = None
        if snap is not None:
            # Ages carry over: a message that was 5 s old at the snapshot is 5 s older now.
            elapsed_ms = max(0, (self.instance.wall_us() - snap.taken_wall_us) // 1000)
            try:
                driver.restore_replica(snap, now_ms - elapsed_ms - snap.taken_mono_ms)
            except ValueError as exc:
                reason = str(exc)
            else:
                queue = driver.name
                for origin, txid in snap.marks:
                    mark = (origin, queue)
                    self._record_marks[mark] = max(self._record_marks.get(mark, 0), txid)
                start = max(stored.snapshot_txid, snap.queue.high_water_txid) + 1
                log.info(
                    "queue %s: snapshot restored at txid %d (%d messages, %d owned elsewhere) "
                    "in %.3f s CPU; replaying the log from txid %d",
                    queue,
                    stored.snapshot_txid,
                    len(snap.queue.txids),
                    driver.engine.owned_elsewhere_count(),
                    time.process_time() - started,
                    start,
                )
                return start
        log.warning(
            "queue %s: replicated queue snapshot not used (%s); replaying the log from txid %d "
            "to rebuild its ownership",
            driver.name,
            reason,
            fallback,
        )
        return None

    def _configured_start(self, setting: str) -> int:
        journal = self.instance.journal
        if setting in ("now", "creation"):
            return journal.last_txid + 1
        text = "0" if setting == "epoch" else setting
        try:
            return journal.find_start(parse_bookmark_spec(text))
        except errors.InvalidBookmark as exc:
            log.warning("RecoveryPoint %r: %s; starting from the beginning", setting, exc)
            return journal.first_txid

    def finish_restores(self, then: Callable[[], None]) -> None:
        """Index what the replicated queues' staged restores left (Rule 7 of
        replication/queue_replica.py) in bounded steps on the loop, clients served between
        them, then call `then`; at once if none is left."""
        drivers = [d for d in self.drivers.values() if d.restoring]
        if not drivers:
            then()
            return
        self._indexer = asyncio.create_task(self._index(drivers, then), name="queue-restores")

    async def _index(self, drivers: list[QueueDriver], then: Callable[[], None]) -> None:
        cpu_s = 0.0
        steps = 0
        try:
            for driver in drivers:
                while driver.restoring:  # an input that needed the index may have finished it
                    # Not sleep(0): a client's request takes several turns of the loop, each
                    # of which would wait for a step; a timer lets them run first.
                    await asyncio.sleep(INDEX_PAUSE_S)
                    started = time.process_time()
                    driver.restore_step()
                    cpu_s += time.process_time() - started
                    steps += 1
        finally:
            then()
        log.info(
            "queues indexed after the start in %d steps (%.3f s CPU, the clients served "
            "between them)",
            steps,
            cpu_s,
        )

    def start_checkpoints(self) -> None:
        self._checkpointer = asyncio.create_task(self._checkpoint_loop(), name="queue-checkpoints")

    async def _checkpoint_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_checkpoint = loop.time() + CHECKPOINT_INTERVAL_S
        while True:
            # Every CHECK_S, not only every checkpoint: a queue whose replay bound is reached
            # (rule 2 of amps/queue/snapshot_spacing.py) takes its snapshot at once.
            await asyncio.sleep(CHECK_S)
            now = loop.time()
            if now < next_checkpoint and not self._snapshot_due(now):
                continue
            next_checkpoint = now + CHECKPOINT_INTERVAL_S
            try:
                await self.checkpoint()
            except (sqlite3.Error, OSError) as exc:  # a full disk: one line, no traceback
                log.error("queue checkpoint failed (%s); the log still holds everything", exc)
            except Exception:
                log.exception("queue checkpoint failed; the log still holds everything")

    def _snapshot_due(self, now: float) -> bool:
        """Whether a changed queue's snapshot is due now (amps/queue/snapshot_spacing.py);
        the first after the start comes with the first checkpoint, as a restart's staged
        restore may still be indexing then."""
        return any(
            driver.dirty
            and driver.snapshot_spacing.taken_any
            and driver.snapshot_spacing.due(now, partial(_changes, driver))
            for driver in self.drivers.values()
        )

    async def checkpoint(self, *, final: bool = False) -> None:
        """Store each changed queue's recovery point and, when due, its snapshot, once what
        they reflect is durable. When a snapshot is due is amps/queue/snapshot_spacing.py:
        every checkpoint, spaced to 50 times its CPU on the loop's thread for a large queue,
        sooner once a restart would replay 100,000 messages in or out since the last, never
        sooner than 10 times its CPU after the last."""
        now = asyncio.get_running_loop().time()
        taken: list[tuple[QueueDriver, int, bytes | None, int]] = []
        for driver in self.drivers.values():
            if not driver.dirty and not final:
                if driver.file_columns is not None:
                    # Q17: an idle file-backed queue lets its pages leave memory.
                    driver.file_columns.page_out()
                continue
            driver.dirty = False
            snapshot_bytes = None
            snapshot_txid = 0
            spacing = driver.snapshot_spacing
            due = final or spacing.due(now, partial(_changes, driver))
            if due and driver.replica is not None:
                changes = _changes(driver)  # as the snapshot holds it: taken in the same step
                started = time.thread_time()
                snapshot_txid = self._applied_through(driver)
                snap = driver.take_replica_snapshot(
                    self.instance.journal.last_txid, self._marks_of(driver.name)
                )
                # A peer's record logged before the newest publish still waits to be applied:
                # the next checkpoint takes the snapshot (replay never re-offers a publish).
                if snapshot_txid >= snap.queue.high_water_txid:
                    snapshot_bytes = queue_snapshot.encode(snap)
                    self._taken(driver, now, time.thread_time() - started, changes)
                else:
                    cost = time.thread_time() - started
                    spacing.attempted(now, cost)
                    self.snapshots_cpu_s += cost  # the loop's CPU all the same
                    snapshot_txid = 0
            elif due:
                changes = _changes(driver)
                started = time.thread_time()
                snapshot = driver.engine.snapshot()
                snapshot_bytes = encode_snapshot(
                    snapshot, self.instance.now_ms(), self.instance.wall_us()
                )
                # Every record up to the dispatched point is in the engine already: publishes
                # were handed over when they became durable, and the queue wrote its own
                # removal records. So a restart replays only what comes after, not the acks
                # made since the last publish.
                snapshot_txid = max(snapshot.high_water_txid, self.instance.dispatched_txid)
                self._taken(driver, now, time.thread_time() - started, changes)
            taken.append((driver, driver.low_water_txid(), snapshot_bytes, snapshot_txid))
        if not taken:
            return
        await self.instance.wait_durable()
        assert self.store is not None
        setting_of = {name: driver.config.recovery_point for name, driver in self.drivers.items()}
        for driver, low_water, snapshot_bytes, snapshot_txid in taken:
            setting = setting_of[driver.name]
            wall_us = self.instance.wall_us()
            if snapshot_bytes is None:
                # The stored snapshot stays valid (replay covers everything after it): only
                # the recovery point moves. The bytes are not kept in memory.
                await self.store.save_low_water(driver.name, setting, low_water, wall_us)
            else:
                await self.store.save(
                    driver.name, setting, low_water, snapshot_bytes, snapshot_txid, wall_us
                )
            driver.saved_low_water_txid = low_water

    def _taken(self, driver: QueueDriver, now: float, cost: float, changes: QueueChanges) -> None:
        """Space the next snapshot after this one, and say so when its cost shows."""
        spacing = driver.snapshot_spacing
        changed = spacing.changed_since(changes)
        sooner = spacing.by_replay_bound(now)
        wait = spacing.taken(now, cost, changes)
        self.snapshots += 1
        self.snapshots_cpu_s += cost
        if cost * spacing.spread > spacing.interval_s:
            # A restart replays the log since the last snapshot: say when the next one waits
            # longer than a checkpoint, or came sooner for that reason (issue 9).
            log.info(
                "queue %s: snapshot of %d messages took %.3f s of CPU on the event loop (%s); "
                "the next in %.0f s at the latest (snapshots since the start: %d, %.2f s of CPU)",
                driver.name,
                changes.live,
                cost,
                f"{changed:,} messages in or out since the last, the bound is "
                f"{spacing.replay_bound:,}"
                if sooner and changed is not None
                else "due by time",
                wait,
                self.snapshots,
                self.snapshots_cpu_s,
            )

    def _applied_through(self, driver: QueueDriver) -> int:
        """The newest txid up to which every record of the log is applied to the queue: the
        durable publishes were handed over, but a peer's record logged here is applied only
        once it is durable, after the callbacks of its commit (Rule 1 of
        replication/queue_snapshot.py)."""
        through = self.instance.dispatched_txid
        for waiting, record in self._to_apply:
            if waiting is driver:
                return min(through, record.txid - 1)
        return through

    def _marks_of(self, queue: str) -> dict[str, int]:
        """Per origin, the newest origin txid of this queue's records logged here (R9)."""
        marks = self._record_marks.items()
        return {origin: txid for (origin, name), txid in marks if name == queue}

    async def close(self) -> None:
        """Final checkpoint (a clean restart replays nothing) and close the store."""
        for task in (self._indexer, self._checkpointer):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.store is None:
            return
        try:
            await self.checkpoint(final=True)
        except (sqlite3.Error, OSError) as exc:
            # The log is the truth and the checkpoint an optimisation: a stop that cannot write
            # it (a full disk) says so and goes on stopping; the next start replays the log
            # from the last checkpoint that was stored.
            log.error(
                "queue checkpoint at stop not written (%s): nothing is lost, the journal holds "
                "every message; the next start replays it from the last stored checkpoint",
                exc,
            )
        try:
            await self.store.close()
        except (sqlite3.Error, OSError) as exc:
            log.error("queue store did not close cleanly (%s)", exc)


def _changes(driver: QueueDriver) -> QueueChanges:
    """The engine's counts the snapshot spacing weighs (messages ever entered, held now)."""
    return QueueChanges.of(driver.engine.statistics(driver.instance.now_ms()))


def _replay(driver: QueueDriver, batch: list[Any], now_ms: int, *, heads: bool) -> None:
    """Replayed publishes into one queue: heads (`Journal.read_heads`) or records."""
    if heads:
        driver.publish_heads(batch, now_ms)
    else:
        driver.publish_many(batch, now_ms, recovering=True)


def _max_backlog(request: pb.Subscribe) -> int | None:
    if request.has_max_backlog:
        return request.max_backlog
    for option in request.options.split(","):
        name, _, value = option.strip().partition("=")
        if name == "max_backlog":
            try:
                return int(value)
            except ValueError:
                raise errors.InvalidOptions(f"max_backlog={value!r}: expected a number") from None
    return None


def render_template(template: str, queue: str, record: PublishRecord, reason: str) -> bytes:
    """Substitute the AMPS context variables of an on-expire action (§5.1)."""
    text = record.data.decode("utf-8", errors="replace")
    values = {
        "AMPS_TOPIC": queue,
        "AMPS_DATA": text,
        "AMPS_DATA_LENGTH": str(len(record.data)),
        "AMPS_CORRELATION_ID": record.correlation_id,
        "AMPS_REASON": reason,
        "AMPS_BOOKMARK": f"{record.publisher_id}|{record.seq}|",
    }

    def substitute(match: re.Match[str]) -> str:
        return values.get(match.group(1), match.group(0))

    return re.sub(r"\{\{\s*(AMPS_[A-Z_]+)\s*\}\}", substitute, template).encode()
