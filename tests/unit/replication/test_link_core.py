"""The link core driven directly with a manual clock (issue 8: R9, R10, L2)."""

from __future__ import annotations

from collections.abc import Sequence

from amps.log.records import PublishRecord, Record
from replication.frames import Ack, Batch, Heartbeat, Hello, Refusal
from replication.link_core import (
    REFUSALS,
    Close,
    Connected,
    FrameReceived,
    LinkCore,
    LinkLimits,
    LinkState,
    LogAdvanced,
    PeerAcked,
    RecordsDurable,
    Send,
    should_send_now,
)
from replication.positions import PositionBook
from replication.routing import Route

from .sim import LIMITS, MemoryLog, Network, check_converged, destination, line, mesh


def pair() -> Network:
    return mesh(["a", "b"])


def ready_pair() -> Network:
    """a and b with their Hellos exchanged: the link is READY both ways."""
    net = pair()
    net.connect("a", "b")
    while net.deliver("a", "b") or net.deliver("b", "a"):
        pass
    return net


def sent(actions: Sequence[object]) -> list[object]:
    return [a.frame for a in actions if isinstance(a, Send)]


def test_handshake_then_records_flow_both_ways() -> None:
    """D1: one stream per pair carries both directions once both Hellos are exchanged."""
    net = pair()
    for _ in range(4):
        net.instances["a"].publish()
        net.instances["b"].publish()
    net.settle()
    check_converged(net)
    assert net.instances["a"].links["b"].state is LinkState.READY
    stats = net.instances["a"].links["b"].statistics(net.now_ms)
    assert stats.records_sent == 4
    assert stats.records_received == 4
    assert stats.behind_records == 0


def test_the_accepting_side_answers_only_after_the_dialler_names_itself() -> None:
    log = MemoryLog()
    book = PositionBook()
    core = LinkCore("b", "b", log, {}, book, "a")
    assert core.handle(Connected(dialled=False), 0) == []
    assert core.state.value == "accepted"
    dialler = LinkCore("a", "a", MemoryLog(), {}, PositionBook(), "b")
    (hello,) = sent(dialler.handle(Connected(dialled=True), 0))
    assert isinstance(hello, Hello)
    assert (hello.instance, hello.expected_peer) == ("a", "b")
    answer = sent(core.handle(FrameReceived(hello), 0))
    assert isinstance(answer[0], Hello)
    assert core.state is LinkState.READY


def test_a_batch_is_sent_at_once_on_an_idle_link_and_batches_grow_under_load() -> None:
    """Send now when idle, coalesce while the window is full (one gRPC message per batch)."""
    net = ready_pair()
    a = net.instances["a"]
    a.publish()
    net.flush("a")
    (frame,) = net.streams[("a", "b")]
    assert isinstance(frame, Batch)
    assert len(frame.records) == 1
    for _ in range(20):
        a.publish()
        net.flush("a")
    # The window (2 batches) filled; the rest waits for an ack and then goes in full batches.
    assert len(net.streams[("a", "b")]) == LIMITS.window_batches
    assert should_send_now(1, 0, LIMITS)
    assert not should_send_now(2, 0, LIMITS)
    net.settle()
    check_converged(net)
    assert a.links["b"].statistics(0).batches_sent < 21


def test_unsent_from_is_the_read_position_then_past_the_acknowledged_one() -> None:
    """What the journal keeps frames from for this link (Journal.drop_frames_before)."""
    net = ready_pair()
    a = net.instances["a"]
    core = a.links["b"]
    assert core.unsent_from_txid == 1
    for _ in range(3):
        a.publish()
    net.flush("a")
    assert core.unsent_from_txid == 4  # read and sent, not yet acknowledged
    assert core.acked_through_txid == 0
    net.cut("a", "b")
    assert core.state is LinkState.IDLE
    assert core.unsent_from_txid == 1  # a new stream resumes no earlier than the peer's ack


