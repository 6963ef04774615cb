"""Duplicate detection (L4) and recovery planning over synthetic segment summaries (L8)."""

from __future__ import annotations

from array import array

import pytest

from amps.errors import CorruptRecord
from amps.log.dedup import GAP_LIMIT, PublisherMarks
from amps.log.recovery import CommitMarker, TailScan, check_sealed, plan_recovery
from amps.log.segments import SegmentBuilder, SegmentSummary, decode_summary, encode_summary


def test_duplicates_are_at_or_below_the_high_water_mark() -> None:
    """L4: equal or lower sequence numbers are duplicates (no gaps here); nothing else is."""
    marks = PublisherMarks()
    assert not marks.is_duplicate(1, 1)
    for seq in range(1, 6):
        marks.advance(1, seq)
    assert marks.is_duplicate(1, 5)
    assert marks.is_duplicate(1, 2)
    assert not marks.is_duplicate(1, 6)
    assert not marks.is_duplicate(2, 1)
    marks.advance(1, 3)  # never moves back
    assert marks.high_water(1) == 5
    assert marks.next_seq(1) == 6
    other = PublisherMarks([(1, 4), (2, 9)])
    marks.merge(other)
    assert dict(marks.items()) == {1: 5, 2: 9}
    assert marks == PublisherMarks([(2, 9), (1, 5)])
    assert len(marks.copy()) == 2


def test_a_claim_is_a_duplicate_check_and_an_advance() -> None:
    """L4: claim refuses what is_duplicate calls a duplicate and advances past what it takes."""
    marks = PublisherMarks([(1, 5)])
    assert not marks.claim(1, 5)
    assert not marks.claim(1, 4)
    assert marks.high_water(1) == 5
    assert marks.claim(1, 7)
    assert marks.high_water(1) == 7
    assert marks.claim(2, 1)
    assert not marks.claim(2, 1)


def _summary(first: int, count: int, ts: int = 0, pubs: dict[int, tuple[int, int]] | None = None,
             size: int = 1000) -> SegmentSummary:  # fmt: skip
    return SegmentSummary(first, first + count - 1, ts, ts + count, count, size, pubs or {})


def _tail(first: int, count: int, file_size: int, valid_size: int, *, next_valid: int | None = None,
          problem: str = "", version: int = 1, commit: CommitMarker | None = None,
          last_after: int = 0) -> TailScan:  # fmt: skip
    summary = _summary(first, count, ts=10_000, size=valid_size)
    return TailScan("t.journal", summary, file_size, problem, next_valid, version, commit,
                    last_after)  # fmt: skip


def test_clean_log_needs_no_cut() -> None:
    plan = plan_recovery(
        [
            ("a", _summary(1, 10, ts=0, pubs={7: (1, 10)})),
            ("b", _summary(11, 5, ts=100, pubs={7: (11, 15)})),
        ],
        _tail(16, 3, 500, 500),
    )
    assert plan.truncate_to_bytes is None
    assert (plan.first_txid, plan.next_txid) == (1, 19)
    assert plan.marks.high_water(7) == 15


def test_empty_log() -> None:
    plan = plan_recovery([], None)
    assert (plan.first_txid, plan.next_txid, plan.truncate_to_bytes) == (1, 1, None)


def test_torn_tail_is_cut() -> None:
    """L8: damage with nothing valid after it, at the end of the newest segment, is cut."""
    plan = plan_recovery([("a", _summary(1, 10))], _tail(11, 2, 700, 650, problem="bad magic"))
    assert plan.truncate_to_bytes == 650
    assert "650" in plan.cut_reason
    assert plan.next_txid == 13


def test_damage_followed_by_valid_record_is_refused() -> None:
    with pytest.raises(CorruptRecord, match="followed by a valid record") as caught:
        plan_recovery([], _tail(1, 2, 700, 100, next_valid=300, problem="frame checksum mismatch"))
    assert (caught.value.segment, caught.value.offset) == ("t.journal", 100)


def test_damage_before_a_commit_marker_could_have_been_acknowledged() -> None:
    """Rule 2: the fsync before a commit marker made the damaged bytes durable: refused, with
    the txids that could have been acknowledged."""
    commit = CommitMarker(offset=600, first_txid=3, last_txid=7)
    with pytest.raises(CorruptRecord, match=r"txids 5\.\.7 .*could have been acknowledged") as c:
        plan_recovery([], _tail(1, 4, 700, 100, next_valid=200, version=2, commit=commit))
    assert (c.value.segment, c.value.offset) == ("t.journal", 100)


