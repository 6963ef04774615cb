"""Publisher gaps across a restart: recovery rebuilds them from the journal, from the summaries
that carry them (sidecar format 2) and from a scan where there is none (issue 8, L4, L8)."""

from __future__ import annotations

import struct
from array import array
from pathlib import Path

import google_crc32c
import pytest

from amps.errors import InvalidBookmark
from amps.log.bookmarks import AtBookmark, Bookmark
from amps.log.journal import Journal
from amps.log.segments import SegmentSummary, decode_summary, encode_summary
from amps.log.storage import iter_keys
from amps.publishing import PublishingCore

SEGMENT_SIZE_BYTES = 16 * 1024  # ~60 of these publishes per segment


def _open(directory: Path) -> Journal:
    return Journal.open(directory, segment_size_bytes=SEGMENT_SIZE_BYTES)


def _publish(journal: Journal, publisher_id: int, seq: int) -> None:
    journal.append_publish(
        topic="orders", data=b"." * 240, publisher_id=publisher_id, seq=seq,
        timestamp_us=1_000_000 + seq,
    )  # fmt: skip


async def _journal_with_gaps(directory: Path) -> None:
    """Publisher 7: 1..150 without 40 (in the first segment) and 140 (in the newest); publisher
    8: 5 first (a replicated later seq), then 2 (the earlier one arriving after it)."""
    journal = _open(directory)
    for seq in range(1, 151):
        if seq not in (40, 140):
            _publish(journal, 7, seq)
    _publish(journal, 8, 5)
    _publish(journal, 8, 2)
    await journal.close()


def _files(directory: Path, pattern: str) -> list[Path]:
    return sorted(directory.glob(pattern))


def _v1(summary: SegmentSummary) -> bytes:
    """A sidecar as written before gaps were kept (format 1: AMPSSUM1, no gaps section)."""
    body = encode_summary(summary)[:-4]
    gap_words = 1 + sum(2 + len(seqs) for seqs in (summary.gaps or {}).values())
    body = b"AMPSSUM1" + body[8 : len(body) - 8 * gap_words]
    return body + struct.pack("<I", google_crc32c.value(body))


@pytest.mark.parametrize("restart", ["summaries", "scan", "format-1-summaries"])
async def test_recovery_rebuilds_the_gaps_and_admits_a_gap_seq_once(
    tmp_path: Path, restart: str
) -> None:
    """The gaps come back whether recovery reads them from the summaries and the checkpoint
    (a clean close), or scans every segment (no sidecar at all: a non-summary recovery); with
    format 1 sidecars (written before gaps were kept) the sealed segments' gaps are unknown
    (none, as before) and the newest segment's scan rebuilds its own."""
    await _journal_with_gaps(tmp_path)
    sealed = _files(tmp_path, "*.summary")
    assert len(sealed) >= 2
    if restart == "scan":
        for path in [*sealed, *_files(tmp_path, "*.tail")]:
            path.unlink()
    elif restart == "format-1-summaries":  # and no checkpoint: the newest segment is scanned
        for path in _files(tmp_path, "*.tail"):
            path.unlink()
        for path in sealed:
            summary = decode_summary(path.read_bytes())
            assert summary is not None
            path.write_bytes(_v1(summary))
    journal = _open(tmp_path)
    expected_7 = (140,) if restart == "format-1-summaries" else (40, 140)
    assert journal.marks.gaps(7) == expected_7
    assert journal.marks.gaps(8) == (1, 3, 4)
    assert journal.marks.high_water(7) == 150
    core: PublishingCore[str] = PublishingCore("amps-1", journal.marks)
    assert core.sequence(7, 140, "pub") == (7, 140)  # L4: never held here, so not a duplicate
    _publish(journal, 7, 140)
    assert core.sequence(7, 140, "pub") is None
    assert core.sequence(7, 139, "pub") is None
    await journal.close()
    again = _open(tmp_path)
    assert again.marks.gaps(7) == expected_7[:-1]
    assert again.marks.is_duplicate(7, 140)
    await again.close()


async def test_a_gap_filled_by_a_record_a_crash_cut_is_a_gap_again(tmp_path: Path) -> None:
    """The segment builder's marks follow the log itself: the torn tail that filled a gap is
    cut, and the seq is taken again when it comes back."""
    await _journal_with_gaps(tmp_path)
    journal = _open(tmp_path)
    _publish(journal, 7, 140)
    await journal.commit()
    await journal.close()
    for path in _files(tmp_path, "*.tail"):
        path.unlink()
    newest = _files(tmp_path, "*.journal")[-1]
    last = [offset for offset, _size, *_keys in iter_keys(newest)][-1]
    with newest.open("r+b") as f:  # a crash: the record never became durable
        f.truncate(last + 5)
    reopened = _open(tmp_path)
    assert reopened.marks.gaps(7) == (40, 140)
    assert not reopened.marks.is_duplicate(7, 140)
    await reopened.close()


def test_a_summary_carries_the_gaps_and_a_format_1_sidecar_still_reads() -> None:
    """Format 2 round-trips the gaps; format 1 reads with gaps unknown (None); a gaps
    section that does not add up is damage (None: rescan)."""
    summary = SegmentSummary(
        5, 6, 10, 11, 2, 300, {7: (3, 9)}, array("Q", [5]), array("Q", [45]),
        array("Q", [10]), {7: array("Q", [4, 8]), 9: array("Q", [1])},
    )  # fmt: skip
    assert decode_summary(encode_summary(summary)) == summary
    old = decode_summary(_v1(summary))
    assert old is not None
    assert old.gaps is None
    assert old.publishers == summary.publishers
    assert old.index_offsets == summary.index_offsets
    body = encode_summary(summary)[:-4]
    cut = body[:-8]  # the last gap seq missing
    assert decode_summary(cut + struct.pack("<I", google_crc32c.value(cut))) is None


async def test_a_bookmark_below_a_gap_filled_later_still_resolves(tmp_path: Path) -> None:
    """L7: filling gap 40 in the newest segment widens its range of publisher 7 to 40..151;
    a bookmark to 50, which an older segment holds, is still found there."""
    await _journal_with_gaps(tmp_path)
    journal = _open(tmp_path)
    _publish(journal, 7, 40)
    txid_of_40 = journal.last_txid
    _publish(journal, 7, 151)
    await journal.commit()
    assert journal.segments()[-1].seq_range(7) == (40, 151)
    assert journal.find_start(AtBookmark(Bookmark(7, 50))) == 50  # txid 49 holds seq 50
    assert journal.find_start(AtBookmark(Bookmark(7, 40))) == txid_of_40 + 1
    with pytest.raises(InvalidBookmark):
        journal.find_start(AtBookmark(Bookmark(8, 3)))  # a gap: never held
    await journal.close()
