"""Client receive path without a server: frames routed to subscriptions, get()/iteration, acks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from amps import errors
from amps.client import Client, Message, Subscription, acks, commands
from amps.client.bookmarks import FileBookmarkStore
from amps.client.connection import Connection
from amps.errors import ConnectionBroken
from amps.v1 import client_pb2

QUEUE_SUB = "c-sub-1"


def delivery(
    bookmark: str, sub_ids: tuple[str, ...] = (QUEUE_SUB,), *, queue: bool = True, **fields: object
) -> client_pb2.ServerMessage:
    lease = 1_700_000_030_000_000 if queue else 0
    values: dict[str, object] = {
        "topic": "work",
        "data": b'{"n": %s}' % bookmark.encode(),
        "bookmark": bookmark,
        "sub_ids": list(sub_ids),
        "txid": 42,
        "timestamp_us": 1_700_000_000_000_000,
        "lease_deadline_us": lease,
        "delivery_count": 1 if queue else 0,
        "queue": queue,
    }
    values.update(fields)
    return client_pb2.ServerMessage(delivery=client_pb2.Delivery(**values))  # type: ignore[arg-type]


def frame(*messages: client_pb2.ServerMessage) -> client_pb2.ServerFrame:
    """Through the wire form, as the connection's reader sees it."""
    raw = client_pb2.ServerFrame(messages=list(messages)).SerializeToString()
    return client_pb2.ServerFrame.FromString(raw)


class Harness:
    """A Client whose stream is a Connection that is never opened: frames go in by hand and
    the commands it would write are read back from its queue."""

    def __init__(self, **options: object) -> None:
        self.client = Client("c", **options)  # type: ignore[arg-type]
        self.client._state = "connected"
        self.conn = self.new_connection()

    def new_connection(self) -> Connection:
        """A new stream for the client (never opened)."""
        self.conn = Connection(
            "127.0.0.1:1",
            flush_interval_s=0.001,
            max_frame_commands=500,
            on_messages=self.client._on_messages,
            on_lost=self.client._on_lost,
        )
        self.client._conn = self.conn
        return self.conn

    def subscription(
        self, sub_id: str = QUEUE_SUB, *, backlog: int | None = 9, bookmark: str | None = None
    ) -> Subscription:
        sub = Subscription(
            self.client,
            sub_id=sub_id,
            topic="work",
            filter="",
            bookmark=bookmark,
            options="",
            max_backlog=backlog,
            auto_ack=self.client._auto_ack,
            bookmark_store=self.client.bookmark_store,
        )
        self.client._subs.add(sub)
        if backlog is not None:
            ack = client_pb2.Ack(status="success", options=f"max_backlog={backlog}")
            self.client._subs.on_subscribed(sub, ack)
        return sub

    def receive(self, *messages: client_pb2.ServerMessage) -> None:
        self.conn._on_messages(frame(*messages).messages)

    def sent(self) -> list[client_pb2.Command]:
        return [
            command
            for raw in self.conn._take_frames()
            for command in client_pb2.ClientFrame.FromString(raw).commands
        ]


async def test_a_frame_of_queue_deliveries_becomes_messages_in_order() -> None:
    h = Harness()
    sub = h.subscription()
    h.receive(*(delivery(f"7|{n}|") for n in range(1, 4)))
    got = [await sub.get(0) for _ in range(3)]
    assert [m.bookmark for m in got if m is not None] == ["7|1|", "7|2|", "7|3|"]
    first = got[0]
    assert isinstance(first, Message)
    assert (first.topic, first.data, first.sub_id, first.txid) == (
        "work",
        b'{"n": 7|1|}',
        QUEUE_SUB,
        42,
    )
    assert first.timestamp_us == 1_700_000_000_000_000
    assert (first.lease_deadline_us, first.delivery_count) == (1_700_000_030_000_000, 1)
    assert first.is_queue
    assert not first.acked
    assert await sub.get(0) is None
    assert h.client.statistics().delivered == 3
    assert sub.last_bookmark is None  # queue bookmarks are not replay positions


