"""The publishing core (amps/publishing.py): client names, sequencing, de-duplication and
persisted acks, shared by local and replicated publishes (issue 8, L2-L6)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amps import errors
from amps.log.bookmarks import publisher_id_for, server_publisher_id_for
from amps.log.dedup import PublisherMarks
from amps.log.received import one_publisher_run
from amps.log.records import PublishRecord
from amps.publishing import PublishingCore, persisted_through


def _core(marks: PublisherMarks | None = None) -> PublishingCore[str]:
    return PublishingCore("amps-1", marks if marks is not None else PublisherMarks())


def _replicated(publisher_id: int, seq: int) -> PublishRecord:
    return PublishRecord(seq, 1, "orders", b"{}", publisher_id, seq, "amps-2", "g", seq, "", 0)


# -- L6: client names ---------------------------------------------------------------------------


def test_a_logon_with_a_free_name_replaces_nothing() -> None:
    core = _core()
    assert core.logon("c1", "pub", "alice") is None
    assert core.holder("pub") == "c1"


def test_the_same_user_replaces_the_connection_holding_the_name() -> None:
    """L6: the first connection is disconnected by the adapter ("name in use")."""
    core = _core()
    core.logon("c1", "pub", "alice")
    assert core.logon("c2", "pub", "alice") == "c1"
    assert core.holder("pub") == "c2"
    core.disconnected("c1")  # the replaced connection ending later frees nothing
    assert core.holder("pub") == "c2"
    core.check_invariants()


def test_another_user_is_refused_and_nothing_changes() -> None:
    """L6: with a different user the new connection is refused."""
    core = _core()
    core.logon("c1", "pub", "alice")
    with pytest.raises(errors.NameInUse, match="another user"):
        core.logon("c2", "pub", "bob")
    assert core.holder("pub") == "c1"
    core.check_invariants()


def test_a_second_logon_under_another_name_frees_the_first_name() -> None:
    core = _core()
    core.logon("c1", "pub", "alice")
    core.logon("c1", "pub2", "alice")
    assert core.holder("pub") is None
    assert core.holder("pub2") == "c1"
    core.disconnected("c1")
    assert core.holder("pub2") is None
    core.check_invariants()


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 10_000])
def test_a_bad_client_name_is_refused_before_anything_changes(name: str) -> None:
    core = _core()
    with pytest.raises(errors.InvalidOptions, match="client name"):
        core.logon("c1", name, "alice")
    assert core.statistics().client_names == 0


def test_a_logon_reports_the_last_seq_the_log_holds_from_that_client() -> None:
    marks = PublisherMarks([(publisher_id_for("pub"), 41)])
    core = _core(marks)
    core.logon("c1", "pub", "alice")
    assert core.logged_on("c1", "pub") == publisher_id_for("pub")
    assert core.acked_seq("c1") == 41


# -- L4, L5: sequencing and de-duplication ------------------------------------------------------


def test_a_seq_at_or_below_the_high_water_mark_is_a_duplicate() -> None:
    """L4: discarded (None), counted; the mark does not move back. A seq skipped below the
    mark (a gap: never held here) is taken once."""
    core = _core()
    assert core.sequence(7, 1, "pub") == (7, 1)
    assert core.sequence(7, 3, "pub") == (7, 3)
    assert core.sequence(7, 3, "pub") is None
    assert core.sequence(7, 1, "pub") is None
    assert core.sequence(7, 2, "pub") == (7, 2)
    assert core.sequence(7, 2, "pub") is None
    assert core.marks.high_water(7) == 3
    assert core.statistics().duplicates == 3


def test_a_publish_without_seq_is_numbered_under_an_identity_of_its_own() -> None:
    """L5: after the highest number seen, never under the client's own publisher id."""
    core = _core()
    own = server_publisher_id_for("pub", "amps-1")
    assert core.sequence(publisher_id_for("pub"), 0, "pub") == (own, 1)
    assert core.sequence(publisher_id_for("pub"), 0, "pub") == (own, 2)
    assert core.sequence(publisher_id_for("pub"), 5, "pub") == (publisher_id_for("pub"), 5)
    assert core.statistics().duplicates == 0