def test_the_window_also_bounds_the_bytes_in_flight() -> None:
    """Rule 3: a wide window of batches is still bounded by the bytes not yet acknowledged."""
    net = ready_pair()
    a = net.instances["a"]
    # One 1-byte record per batch, room for 64 batches but only 3 bytes.
    a.links["b"].limits = LinkLimits(max_batch_records=1, window_batches=64, window_bytes=3)
    for _ in range(10):
        a.publish()
    net.flush("a")
    assert len(net.streams[("a", "b")]) == 3
    assert not should_send_now(0, 3, a.links["b"].limits)
    net.deliver("a", "b")
    net.flush("b")  # durable on b: b acks the first batch
    net.deliver("b", "a")  # the ack makes room for one more
    assert len(net.streams[("a", "b")]) == 3
    a.links["b"].check_invariants()
    net.settle()
    check_converged(net)


def test_acks_come_only_after_the_records_are_durable_on_the_receiver() -> None:
    """L2/R10: a position is acknowledged (and later reported) only once it is on disk."""
    net = ready_pair()
    net.instances["a"].publish()
    net.flush("a")
    net.deliver("a", "b")
    assert not net.streams[("b", "a")]  # applied, not yet durable: no ack
    assert net.instances["b"].book.positions("a") == ()
    net.flush("b")
    (ack,) = net.streams[("b", "a")]
    assert isinstance(ack, Ack)
    assert net.instances["b"].book.through_txid("a") == 1
    net.deliver("b", "a")
    assert net.instances["a"].acked["b"] == 1


def test_records_not_for_the_destination_are_acknowledged_by_position() -> None:
    """An archive destination takes only some topics; the others count as delivered."""
    log = MemoryLog()
    log.records = [
        PublishRecord(i, 0, "other" if i % 2 else "orders", b"", 1, i, "a", "a", i)
        for i in range(1, 6)
    ]
    log.durable = 5
    archive = destination("z")
    from dataclasses import replace

    from amps.config.model import ReplicationTopicConfig

    archive = replace(archive, topics=(ReplicationTopicConfig("orders", "json"),))
    core = LinkCore("a", "a", log, {"z": Route("a", archive)}, PositionBook(), "z")
    core.handle(Connected(dialled=True), 0)
    actions = core.handle(FrameReceived(Hello(1, "z", "z", "", "", Route("a", archive).digest)), 0)
    (batch,) = sent(actions)
    assert isinstance(batch, Batch)
    assert [r.topic for r in batch.records] == ["orders", "orders"]  # type: ignore[union-attr]
    assert core.handle(FrameReceived(Ack(batch.through_txid)), 1) == [PeerAcked(5)]


def test_heartbeats_on_an_idle_link_and_close_when_the_peer_is_silent() -> None:
    net = ready_pair()
    core = net.instances["a"].links["b"]
    deadline = core.next_deadline_ms()
    assert deadline == LIMITS.heartbeat_interval_ms
    assert sent(core.on_deadline(deadline)) == [Heartbeat((("b", 1000),))]
    silent = core.next_deadline_ms()
    assert silent is not None
    actions = core.on_deadline(LIMITS.peer_timeout_ms)
    assert isinstance(actions[-1], Close)
    assert core.state is LinkState.IDLE
    assert core.next_deadline_ms() is None


def test_refusals_name_both_instances() -> None:
    """R8: a peer with this instance's Name, the wrong instance, a Group mismatch."""
    routes = {"b": Route("a", destination("b"))}
    cases = [
        (Hello(1, "a", "a", "", "", routes["b"].digest), "self"),
        (Hello(1, "c", "c", "", "", routes["b"].digest), "wrong_peer"),
        (Hello(1, "b", "east", "", "", routes["b"].digest), "group_mismatch"),
        (Hello(1, "b", "b", "x", "", routes["b"].digest), "wrong_peer"),
        (Hello(2, "b", "b", "", "", routes["b"].digest), "protocol"),
    ]
    for hello, code in cases:
        core = LinkCore("a", "a", MemoryLog(), routes, PositionBook(), "b")
        core.handle(Connected(dialled=True), 0)
        actions = core.handle(FrameReceived(hello), 0)
        refusal = sent(actions)[-1]
        assert isinstance(refusal, Refusal)
        assert refusal.code == code, (hello, refusal)
        assert code in REFUSALS
        assert "a (group a)" in refusal.message
        assert f"{hello.instance} (group" in refusal.message
        assert isinstance(actions[-1], Close)
        assert actions[-1].refused
        assert core.state is LinkState.IDLE


