"""The instance: journal, group commit, persisted acks, fan-out to subscriptions and queues.

Publish path (ARCHITECTURE.md flow 1): session -> dedup -> journal append -> one commit per
loop iteration (group commit: one fsync for everything appended meanwhile) -> persisted acks and
fan-out of the now-durable records. Only durable records are delivered, so a bookmark replay and
the live stream meet at `dispatched_txid` without gaps or doubles (L7).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from time import perf_counter_ns
from typing import TYPE_CHECKING, cast

from amps import __version__, errors
from amps.expr import Message
from amps.log.journal import Journal
from amps.log.received import ReceivedFrames, ReceivedRun, one_publisher_run
from amps.log.records import PublishRecord, QueueRecord, Record, TransferRecord
from amps.publishing import PublishingCore, check_client_name, persisted_through
from amps.server.damage import DamageLog
from amps.server.host import InstanceStatistics, ReplicationHooks
from amps.server.lifecycle import HoldRegistry, JournalLifecycle
from amps.server.positions import OriginPositions
from amps.server.queue_manager import QueueManager
from amps.server.record_cache import RecordCache
from amps.server.send_budget import SendBudget
from amps.server.session import Session, Subscription
from amps.server.subscriptions import SubscriptionIndex
from amps.server.topics import validate_topic_name
from amps.server.transports import ClientTransports
from amps.server.wire import persisted_ack_entry
from amps.v1 import client_pb2 as pb

if TYPE_CHECKING:
    from amps.config import Config
    from amps.expr import Filter
    from amps.server.auth import Authenticator

log = logging.getLogger("amps.instance")

# A record appended with `soon=True` is made durable by the next group commit, or at most this
# long after it was appended: it costs no commit round of its own, so under load it rides along
# with the publishes' commits instead of putting an extra fsync in front of them.
SOON_COMMIT_DELAY_S = 0.005


class Instance:
    """Everything one broker instance shares between its sessions."""

    def __init__(
        self, config: Config, journal: Journal, on_fatal: Callable[[BaseException], None]
    ) -> None:
        self.config = config
        self.journal = journal
        self.name = config.name
        self.group = config.group
        transport = config.grpc_transport
        self.max_message_size_bytes = transport.max_message_size_bytes if transport else 1 << 20
        self.subscriptions = SubscriptionIndex()
        self.sessions: set[Session] = set()
        # Publishing's decisions (L2-L6): names, sequencing, de-duplication, persisted acks.
        # An instance that neither replicates nor receives replication keeps L4 to the letter.
        replicates = config.replication is not None or config.replication_transport is not None
        self.publishing: PublishingCore[Session] = PublishingCore(
            config.name, journal.marks, gaps=replicates
        )
        self.send_budget = SendBudget(
            config.message_memory_limit_bytes, config.client_max_capacity_percent
        )
        self.statistics = InstanceStatistics()
        self.dispatched_txid = journal.last_txid
        # Each origin's last publish per topic: positions_only probes are answered from it.
        self.origin_positions = OriginPositions(journal.last_txid)
        # Durable publishes not yet dispatched, in txid order; a peer's publishes appended as
        # frames are one ReceivedRun each, built into records only if someone wants them.
        self._undispatched: list[PublishRecord | ReceivedRun] = []
        self._undispatched_runs = 0
        self._durable_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # A commit wanted: started by a loop callback at the next iteration, so what this
        # iteration's callbacks append goes to the writer together (group commit).
        self._commit_handle: asyncio.Handle | None = None
        self._committing = False  # started, not stopped: commits are scheduled
        self._on_fatal = on_fatal
        self.version = __version__
        self.damage = DamageLog()
        self.records = RecordCache(journal, on_damage=self.damage.report)
        self._recorded: dict[str, bool] = {}
        self._durable_callbacks: list[tuple[int, Callable[[], None]]] = []
        self._soon_commit: asyncio.TimerHandle | None = None
        # (txid, perf_counter_ns) of the oldest `soon` record not yet durable: hops statistics.
        self._oldest_soon: tuple[int, int] | None = None
        self._next_client_number = 0
        self._loop = asyncio.get_running_loop()
        self.queues = QueueManager(self, config.queues)
        self.queues.wire_actions(config.actions)
        # The journal lifecycle never removes what a hold needs (queues here; replication
        # destinations register theirs).
        self.holds = HoldRegistry()
        for name, driver in self.queues.drivers.items():
            self.holds.register(f"queue {name}", driver.oldest_needed_txid)
        self.lifecycle = JournalLifecycle(journal, self.holds, now_us)
        # The replication links (set by the server when replication is configured).
        self.replicator: ReplicationHooks | None = None
        # Logon checks and name bindings (set by the server when a UsersFile is configured).
        self.authenticator: Authenticator | None = None
        # Client transports an administrator may keep closed (InitialState, amps admin transport).
        self.transports = ClientTransports(config.transports)
        self.client_transport = transport.name if transport is not None else ""
        self.transports.on_change.append(self._transport_changed)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, store_directory: Path) -> None:
        started = self._loop.time()
        started_cpu = time.process_time()
        if self.queues.drivers:
            await self.queues.open_store(store_directory)
        count = self.queues.recover()
        if self.queues.drivers:
            # CPU beside wall time: on a loaded machine the wall time says little.
            log.info(
                "queues recovered from %d log records in %.3f s (%.3f s CPU)",
                count,
                self._loop.time() - started,
                time.process_time() - started_cpu,
            )
        self.journal.on_durable = self._durable
        self.journal.on_failure = self._journal_failed
        self._committing = True
        self._want_commit()  # what was appended before the start
        if self.queues.drivers:
            self.queues.start_checkpoints()
        self.lifecycle.start_schedules(self.config.actions)

    async def stop(self) -> None:
        await self.lifecycle.stop()
        if self._soon_commit is not None:
            self._soon_commit.cancel()  # the journal's close commits what is appended
        for session in list(self.sessions):
            session.outbox.close()
        for driver in self.queues.drivers.values():
            driver.stop()
        await self.queues.close()
        self.journal.on_durable = None  # nothing is dispatched once stopped
        self.journal.on_failure = None
        self._committing = False
        if self._commit_handle is not None:
            self._commit_handle.cancel()  # the journal's close commits what is appended
            self._commit_handle = None

    # -- sessions ---------------------------------------------------------------------------

    def _transport_changed(self, name: str, enabled: bool) -> None:
        """A disabled client transport keeps no clients: their leases return now (Q6)."""
        if enabled or name != self.client_transport:
            return
        for session in list(self.sessions):
            session.kick(errors.TransportDisabled(name))
            session.end_soon()

    @staticmethod
    def check_client_name(client_name: str) -> None:
        """A client name a logon may use, or InvalidOptions."""
        check_client_name(client_name)

    def logon(self, session: Session, client_name: str, user_id: str) -> None:
        """L6: one connection per client name; same user replaces, another user is refused.
        With authentication, a name belongs to the first user that used it (S3)."""
        check_client_name(client_name)
        authenticator = self.authenticator
        if authenticator is not None and not authenticator.bindings.claim(client_name, user_id):
            raise errors.NameInUse(f"client name {client_name!r} belongs to another user")
        replaced = self.publishing.logon(session, client_name, user_id)
        if replaced is not None:
            log.warning(
                "client %r replaced by a new connection from %s (name in use)",
                client_name,
                session.peer,
            )
            replaced.kick(errors.NameInUse(f"client name {client_name!r} logged on elsewhere"))
        session.client_name = client_name
        session.outbox.name = f"{client_name!r} ({session.peer})"
        session.user_id = user_id
        session.publisher_id = self.publishing.logged_on(session, client_name)
        session.logged_on = True
        self._next_client_number += 1
        session.client_id = f"{client_name}#{self._next_client_number}"

    def disconnected(self, session: Session) -> None:
        """The connection ended (or was cut): leases return, subscriptions end; once only."""
        if session.gone:
            return
        session.gone = True
        self.sessions.discard(session)
        self.publishing.disconnected(session)
        session.outbox.release()
        session.cancel_tasks()
        for subscription in list(session.subscriptions.values()):
            self.remove_subscription(subscription)
        self.queues.disconnected(session)

    def remove_subscription(self, subscription: Subscription) -> None:
        if subscription.cancel_replay is not None:
            subscription.cancel_replay()
        self.subscriptions.remove(subscription)
        subscription.session.subscriptions.pop(subscription.sub_id, None)

    # -- publish ----------------------------------------------------------------------------

    def publish(self, session: Session, command: pb.Command, now_us: int) -> int:
        """Validate, dedup and append one publish; returns the own seq to ack (0 if none)."""
        # Every protobuf field is read once: each read builds a new Python object (data: a copy).
        publish = command.publish
        data = publish.data
        size = len(data)
        if size > self.max_message_size_bytes:
            raise errors.MessageTooLarge(size, self.max_message_size_bytes)
        topic = publish.topic
        validate_topic_name(topic)
        topic = self.queues.publish_target(topic)
        entitlements = session.entitlements
        if entitlements is not None and not entitlements.can_write(topic):
            raise errors.NotEntitled(f"user {session.user_id!r} may not publish to {topic!r}")
        own_seq = publish.seq
        if not self.records_topic(topic):
            self._publish_unrecorded(session, topic, data, own_seq, now_us, publish)
            return own_seq
        sequenced = self.publishing.sequence(session.publisher_id, own_seq, session.client_name)
        if sequenced is None:
            return own_seq  # L4: discarded, still acknowledged as persisted
        publisher_id, seq = sequenced
        self._undispatched.append(
            self.journal.append_client_publish(
                topic, data, publisher_id, seq, now_us, publish.correlation_id, publish.expiration_s
            )
        )
        self._count_publish(topic, size)
        return own_seq

    def append_replicated(self, records: Sequence[Record]) -> None:
        """Append what a peer replicated under local txids, origin kept; the same publisher
        de-duplication as a local publish (L4), so a republish after failover adds nothing.
        Runs of publishes go to the journal in one call each (a batch is usually one run)."""
        if type(records) is ReceivedFrames:
            # Frames restamped, no publish record built: the usual batch is publishes only; a
            # replicated queue's batches carry the owner's removal records between them.
            if records.only_publishes:
                self._append_received(records)
            else:
                self._append_received_mixed(records)
            self._want_commit()
            return
        run: list[PublishRecord] = []
        for record in records:
            if isinstance(record, PublishRecord):
                run.append(record)
            else:
                # A peer's queue removal or ownership record: logged here with its origin, then
                # applied once durable, after the publishes before it (an ack that still comes
                # before its message waits in the deferred acks).
                self._append_replicated_publishes(run)
                run = []
                self.queues.replicated_record(record)
        self._append_replicated_publishes(run)
        self._want_commit()

    def _append_replicated_publishes(self, run: list[PublishRecord]) -> None:
        discarded: list[PublishRecord] = []
        fresh = self.publishing.admit_replicated(run, discarded)
        if discarded:
            self.queues.republished(discarded)
        if not fresh:
            return
        appended = self.journal.append_replicated(fresh)
        self._undispatched.extend(appended)
        stats = self.statistics
        counts, sizes = stats.published_by_topic, stats.published_bytes_by_topic
        for record in appended:  # _count_publish, inlined: this runs per replicated record
            topic = record.topic
            counts[topic] = counts.get(topic, 0) + 1
            sizes[topic] = sizes.get(topic, 0) + len(record.data)

    def _append_received_mixed(self, frames: ReceivedFrames) -> None:
        """A batch with queue or transfer records: each run of publishes between them as
        frames, each other record in its place (as `append_replicated` does with records)."""
        start = 0
        for index, record in sorted(frames.others.items()):
            if index > start:
                self._append_received(frames, range(start, index))
            assert not isinstance(record, PublishRecord)
            self.queues.replicated_record(record)
            start = index + 1
        if start < len(frames):
            self._append_received(frames, range(start, len(frames)))

    def _append_received(self, frames: ReceivedFrames, indices: range | None = None) -> None:
        """The publishes of `frames` (`indices`, all of them if None) that are new here."""
        discarded: list[int] = []
        heads = frames.heads if indices is None else frames.heads[indices.start : indices.stop]
        # Looked for once, for de-duplication and the journal's marks (the usual batch).
        run = one_publisher_run(heads)
        fresh = self.publishing.admit_received(heads, discarded, run=run)
        if indices is not None:
            fresh = [indices[k] for k in fresh]
            discarded = [indices[k] for k in discarded]
        if discarded:
            # A record only for a queue's copy: in a triangle every publish arrives twice.
            hears, names = self.queues.hears_republished, frames.names
            copies = [frames.publish(i, 0, 0) for i in discarded if hears(names[i][0])]
            if copies:
                self.queues.republished(copies)
        if not fresh:
            return
        whole = run is not None and len(fresh) == len(heads)  # all new: the same run
        appended = self.journal.append_received(frames, fresh, run=run if whole else None)
        self._undispatched.append(appended)
        self._undispatched_runs += 1
        stats = self.statistics
        counts, sizes = stats.published_by_topic, stats.published_bytes_by_topic
        for topic, (count, size) in frames.topic_totals(fresh).items():
            counts[topic] = counts.get(topic, 0) + count
            sizes[topic] = sizes.get(topic, 0) + size

    def release_persisted_acks(self) -> None:
        """A sync destination acknowledged more (or was downgraded): ack what it allows."""
        self._send_persisted_acks(self.dispatched_txid)

    def records_topic(self, topic: str) -> bool:
        """Whether the transaction log records this topic (its `Topic` entries)."""
        recorded = self._recorded.get(topic)
        if recorded is None:
            txlog = self.config.transaction_log
            recorded = txlog is not None and txlog.records_topic(topic)
            if len(self._recorded) > 100_000:
                self._recorded.clear()
            self._recorded[topic] = recorded
        return recorded

    def _publish_unrecorded(
        self,
        session: Session,
        topic: str,
        data: bytes,
        own_seq: int,
        now_us: int,
        publish: pb.Publish,
    ) -> None:
        """A topic the log does not record: live subscribers only, nothing to replay (as AMPS)."""
        publisher_id = session.publisher_id if own_seq else 0
        record = PublishRecord(
            txid=0,
            timestamp_us=now_us,
            topic=topic,
            data=data,
            publisher_id=publisher_id,
            seq=own_seq,
            correlation_id=publish.correlation_id,
            expiration_s=publish.expiration_s,
        )
        self.fan_out(record)
        self._count_publish(topic, len(data))

    def _count_publish(self, topic: str, size: int) -> None:
        stats = self.statistics
        counts = stats.published_by_topic
        counts[topic] = counts.get(topic, 0) + 1
        sizes = stats.published_bytes_by_topic
        sizes[topic] = sizes.get(topic, 0) + size

    def publish_internal(self, topic: str, data: bytes) -> None:
        """A publish made by the instance itself (dead letters), under its own publisher id."""
        publisher_id, seq = self.publishing.internal_sequence()
        record = self.journal.append_publish(
            topic=topic, data=data, publisher_id=publisher_id, seq=seq, timestamp_us=now_us()
        )
        self._undispatched.append(record)
        self._count_publish(topic, len(data))
        self._want_commit()

    def append_record(
        self, record: QueueRecord | TransferRecord, *, soon: bool = False
    ) -> QueueRecord | TransferRecord:
        """Append a queue or transfer record (built with txid 0); returns it as logged. A
        commit starts for it at once, or with `soon` the next commit covers it, started at
        most SOON_COMMIT_DELAY_S later."""
        stamped = self.journal.append(record)
        self.records.put_other(stamped)  # the links read it from memory once it is durable
        if not soon:
            self._want_commit()
            return stamped
        if self._oldest_soon is None:
            self._oldest_soon = (self.journal.last_txid, perf_counter_ns())
        if self._soon_commit is None:
            self._soon_commit = self._loop.call_later(SOON_COMMIT_DELAY_S, self._commit_soon)
        return stamped

    def _commit_soon(self) -> None:
        self._soon_commit = None
        self._want_commit()

    def when_durable(self, callback: Callable[[], None]) -> None:
        """Run callback once everything appended so far is durable (the Action contract)."""
        self._durable_callbacks.append((self.journal.last_txid, callback))
        self._want_commit()

    def now_ms(self) -> int:
        """Monotonic milliseconds: the engines' clock."""
        return int(self._loop.time() * 1000)

    @staticmethod
    def wall_us() -> int:
        return now_us()

    @staticmethod
    def expr_message(record: PublishRecord) -> Message:
        return expr_message(record)

    def expect_persisted_ack(self, session: Session, seq: int) -> None:
        """After a frame: ack `seq` once everything appended so far is durable."""
        self.publishing.expect_ack(session, self.journal.last_txid, seq)
        self._want_commit()

    async def wait_durable(self) -> None:
        """Return once everything appended so far is durable (flush with persisted)."""
        target = self.journal.last_txid
        if target <= self.dispatched_txid:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._durable_waiters.append((target, future))
        self._want_commit()
        await future

    def _want_commit(self) -> None:
        """Commit what is appended at the next loop iteration (once per iteration)."""
        if self._commit_handle is None and self._committing:
            self._commit_handle = self._loop.call_soon(self._commit_now)

    def _commit_now(self) -> None:
        """Hand what is appended to the journal's writer, unless a batch is with it: its
        result (`_durable`) hands over what was appended meanwhile. A callback, not a task
        awaiting each commit: one wake-up per commit less on every instance (issue 8)."""
        self._commit_handle = None
        try:
            if self.journal.last_txid > self.dispatched_txid:
                self.journal.start_commit()
            else:  # callbacks and waiters already due
                self._after_commit(self.dispatched_txid)
        except BaseException as exc:  # never pretend success
            self._on_fatal(exc)
            raise

    def _journal_failed(self, error: BaseException) -> None:
        """The journal's writer failed (an fsync or a write): the instance stops; nothing
        waiting for that commit is told it is durable."""
        self._on_fatal(error)

    def _durable(self, durable_txid: int) -> None:
        """The journal made a batch durable (its result just came back to the loop): what was
        appended during that fsync goes to the writer now, and the batch is acknowledged,
        replicated and delivered in the same loop iteration (once per replicated batch on the
        origin before its link sends it, and on the destination before its ack)."""
        try:
            self.journal.start_commit()
            self._after_commit(durable_txid)
        except BaseException as exc:  # never pretend success
            self._on_fatal(exc)
            raise

    def _after_commit(self, durable_txid: int) -> None:
        records = self._undispatched
        split = len(records)
        while split and _last_txid(records[split - 1]) > durable_txid:
            split -= 1
        if self._undispatched_runs:
            ready, latest = self._records_of(records[:split])
        else:  # records only: no pass over them
            ready = latest = cast(list[PublishRecord], records[:split])
        self._undispatched = records[split:]
        if self.replicator is not None and split:
            self._time_replicated(records[:split])
        self.dispatched_txid = max(self.dispatched_txid, durable_txid)
        self._send_persisted_acks(durable_txid)
        if self._soon_commit is not None and self.journal.last_txid <= durable_txid:
            self._soon_commit.cancel()  # this commit covered them
            self._soon_commit = None
        oldest_soon = self._oldest_soon
        if oldest_soon is not None and oldest_soon[0] <= durable_txid:
            self.statistics.hops.removal_durable.add(perf_counter_ns() - oldest_soon[1])
            self._oldest_soon = None
        self.origin_positions.dispatched(latest)
        if ready:
            put = self.records.put
            for record in ready:
                put(record)  # before the links read them: the cache spares a journal read
        if self.replicator is not None:
            # Before the local fan-out: the copy on a destination (and, for a sync one, the
            # publishers' persisted acks) waits for a link hop and the peer's fsync, the local
            # subscribers for nothing more.
            self.replicator.log_advanced()
        if ready:
            if len(self.subscriptions):  # none: no per-record look-up (a catching-up peer)
                fan_out = self.fan_out
                for record in ready:
                    fan_out(record)
            self.queues.on_durable(ready, self.now_ms())
        if self._durable_callbacks:
            due = [cb for target, cb in self._durable_callbacks if target <= durable_txid]
            self._durable_callbacks = [
                (t, cb) for t, cb in self._durable_callbacks if t > durable_txid
            ]
            for callback in due:
                callback()
        still = []
        for target, future in self._durable_waiters:
            if target <= durable_txid:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((target, future))
        self._durable_waiters = still
        if self.journal.flushing:
            return  # it holds everything appended: its result comes back here
        if self._undispatched or self._durable_waiters or self._durable_callbacks:
            self._want_commit()

    def _time_replicated(self, items: list[PublishRecord | ReceivedRun]) -> None:
        """Hops: each replicated publish made durable here, from its origin's timestamp."""
        lag, now, local = self.statistics.hops.replicated_lag, now_us(), self.name
        for item in items:
            if type(item) is ReceivedRun:
                lag.add_since_us(now, item.timestamps)
            elif item.origin_instance != local:  # type: ignore[union-attr]
                lag.add_us(now - item.timestamp_us)  # type: ignore[union-attr]

    def _records_of(
        self, items: list[PublishRecord | ReceivedRun]
    ) -> tuple[list[PublishRecord], list[PublishRecord]]:
        """The durable publishes, and those the origin positions need (the same list, or each
        run's last record per topic and origin). A peer's runs are built into records only when
        something reads them: a live subscription, a queue, or a destination (its link reads
        the record cache); otherwise nobody would look at them before they leave the cache."""
        wanted = bool(
            len(self.subscriptions)
            or self.queues.drivers
            or (self.replicator is not None and self.replicator.forwards)
        )
        out: list[PublishRecord] = []
        latest: list[PublishRecord] = []
        for item in items:
            if type(item) is ReceivedRun:
                self._undispatched_runs -= 1
                if wanted:
                    out.extend(item.records())
                else:
                    latest.extend(item.last_records())
            else:
                out.append(item)  # type: ignore[arg-type]
                if not wanted:
                    latest.append(item)  # type: ignore[arg-type]
        return out, (out if wanted else latest)

    def _send_persisted_acks(self, durable_txid: int) -> None:
        if self.replicator is not None:
            # L2: and every sync destination has made it durable too.
            durable_txid = persisted_through(durable_txid, self.replicator.sync_acked_txids())
        for session, seq in self.publishing.release(durable_txid):
            session.send_entry(persisted_ack_entry(seq))

    # -- filters and queues -----------------------------------------------------------------

    def compile_filter(self, text: str) -> Filter:
        """A subscription content filter; FilterSyntaxError becomes a `bad filter` ack."""
        from amps.expr import compile_filter

        return compile_filter(text)

    def sow_delete(self, session: Session, command: pb.Command) -> None:
        """Queue acknowledgements (Q10)."""
        self.queues.sow_delete(session, command)

    def sow(self, session: Session, command: pb.Command) -> None:
        """A `sow` of a queue (Q19)."""
        self.queues.sow(session, command)

    # -- fan-out ----------------------------------------------------------------------------

    def fan_out(self, record: PublishRecord) -> None:
        """Deliver a durable publish to every live subscription that matches it."""
        subscriptions = self.subscriptions.matching(record.topic)
        if not subscriptions:
            return
        by_session: dict[Session, list[str]] = {}
        # Subscriptions with the `origin` option: their deliveries name the origin (separate
        # entries, so that a session's other subscriptions get what they asked for).
        with_origin: dict[Session, list[str]] | None = None
        message = None
        for subscription in subscriptions:
            if not subscription.live:
                continue
            if subscription.filter is not None:
                if message is None:
                    message = expr_message(record)
                if not subscription.filter.matches(message):
                    continue
            if subscription.origin:
                only = subscription.only_origin
                if only is not None and only != record.origin_instance.encode():
                    continue
                with_origin = {} if with_origin is None else with_origin
                with_origin.setdefault(subscription.session, []).append(subscription.sub_id)
                continue
            by_session.setdefault(subscription.session, []).append(subscription.sub_id)
        self._deliver(record, by_session, origin=False)
        if with_origin is not None:
            self._deliver(record, with_origin, origin=True)

    def _deliver(
        self, record: PublishRecord, by_session: dict[Session, list[str]], *, origin: bool
    ) -> None:
        # One encoding per distinct set of sub_ids (usually one for all sessions).
        entries: dict[tuple[str, ...], bytes] = {}
        for session, sub_ids in by_session.items():
            key = tuple(sub_ids)
            entry = entries.get(key)
            if entry is None:
                entry = entries[key] = delivery_for(record, sub_ids, origin=origin)
            session.send_entry(entry)
            self.statistics.delivered += 1


