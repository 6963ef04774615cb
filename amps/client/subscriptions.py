"""The client's subscriptions and sow queries: routing deliveries and re-entering after logon."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from amps.client import commands
from amps.client.message import Message, MessageOwner, Subscription
from amps.client.policy import parse_max_backlog
from amps.errors import AmpsError, InvalidBookmark, error_for_code
from amps.v1 import client_pb2

_new_message = Message.__new__


def subscribe_command(cmd_id: str, sub: Subscription, bookmark: str | None) -> client_pb2.Command:
    """The subscribe command for `sub`, starting at `bookmark`."""
    return commands.subscribe_command(
        cmd_id,
        sub_id=sub.sub_id,
        topic=sub.topic,
        filter=sub.filter,
        bookmark=bookmark,
        options=sub.options,
        max_backlog=sub.max_backlog,
    )


class SubscriptionRegistry:
    """Subscriptions by sub_id, sow queries by query_id, and re-subscribes awaiting their ack."""

    def __init__(
        self,
        client: MessageOwner,
        *,
        retry_resume: Callable[[Subscription, AmpsError], bool] = lambda sub, error: False,
        resumed: Callable[[Subscription], None] = lambda sub: None,
    ) -> None:
        self._client = client
        # A resubscription refused because the instance lacks its bookmark: True when the
        # client will try it again (a replica that has not received that message yet).
        self._retry_resume = retry_resume
        self._resumed = resumed
        self._subs: dict[str, Subscription] = {}
        self._resubscribing: dict[str, str] = {}
        self._queries: dict[str, list[Message]] = {}
        self.delivered_count = 0

    def __iter__(self) -> Iterator[Subscription]:
        return iter(self._subs.values())

    def get(self, sub_id: str) -> Subscription | None:
        """The subscription with this id, if any."""
        return self._subs.get(sub_id)

    def add(self, sub: Subscription) -> None:
        """Register before the subscribe is sent, so no early delivery is lost."""
        self._subs[sub.sub_id] = sub

    def remove(self, sub_id: str) -> Subscription | None:
        """Forget a subscription; later deliveries for it are dropped."""
        return self._subs.pop(sub_id, None)

    def on_subscribed(self, sub: Subscription, ack: client_pb2.Ack) -> None:
        """Record what the subscribe ack granted: a max_backlog means a queue subscription (Q8)."""
        granted = parse_max_backlog(ack.options)
        if granted is not None:
            sub.granted_max_backlog = granted
            sub.is_queue = True

    def resubscribe_commands(self, next_cmd_id: Callable[[], str]) -> list[client_pb2.Command]:
        """After a logon: topic subscriptions resume after the last bookmark handed to the
        application (no gap, no duplicate), queue ones are new subscriptions (§7.3, D3)."""
        return [self.resubscribe_command(sub, next_cmd_id) for sub in self._subs.values()]

    def resubscribe_command(
        self, sub: Subscription, next_cmd_id: Callable[[], str]
    ) -> client_pb2.Command:
        """The command that resumes one subscription (its ack comes back to `on_ack`)."""
        cmd_id = next_cmd_id()
        self._resubscribing[cmd_id] = sub.sub_id
        return subscribe_command(cmd_id, sub, sub.resume_bookmark)

    def on_ack(self, ack: client_pb2.Ack) -> bool:
        """Handle a completed ack, a re-subscribe ack, or the instance ending a subscription
        (a failed ack naming the sub_id and no command); False when the ack is not ours."""
        if ack.status == "failure" and not ack.cmd_id and ack.sub_id:
            ended = self._subs.pop(ack.sub_id, None)
            if ended is not None:
                message = ack.reason or "the instance ended the subscription"
                ended.end(error_for_code(ack.error_code, message))
            return True
        if ack.ack_type == "completed":
            sub = self._subs.get(ack.sub_id)
            if sub is not None:
                sub.mark_completed(ack.seq, {o.instance: o.txid for o in ack.origins})
            return True
        sub_id = self._resubscribing.pop(ack.cmd_id, None)
        if sub_id is None:
            return False
        sub = self._subs.get(sub_id)
        if sub is not None and ack.status == "success":
            self.on_subscribed(sub, ack)
            self._resumed(sub)
        elif sub is not None:
            error = error_for_code(ack.error_code, ack.reason or "resubscribe failed")
            if isinstance(error, InvalidBookmark) and self._retry_resume(sub, error):
                return True
            del self._subs[sub_id]
            sub.end(error)
        return True

    def on_messages(
        self, messages: Iterable[client_pb2.ServerMessage]
    ) -> list[client_pb2.ServerMessage]:
        """Route the deliveries of one frame; return its other messages (acks, markers, ...).

        The hot path (queue and live deliveries naming one subscription) reads each protobuf
        field once (every read builds a new object), builds the Message without a constructor
        call, and hands a subscription all of its messages in the frame in one step.
        """
        others: list[client_pb2.ServerMessage] = []
        subs = self._subs
        queries = self._queries
        client = self._client
        new = _new_message
        count = 0
        sub: Subscription | None = None
        sub_id = ""
        batch: list[Message] = []
        for message in messages:
            # An unset oneof member reads as an empty Delivery: no sub_ids (checked below).
            delivery = message.delivery
            sub_ids = delivery.sub_ids
            if len(sub_ids) != 1 or queries:
                if not message.HasField("delivery"):
                    others.append(message)
                    continue
                count += 1
                if batch:  # keep each subscription's order
                    assert sub is not None
                    sub.deliver(batch)
                    batch = []
                query_id = delivery.query_id if queries else ""
                results = queries.get(query_id) if query_id else None
                if results is not None:
                    results.append(self._to_message(delivery, ""))
                    continue
                for other_id in sub_ids:
                    other = subs.get(other_id)
                    if other is not None:
                        other.deliver([self._to_message(delivery, other_id)])
                continue
            count += 1
            this_id = sub_ids[0]
            if this_id != sub_id:
                if batch:
                    assert sub is not None
                    sub.deliver(batch)
                    batch = []
                sub_id = this_id
                sub = subs.get(this_id)
            if sub is None:
                continue
            item = new(Message)
            item._client = client
            item.topic = delivery.topic
            item.data = delivery.data
            item.bookmark = delivery.bookmark
            item.sub_id = this_id
            item.txid = delivery.txid
            item.timestamp_us = delivery.timestamp_us
            lease_deadline_us = item.lease_deadline_us = delivery.lease_deadline_us
            item.delivery_count = delivery.delivery_count
            item.is_queue = delivery.queue or lease_deadline_us > 0
            item.origin_txid = origin_txid = delivery.origin_txid
            item.origin_instance = delivery.origin_instance if origin_txid else ""
            item.acked = False
            batch.append(item)
        if batch:
            assert sub is not None
            sub.deliver(batch)
        self.delivered_count += count
        return others

    def _to_message(self, delivery: client_pb2.Delivery, sub_id: str) -> Message:
        # Each protobuf field read builds a new object: read each once.
        lease_deadline_us = delivery.lease_deadline_us
        return Message(
            self._client,
            topic=delivery.topic,
            data=delivery.data,
            bookmark=delivery.bookmark,
            sub_id=sub_id,
            txid=delivery.txid,
            timestamp_us=delivery.timestamp_us,
            lease_deadline_us=lease_deadline_us,
            delivery_count=delivery.delivery_count,
            is_queue=delivery.queue or lease_deadline_us > 0,
            origin_instance=delivery.origin_instance,
            origin_txid=delivery.origin_txid,
        )

    def start_query(self, query_id: str) -> None:
        """Collect deliveries carrying `query_id` until `finish_query`."""
        self._queries[query_id] = []

    def finish_query(self, query_id: str) -> list[Message]:
        """The results collected for a sow query."""
        return self._queries.pop(query_id)

    def on_connection_lost(self) -> None:
        """Drop buffered messages the instance will send again (replays, returned leases)."""
        self._resubscribing.clear()
        for sub in self._subs.values():
            if sub.resumes_from_bookmark:
                sub.discard_buffered()

    def end_all(self, error: AmpsError | None) -> None:
        """End every iterator (with `error` raised after its buffer drains, if given)."""
        for sub in self._subs.values():
            sub.end(error)