def test_a_refusal_from_the_peer_closes_the_link() -> None:
    core = LinkCore("a", "a", MemoryLog(), {}, PositionBook(), "b")
    core.handle(Connected(dialled=True), 0)
    (close,) = core.handle(FrameReceived(Refusal("self", "b and b")), 0)
    assert isinstance(close, Close)
    assert close.refused
    assert "b and b" in close.reason


def test_resync_resumes_after_the_held_position_without_resending() -> None:
    """R10: after a cut the sender starts after what the receiver reported holding."""
    net = pair()
    a = net.instances["a"]
    for _ in range(7):
        a.publish()
    net.settle()
    sent_before = a.links["b"].statistics(0).records_sent
    net.cut("a", "b")
    for _ in range(2):
        a.publish()
    net.settle()
    check_converged(net)
    assert a.links["b"].statistics(0).records_sent - sent_before == 2


def test_a_receiver_restarted_from_its_log_gets_what_it_lost() -> None:
    """R10: records applied but not durable at a crash are sent again after the restart."""
    net = pair()
    a, b = net.instances["a"], net.instances["b"]
    for _ in range(5):
        a.publish()
    net.settle()
    b.save_book()
    for _ in range(5):
        a.publish()
    net.flush("a")
    while net.deliver("a", "b"):
        pass
    net.restart("b")  # b applied the last five, never flushed them
    assert len(b.log.records) == 5
    net.settle()
    check_converged(net)


def test_a_stale_saved_position_only_causes_discarded_resends() -> None:
    """A position book saved long ago lags: the resend is de-duplicated (L4), never lost."""
    net = pair()
    a, b = net.instances["a"], net.instances["b"]
    for _ in range(6):
        a.publish()
    net.settle()
    net.restart("b")  # never saved its book: positions start empty
    net.settle()
    check_converged(net)
    assert len(b.log.records) == 6


def test_passthrough_on_a_line_and_no_loop_in_a_triangle() -> None:
    """R9: a record crosses a line hop by hop and is applied once per instance in a triangle."""
    for net in (line(["a", "b", "c"]), mesh(["a", "b", "c"])):
        for name in ("a", "b", "c"):
            for _ in range(3):
                net.instances[name].publish()
        net.settle()
        check_converged(net)


def test_without_passthrough_a_line_carries_only_direct_records() -> None:
    net = mesh(["a", "b"], pass_through=None)
    net.instances["a"].publish()
    net.settle()
    check_converged(net)
    # b got a's record from a; with no PassThrough it would not forward it anywhere.
    route = Route("b", destination("c", pass_through=None))
    assert not route.wants(net.instances["b"].log.records[0])
    assert not Route("b", destination("a")).wants(net.instances["b"].log.records[0])


def test_sync_downgrade_is_recorded_and_apply_waits_for_durability() -> None:
    net = pair()
    core = net.instances["a"].links["b"]
    assert core.sync
    assert not core.downgraded
    from replication.link_core import SyncChanged

    core.handle(SyncChanged(True, "admin"), 0)
    assert core.statistics(0).downgraded
    core.handle(SyncChanged(False, "admin"), 0)
    assert not core.downgraded
    b = net.instances["b"].links["a"]
    net.connect("a", "b")
    net.instances["a"].publish()
    net.flush("a")
    while net.deliver("b", "a") or net.deliver("a", "b"):
        pass
    assert b.handle(RecordsDurable(((0, 0),)), 0) == []
    assert b.handle(LogAdvanced(), 0) == []  # b has nothing of its own to send