def test_replicated_and_local_publishes_share_one_de_duplication() -> None:
    """L4: a client that fails over and republishes what replication brought adds nothing."""
    core = _core()
    kept = core.admit_replicated([_replicated(7, 1), _replicated(7, 2), _replicated(7, 2)])
    assert [r.seq for r in kept] == [1, 2]
    assert core.sequence(7, 2, "pub") is None  # the republish after failover
    assert core.sequence(7, 3, "pub") == (7, 3)
    assert core.admit_replicated([_replicated(7, 3), _replicated(8, 1)]) == [_replicated(8, 1)]
    assert core.statistics().duplicates == 3


def test_internal_publishes_number_on() -> None:
    core = _core()
    first = core.internal_sequence()
    assert core.internal_sequence() == (first[0], first[1] + 1)


# -- L2, L3: persisted acks ---------------------------------------------------------------------


def test_acks_are_conflated_and_wait_for_durability() -> None:
    """L3: one ack per connection for the highest seq of every durable frame."""
    core = _core()
    core.expect_ack("c1", 2, 5)
    core.expect_ack("c1", 4, 7)
    core.expect_ack("c2", 3, 1)
    assert core.release(1) == []
    assert sorted(core.release(3)) == [("c1", 5), ("c2", 1)]
    assert core.release(10) == [("c1", 7)]
    assert core.release(10) == []
    assert core.statistics().persisted_acks == 3
    core.check_invariants()


def test_an_ack_never_goes_below_what_the_connection_was_told() -> None:
    """A republished (duplicate) frame acks nothing older than the logon ack said."""
    core = _core(PublisherMarks([(publisher_id_for("pub"), 9)]))
    core.logon("c1", "pub", "alice")
    core.logged_on("c1", "pub")
    core.expect_ack("c1", 0, 8)
    assert core.release(0) == []
    core.expect_ack("c1", 1, 10)
    assert core.release(1) == [("c1", 10)]


def test_a_sync_destination_holds_acks_until_it_has_the_log() -> None:
    """L2: durable here is not enough while a sync destination lags."""
    core = _core()
    core.expect_ack("c1", 5, 5)
    assert core.release(persisted_through(5, [3])) == []
    assert core.release(persisted_through(5, [3, 9])) == []
    assert core.owes("c1")  # waiting for this instance: not idle (IdleTimeout)
    assert core.release(persisted_through(5, [9, 5])) == [("c1", 5)]
    assert not core.owes("c1")
    assert persisted_through(5, []) == 5  # no sync destination (or all downgraded)


def test_a_disconnected_connection_is_owed_nothing() -> None:
    core = _core()
    core.logon("c1", "pub", "alice")
    core.expect_ack("c1", 1, 1)
    core.disconnected("c1")
    assert core.release(1) == []
    assert core.statistics().connections_owed_acks == 0
    core.check_invariants()


# -- Hypothesis: the core against a plain model -------------------------------------------------

CONNECTIONS = ("c1", "c2", "c3")
PUBLISHERS = (1, 2)


