"""Segment summaries: what recovery and lookups need to know about a segment without reading it.

[core] A summary holds the txid and timestamp range, the record count, the size, each
publisher's sequence range, a sparse index (txid, offset, timestamp) every ~64 KiB, and the
publishers' de-duplication gaps as of its last record (amps.log.dedup: sequence numbers skipped
below a publisher's mark that the log does not hold, over the whole log, not this segment
alone), so recovery rebuilds them from the newest summary and what follows it. It is stored
next to a sealed segment as a sidecar file with its own CRC32C. Sidecar format 2 (`AMPSSUM2`)
adds the gaps; format 1 (`AMPSSUM1`, before gaps were kept) still reads, as "gaps unknown".
"""

from __future__ import annotations

import re
import struct
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate

import google_crc32c

from amps.log.dedup import PublisherMarks

__all__ = [
    "INDEX_EVERY_BYTES",
    "SegmentBuilder",
    "SegmentSummary",
    "checkpoint_name",
    "decode_summary",
    "encode_summary",
    "parse_segment_name",
    "segment_name",
    "summary_name",
]

INDEX_EVERY_BYTES = 64 * 1024
_SIDE_MAGIC_1 = b"AMPSSUM1"  # without gaps
_SIDE_MAGIC = b"AMPSSUM2"  # header, publishers, index, gaps (u64 count, then per publisher
# u64 id, u64 n, n u64 seqs), CRC32C
_SIDE_HEADER = struct.Struct("<8sQQQQQQII")
_NAME_RE = re.compile(r"(\d{20})\.journal")


def segment_name(first_txid: int) -> str:
    """File name of the segment whose first record has `first_txid`; sorts by txid."""
    return f"{first_txid:020d}.journal"


def summary_name(first_txid: int) -> str:
    return f"{first_txid:020d}.summary"


def checkpoint_name(first_txid: int) -> str:
    """Summary of a durable prefix of the active segment, so a reopen scans only the rest."""
    return f"{first_txid:020d}.tail"