def test_reachability_reaches_an_instance_through_its_neighbour() -> None:
    """Heartbeats carry each side's table: on a line a-b-c, a hears of c through b."""
    net = line(["a", "b", "c"])
    net.settle()
    for _ in range(3):
        net.now_ms += LIMITS.heartbeat_interval_ms
        for instance in net.instances.values():
            for peer, link in instance.links.items():
                net._run(instance.name, peer, link.on_deadline(net.now_ms))
        while any(net.deliver(x, y) for x, y in list(net.streams)):
            pass
    reach = net.instances["a"].reachability
    assert reach.last_heard_ms("b") == net.now_ms
    heard_c = reach.last_heard_ms("c")
    assert heard_c is not None
    assert net.now_ms - heard_c <= LIMITS.heartbeat_interval_ms
    assert reach.last_heard_ms("a") is None


def test_a_destination_that_is_down_falls_behind_for_the_downgrade_rule() -> None:
    """L2: the age a downgrade action reads grows while the destination is unreachable."""
    net = pair()
    a = net.instances["a"]
    a.publish()
    net.settle()
    core = a.links["b"]
    assert core.oldest_unacked_ms(net.now_ms) == 0
    net.cut("a", "b")
    a.publish()
    net.now_ms = 100
    net.flush("a")
    net.now_ms = 700
    assert core.oldest_unacked_ms(net.now_ms) == 600
    net.settle()
    assert core.oldest_unacked_ms(net.now_ms) == 0


def test_queue_acks_replicate_by_bookmark_matched_by_queue_name_not_filter() -> None:
    """R1: a sow_delete's record (local txids) crosses as bookmarks; other queue records stay."""
    from dataclasses import replace

    from amps.config.model import ReplicationTopicConfig
    from amps.log.records import QueueAction, QueueRecord

    log = MemoryLog()
    log.records = [
        PublishRecord(1, 0, "orders", b"{}", 7, 1, "a", "a", 1),
        PublishRecord(2, 0, "orders", b"{}", 7, 2, "a", "a", 2),
        QueueRecord(3, 0, "work", QueueAction.DELIVERED, txids=(1,), origin_instance="a",
                    origin_group="a", origin_txid=3),
        QueueRecord(4, 0, "work", QueueAction.ACK, txids=(1, 2), origin_instance="a",
                    origin_group="a", origin_txid=4, delivered_us=(5, 6), deliveries=(1, 1)),
    ]  # fmt: skip
    log.durable = 4
    topics = (
        ReplicationTopicConfig("orders", "json", "/x = 1"),
        ReplicationTopicConfig("work", "json", "/never = 1"),
    )
    dest = replace(destination("z"), topics=topics)
    core = LinkCore("a", "a", log, {"z": Route("a", dest)}, PositionBook(), "z")
    core.handle(Connected(dialled=True), 0)
    actions = core.handle(FrameReceived(Hello(1, "z", "z", "", "", Route("a", dest).digest)), 0)
    (batch,) = sent(actions)
    assert isinstance(batch, Batch)
    (ack,) = batch.records  # the publishes fail the filter; the delivery record stays local
    assert isinstance(ack, QueueRecord)
    assert ack.action is QueueAction.ACK
    assert [(b.publisher_id, b.seq) for b in ack.bookmarks] == [(7, 1), (7, 2)]
    assert ack.txids == ()
    assert ack.deliveries == ()


class _CountingLog(MemoryLog):
    """A MemoryLog that returns at most `prefix` records a read (as the cached view may) and
    counts its reads."""

    def __init__(self, prefix: int) -> None:
        super().__init__()
        self.prefix = prefix
        self.reads = 0

    def read(self, from_txid: int, max_records: int) -> list[Record]:
        self.reads += 1
        return super().read(from_txid, min(max_records, self.prefix))