class PublishingMachine(RuleBasedStateMachine):
    """Random publishes (local and replicated, with resends), commits, sync acks and
    disconnects; a model that keeps every frame checks each ack and each duplicate."""

    def __init__(self) -> None:
        super().__init__()
        self.core: PublishingCore[str] = _core()
        self.txid = 0  # the log's last txid
        self.durable = 0
        self.sync_acked = 0
        self.appended: dict[int, list[int]] = {p: [] for p in PUBLISHERS}
        self.frames: dict[str, list[tuple[int, int]]] = {c: [] for c in CONNECTIONS}
        self.acked: dict[str, int] = dict.fromkeys(CONNECTIONS, 0)

    def _publish(self, publisher_id: int, seq: int) -> None:
        sequenced = self.core.sequence(publisher_id, seq, "pub")
        assert (sequenced is None) == (seq in self.appended[publisher_id])  # L4, with gaps
        if sequenced is not None:
            self.appended[publisher_id].append(seq)
            self.txid += 1

    @rule(
        connection=st.sampled_from(CONNECTIONS),
        publisher_id=st.sampled_from(PUBLISHERS),
        seqs=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    )
    def frame(self, connection: str, publisher_id: int, seqs: list[int]) -> None:
        for seq in seqs:
            self._publish(publisher_id, seq)
        self.core.expect_ack(connection, self.txid, max(seqs))
        self.frames[connection].append((self.txid, max(seqs)))

    @rule(publisher_id=st.sampled_from(PUBLISHERS), seqs=st.lists(st.integers(1, 30), max_size=5))
    def replicated_batch(self, publisher_id: int, seqs: list[int]) -> None:
        batch = [_replicated(publisher_id, s) for s in seqs]
        before = list(self.appended[publisher_id])
        kept = self.core.admit_replicated(batch)
        expected: list[int] = []
        for seq in seqs:  # L4 with gaps: exactly the seqs not held yet (far below GAP_LIMIT)
            if seq not in before and seq not in expected:
                expected.append(seq)
        assert [r.seq for r in kept] == expected
        self.appended[publisher_id].extend(expected)
        self.txid += len(kept)

    @rule()
    def commit(self) -> None:
        self.durable = self.txid
        self._release()

    @precondition(lambda self: self.sync_acked < self.txid)
    @rule(data=st.data())
    def sync_destination_acks(self, data: st.DataObject) -> None:
        self.sync_acked = data.draw(st.integers(self.sync_acked + 1, self.txid))
        self._release()

    @rule(connection=st.sampled_from(CONNECTIONS))
    def disconnect(self, connection: str) -> None:
        self.core.disconnected(connection)
        self.frames[connection] = []
        self.acked[connection] = 0

    def _release(self) -> None:
        through = persisted_through(self.durable, [self.sync_acked])
        due = dict(self.core.release(through))
        for connection, frames in self.frames.items():
            done = [seq for txid, seq in frames if txid <= through]
            self.frames[connection] = [(t, s) for t, s in frames if t > through]
            best = max(done, default=0)
            if best > self.acked[connection]:
                assert due.pop(connection) == best  # L3: one ack, for the highest seq
                self.acked[connection] = best
            assert connection not in due, "an ack that goes backwards or repeats"

    @invariant()
    def core_invariants(self) -> None:
        self.core.check_invariants()


TestPublishingMachine = PublishingMachine.TestCase


def test_discarded_replicated_publishes_are_handed_back_for_their_origins() -> None:
    """Issue 9: a replicated queue needs the origin of a copy that L4 discarded."""
    core = _core()
    discarded: list[PublishRecord] = []
    batch = [_replicated(7, 1), _replicated(7, 1), _replicated(7, 2)]
    assert core.admit_replicated(batch, discarded) == [batch[0], batch[2]]
    assert discarded == [batch[1]]
    indices: list[int] = []
    heads = [(0, 0, 0, 0, 0, 0, 7, 2), (0, 0, 0, 0, 0, 0, 7, 3), (0, 0, 0, 0, 0, 0, 7, 1)]
    assert core.admit_received(heads, indices) == [1]
    assert indices == [0, 2]


def test_an_earlier_seq_replicated_after_a_later_one_is_admitted_once() -> None:
    """L4 under chained failover (issue 8, make sim FAILOVER=1 SEED=2174): the publisher's seq 1
    was logged on i2, which crashed; it failed over to i0 (seq 2, not persisted: i0 crashed)
    and then to i1, where it republished seq 2. i1 never held seq 1: when it arrives, by
    replication from i0 or i2, it is not a duplicate, and a second copy of it is."""
    i1 = _core()
    assert i1.sequence(102, 2, "pub") == (102, 2)  # the republish after the second failover
    from_i0 = [_replicated(102, 1), _replicated(102, 2)]
    assert i1.admit_replicated(from_i0) == [from_i0[0]]
    assert i1.admit_replicated([_replicated(102, 1)]) == []  # the copy from i2
    assert i1.sequence(102, 1, "pub") is None
    assert i1.statistics().duplicates == 3
    heads = [(0, 0, 0, 0, 0, 0, 103, 3), (0, 0, 0, 0, 0, 0, 103, 1), (0, 0, 0, 0, 0, 0, 103, 1)]
    assert i1.admit_received(heads) == [0, 1]  # the same through the received-frames path
    assert i1.sequence(103, 2, "pub") == (103, 2)  # the client's republish of the other gap
    assert i1.sequence(103, 2, "pub") is None