async def test_deliveries_for_several_subscriptions_in_one_frame() -> None:
    h = Harness()
    a, b = h.subscription("a", backlog=None), h.subscription("b", backlog=None)
    h.receive(
        delivery("1|1|", ("a",), queue=False),
        delivery("1|2|", ("b",), queue=False),
        delivery("1|3|", ("a", "b"), queue=False),
        delivery("1|4|", ("gone",), queue=False),
        delivery("1|5|", ("a",), queue=False),
        client_pb2.ServerMessage(heartbeat=client_pb2.Heartbeat()),
    )
    got_a, got_b = await drain(a), await drain(b)
    assert [(m.bookmark, m.sub_id) for m in got_a] == [("1|1|", "a"), ("1|3|", "a"), ("1|5|", "a")]
    assert [(m.bookmark, m.sub_id) for m in got_b] == [("1|2|", "b"), ("1|3|", "b")]
    assert a.last_bookmark == "1|5|"
    assert b.last_bookmark == "1|3|"
    assert not any(m.is_queue for m in got_a + got_b)
    assert h.client.statistics().delivered == 5


async def drain(sub: Subscription) -> list[Message]:
    result = []
    while (message := await sub.get(0)) is not None:
        result.append(message)
    return result


async def test_lease_without_queue_flag_is_a_queue_message() -> None:
    h = Harness()
    sub = h.subscription()
    h.receive(delivery("7|1|", queue=False, lease_deadline_us=5))
    message = await sub.get(0)
    assert message is not None
    assert message.is_queue


async def test_sow_results_and_acks_in_the_same_frame() -> None:
    h = Harness()
    sub = h.subscription()
    h.client._subs.start_query("q1")
    future: asyncio.Future[client_pb2.Ack] = asyncio.get_running_loop().create_future()
    h.client._pending["5"] = future
    h.receive(
        client_pb2.ServerMessage(group_begin=client_pb2.GroupBegin(query_id="q1")),
        delivery("7|1|", (), query_id="q1"),
        delivery("7|2|"),
        delivery("7|3|", (), query_id="q1"),
        client_pb2.ServerMessage(ack=client_pb2.Ack(cmd_id="5", status="success")),
    )
    assert [m.bookmark for m in h.client._subs.finish_query("q1")] == ["7|1|", "7|3|"]
    assert [m.bookmark for m in await drain(sub)] == ["7|2|"]
    assert future.result().status == "success"


async def test_iteration_waits_for_the_next_frame_and_ends_after_the_buffer() -> None:
    h = Harness()
    sub = h.subscription()
    h.receive(delivery("7|1|"))

    async def collect() -> list[str]:
        return [message.bookmark async for message in sub]

    task = asyncio.create_task(collect())
    await asyncio.sleep(0)
    h.receive(delivery("7|2|"), delivery("7|3|"))
    await asyncio.sleep(0)
    sub.end()
    h.receive(delivery("7|4|"))  # after the end marker: still handed out, then the end
    assert await asyncio.wait_for(task, 1) == ["7|1|", "7|2|", "7|3|", "7|4|"]
    assert await sub.get(0) is None


async def test_get_raises_the_end_error_after_the_buffer() -> None:
    h = Harness()
    sub = h.subscription()
    h.receive(delivery("7|1|"))
    sub.end(ConnectionBroken("gone"))
    assert (await sub.get(0)) is not None
    with pytest.raises(ConnectionBroken):
        await sub.get(0)
    with pytest.raises(ConnectionBroken):
        await sub.get(None)


async def test_get_times_out_then_returns_a_later_delivery() -> None:
    h = Harness()
    sub = h.subscription()
    assert await sub.get(0.01) is None
    asyncio.get_running_loop().call_later(0.01, h.receive, delivery("7|1|"))
    message = await sub.get(1.0)
    assert message is not None
    assert message.bookmark == "7|1|"


async def test_acks_are_batched_per_topic_capped_by_the_backlog() -> None:
    h = Harness()  # granted backlog 9: batches of 3
    sub = h.subscription()
    h.receive(*(delivery(f"7|{n}|") for n in range(1, 8)))
    for _ in range(7):
        message = await sub.get(0)
        assert message is not None
        await message.ack()
        await message.ack()  # a second ack of the same message is a no-op
    sent = h.sent()
    assert [c.sow_delete.bookmark for c in sent] == ["7|1|,7|2|,7|3|", "7|4|,7|5|,7|6|"]
    assert {(c.sow_delete.topic, c.sow_delete.options) for c in sent} == {("work", "")}
    await h.client.flush_acks()
    assert [c.sow_delete.bookmark for c in h.sent()] == ["7|7|"]
    assert h.client.statistics().acks_sent == 7
    h.client._acks.cancel_timer()