def test_an_acks_bookmarks_are_read_a_run_of_txids_at_a_time() -> None:
    """R1: the bookmarks of a removal's txids, in its order, whatever the order and gaps of
    the txids; consecutive txids are read together (not one read each), even from a log view
    that answers a read with a prefix of what was asked."""
    from amps.log.records import QueueAction, QueueRecord

    log = _CountingLog(prefix=3)
    log.records = [
        PublishRecord(t, 0, "orders", b"{}", 7, 100 + t, "a", "a", t) for t in range(1, 21)
    ]
    txids = (12, *range(1, 11), 20, 15, 14, 13)
    log.records.append(
        QueueRecord(21, 0, "work", QueueAction.ACK, txids=txids, origin_instance="a",
                    origin_group="a", origin_txid=21)
    )  # fmt: skip
    log.durable = 21
    dest = destination("z")
    core = LinkCore("a", "a", log, {"z": Route("a", dest)}, PositionBook(), "z")
    core.handle(Connected(dialled=True), 0)
    reads_before = log.reads
    actions = core.handle(FrameReceived(Hello(1, "z", "z", "", "", Route("a", dest).digest)), 0)
    batches: list[Batch] = []
    while found := [b for b in sent(actions) if isinstance(b, Batch)]:
        batches += found
        actions = [a for b in found for a in core.handle(FrameReceived(Ack(b.through_txid)), 0)]
    acks = [r for b in batches for r in b.records if isinstance(r, QueueRecord)]
    assert len(acks) == 1
    assert [(b.publisher_id, b.seq) for b in acks[0].bookmarks] == [(7, 100 + t) for t in txids]
    assert acks[0].txids == ()
    # The link's own reads of 21 records 3 at a time, then the runs 1-10 and 12-15 (4 and 2
    # reads of a prefix of 3) and 20: not one read per txid.
    assert log.reads - reads_before <= 7 + 4 + 2 + 1


def test_removals_replicate_and_the_rest_of_a_queues_records_stays_local() -> None:
    """R1, R2: an ack, an expire ack, the owner's expiry (once per cluster, by the owner) and
    an at-most-once send leave the queue everywhere; deliveries, lease returns, cancels and
    barrier releases (each instance its own, R6) stay local."""
    from amps.log.bookmarks import Bookmark
    from amps.log.records import QueueAction, QueueRecord

    route = Route("a", destination("b"))
    bookmarks = (Bookmark(7, 1),)
    records = [
        QueueRecord(3, 0, "work", a, bookmarks=bookmarks, origin_instance="a", origin_group="a")
        for a in QueueAction
    ]
    wanted = {record.action for record in records if route.wants(record)}
    assert wanted == {
        QueueAction.ACK,
        QueueAction.EXPIRE,
        QueueAction.EXPIRED,
        QueueAction.DELIVERED_AT_MOST_ONCE,
    }


def test_ownership_records_replicate_by_queue_name_never_back_and_by_pass_through() -> None:
    """R1, R5, R9: a grant or claim (TransferRecord) goes to a destination whose Topic names
    its queue (the Filter is for messages), never back to its origin, and onwards only where
    the destination's PassThrough allows its origin's group."""
    from dataclasses import replace

    from amps.config.model import ReplicationTopicConfig
    from amps.log.bookmarks import Bookmark
    from amps.log.records import TransferRecord

    grant = TransferRecord(
        5, 0, "work", Bookmark(7, 1), "a", "b", origin_instance="a", origin_group="a",
        origin_txid=5, epoch=1,
    )  # fmt: skip
    work = (ReplicationTopicConfig("work", "json", "/never = 1"),)
    orders = (ReplicationTopicConfig("orders", "json"),)
    assert Route("a", destination("b")).wants(grant)
    assert Route("a", replace(destination("z"), topics=work)).wants(grant)
    assert not Route("a", replace(destination("z"), topics=orders)).wants(grant)
    from_b = replace(grant, origin_instance="b", origin_group="b")
    assert not Route("c", destination("b")).wants(from_b)
    assert Route("c", destination("d")).wants(from_b)
    assert not Route("c", destination("d", pass_through=None)).wants(from_b)


