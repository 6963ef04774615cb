"""AckConflationInterval: the receiver of an async link acknowledges once per interval, at
once on a sync link and when half the sender's window is unacknowledged (issue 8, L2, Rule 5
of replication/link_core.py), with a manual clock."""

from __future__ import annotations

from dataclasses import replace

from amps.v1 import replication_pb2 as pb
from replication.convert import from_pb, to_pb
from replication.frames import ACK_AT_ONCE, Ack, AckPolicy, Batch, Heartbeat, Hello
from replication.link_core import LinkCore, LinkLimits, SyncChanged

from .sim import LIMITS, Network, check_converged, mesh

# Half the window is 4 batches; heartbeats and the silence timeout out of the way.
WIDE = replace(LIMITS, window_batches=8, heartbeat_interval_ms=5000, peer_timeout_ms=60_000)
INTERVAL_MS = 1000  # the destination's AckConflationInterval (its default)


def ready(*, sync: bool, limits: LinkLimits = WIDE) -> Network:
    net = mesh(["a", "b"], sync=sync, limits=limits)
    net.now_ms = 100
    net.connect("a", "b")
    while net.deliver("a", "b") or net.deliver("b", "a"):
        pass
    return net


def one_batch(net: Network) -> int:
    """a publishes a record and sends it; b appends it and makes it durable; its through_txid."""
    net.instances["a"].publish()
    net.flush("a")
    batch = net.streams[("a", "b")][-1]
    assert isinstance(batch, Batch)
    while net.deliver("a", "b"):
        pass
    net.flush("b")
    return batch.through_txid


def acks(net: Network) -> list[int]:
    return [f.through_txid for f in net.streams[("b", "a")] if isinstance(f, Ack)]


def b_link(net: Network) -> LinkCore:
    return net.instances["b"].links["a"]


def test_an_async_link_acknowledges_once_per_interval_at_the_deadline_it_gives() -> None:
    net = ready(sync=False)
    throughs = [one_batch(net) for _ in range(3)]
    assert acks(net) == []
    assert b_link(net).next_deadline_ms() == 100 + INTERVAL_MS
    assert b_link(net).on_deadline(100 + INTERVAL_MS - 1) == []
    net.now_ms = 100 + INTERVAL_MS
    net._run("b", "a", b_link(net).on_deadline(net.now_ms))
    assert acks(net) == [throughs[-1]]  # one cumulative ack for three batches
    assert b_link(net).next_deadline_ms() == 100 + WIDE.heartbeat_interval_ms
    while net.deliver("b", "a"):
        pass
    assert net.instances["a"].acked["b"] == throughs[-1]
    assert b_link(net).statistics(net.now_ms).acks_sent == 1
    assert b_link(net).statistics(net.now_ms).batches_received == 3


def test_a_sync_link_acknowledges_every_batch_at_once() -> None:
    net = ready(sync=True)
    throughs = [one_batch(net) for _ in range(3)]
    assert acks(net) == throughs
    assert b_link(net).next_deadline_ms() == 100 + WIDE.heartbeat_interval_ms


def test_batches_one_commit_made_durable_are_acknowledged_once_and_counted_once() -> None:
    """A sync link: two batches applied before b's commit, one ack for both from the core,
    and `acks_sent` counts what was sent (the adapter used to drop all but the last)."""
    net = ready(sync=True)
    throughs = []
    for _ in range(2):
        net.instances["a"].publish()
        net.flush("a")
        batch = net.streams[("a", "b")][-1]
        assert isinstance(batch, Batch)
        throughs.append(batch.through_txid)
        while net.deliver("a", "b"):
            pass
    assert acks(net) == []
    net.flush("b")  # one commit: both batches in one event
    assert acks(net) == [throughs[-1]]
    assert b_link(net).statistics(net.now_ms).acks_sent == 1
    assert b_link(net).statistics(net.now_ms).batches_received == 2
    while net.deliver("b", "a"):
        pass
    assert net.instances["a"].acked["b"] == throughs[-1]