async def test_cancel_and_expire_are_sent_at_once_and_non_queue_acks_do_nothing() -> None:
    h = Harness()
    sub = h.subscription()
    live = h.subscription("live", backlog=None)
    h.receive(delivery("7|1|"), delivery("7|2|"), delivery("7|3|"))
    h.receive(delivery("1|1|", ("live",), queue=False))
    first, second, third = [await sub.get(0) for _ in range(3)]
    assert first is not None
    assert second is not None
    assert third is not None
    await first.ack(cancel=True)
    await second.ack(expire=True)
    await h.client.ack_message(third, cancel=True)
    plain = await live.get(0)
    assert plain is not None
    assert not plain.is_queue
    await plain.ack()
    sent = [(c.sow_delete.bookmark, c.sow_delete.options) for c in h.sent()]
    assert sent == [("7|1|", "cancel"), ("7|2|", "expire"), ("7|3|", "cancel")]
    assert not plain.acked


async def test_auto_ack_acks_when_the_iterator_moves_on() -> None:
    h = Harness(auto_ack=True, ack_batch_size=1)
    sub = h.subscription()
    h.receive(delivery("7|1|"), delivery("7|2|"))
    first = await sub.get(0)
    assert first is not None
    assert not first.acked
    second = await sub.__anext__()
    assert first.acked
    assert not second.acked
    assert [c.sow_delete.bookmark for c in h.sent()] == ["7|1|"]
    assert sub.take_auto_ack() is second


def processed(command: client_pb2.Command, status: str = "success") -> client_pb2.ServerMessage:
    return client_pb2.ServerMessage(
        ack=client_pb2.Ack(cmd_id=command.cmd_id, ack_type="processed", status=status)
    )


def reconnect(h: Harness) -> None:
    """Lose the stream, then log on again on a new one (what `_on_logged_on` does for acks)."""
    h.client._state = "closed"  # no reconnect task: the test plays the logon itself
    h.client._on_lost(h.conn, ConnectionBroken("gone"))
    h.client._state = "connected"
    h.client._acks.on_logon(h.new_connection())


async def test_acks_while_disconnected_are_kept_and_sent_after_the_logon() -> None:
    h = Harness(ack_batch_size=2)
    sub = h.subscription()
    h.receive(*(delivery(f"7|{n}|") for n in range(1, 5)))
    messages = [await sub.get(0) for _ in range(4)]
    h.client._conn = None
    got = [message for message in messages if message is not None]
    assert len(got) == 4
    for message in got:
        await message.ack()
    await got[0].ack(cancel=False)  # already acked: nothing more
    h.client._conn = h.conn
    h.client._acks.on_logon(h.conn)
    assert [c.sow_delete.bookmark for c in h.sent()] == ["7|1|,7|2|", "7|3|,7|4|"]


async def test_unconfirmed_acks_are_sent_again_after_a_reconnect_and_cancels_are_not() -> None:
    h = Harness(ack_batch_size=1)
    sub = h.subscription()
    h.receive(*(delivery(f"7|{n}|") for n in range(1, 5)))
    got = [await sub.get(0) for _ in range(4)]
    first, second, third, fourth = [message for message in got if message is not None]
    await first.ack()
    await second.ack()
    await third.ack(cancel=True)
    await fourth.ack(expire=True)
    sent = h.sent()
    assert [c.sow_delete.bookmark for c in sent] == ["7|1|", "7|2|", "7|3|", "7|4|"]
    # One confirmation request at a time: the first batch asks, the others do not.
    assert [c.ack_type for c in sent] == ["processed", "", "", ""]
    h.receive(processed(sent[0]))  # the instance confirmed the first one only
    assert h.client._acks.unconfirmed_count == 3
    reconnect(h)
    resent = [(c.sow_delete.bookmark, c.sow_delete.options) for c in h.sent()]
    assert resent == [("7|2|", ""), ("7|4|", "expire")]
    h.client._acks.cancel_timer()