def parse_segment_name(name: str) -> int | None:
    """The first txid a segment file name announces, or None for other files."""
    match = _NAME_RE.fullmatch(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What is known about one segment's valid records (the arrays are never mutated)."""

    first_txid: int
    last_txid: int  # first_txid - 1 when empty
    first_timestamp_us: int
    last_timestamp_us: int
    record_count: int
    size_bytes: int
    publishers: dict[int, tuple[int, int]]  # publisher_id -> (min seq, max seq)
    index_txids: array[int] = field(default_factory=lambda: array("Q"))
    index_offsets: array[int] = field(default_factory=lambda: array("Q"))
    index_timestamps_us: array[int] = field(default_factory=lambda: array("Q"))
    # publisher_id -> its gaps, ascending, over the log through last_txid; None: not known (a
    # format 1 sidecar)
    gaps: dict[int, array[int]] | None = None

    def __post_init__(self) -> None:
        assert self.last_txid - self.first_txid + 1 == self.record_count, self
        assert len(self.index_txids) == len(self.index_offsets) == len(self.index_timestamps_us)

    def seq_range(self, publisher_id: int) -> tuple[int, int] | None:
        """(min, max) sequence number of `publisher_id` in this segment, None if absent."""
        return self.publishers.get(publisher_id)


class SegmentBuilder:
    """Accumulates a summary as records are appended to, or scanned from, one segment."""

    __slots__ = (
        "_first_seq",
        "_index_offsets",
        "_index_timestamps_us",
        "_index_txids",
        "_last_seq",
        "_next_index_offset",
        "first_timestamp_us",
        "first_txid",
        "last_timestamp_us",
        "last_txid",
        "marks",
        "size_bytes",
    )

    def __init__(self, first_txid: int, marks: PublisherMarks | None = None) -> None:
        """`marks`: the log's publisher marks through first_txid - 1, advanced by every publish
        added here (in log order, so their gaps are exact: the journal's own marks run ahead
        by what the publishing core claimed and the journal has not appended yet)."""
        assert first_txid >= 1
        self.first_txid = first_txid
        self.last_txid = first_txid - 1
        self.first_timestamp_us = 0
        self.last_timestamp_us = 0
        self.size_bytes = 0
        self._first_seq: dict[int, int] = {}
        self._last_seq: dict[int, int] = {}
        self._index_txids: array[int] = array("Q")
        self._index_offsets: array[int] = array("Q")
        self._index_timestamps_us: array[int] = array("Q")
        self._next_index_offset = 0
        self.marks = marks if marks is not None else PublisherMarks()

    @classmethod
    def from_summary(
        cls, summary: SegmentSummary, marks: PublisherMarks | None = None
    ) -> SegmentBuilder:
        """A builder that continues after the records `summary` describes; `marks` (those
        through the previous segment) take its ranges and gaps (`take_summary`)."""
        marks = marks if marks is not None else PublisherMarks()
        builder = cls(summary.first_txid, take_summary(marks, summary))
        builder.last_txid = summary.last_txid
        builder.first_timestamp_us = summary.first_timestamp_us
        builder.last_timestamp_us = summary.last_timestamp_us
        builder.size_bytes = summary.size_bytes
        builder._first_seq = {pub: low for pub, (low, _high) in summary.publishers.items()}
        builder._last_seq = {pub: high for pub, (_low, high) in summary.publishers.items()}
        builder._index_txids = array("Q", summary.index_txids)
        builder._index_offsets = array("Q", summary.index_offsets)
        builder._index_timestamps_us = array("Q", summary.index_timestamps_us)
        if summary.index_offsets:
            builder._next_index_offset = summary.index_offsets[-1] + INDEX_EVERY_BYTES
        return builder

    @property
    def record_count(self) -> int:
        return self.last_txid - self.first_txid + 1

    def add(self, frame_size_bytes: int, txid: int, timestamp_us: int, pub: int, seq: int) -> int:
        """Account for one frame appended at the end; return the offset it starts at."""
        last_txid = self.last_txid
        assert txid == last_txid + 1, (txid, last_txid)
        offset = self.size_bytes
        if offset >= self._next_index_offset:
            self._index_txids.append(txid)
            self._index_offsets.append(offset)
            self._index_timestamps_us.append(timestamp_us)
            self._next_index_offset = offset + INDEX_EVERY_BYTES
        if txid == self.first_txid:
            self.first_timestamp_us = timestamp_us
        self.last_txid = txid
        self.last_timestamp_us = timestamp_us
        self.size_bytes = offset + frame_size_bytes
        if pub:
            self.marks.claim(pub, seq)  # `advance`, one call fewer (a held seq: no change)
            last_seq = self._last_seq
            if seq > last_seq.get(pub, 0):
                last_seq[pub] = seq
            first_seq = self._first_seq
            low = first_seq.get(pub)
            if low is None or seq < low:
                first_seq[pub] = seq
        return offset

    def add_run(
        self, sizes: list[int], timestamps_us: list[int], seq_ranges: dict[int, tuple[int, int]]
    ) -> None:
        """`add` for consecutive frames at once: frame k has txid last_txid + 1 + k, size
        `sizes[k]` and timestamp `timestamps_us[k]`; `seq_ranges`: publisher -> (lowest,
        highest) seq among them. What `add` does per frame, with a Python step only per index
        entry (every INDEX_EVERY_BYTES) instead of per frame; the caller advances `marks` by
        each frame's (publisher, seq), in order."""
        if not sizes:
            return
        first = self.last_txid + 1
        start = self.size_bytes
        ends = list(accumulate(sizes, initial=start))  # ends[k]: where frame k starts
        k = 0
        while True:
            k = bisect_left(ends, self._next_index_offset, k, len(sizes))
            if k >= len(sizes):
                break
            self._index_txids.append(first + k)
            self._index_offsets.append(ends[k])
            self._index_timestamps_us.append(timestamps_us[k])
            self._next_index_offset = ends[k] + INDEX_EVERY_BYTES
        if first == self.first_txid:
            self.first_timestamp_us = timestamps_us[0]
        self.last_txid = first + len(sizes) - 1
        self.last_timestamp_us = timestamps_us[-1]
        self.size_bytes = ends[-1]
        first_seq, last_seq = self._first_seq, self._last_seq
        for pub, (low, high) in seq_ranges.items():
            if not pub:
                continue
            if high > last_seq.get(pub, 0):
                last_seq[pub] = high
            known = first_seq.get(pub)
            if known is None or low < known:
                first_seq[pub] = low

    def add_control(self, frame_size_bytes: int) -> None:
        """Account for a control frame (segment header, commit marker) appended at the end."""
        self.size_bytes += frame_size_bytes

    # The live sparse index: appended to, never rewritten, so readers may hold on to it.
    @property
    def index_txids(self) -> array[int]:
        return self._index_txids

    @property
    def index_offsets(self) -> array[int]:
        return self._index_offsets

    @property
    def index_timestamps_us(self) -> array[int]:
        return self._index_timestamps_us

    def seq_range(self, publisher_id: int) -> tuple[int, int] | None:
        top = self._last_seq.get(publisher_id)
        return None if top is None else (self._first_seq[publisher_id], top)

    def summary(self) -> SegmentSummary:
        """A snapshot of everything added so far."""
        publishers = {pub: (self._first_seq[pub], top) for pub, top in self._last_seq.items()}
        gaps = {pub: array("Q", seqs) for pub, seqs in self.marks.gap_items()}
        return SegmentSummary(
            self.first_txid, self.last_txid, self.first_timestamp_us, self.last_timestamp_us,
            self.record_count, self.size_bytes, publishers,
            array("Q", self._index_txids), array("Q", self._index_offsets),
            array("Q", self._index_timestamps_us), gaps,
        )  # fmt: skip


def take_summary(marks: PublisherMarks, summary: SegmentSummary) -> PublisherMarks:
    """`marks` (of the log before the segment) moved past the segment `summary` describes:
    each publisher's mark raised to its range's top, and the gaps the summary's (none when a
    format 1 summary does not know them: as before gaps were kept). Returns `marks`."""
    for publisher_id, (_low, high) in summary.publishers.items():
        marks.raise_mark(publisher_id, high)
    marks.clear_gaps()
    for publisher_id, seqs in (summary.gaps or {}).items():
        marks.set_gaps(publisher_id, seqs)
    return marks


def encode_summary(summary: SegmentSummary) -> bytes:
    """Sidecar bytes: header, publisher ranges, sparse index, CRC32C of all of it."""
    head = _SIDE_HEADER.pack(
        _SIDE_MAGIC, summary.first_txid, summary.last_txid, summary.first_timestamp_us,
        summary.last_timestamp_us, summary.record_count, summary.size_bytes,
        len(summary.publishers), len(summary.index_txids),
    )  # fmt: skip
    pubs = array(
        "Q", [v for p, (lo, hi) in sorted(summary.publishers.items()) for v in (p, lo, hi)]
    )
    gaps = sorted((summary.gaps or {}).items())
    gap_words = array("Q", [len(gaps)])
    for publisher_id, seqs in gaps:
        gap_words.extend((publisher_id, len(seqs)))
        gap_words.extend(seqs)
    body = b"".join(
        (head, pubs.tobytes(), summary.index_txids.tobytes(), summary.index_offsets.tobytes(),
         summary.index_timestamps_us.tobytes(), gap_words.tobytes())
    )  # fmt: skip
    return body + struct.pack("<I", google_crc32c.value(body))


def decode_summary(data: bytes) -> SegmentSummary | None:
    """The summary in a sidecar, or None when it is damaged in any way (then rescan)."""
    if len(data) < _SIDE_HEADER.size + 4:
        return None
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    if google_crc32c.value(body) != crc:
        return None
    magic, first, last, first_ts, last_ts, count, size, npub, nidx = _SIDE_HEADER.unpack_from(body)
    fixed = _SIDE_HEADER.size + 8 * (3 * npub + 3 * nidx)
    if magic == _SIDE_MAGIC_1:
        if len(body) != fixed:
            return None
    elif magic != _SIDE_MAGIC or len(body) < fixed + 8 or (len(body) - _SIDE_HEADER.size) % 8:
        return None
    if last - first + 1 != count:
        return None
    words = array("Q")
    words.frombytes(body[_SIDE_HEADER.size :])
    pubs = {words[i]: (words[i + 1], words[i + 2]) for i in range(0, 3 * npub, 3)}
    base = 3 * npub
    gaps = None if magic == _SIDE_MAGIC_1 else _decode_gaps(words, base + 3 * nidx)
    if magic == _SIDE_MAGIC and gaps is None:
        return None
    return SegmentSummary(
        first, last, first_ts, last_ts, count, size, pubs,
        words[base : base + nidx], words[base + nidx : base + 2 * nidx],
        words[base + 2 * nidx : base + 3 * nidx], gaps,
    )  # fmt: skip


def _decode_gaps(words: array[int], at: int) -> dict[int, array[int]] | None:
    """The gaps section from word `at` to the end; None if it does not fill it exactly."""
    gaps: dict[int, array[int]] = {}
    count, at = words[at], at + 1
    for _ in range(count):
        if at + 2 > len(words):
            return None
        publisher_id, n = words[at], words[at + 1]
        at += 2
        if at + n > len(words):
            return None
        gaps[publisher_id] = words[at : at + n]
        at += n
    return gaps if at == len(words) else None