def test_half_the_senders_window_unacknowledged_is_acknowledged_at_once() -> None:
    net = ready(sync=False)
    throughs = [one_batch(net) for _ in range(WIDE.window_batches // 2)]
    assert acks(net) == [throughs[-1]]
    assert b_link(net).next_deadline_ms() == 100 + WIDE.heartbeat_interval_ms  # none owed


def test_half_the_senders_window_in_bytes_is_acknowledged_at_once() -> None:
    net = ready(sync=False, limits=replace(WIDE, window_bytes=2))  # a record is one byte
    first = one_batch(net)
    assert acks(net) == [first]


def test_the_sender_never_waits_for_a_conflated_ack() -> None:
    """The window never fills: a keeps sending with no deadline ever reached."""
    net = ready(sync=False)
    for _ in range(5 * WIDE.window_batches):
        one_batch(net)
        while net.deliver("b", "a"):
            pass
        assert not net.instances["a"].links["b"].wants_to_send
    assert net.instances["a"].log.durable_txid == 5 * WIDE.window_batches
    assert len(net.instances["b"].log.records) == 5 * WIDE.window_batches
    assert b_link(net).statistics(net.now_ms).acks_sent == 10


def test_a_downgrade_conflates_and_an_upgrade_sends_the_owed_ack_at_once() -> None:
    net = ready(sync=True)
    a_link = net.instances["a"].links["b"]
    net._run("a", "b", a_link.handle(SyncChanged(True, "admin"), net.now_ms))
    (heartbeat,) = net.streams[("a", "b")]
    assert isinstance(heartbeat, Heartbeat)
    assert heartbeat.ack_policy == AckPolicy(INTERVAL_MS, WIDE.window_batches, WIDE.window_bytes)
    net.deliver("a", "b")
    through = one_batch(net)
    assert acks(net) == []  # conflated now
    net._run("a", "b", a_link.handle(SyncChanged(False, "admin"), net.now_ms))
    (heartbeat,) = net.streams[("a", "b")]
    assert isinstance(heartbeat, Heartbeat)
    assert heartbeat.ack_policy == ACK_AT_ONCE
    net.deliver("a", "b")
    assert acks(net) == [through]  # no interval waited
    assert b_link(net).next_deadline_ms() == 100 + WIDE.heartbeat_interval_ms
    again = one_batch(net)
    assert acks(net) == [through, again]  # sync again: at once


def test_a_downgrade_while_the_link_is_down_reaches_the_peer_in_the_next_hello() -> None:
    net = mesh(["a", "b"], sync=True, limits=WIDE)
    a_link = net.instances["a"].links["b"]
    assert a_link.handle(SyncChanged(True, "action"), 0) == []
    net.connect("a", "b")
    (hello,) = net.streams[("a", "b")]
    assert isinstance(hello, Hello)
    assert hello.ack_policy.interval_ms == INTERVAL_MS


def test_an_ack_not_sent_when_the_link_breaks_is_a_position_resumed_before() -> None:
    net = ready(sync=False)
    for _ in range(3):
        one_batch(net)
    sent_before = net.instances["a"].links["b"].statistics(net.now_ms).records_sent
    net.cut("a", "b")
    assert b_link(net).next_deadline_ms() is None
    net.settle()
    # b's Hello reported what it held, so a resent nothing of the three records.
    assert net.instances["a"].links["b"].statistics(net.now_ms).records_sent == sent_before
    check_converged(net)


def test_an_older_peer_without_a_policy_is_acknowledged_at_once() -> None:
    """A Hello or heartbeat without AckPolicy (an older sender) decodes as at once."""
    net = mesh(["a", "b"], sync=False, limits=WIDE)
    net.connect("a", "b")
    (hello,) = net.streams[("a", "b")]
    assert isinstance(hello, Hello)
    message = to_pb(hello)
    assert message.hello.HasField("ack_policy")
    message.hello.ClearField("ack_policy")
    older = from_pb(message)
    assert isinstance(older, Hello)
    assert older.ack_policy == ACK_AT_ONCE
    net.streams[("a", "b")][0] = older
    while net.deliver("a", "b") or net.deliver("b", "a"):
        pass
    through = one_batch(net)
    assert acks(net) == [through]


def test_the_policy_survives_the_wire_and_at_once_is_sent_as_unset() -> None:
    policy = AckPolicy(250, 64, 8 << 20)
    wire = to_pb(Heartbeat(ack_policy=policy)).SerializeToString()
    assert from_pb(pb.LinkFrame.FromString(wire)) == Heartbeat(ack_policy=policy)
    assert not to_pb(Heartbeat()).heartbeat.HasField("ack_policy")