def test_a_sync_destination_that_is_down_holds_only_what_it_takes() -> None:
    """L2: while an archive that takes only `orders` is down, records of other topics count as
    acknowledged (persisted acks for them are not held); the first `orders` record stops it."""
    from dataclasses import replace

    from amps.config.model import ReplicationTopicConfig
    from replication.link_core import LogAdvanced

    log = MemoryLog()
    log.records = [PublishRecord(i, 0, "other", b"", 1, i, "a", "a", i) for i in range(1, 4)]
    log.durable = 3
    archive = replace(destination("z"), topics=(ReplicationTopicConfig("orders", "json"),))
    core = LinkCore("a", "a", log, {"z": Route("a", archive)}, PositionBook(), "z")
    assert core.handle(LogAdvanced(), 10) == [PeerAcked(3)]
    assert core.oldest_unacked_ms(10) == 0
    log.records.append(PublishRecord(4, 0, "orders", b"", 1, 4, "a", "a", 4))
    log.records.append(PublishRecord(5, 0, "other", b"", 1, 5, "a", "a", 5))
    log.durable = 5
    assert core.handle(LogAdvanced(), 20) == []
    assert core.acked_through_txid == 3
    assert core.oldest_unacked_ms(120) == 100


def test_a_destination_that_keeps_up_under_steady_traffic_is_never_old_for_the_downgrade() -> None:
    """L2: the age a downgrade reads is that of the oldest unacknowledged record, not how long
    the destination has had anything unacknowledged: under steady traffic with one batch always
    in flight, a destination that acks every batch within 20 ms is at most that old."""
    net = ready_pair()
    a = net.instances["a"]
    core = a.links["b"]
    ages = []
    for step in range(1, 201):  # 2 s of a publish every 10 ms
        net.now_ms = step * 10
        a.publish()
        net.flush("a")  # batch k goes out
        while net.deliver("a", "b"):
            pass
        net.flush("b")  # b's ack of batch k is queued behind the ack of batch k - 1
        if len(net.streams[("b", "a")]) > 1:
            net.deliver("b", "a")  # only the ack of batch k - 1 arrives: k stays in flight
        ages.append(core.oldest_unacked_ms(net.now_ms))
    assert core.acked_through_txid > 150  # the destination kept up
    assert max(ages) <= 20


def test_a_destination_down_for_many_commits_stays_as_old_as_its_first_unacked_record() -> None:
    """L2: the instants kept for the age are bounded, and bounding them never makes the oldest
    unacknowledged record look younger; all acknowledged after the heal, the age is 0."""
    net = ready_pair()
    a = net.instances["a"]
    core = a.links["b"]
    net.cut("a", "b")
    for step in range(1, 3001):
        net.now_ms = step
        a.publish()
        net.flush("a")
    assert core.oldest_unacked_ms(net.now_ms) == 3000 - 1
    net.settle()
    assert core.oldest_unacked_ms(net.now_ms) == 0


def test_frames_out_of_order_from_the_peer_are_refused_not_asserted() -> None:
    from dataclasses import replace

    from amps.log.codec import encode
    from amps.log.received import scan

    """Bad input never crashes an instance: a batch out of txid order, or an ack that ends no
    batch in flight, closes the link with a `protocol` refusal naming both instances."""
    bad_batches = [
        Batch(1, 5, (PublishRecord(6, 0, "orders", b"", 1, 1, "b", "b", 6),)),
        Batch(1, 5, (PublishRecord(3, 0, "o", b"", 1, 1, "b", "b", 3),) * 2),
        Batch(1, 5, tuple(PublishRecord(t, 0, "o", b"", 1, t, "b", "b", t) for t in (4, 3))),
        Batch(1, 0, ()),  # a batch that ends where the link already is
    ]
    # The same batches as the receiver gets them: frames checked, records not built.
    as_received = [replace(b, records=scan(b"".join(map(encode, b.records)))) for b in bad_batches]
    cases: list[Batch | Ack] = [*bad_batches, *as_received, Ack(42)]
    for bad in cases:
        net = pair()
        net.connect("a", "b")
        while net.deliver("a", "b") or net.deliver("b", "a"):
            pass
        core = net.instances["a"].links["b"]
        actions = core.handle(FrameReceived(bad), 0)
        refusal = sent(actions)[0]
        assert isinstance(refusal, Refusal)
        assert refusal.code == "protocol"
        assert "a and b" in refusal.message
        assert core.state is LinkState.IDLE