async def test_one_confirmation_confirms_every_ack_sent_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(acks, "CONFIRM_EVERY_MS", 0)  # ask whenever nothing is outstanding
    h = Harness(ack_batch_size=1)
    sub = h.subscription()
    h.receive(*(delivery(f"7|{n}|") for n in range(1, 6)))
    messages = [m for m in [await sub.get(0) for _ in range(5)] if m is not None]
    for message in messages[:3]:
        await message.ack()
    first = h.sent()
    assert [c.ack_type for c in first] == ["processed", "", ""]
    h.receive(processed(first[0]))
    for message in messages[3:]:
        await message.ack()
    later = h.sent()
    assert [c.ack_type for c in later] == ["processed", ""]
    h.receive(processed(later[0]))  # confirms 7|2|..7|4| as well: sent before it
    assert h.client._acks.unconfirmed_count == 1  # 7|5|, sent after the request
    reconnect(h)
    assert [c.sow_delete.bookmark for c in h.sent()] == ["7|5|"]
    h.client._acks.cancel_timer()


async def test_a_refused_ack_batch_is_not_sent_again() -> None:
    h = Harness(ack_batch_size=1)
    sub = h.subscription()
    h.receive(delivery("7|1|"))
    message = await sub.get(0)
    assert message is not None
    await message.ack()
    (command,) = h.sent()
    h.receive(processed(command, status="failure"))
    assert h.client._acks.unconfirmed_count == 0
    reconnect(h)
    assert h.sent() == []


def resubscribes(h: Harness) -> dict[str, str]:
    """sub_id -> bookmark of the resubscribe commands a logon would send."""
    commands_ = h.client._subs.resubscribe_commands(h.client._cmd_id)
    return {c.subscribe.sub_id: c.subscribe.bookmark for c in commands_}


async def test_topic_subscriptions_resume_after_the_last_bookmark_handed_out() -> None:
    h = Harness()
    live = h.subscription("live", backlog=None)
    replay = h.subscription("replay", backlog=None, bookmark="0")
    fresh = h.subscription("fresh", backlog=None)
    from_now = h.subscription("from-now", backlog=None, bookmark="0|1|")
    for sub_id in ("live", "replay", "from-now"):
        h.receive(*(delivery(f"5|{n}|", (sub_id,), queue=False) for n in range(1, 5)))
    for sub in (live, replay):
        assert [(await sub.get(0)).bookmark for _ in range(2)] == ["5|1|", "5|2|"]  # type: ignore[union-attr]
    reconnect(h)
    assert resubscribes(h) == {"live": "5|2|", "replay": "5|2|", "fresh": "", "from-now": "0|1|"}
    # What was buffered and not handed out comes again from the replay: dropped here, except
    # where the resubscription starts from now (nothing would come again).
    # The store lags one message behind: the last one handed out is recorded when the
    # application asks for the next (it is done with it).
    assert h.client.bookmark_store.get("live") == "5|1|"
    assert await live.get(0) is None
    assert h.client.bookmark_store.get("live") == "5|2|"
    assert await replay.get(0) is None
    assert [(await from_now.get(0)).bookmark for _ in range(4)] == [  # type: ignore[union-attr]
        "5|1|",
        "5|2|",
        "5|3|",
        "5|4|",
    ]
    assert await fresh.get(0) is None
    h.client._acks.cancel_timer()


async def test_the_last_message_handed_out_is_recorded_at_unsubscribe_and_close() -> None:
    h = Harness()
    first = h.subscription("first", backlog=None)
    second = h.subscription("second", backlog=None)
    h.receive(delivery("5|1|", ("first",), queue=False), delivery("6|1|", ("second",), queue=False))
    assert await first.get(0) is not None
    assert await second.get(0) is not None
    store = h.client.bookmark_store
    assert (store.get("first"), store.get("second")) == (None, None)
    h.client._conn = None  # no unsubscribe command to send
    await h.client.unsubscribe("first")
    assert (store.get("first"), store.get("second")) == ("5|1|", None)
    await h.client.close()
    assert store.get("second") == "6|1|"