def test_an_instance_that_does_not_replicate_keeps_l4_to_the_letter() -> None:
    """L4: without replication nothing reaches an instance out of a publisher's order, so a
    client's number below the mark is a replay: discarded even where the log skipped it."""
    alone = PublishingCore[str]("amps-1", PublisherMarks(), gaps=False)
    assert alone.sequence(7, 10, "pub") == (7, 10)
    assert alone.sequence(7, 5, "pub") is None
    assert alone.sequence(7, 10, "pub") is None
    assert alone.sequence(7, 11, "pub") == (7, 11)
    assert alone.statistics().duplicates == 2
    replicated = _core()  # the same numbers where replication can reorder them: 5 is a gap
    assert [replicated.sequence(7, seq, "pub") for seq in (10, 5, 10, 11)] == [
        (7, 10), (7, 5), None, (7, 11),
    ]  # fmt: skip


def _history() -> st.SearchStrategy[list[tuple[int, int]]]:
    """Claims that leave marks, gaps (numbers skipped) and filled gaps behind."""
    return st.lists(st.tuples(st.integers(1, 2), st.integers(1, 40)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(history=_history(), publisher=st.integers(1, 3), first=st.integers(1, 50),
       count=st.integers(1, 12))  # fmt: skip
def test_a_run_of_one_publisher_is_admitted_as_claim_by_claim(
    history: list[tuple[int, int]], publisher: int, first: int, count: int
) -> None:
    """One publisher's consecutive numbers (a catch-up's usual batch) take one step of the
    marks (`claim_run`, `advance_run`) where they can; the outcome is that of a claim per
    record, whatever the marks and gaps before (L4)."""
    stepwise, at_once = PublisherMarks(), PublisherMarks()
    for p, s in history:
        stepwise.claim(p, s)
        at_once.claim(p, s)
    seqs = range(first, first + count)
    heads = [(0, 0, 0, 0, 0, 0, publisher, seq) for seq in seqs]
    assert one_publisher_run(heads) == (publisher, first, first + count - 1)
    kept = [k for k, seq in enumerate(seqs) if stepwise.claim(publisher, seq)]
    assert _core(at_once).admit_received(heads) == kept
    assert at_once == stepwise
    # A second pass over the same numbers (the journal's own marks, when they are the
    # publishing core's): nothing moves, as claim by claim.
    for seq in seqs:
        stepwise.claim(publisher, seq)
    at_once.advance_run(publisher, first, first + count - 1)
    assert at_once == stepwise
    # Numbers above the mark, some skipped first (gaps below the run): the run at once.
    later = first + count + 3
    for seq in range(later, later + count):
        stepwise.claim(publisher, seq)
    at_once.advance_run(publisher, later, later + count - 1)
    assert at_once == stepwise
    assert at_once.gaps(publisher) == stepwise.gaps(publisher)


def test_a_batch_that_is_not_one_run_is_claimed_record_by_record() -> None:
    def heads(*pairs: tuple[int, int]) -> list[tuple[int, ...]]:
        return [(0, 0, 0, 0, 0, 0, p, s) for p, s in pairs]

    assert one_publisher_run([]) is None
    assert one_publisher_run(heads((7, 1), (8, 2))) is None  # two publishers
    assert one_publisher_run(heads((7, 1), (7, 3))) is None  # a number skipped
    assert one_publisher_run(heads((7, 2), (7, 1))) is None  # out of order
    assert one_publisher_run(heads((7, 2), (7, 2))) is None  # a copy within the batch
    assert one_publisher_run(heads((7, 5))) == (7, 5, 5)
    core = _core()
    assert core.admit_received(heads((7, 1), (7, 3), (7, 2), (7, 3))) == [0, 1, 2]
    assert core.marks.high_water(7) == 3
    assert not core.marks.gaps(7)
    assert core.statistics().duplicates == 1