def test_a_read_only_reader_stops_before_an_incomplete_newest_record_instead() -> None:
    """A reader of a journal its instance is writing (dump, Spark) can see a write's later page
    (its commit marker) before an earlier one: it reads up to the incomplete record and refuses
    nothing, since it cannot tell a write in progress from damage. Nothing is cut."""
    commit = CommitMarker(offset=600, first_txid=3, last_txid=7)
    tail = _tail(1, 4, 700, 100, next_valid=200, version=2, commit=commit)
    plan = plan_recovery([], tail, read_only=True)
    assert plan.truncate_to_bytes == 100  # the readable end; read-only opens never truncate
    assert "read stops at offset 100" in plan.cut_reason
    assert plan.next_txid == 5


def test_damage_without_a_commit_marker_after_it_is_cut_in_format_2() -> None:
    """Rule 1: valid records after the damage but no commit marker: a torn, unsynced write."""
    plan = plan_recovery(
        [], _tail(1, 4, 700, 100, next_valid=200, version=2, last_after=9, problem="bad magic")
    )
    assert plan.truncate_to_bytes == 100
    assert "txids 5..9" in plan.cut_reason
    assert "could not have been acknowledged" in plan.cut_reason
    assert "600 bytes" in plan.cut_reason


def test_a_gap_between_segments_is_refused() -> None:
    with pytest.raises(CorruptRecord, match="starts at txid 12, expected 11"):
        plan_recovery([("a", _summary(1, 10)), ("b", _summary(12, 3))], None)


def test_a_sealed_segment_must_end_cleanly() -> None:
    check_sealed(_tail(1, 2, 100, 100))
    with pytest.raises(CorruptRecord, match="not the newest segment"):
        check_sealed(_tail(1, 2, 700, 650))


def test_sidecar_round_trip_and_damage() -> None:
    builder = SegmentBuilder(5)
    for i in range(100):
        builder.add(1000, 5 + i, 100 + i, 7 if i % 2 else 8, i + 1)
    summary = builder.summary()
    data = encode_summary(summary)
    decoded = decode_summary(data)
    assert decoded == summary
    assert summary.seq_range(7) == (2, 100)
    assert list(summary.index_txids) == [5, 71]  # every 64 KiB: offsets 0 and 66,000
    for cut in (0, 10, len(data) - 1):
        assert decode_summary(data[:cut]) is None
    flipped = bytearray(data)
    flipped[20] ^= 1
    assert decode_summary(bytes(flipped)) is None
    assert summary.index_offsets == array("Q", [0, 66_000])


def test_a_seq_skipped_below_the_mark_is_a_gap_taken_once() -> None:
    """L4: a sequence number skipped below the mark is not held, so it is not a duplicate until
    it arrives; a mark raised without gaps (removed segments' marks) says all below is held."""
    marks = PublisherMarks()
    assert marks.claim(1, 4)
    assert marks.gaps(1) == (1, 2, 3)
    assert not marks.is_duplicate(1, 2)
    assert marks.claim(1, 2)
    assert marks.is_duplicate(1, 2)
    assert not marks.claim(1, 2)
    marks.advance(1, 3)  # the journal's append of a seq the core claimed: the gap is filled
    assert marks.gaps(1) == (1,)
    assert marks.high_water(1) == 4
    marks.merge(PublisherMarks([(1, 9), (2, 5)]))
    assert marks.gaps(1) == (1,)
    assert marks.gaps(2) == ()
    assert marks.is_duplicate(1, 7)
    assert marks.is_duplicate(2, 3)
    clone = marks.copy()
    assert clone == marks
    assert clone.claim(1, 1)
    assert clone != marks
    assert not marks.is_duplicate(1, 1)


def test_gaps_are_capped_per_publisher_and_the_forgotten_counted() -> None:
    """Past GAP_LIMIT the lowest gaps are forgotten (duplicates again, as under a plain mark);
    the numbers of one jump below the GAP_LIMIT kept were never gaps, and are not counted."""
    marks = PublisherMarks()
    marks.advance(1, GAP_LIMIT + 11)  # 1 .. GAP_LIMIT + 10 skipped: 1 .. 10 never gaps
    assert marks.forgotten_gaps == 0
    assert marks.gaps(1)[0] == 11
    assert len(marks.gaps(1)) == GAP_LIMIT
    assert marks.is_duplicate(1, 10)
    assert not marks.is_duplicate(1, 11)
    marks.advance(1, GAP_LIMIT + 13)  # one more gap: the lowest goes
    assert marks.forgotten_gaps == 1
    assert marks.gaps(1)[0] == 12
    assert marks.gaps(1)[-1] == GAP_LIMIT + 12
    marks.set_gaps(1, [0, 5, 5, GAP_LIMIT + 13, GAP_LIMIT + 14])
    assert marks.gaps(1) == (5,)  # recovery keeps only those below the mark