def refused(command: client_pb2.Command) -> client_pb2.ServerMessage:
    """The instance's answer to a resubscription whose bookmark is not in its log."""
    return client_pb2.ServerMessage(
        ack=client_pb2.Ack(
            cmd_id=command.cmd_id,
            ack_type="processed",
            status="failure",
            error_code="invalid_bookmark",
            reason="bookmark not found in the transaction log: 5|2|",
        )
    )


async def test_a_resumption_the_instance_lacks_the_bookmark_for_is_tried_again() -> None:
    h = Harness()
    sub = h.subscription("live", backlog=None)
    h.receive(*(delivery(f"5|{n}|", ("live",), queue=False) for n in range(1, 3)))
    assert [(await sub.get(0)).bookmark for _ in range(2)] == ["5|1|", "5|2|"]  # type: ignore[union-attr]
    reconnect(h)
    for command in h.client._subs.resubscribe_commands(h.client._cmd_id):
        h.conn.send(command)
    (first,) = h.sent()
    retried = asyncio.Event()
    resume_again = h.client._resume_again

    def resumed_again(sub: Subscription, conn: Connection) -> None:
        resume_again(sub, conn)
        retried.set()

    h.client._resume_again = resumed_again  # type: ignore[method-assign]
    h.receive(refused(first))  # a replica that has not received 5|2| yet
    waiter = asyncio.create_task(sub.get(5))
    await asyncio.wait_for(retried.wait(), 5)
    (again,) = h.sent()
    assert again.subscribe.bookmark == "5|2|"
    assert again.cmd_id != first.cmd_id
    h.receive(client_pb2.ServerMessage(ack=client_pb2.Ack(cmd_id=again.cmd_id, status="success")))
    h.receive(delivery("5|3|", ("live",), queue=False))
    message = await waiter
    assert message is not None
    assert message.bookmark == "5|3|"
    assert h.client._resume_refused == {}


async def test_a_resumption_refused_past_the_resume_timeout_ends_the_subscription() -> None:
    h = Harness(resume_timeout_s=0)
    sub = h.subscription("live", backlog=None)
    h.receive(delivery("5|1|", ("live",), queue=False))
    assert await sub.get(0) is not None
    reconnect(h)
    (command,) = h.client._subs.resubscribe_commands(h.client._cmd_id)
    h.receive(refused(command))
    with pytest.raises(errors.InvalidBookmark, match="not found"):
        await sub.get(1)
    assert h.client._subs.get("live") is None


async def test_a_queue_subscription_resubscribes_without_a_bookmark() -> None:
    h = Harness()
    sub = h.subscription()
    sub.bookmark = "0"  # even one made with a bookmark option: a queue resumes as a queue
    h.receive(delivery("7|1|"), delivery("7|2|"))
    assert (await sub.get(0)) is not None
    reconnect(h)
    assert resubscribes(h) == {QUEUE_SUB: ""}
    assert await sub.get(0) is None  # the lease of 7|2| returned to the queue with the stream
    assert h.client.bookmark_store.get(QUEUE_SUB) is None


async def test_subscribe_recent_starts_after_the_stored_bookmark(tmp_path: Path) -> None:
    store = FileBookmarkStore(tmp_path / "bookmarks")
    store.record("orders", "3|9|")
    h = Harness(bookmark_store=store)
    task = asyncio.create_task(h.client.subscribe("orders", sub_id="orders", bookmark="recent"))
    await asyncio.sleep(0)
    (command,) = h.sent()
    assert command.subscribe.bookmark == "3|9|"
    task.cancel()
    h.client.bookmark_store.close()


def test_hand_built_ack_entries_join_into_frames() -> None:
    conn = Connection(
        "127.0.0.1:1",
        flush_interval_s=0.001,
        max_frame_commands=2,
        on_messages=lambda messages: None,
        on_lost=lambda conn, error: None,
    )
    for n in range(3):
        conn.send_entry(commands.queue_ack_entry("work", f"7|{n}|"))
    frames = [client_pb2.ClientFrame.FromString(f) for f in conn._take_frames()]
    assert [[c.sow_delete.bookmark for c in f.commands] for f in frames] == [
        ["7|0|", "7|1|"],
        ["7|2|"],
    ]
