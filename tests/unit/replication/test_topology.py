"""Queue topology across instances, compared at the link's handshake (issue 9: R8)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from amps.config.model import (
    DestinationConfig,
    QueueConfig,
    ReplicationTopicConfig,
    ReplicationTransportConfig,
)
from replication.frames import Digest, Hello, QueueDigest, Refusal, TopicDigest
from replication.link_core import Close, Connected, FrameReceived, LinkCore, LinkState, Send
from replication.positions import PositionBook
from replication.routing import Route
from replication.topology import MAX_DIFFERENCES_SHOWN, Side, Topology, differences, takes

from .sim import MemoryLog

WORK = QueueDigest("work", "Queue", "json", "orders", holders=(("a", "A"),))
EVERYTHING = Digest(sends=True)


def side(name: str, *queues: QueueDigest, digest: Digest = EVERYTHING) -> Side:
    return Side(name, name.upper(), replace(digest, queues=queues))


def only(*topics: str) -> Digest:
    return Digest(sends=True, topics=tuple(TopicDigest(t, "json") for t in topics))


def test_the_same_queue_replicated_both_ways_agrees() -> None:
    assert differences(side("a", WORK), side("b", WORK)) == []


@pytest.mark.parametrize(
    ("there", "message"),
    [
        (
            replace(WORK, underlying_topic="other"),
            "queue 'work' has UnderlyingTopic 'orders' on a and 'other' on b",
        ),
        (
            replace(WORK, message_type="binary"),
            "queue 'work' has MessageType 'json' on a and 'binary' on b",
        ),
        (replace(WORK, filter="/x > 1"), "queue 'work' has Filter none on a and '/x > 1' on b"),
        (
            replace(WORK, kind="GroupLocalQueue", initial_owner="a"),
            "queue 'work' is a Queue on a and a GroupLocalQueue on b",
        ),
        (replace(WORK, kind="LocalQueue"), "queue 'work' is a Queue on a and a LocalQueue on b"),
    ],
)
def test_each_difference_in_a_definition_has_its_message(there: QueueDigest, message: str) -> None:
    assert differences(side("a", WORK), side("b", there)) == [message]


def test_a_different_initial_owner_is_named() -> None:
    here = replace(WORK, kind="GroupLocalQueue", initial_owner="a")
    there = replace(here, initial_owner="b")
    assert differences(side("a", here), side("b", there)) == [
        "queue 'work' has InitialOwner 'a' on a and 'b' on b"
    ]


def test_a_queue_on_one_side_only_is_named_from_either_side() -> None:
    """R8: a topic that is a queue on one instance and not on the other (b replicates it as a
    plain topic, or not at all)."""
    expected = ["queue 'work' is a Queue on a and not a queue on b"]
    assert differences(side("a", WORK), side("b")) == expected
    assert differences(side("b"), side("a", WORK)) == expected


def test_a_queue_replicated_one_way_only_says_which_way_and_why() -> None:
    """R8: b defines the queue too, but has no destination a, or one that does not take it."""
    no_destination = side("b", WORK, digest=Digest(sends=False))
    assert differences(side("a", WORK), no_destination) == [
        "queue 'work' is replicated from a to b only (b has no destination a)"
    ]
    other_topics = side("b", WORK, digest=only("orders"))
    assert differences(side("a", WORK), other_topics) == [
        "queue 'work' is replicated from a to b only (b's destination a does not take it)"
    ]
    assert differences(other_topics, side("a", WORK)) == [
        "queue 'work' is replicated from a to b only (b's destination a does not take it)"
    ]


def test_replicating_only_the_underlying_topic_to_an_archive_is_allowed() -> None:
    """R8: the archive takes `orders` (the queue's data), not `work`: nothing to compare."""
    assert differences(side("a", WORK, digest=only("orders")), side("archive")) == []
    assert (
        differences(
            side("archive", digest=Digest(sends=False)), side("a", WORK, digest=only("orders"))
        )
        == []
    )


def test_local_queues_are_each_sides_own_business() -> None:
    """A LocalQueue is never replicated: a regex that takes it replicates its data only."""
    local = replace(WORK, kind="LocalQueue")
    assert differences(side("a", local), side("b")) == []
    assert differences(side("a", local), side("b", replace(local, filter="/x"))) == []


def test_a_regex_topic_takes_the_queue_and_a_literal_of_another_name_does_not() -> None:
    assert takes(only("wor.*"), "work")
    assert not takes(only("orders"), "work")
    assert takes(Digest(sends=True), "work")  # no Topic element: every topic
    assert not takes(Digest(sends=False), "work")


def test_every_difference_is_listed_and_a_refusal_shows_the_first_few() -> None:
    many = [replace(WORK, name=f"q{i}") for i in range(MAX_DIFFERENCES_SHOWN + 2)]
    assert len(differences(side("a", *many), side("b"))) == len(many)
    topology = Topology("a", "A", [_queue(f"q{i}") for i in range(len(many))], [_to("b", "B")])
    mine = replace(EVERYTHING, queues=topology.queues)
    message = topology.check(mine, "b", "B", Digest(sends=True))
    assert message is not None
    assert message.count("not a queue on b") == MAX_DIFFERENCES_SHOWN
    assert message.endswith("; and 2 more")


def _queue(name: str, underlying: str = "orders") -> QueueConfig:
    return QueueConfig(name, "Queue", "json", underlying, underlying)


def _to(
    name: str, group: str, pass_through: str | None = ".*", topics: tuple[str, ...] = ()
) -> DestinationConfig:
    return DestinationConfig(
        name=name,
        group=group,
        sync_type="sync",
        transports=(ReplicationTransportConfig("amps-replication"),),
        topics=tuple(ReplicationTopicConfig(t, "json") for t in topics),
        pass_through=pass_through,
    )


def test_the_digest_names_the_holders_that_take_the_queue() -> None:
    topology = Topology(
        "a",
        "A",
        [_queue("work"), replace(_queue("mine"), kind="LocalQueue")],
        [_to("b", "B"), _to("archive", "Z", topics=("orders",))],
    )
    work, mine = topology.queues
    assert work.holders == (("a", "A"), ("b", "B"))
    assert mine.holders == (("a", "A"),)  # a LocalQueue is never taken


def test_a_holder_behind_the_peer_whose_group_another_destination_does_not_pass() -> None:
    """R8 passthrough: c holds the queue behind b; a's destination d takes the queue too, so
    what c sends about it must pass a towards d."""
    topology = Topology("a", "A", [_queue("work")], [_to("b", "B"), _to("d", "D", "B|A")])
    theirs = replace(WORK, holders=(("b", "B"), ("a", "A"), ("c", "C"), ("d", "D")))
    assert topology.passthrough_gaps("b", [theirs]) == [
        "a's destination d does not pass through group 'C', and c holds queue 'work' behind b "
        "(PassThrough 'B|A')"
    ]
    # a itself and d are not holders whose records must reach d through a
    fine = Topology("a", "A", [_queue("work")], [_to("b", "B"), _to("d", "D", "B|C")])
    assert fine.passthrough_gaps("b", [theirs]) == []


def _core(name: str, peer: str, queues: list[QueueConfig]) -> LinkCore:
    destination = _to(peer, peer)
    return LinkCore(
        name,
        name,
        MemoryLog(),
        {peer: Route(name, destination)},
        PositionBook(),
        peer,
        topology=Topology(name, name, queues, [destination]),
    )


def _handshake(a: LinkCore, b: LinkCore) -> tuple[list[object], list[object]]:
    """a dials b; returns what b did with a's Hello and what a did with b's answer."""
    (hello,) = [x.frame for x in a.handle(Connected(dialled=True), 0) if isinstance(x, Send)]
    b.handle(Connected(dialled=False), 0)
    answer = b.handle(FrameReceived(hello), 0)
    replies = [x.frame for x in answer if isinstance(x, Send)]
    back: list[object] = []
    for frame in replies:
        back.extend(a.handle(FrameReceived(frame), 0))
    return list(answer), back


def test_the_handshake_refuses_a_queue_topology_on_both_sides_and_names_the_difference() -> None:
    a = _core("a", "b", [_queue("work")])
    b = _core("b", "a", [_queue("work", underlying="other")])
    answer, back = _handshake(a, b)
    (refusal,) = [x.frame for x in answer if isinstance(x, Send)]
    assert isinstance(refusal, Refusal)
    assert refusal.code == "queue_topology"
    difference = "queue 'work' has UnderlyingTopic 'other' on b and 'orders' on a"
    assert refusal.message == f"b (group b) and a (group a): {difference}"
    (closed,) = [x for x in back if isinstance(x, Close)]
    assert closed.refused
    assert closed.code == "queue_topology"
    assert difference in closed.reason
    for core in (a, b):
        assert core.state is LinkState.IDLE
        assert core.refusal is not None
        assert core.refusal[0] == "queue_topology"
        assert difference in core.refusal[1]
    assert (a.refusals, b.refusals) == (1, 1)


def test_agreeing_queues_connect_and_a_link_that_comes_up_forgets_its_refusal() -> None:
    a = _core("a", "b", [_queue("work")])
    b = _core("b", "a", [])
    _handshake(a, b)
    assert a.refusal is not None
    a.handle(FrameReceived(Refusal("protocol", "x")), 0)  # raced the close: ignored when idle
    fixed = _core("b", "a", [_queue("work")])
    _handshake(a, fixed)
    assert a.state is LinkState.READY
    assert fixed.state is LinkState.READY
    assert a.refusal is None
    assert a.refusals == 1


def test_a_hello_carries_every_queue_even_without_a_destination_for_the_peer() -> None:
    """One-way: b has no destination a, yet says which queues it has (so a can tell a queue
    replicated one way from a topic that is no queue there)."""
    topology = Topology("b", "b", [_queue("work")], [])
    core = LinkCore("b", "b", MemoryLog(), {}, PositionBook(), "a", topology=topology)
    core.handle(Connected(dialled=False), 0)
    dialler = _core("a", "b", [_queue("work")])
    (hello,) = [x.frame for x in dialler.handle(Connected(dialled=True), 0) if isinstance(x, Send)]
    (refusal, _close) = core.handle(FrameReceived(hello), 0)
    assert isinstance(refusal, Send)
    assert isinstance(refusal.frame, Refusal)
    assert "queue 'work' is replicated from a to b only (b has no destination a)" in (
        refusal.frame.message
    )
    assert isinstance(hello, Hello)
    assert [q.name for q in hello.digest.queues] == ["work"]


def test_a_refused_link_is_dialled_again_later_and_later_up_to_a_minute() -> None:
    """A refused topology needs an operator: the dialler must not spin on it."""
    from replication.link import MAX_REFUSED_RECONNECT_S, refused_reconnect_s

    waits = [refused_reconnect_s(0.2, n) for n in range(12)]
    assert waits[:4] == [0.2, 0.4, 0.8, 1.6]
    assert waits == sorted(waits)
    assert waits[-1] == MAX_REFUSED_RECONNECT_S
    assert refused_reconnect_s(120.0, 3) == 120.0  # never below the ReconnectTimeout


def test_a_local_queues_acks_stay_here_even_where_every_topic_replicates() -> None:
    """R2: a destination that takes every topic takes a LocalQueue's name too; its acks still
    stay local (each instance delivers its own copy), while another queue's acks go."""
    from amps.log.records import QueueAction, QueueRecord

    route = Route("a", _to("b", "B"), frozenset({"mine"}))

    def ack(queue: str) -> QueueRecord:
        return QueueRecord(1, 0, queue, QueueAction.ACK, txids=(1,), origin_instance="a")

    assert not route.wants(ack("mine"))
    assert route.wants(ack("work"))
