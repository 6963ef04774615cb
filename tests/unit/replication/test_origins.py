"""How far an instance is behind each origin, from its peers' heads (issue 8)."""

from __future__ import annotations

from replication.frames import Heartbeat, OriginPosition
from replication.link_core import FrameReceived
from replication.origins import OriginHeads, OriginLag, OriginLags
from replication.positions import PositionBook

from .sim import mesh


def test_behind_an_origin_until_its_head_is_held_and_the_clock_runs_meanwhile() -> None:
    book = PositionBook()
    lags = OriginLags("b", book)
    book.hold("a", OriginPosition("a", 40, 40))
    # a's log holds its own records up to 100; b holds a's log only through 40.
    lags.heard("a", (OriginPosition("a", 100, 100),), 40, now_ms=1_000)
    assert lags.read(3_500) == [OriginLag("a", 60, 2.5, 40)]
    book.hold("a", OriginPosition("a", 100, 100))
    assert lags.read(4_000) == [OriginLag("a", 0, 0.0, 100)]
    # Behind again later: the clock starts again from when it is seen.
    lags.heard("a", (OriginPosition("a", 130, 130),), 100, now_ms=9_000)
    assert lags.read(9_250) == [OriginLag("a", 30, 0.25, 100)]


def test_not_behind_what_the_link_passed_or_another_path_brought_or_itself() -> None:
    book = PositionBook()
    lags = OriginLags("b", book)
    # c's records reach b from c directly; a (passthrough) is further on than b holds over a's
    # link, but b's link from a acknowledged past a's head of c: b takes none of those from a.
    book.hold("c", OriginPosition("c", 70, 70))
    heads = (OriginPosition("c", 70, 300), OriginPosition("b", 12, 290))
    lags.heard("a", heads, 300, now_ms=0)
    # And a's head of c beyond what a's link passed, but c's own link already brought it.
    lags.heard("d", (OriginPosition("c", 70, 500),), 10, now_ms=0)
    assert lags.read(5_000) == [OriginLag("c", 0, 0.0, 70)]


def test_heads_keep_the_newest_record_of_each_origin() -> None:
    heads = OriginHeads()
    heads.advance(OriginPosition("a", 5, 5))
    heads.advance(OriginPosition("c", 9, 7))
    heads.advance(OriginPosition("a", 4, 8))  # an older record of a: not a newer head
    assert heads.positions() == (OriginPosition("a", 5, 5), OriginPosition("c", 9, 7))


def test_a_link_sends_its_heads_in_heartbeats_and_the_peer_reads_its_lag() -> None:
    """The sender's heartbeat carries its heads and how far the peer holds its log; records
    made durable over a link move the receiver's own heads on (for its passthrough)."""
    net = mesh(["a", "b"])
    a, b = net.instances["a"], net.instances["b"]
    a.links["b"].heads = OriginHeads()
    b.links["a"].heads = OriginHeads()
    b.links["a"].lags = lags = OriginLags("b", b.book)
    net.connect("a", "b")
    net.settle()
    for _ in range(3):
        a.publish()
    net.flush("a")
    assert a.links["b"].heads is not None
    a.links["b"].heads.advance(OriginPosition("a", 3, 3))
    beat = a.links["b"]._heartbeat(0)  # before b acknowledged the batch
    assert beat == Heartbeat((("b", 0),), (OriginPosition("a", 3, 3),), 0)
    b.links["a"].handle(FrameReceived(beat), 10)
    assert [(lag.origin, lag.messages_behind) for lag in lags.read(10)] == [("a", 3)]
    net.settle()
    assert [(lag.origin, lag.messages_behind) for lag in lags.read(20)] == [("a", 0)]
    # b made a's records durable: its heads (for its own destinations) name them.
    assert b.links["a"].heads.positions() == (OriginPosition("a", 3, 3),)


def test_the_own_head_skips_the_peers_records_the_log_interleaves() -> None:
    """a's log: its own 1-5, c's records at 6-9, its own 10, c's 11-12. a's own head is the
    newest durable txid that is its own, not the durable txid."""
    heads = OriginHeads("a")
    heads.durable(5)
    heads.replicated(6, 9)
    heads.durable(9)
    assert heads.positions() == (OriginPosition("a", 5, 5),)
    heads.replicated(11, 12)
    heads.durable(12)
    assert heads.positions() == (OriginPosition("a", 10, 10),)


def test_an_instance_that_only_receives_keeps_one_range_and_no_own_head() -> None:
    heads = OriginHeads("b")
    for first in range(1, 10_001, 10):
        heads.replicated(first, first + 9)
        heads.durable(first + 9)
    assert heads.positions() == ()
    assert len(heads._replicated) == 1


def test_seconds_behind_is_the_age_of_the_oldest_head_not_yet_held_under_steady_traffic() -> None:
    """Every heartbeat finds b a few records behind a, and each head it names is held within
    milliseconds: the age is of the oldest head still missing, not of the first heartbeat
    that ever found b behind (which grew without bound under steady traffic)."""
    book = PositionBook()
    lags = OriginLags("b", book)
    for k in range(1, 201):
        book.hold("a", OriginPosition("a", 10 * k, 10 * k))
        lags.heard("a", (OriginPosition("a", 10 * k + 10, 10 * k + 10),), 10 * k, now_ms=100 * k)
    assert lags.read(20_005) == [OriginLag("a", 10, 0.005, 2_000)]


def test_seconds_behind_while_stalled_runs_from_the_first_head_not_held() -> None:
    book = PositionBook()
    lags = OriginLags("b", book)
    book.hold("a", OriginPosition("a", 10, 10))
    for k in range(1, 3_001):  # 3,000 heartbeats while nothing arrives: the memory is bounded
        lags.heard("a", (OriginPosition("a", 10 + k, 10 + k),), 10, now_ms=100 * k)
    assert lags.read(300_100) == [OriginLag("a", 3_000, 300.0, 10)]
    book.hold("a", OriginPosition("a", 2_000, 2_000))  # part of the backlog arrived
    (lag,) = lags.read(300_100)
    # Head 2,001 was first heard at 199.1 s; the bounded memory may only make it look older.
    assert lag.messages_behind == 1_010
    assert 101.0 <= lag.seconds_behind < 300.0