def _last_txid(item: PublishRecord | ReceivedRun) -> int:
    return item.txid if type(item) is PublishRecord else item.last_txid  # type: ignore[union-attr]


def bookmark_of(record: PublishRecord) -> str:
    return f"{record.publisher_id}|{record.seq}|"


def delivery_for(record: PublishRecord, sub_ids: list[str], *, origin: bool = False) -> bytes:
    """The frame entry of ServerMessage(delivery=...) for a durable publish (amps.server.wire);
    with `origin` it names the origin instance and origin txid, as a replay with that option."""
    from amps.server.wire import encoder_for

    parts: list[bytes] = []
    encoder_for(record.topic, sub_ids).encode_into(
        parts, record.data, record.publisher_id, record.seq, record.txid, record.timestamp_us,
        record.correlation_id.encode(), record.origin_instance.encode() if origin else b"",
        record.origin_txid if origin else 0,
    )  # fmt: skip
    return b"".join(parts)


def expr_message(record: PublishRecord) -> Message:
    """The expression-language view of a record (parsed lazily by amps.expr)."""
    return Message(
        record.data,
        topic=record.topic,
        bookmark=bookmark_of(record),
        timestamp_us=record.timestamp_us,
        correlation_id=record.correlation_id,
        expiration_s=record.expiration_s,
    )


def now_us() -> int:
    return time.time_ns() // 1000
