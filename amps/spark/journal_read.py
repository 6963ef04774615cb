"""Reading a journal directory into Arrow batches: planned on the driver, read on executors.

Planning opens the journal read-only (as `amps journal dump`: no lock, nothing written), fixes
the txid range (the `from`/`to` bookmark specs and the durable end at planning) and cuts it into
pieces of at most `records_per_partition` records per segment, and at least `min_partitions`
pieces of about the same size; `parts` cuts them at even shares of the range, one Spark
partition per share, across segment boundaries. A piece names the segment's file and summary,
so an executor that sees the same path reads it with the journal's own reader and codec,
whatever is appended meanwhile.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amps.errors import CorruptRecord, InvalidOptions
from amps.log.bookmarks import Epoch, parse_bookmark_spec
from amps.log.journal import Journal
from amps.log.reader import MIN_READ_BYTES, SegmentFiles, SegmentReader
from amps.log.records import Record
from amps.log.segments import SegmentBuilder, SegmentSummary
from amps.server.topics import topic_matcher
from amps.spark import columns
from amps.spark.options import ReadOptions
from amps.spark.rows import records_batch

BATCH_RECORDS = 8192
# A columnar read takes about BATCH_RECORDS records at a time, in at most this many bytes
# (large records: fewer; one longer than this: the read doubles until it fits).
MAX_READ_BYTES = 16 << 20
OPEN_ATTEMPTS = 5
OPEN_RETRY_S = 0.1


@dataclass(frozen=True)
class JournalPiece:
    """Records first_txid..last_txid of one segment, whose file (in the journal or its archive
    directory, plain or compressed) is `path`."""

    path: str
    segment: SegmentSummary
    first_txid: int
    last_txid: int


@dataclass(frozen=True)
class JournalPart:
    """One Spark partition of a journal read: consecutive pieces, read in turn (a partition
    may span segments, so that `min_partitions` pieces of equal size keep every core busy)."""

    pieces: tuple[JournalPiece, ...]


def parts(directory: str, options: ReadOptions) -> list[JournalPart]:
    """The plan's pieces cut at even shares of the txid range and gathered into one partition
    per share: a segment boundary no longer makes a third, small partition on two cores."""
    pieces = plan(directory, options)
    if not pieces:
        return []
    first = pieces[0].first_txid
    total = pieces[-1].last_txid - first + 1
    share = max(1, -(-total // max(1, options.min_partitions)))
    share = min(share, options.records_per_partition)
    grouped: dict[int, list[JournalPiece]] = {}
    for piece in pieces:
        start = piece.first_txid
        while start <= piece.last_txid:
            k = (start - first) // share
            end = min(piece.last_txid, first + (k + 1) * share - 1)
            grouped.setdefault(k, []).append(replace(piece, first_txid=start, last_txid=end))
            start = end + 1
    return [JournalPart(tuple(group)) for _k, group in sorted(grouped.items())]


def plan(directory: str, options: ReadOptions) -> list[JournalPiece]:
    """The pieces of the journal at `directory` that the options select, oldest first."""
    path = Path(directory)
    if not path.is_dir():
        raise InvalidOptions(f"journal directory {directory!r} does not exist")
    archive = Path(options.archive) if options.archive else None
    journal = _open_live(path, archive)
    try:
        first = journal.first_txid
        if options.start:
            spec = parse_bookmark_spec(options.start)
            first = first if isinstance(spec, Epoch) else journal.find_start(spec)
        last = journal.durable_txid
        if options.end:
            # A bookmark ends with that message; a timestamp before the first record at it.
            last = min(last, journal.find_start(parse_bookmark_spec(options.end)) - 1)
        pieces: list[JournalPiece] = []
        # Pieces of about the same size, at least min_partitions of them: segments differ in
        # size (the newest is partly filled), and a read is as fast as its largest piece.
        even = -(-(last - first + 1) // options.min_partitions)
        step = max(1, min(options.records_per_partition, even))
        for segment in journal.segments():
            low = max(first, segment.first_txid)
            high = min(last, segment.last_txid)
            if low > high:
                continue
            summary = segment.summary() if isinstance(segment, SegmentBuilder) else segment
            for start in range(low, high + 1, step):
                end = min(high, start + step - 1)
                segment_path = journal.segment_path(segment.first_txid).resolve()
                pieces.append(JournalPiece(str(segment_path), summary, start, end))
        return pieces
    finally:
        journal.close_read_only()


def _open_live(path: Path, archive: Path | None) -> Journal:
    """Open read-only, tolerating a write in progress: a read racing the instance's append can
    see a later page of its write (a commit marker) before an earlier one, which the journal
    reports as damage; damage that is really there is still there after OPEN_ATTEMPTS reads."""
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return Journal.open(path, read_only=True, archive_directory=archive)
        except CorruptRecord:
            if attempt == OPEN_ATTEMPTS - 1:
                raise
            time.sleep(OPEN_RETRY_S)
    raise AssertionError("unreachable")


def read(piece: JournalPiece | JournalPart, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The selected records of one piece (or of each piece of a part, in turn), as batches of
    at most about BATCH_RECORDS rows.

    Publishes (the default kind) without a content filter are decoded column by column
    (amps.spark.columns); a chunk that needs more than that, and every other read, goes
    through the journal's own reader (`read_records`), which also names any damage.
    """
    if isinstance(piece, JournalPart):
        for one in piece.pieces:
            yield from read(one, options)
        return
    if options.kinds != "publish" or options.filter:
        yield from read_records(piece, options, piece.first_txid)
        return
    keep_topic = _topic_mask(options.topic)
    # Columns the read does not return are not built (the batch is cut to them later).
    skip = columns.SKIPPABLE - set(options.columns) if options.columns else frozenset()
    segment = piece.segment
    files = SegmentFiles(lambda _first_txid: Path(piece.path), 1)
    try:
        pread_into = files.file(segment.first_txid).pread_into
        j = bisect_right(segment.index_txids, piece.first_txid) - 1
        offset = segment.index_offsets[j]
        average = segment.size_bytes // max(1, segment.record_count) + 1
        size = max(MIN_READ_BYTES, min(BATCH_RECORDS * average, MAX_READ_BYTES))
        txid = piece.first_txid
        while txid <= piece.last_txid:
            # Read into a buffer the decode may overwrite (it checks the checksums in place).
            buffer = np.empty(size + columns.SPARE_BYTES, np.uint8)
            got = pread_into(buffer[:size].data, offset)
            decoded = columns.decode_into(
                buffer[: got + columns.SPARE_BYTES], txid, piece.last_txid, skip
            )
            if decoded is None or (not decoded.consumed and got < size):
                # Damage, an end before the summary's last txid, or an unusual frame: the
                # journal's own reader reads on from here (and says what is wrong, if anything).
                yield from read_records(piece, options, txid)
                return
            if not decoded.consumed:
                size *= 2  # one frame longer than the read
                continue
            offset += decoded.consumed
            txid = decoded.next_txid
            batch = decoded.batch
            if batch is not None and keep_topic is not None:
                batch = batch.filter(keep_topic(batch.column(0)))
            if batch is not None and batch.num_rows:
                yield batch
    finally:
        files.close()


