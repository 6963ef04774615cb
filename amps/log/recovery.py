"""Crash recovery decisions over segment summaries (L8). [core]

Rule 1: only the newest segment may end badly. A torn tail there was never acknowledged: it is
cut, and the cut is reported (segment, offset, txids, why it could not have been acknowledged).
Rule 2: damage followed by a commit marker is not a torn write: the fsync before that marker made
the damaged bytes durable, so they may have been acknowledged. Refuse to start, naming the
segment, the offset and the txids. The writer writes the marker after each fsync and before any
acknowledgement, so a torn tail is exactly damage with no commit marker after it.
Rule 3: a segment of format 1 (before commit markers) cannot tell the two apart: damage followed
by any valid frame is refused there, as Rule 2.
Rule 4: segments must cover txids without gaps or overlaps; a missing file is corruption.
The journal gathers the inputs (summaries, a scan of the newest segment) and executes the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amps.errors import CorruptRecord
from amps.log.dedup import PublisherMarks
from amps.log.segments import SegmentSummary

__all__ = ["CommitMarker", "RecoveryPlan", "TailScan", "check_sealed", "plan_recovery"]


@dataclass(frozen=True, slots=True)
class CommitMarker:
    """A commit marker found in a segment: the fsync before `offset` made these txids durable."""

    offset: int
    first_txid: int
    last_txid: int


@dataclass(frozen=True, slots=True)
class TailScan:
    """The newest segment, decoded from its start until the end of the file or the first damage."""

    name: str
    summary: SegmentSummary  # valid records only; summary.size_bytes is where they end
    file_size_bytes: int
    problem: str = ""  # why decoding stopped before the end of the file ("" if it did not)
    next_valid_offset: int | None = None  # a valid frame found after the damage, if any
    format_version: int = 1  # from the segment header (1: a segment written before headers)
    commit_after: CommitMarker | None = None  # the first commit marker after the damage
    last_txid_after: int = 0  # the highest txid of a valid record after the damage (0: none)

    def __post_init__(self) -> None:
        assert self.summary.size_bytes <= self.file_size_bytes
        if self.summary.size_bytes == self.file_size_bytes:
            assert self.next_valid_offset is None


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What to cut and where the log stands after recovery."""

    truncate_to_bytes: int | None  # new size of the newest segment, None when nothing to cut
    cut_reason: str
    first_txid: int  # the oldest txid in the log (next_txid when the log is empty)
    next_txid: int
    last_timestamp_us: int
    marks: PublisherMarks


def _check_contiguous(name: str, summary: SegmentSummary, expected_txid: int | None) -> None:
    if expected_txid is not None and summary.first_txid != expected_txid:
        raise CorruptRecord(
            f"segment {name} starts at txid {summary.first_txid}, expected {expected_txid}: "
            "a segment file is missing, duplicated or damaged",
            segment=name,
            offset=0,
        )


def check_sealed(scan: TailScan) -> None:
    """Rule 1: a segment followed by another one must decode to its very end."""
    if scan.summary.size_bytes < scan.file_size_bytes:
        offset = scan.summary.size_bytes
        raise CorruptRecord(
            f"{scan.problem or 'incomplete record'} in segment {scan.name} at offset {offset}, "
            "which is not the newest segment: refusing to start on a corrupt transaction log",
            segment=scan.name,
            offset=offset,
        )


def plan_recovery(
    sealed: Sequence[tuple[str, SegmentSummary]],
    tail: TailScan | None,
    *,
    read_only: bool = False,
) -> RecoveryPlan:
    """Decide the recovery of a log made of `sealed` segments (oldest first) and `tail`.

    Raises CorruptRecord when the log cannot be trusted (rules 2 and 3). A `read_only` reader
    of a journal that its instance may be writing stops before an incomplete newest record
    instead: a concurrent read can see a later page of a write (its commit marker) before an
    earlier one, so it cannot tell a write in progress from damage (`amps journal verify`
    names damage; the instance itself, opening read-write, applies the rules).
    """
    marks = PublisherMarks()
    expected: int | None = None
    last_ts = 0
    first_txid: int | None = None
    segments = [*sealed, (tail.name, tail.summary)] if tail is not None else list(sealed)
    for name, summary in segments:
        _check_contiguous(name, summary, expected)
        if first_txid is None:
            first_txid = summary.first_txid
        for publisher_id, (_low, high) in summary.publishers.items():
            marks.advance(publisher_id, high)
        if summary.record_count:
            if summary.first_timestamp_us < last_ts:
                raise CorruptRecord(
                    f"segment {name} starts before the previous segment ends (timestamps)",
                    segment=name,
                )
            last_ts = summary.last_timestamp_us
        expected = summary.last_txid + 1
    truncate: int | None = None
    reason = ""
    if tail is not None and tail.summary.size_bytes < tail.file_size_bytes:
        truncate = tail.summary.size_bytes
        if read_only:
            reason = (
                f"read stops at offset {truncate} of the newest segment {tail.name} "
                f"({tail.problem or 'incomplete record'}): a write in progress, or damage"
            )
        else:
            reason = _check_torn_tail(tail)
    start = 1 if first_txid is None else first_txid
    return RecoveryPlan(truncate, reason, start, expected or start, last_ts, marks)


def _check_torn_tail(tail: TailScan) -> str:
    """Rules 1-3 for a newest segment that stops decoding early: what to say about the cut, or
    CorruptRecord when the damaged bytes may have been acknowledged."""
    offset = tail.summary.size_bytes
    problem = tail.problem or "damaged record"
    first_cut = tail.summary.last_txid + 1
    commit = tail.commit_after
    if commit is not None:
        raise CorruptRecord(
            f"{problem} in segment {tail.name} at offset {offset}, before the commit marker at "
            f"offset {commit.offset}: txids {first_cut}..{commit.last_txid} were made durable "
            "and could have been acknowledged; refusing to start on a corrupt transaction log",
            segment=tail.name,
            offset=offset,
        )
    if tail.format_version < 2 and tail.next_valid_offset is not None:
        raise CorruptRecord(
            f"{problem} in segment {tail.name} at offset {offset}, followed by a valid record at "
            f"offset {tail.next_valid_offset} (segment format 1, without commit markers): "
            "refusing to start on a corrupt transaction log",
            segment=tail.name,
            offset=offset,
        )
    if tail.last_txid_after >= first_cut:
        txids = f"txids {first_cut}..{tail.last_txid_after}"
    else:
        txids = f"txid {first_cut} and later, if the damaged bytes held records"
    return (
        f"cut torn tail of segment {tail.name} at offset {offset} "
        f"({tail.file_size_bytes - offset} bytes: {problem}; {txids}): it could not have been "
        "acknowledged (no commit marker follows it)"
    )
