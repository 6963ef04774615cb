"""Which segments a lifecycle action takes, and what holds the others (issue 11 item 8, §1.4)."""

from __future__ import annotations

import pytest

from amps.log.retention import Hold, SegmentState, select_segments

HOUR_US = 3_600_000_000
NOW_US = 100 * HOUR_US


def segments(*ages_h: int, archived: tuple[int, ...] = ()) -> list[SegmentState]:
    """Segments of 100 txids each, oldest first, whose newest records are `ages_h` hours old;
    the last one is the active segment."""
    return [
        SegmentState(100 * i + 1, 100 * i + 100, NOW_US - age * HOUR_US, 1000, i in archived)
        for i, age in enumerate(ages_h)
    ]


def firsts(states: tuple[SegmentState, ...]) -> list[int]:
    return [s.first_txid for s in states]


def test_removal_takes_the_old_sealed_segments_never_the_active_one() -> None:
    """Rules 1 and 2: age counts from a segment's newest record; the active one stays."""
    log = segments(9, 8, 5, 9)  # the active segment is old too: still kept
    chosen = select_segments("remove", log, [], now_us=NOW_US, age_us=6 * HOUR_US).chosen
    assert firsts(chosen) == [1, 101]


def test_a_hold_keeps_its_segment_and_every_later_one_and_is_named() -> None:
    """Rule 3: a queue that needs txid 150 on keeps segment 101 (100..200) and what follows;
    a removal never leaves a gap."""
    log = segments(9, 9, 9, 9, 0)
    holds = [Hold("queue work", 150), Hold("destination amps-2", 260)]
    selection = select_segments("remove", log, holds, now_us=NOW_US, age_us=HOUR_US)
    assert firsts(selection.chosen) == [1]
    assert [(s.first_txid, h) for s, h in selection.held] == [
        (101, ("queue work",)),
        (201, ("destination amps-2", "queue work")),
        (301, ("destination amps-2", "queue work")),
    ]
    assert selection.held_by() == {"queue work": 3, "destination amps-2": 2}
    assert selection.chosen_bytes == 1000


def test_a_hold_at_the_start_of_a_segment_does_not_need_the_one_before() -> None:
    log = segments(9, 9, 0)
    selection = select_segments("remove", log, [Hold("q", 101)], now_us=NOW_US, age_us=0)
    assert firsts(selection.chosen) == [1]


def test_the_admin_path_takes_the_named_journal_and_older_ones_only() -> None:
    log = segments(9, 9, 9, 0)
    chosen = select_segments(
        "remove", log, [], now_us=NOW_US, age_us=0, up_to_first_txid=101
    ).chosen
    assert firsts(chosen) == [1, 101]


def test_archive_and_compress_ignore_holds_and_skip_what_they_took_already() -> None:
    """Rule 4: an archived or compressed segment stays readable, so a hold does not stop it."""
    log = segments(9, 9, 9, 0, archived=(0,))
    holds = [Hold("queue work", 1)]
    archive = select_segments("archive", log, holds, now_us=NOW_US, age_us=HOUR_US)
    assert firsts(archive.chosen) == [101, 201]
    assert archive.held == ()
    compress = select_segments("compress", log, holds, now_us=NOW_US, age_us=HOUR_US)
    assert firsts(compress.chosen) == [1, 101, 201]


@pytest.mark.parametrize("age_h", [0, 5, 9, 10])
def test_nothing_younger_than_the_age_is_taken(age_h: int) -> None:
    log = segments(9, 7, 5, 3, 0)
    chosen = select_segments("remove", log, [], now_us=NOW_US, age_us=age_h * HOUR_US).chosen
    assert all(NOW_US - s.last_timestamp_us >= age_h * HOUR_US for s in chosen)
    assert len(chosen) == sum(1 for age in (9, 7, 5, 3) if age >= age_h)