def _topic_mask(topic: str) -> Callable[[pa.Array], pa.Array] | None:
    """For a topic option: the rows of a topic column that match it (each distinct topic of a
    batch is matched once)."""
    if not topic:
        return None
    matcher = topic_matcher(topic)

    def mask(topics: pa.Array) -> pa.Array:
        distinct = pc.unique(topics).to_pylist()
        return pc.is_in(topics, columns.texts([t for t in distinct if matcher.matches(t)]))

    return mask


def read_records(
    piece: JournalPiece, options: ReadOptions, first_txid: int
) -> Iterator[pa.RecordBatch]:
    """Records first_txid..piece.last_txid through the journal's reader and codec."""
    segment_path = Path(piece.path)
    reader = SegmentReader(lambda _first_txid: segment_path)
    keep = options.selector()
    # Publishes only (the default): other records are checked but never built.
    fetch: Callable[..., Sequence[Record]] = reader.read
    if options.kinds == "publish":
        fetch = reader.read_publishes
        if not options.topic and not options.filter:
            keep = None
    try:
        txid = first_txid
        while txid <= piece.last_txid:
            records = fetch([piece.segment], txid, piece.last_txid, BATCH_RECORDS)
            if not records:
                break
            txid = records[-1].txid + 1
            chosen = records if keep is None else [r for r in records if keep(r)]
            if chosen:
                yield records_batch(chosen)
    finally:
        reader.close()
