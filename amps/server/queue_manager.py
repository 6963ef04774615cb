"""All queues of an instance: routing of publishes (A1), queue subscriptions, acks, sow,
dead letters (AMPS-REFERENCE §5.1) and recovery from the log (Q16)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from amps import errors
from amps.config import ActionConfig, QueueConfig
from amps.expr import ExprKind, Filter, compile_filter
from amps.log.records import PublishRecord, QueueRecord
from amps.queue import ExpireReason
from amps.server.convert import success_ack
from amps.server.queues import QueueDriver
from amps.v1 import client_pb2 as pb

if TYPE_CHECKING:
    from amps.server.instance import Instance
    from amps.server.session import Session

log = logging.getLogger("amps.queues")

ON_EXPIRE = "amps-action-on-sow-expire-message"
DO_PUBLISH = "amps-action-do-publish-message"
RECOVERY_BATCH_RECORDS = 5_000
SOW_DEFAULT_LIMIT = 100_000


class QueueManager:
    """Owns one QueueDriver per configured queue."""

    def __init__(self, instance: Instance, queues: tuple[QueueConfig, ...]) -> None:
        self.instance = instance
        self.drivers: dict[str, QueueDriver] = {q.name: QueueDriver(q, instance) for q in queues}
        self._routes: dict[str, list[QueueDriver]] = {}

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

    def on_durable(self, record: PublishRecord, now_ms: int) -> None:
        for driver in self.routes(record.topic):
            driver.on_published(record, now_ms)

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
        request = command.sow_delete
        driver = self.driver(request.topic)
        if bool(request.bookmark) == bool(request.filter):
            raise errors.InvalidOptions(
                "sow_delete command only supports one of: filter, sow_keys, bookmark, or data"
            )
        flt = compile_filter(request.filter, ExprKind.SOW_DELETE_FILTER) if request.filter else None
        removed = driver.ack(session, request.bookmark, flt, request.options)
        if command.ack_type:
            for ack_type in ("processed", "completed", "stats"):
                if ack_type in command.ack_type:
                    session.send(
                        success_ack(
                            cmd_id=command.cmd_id,
                            ack_type=ack_type,
                            records_deleted=removed,
                            matches=removed,
                        )
                    )

    def sow(self, session: Session, command: pb.Command) -> None:
        """Q19: the queue's deliverable messages, read-only."""
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
            delivery = pb.Delivery(
                topic=driver.name,
                data=record.data,
                bookmark=f"{record.publisher_id}|{record.seq}|",
                txid=record.txid,
                timestamp_us=record.timestamp_us,
                query_id=query_id,
                queue=True,
            )
            session.send(pb.ServerMessage(delivery=delivery), len(record.data) + 96)
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

    def _publisher(self, queue: str, step: object) -> Callable[[PublishRecord, ExpireReason], None]:
        from amps.config import ActionStep

        assert isinstance(step, ActionStep)
        topic = step.option("Topic") or ""
        template = step.option("Data") or "{{AMPS_DATA}}"

        def publish(record: PublishRecord, reasons: ExpireReason) -> None:
            data = render_template(template, queue, record, reasons.reason_text())
            self.instance.publish_internal(topic, data)

        return publish

    # -- recovery -----------------------------------------------------------------------------

    def recover(self) -> int:
        """Q16: one replay of the log for all queues; returns the number of records read."""
        if not self.drivers:
            return 0
        journal = self.instance.journal
        now_ms = self.instance.now_ms()
        position = journal.first_txid
        last = journal.last_txid
        count = 0
        while position <= last:
            records = journal.read(position, RECOVERY_BATCH_RECORDS)
            if not records:
                break
            for record in records:
                count += 1
                if isinstance(record, PublishRecord):
                    for driver in self.routes(record.topic):
                        driver.on_published(record, now_ms, recovering=True)
                elif isinstance(record, QueueRecord):
                    owner = self.drivers.get(record.queue)
                    if owner is not None:
                        owner.on_recovered_removal(record, now_ms)
            position = records[-1].txid + 1
        return count


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
