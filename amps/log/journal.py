"""The transaction log: segment files, group-commit fsync, recovery, reads (L1-L8). [io]

Appends are synchronous and only buffer; `commit()` writes and fsyncs everything buffered while
the event loop keeps accepting appends, and one fsync covers every record appended since the
previous one. A small batch is written on the loop and fsynced by the kernel (kernel_fsync.py);
a large one, a segment's rotation or a checkpoint goes to a writer thread of the journal's own.
A failed write or fsync fails the journal for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from time import perf_counter_ns
from typing import TypeVar, cast

from amps.errors import JournalError
from amps.log import codec
from amps.log.bookmarks import BookmarkSpec
from amps.log.compressed import COMPRESSED_SUFFIX, compress_segment
from amps.log.dedup import PublisherMarks
from amps.log.kept_frames import KeptFrames
from amps.log.kernel_fsync import KernelFsync
from amps.log.lookup import find_start
from amps.log.marks_file import read_marks, write_marks
from amps.log.reader import Segment, SegmentReader
from amps.log.received import ReceivedFrames, ReceivedRun, one_publisher_run
from amps.log.records import PublishRecord, Record
from amps.log.recovery import TailScan, check_sealed, plan_recovery
from amps.log.retention import SegmentState
from amps.log.segment_files import (
    compressed_summary,
    copy_to_archive,
    list_segments,
    remove_file,
    remove_segment_files,
)
from amps.log.segments import SegmentBuilder, SegmentSummary, segment_name, take_summary
from amps.log.storage import (
    Rotate,
    SegmentWriter,
    load_checkpoint,
    load_summary,
    scan_segment,
    write_summary,
)

__all__ = ["Journal", "JournalStatistics"]

log = logging.getLogger("amps.journal")
# One of the record kinds: `append` gives back the kind it was given, stamped.
AnyRecord = TypeVar("AnyRecord", bound=Record)

FsyncObserver = Callable[[float], None]
# A reopen scans at most this much of the newest segment (~0.1 s at the 70-100 MB/s the scan
# runs at; 32 MiB took up to ~0.45 s of every restart). Each checkpoint rewrites the segment's
# sparse index (24 bytes per 64 KiB), under 5 % more bytes written even in a 1 GiB segment.
CHECKPOINT_EVERY_BYTES = 8 << 20
# A batch up to this size is written on the event loop (a page-cache copy of tens of us) and its
# fsync run by the kernel; a larger one is written from the writer thread, beside the loop.
INLINE_COMMIT_MAX_BYTES = 64 << 10
# What the writer thread reports for a batch: each fsync's duration, or what went wrong.
FlushResult = list[float] | BaseException


@dataclass(frozen=True, slots=True)
class CommitTiming:
    """How a batch crossed to the writer thread and back (perf_counter_ns instants)."""

    submitted_ns: int  # handed to the writer
    started_ns: int  # the writer thread running it
    finished_ns: int  # the writer done with it (written, fsynced, marked)
    returned_ns: int = 0  # its result handled on the event loop (0 until then)
    fsync_ns: int = 0  # of which its fsyncs took (set with returned_ns)

    @property
    def handoff_ns(self) -> int:
        return self.started_ns - self.submitted_ns

    def stages_ns(self, now_ns: int) -> tuple[tuple[str, int], ...]:
        """(stage, ns) of the batch's trip through the writer and back on the loop, up to
        `now_ns`: handoff, write, fsync, return, dispatch (the hops of a replicated batch)."""
        return (
            ("handoff", self.handoff_ns),
            ("write", self.finished_ns - self.started_ns - self.fsync_ns),
            ("fsync", self.fsync_ns),
            ("return", self.returned_ns - self.finished_ns),
            ("dispatch", now_ns - self.returned_ns),
        )


# Told each batch's (handoff, return) in ns: the thread hops of a commit, beside its fsync.
CommitHopsObserver = Callable[[int, int], None]
# Told the durable txid on the loop as soon as a batch's result arrives, before any waiter of
# `commit` resumes: the owner dispatches it in that same loop iteration.
DurableObserver = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class JournalStatistics:
    """Snapshot for metrics and the admin CLI."""

    first_txid: int
    last_txid: int
    durable_txid: int
    bytes_total: int
    pending_bytes: int
    segment_count: int
    fsync_count: int


class _WriterThread:
    """One thread that writes and fsyncs batches and reports each result on the event loop.

    The result goes straight to a loop callback (`call_soon_threadsafe`). `asyncio.to_thread`
    plus a task per flush took several more loop iterations per commit to come back, and on a
    busy loop each iteration can take milliseconds: that was most of a commit's latency.
    """

    def __init__(self, writer: SegmentWriter) -> None:
        self._writer = writer
        self._work: queue.SimpleQueue[
            tuple[list[bytes | Rotate], SegmentSummary | None, bytes, asyncio.AbstractEventLoop,
                  Callable[[FlushResult, CommitTiming], None], int] | None
        ] = queue.SimpleQueue()  # fmt: skip
        self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._thread.start()

    def submit(
        self,
        batch: list[bytes | Rotate],
        checkpoint: SegmentSummary | None,
        commit: bytes,
        loop: asyncio.AbstractEventLoop,
        done: Callable[[FlushResult, CommitTiming], None],
    ) -> None:
        """Write and fsync `batch` (see SegmentWriter.write_batch); `done(result, timing)` runs
        on `loop` afterwards."""
        self._work.put((batch, checkpoint, commit, loop, done, perf_counter_ns()))

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            batch, checkpoint, commit, loop, done, submitted_ns = item
            # This thread runs Python again only once it holds the GIL: the wait for it behind
            # the event loop's work is part of every commit (the `journal_handoff` hop).
            started_ns = perf_counter_ns()
            result: FlushResult
            try:
                result = self._writer.write_batch(batch, checkpoint, commit)
            except BaseException as exc:  # reported to the loop: the journal fails for good
                result = exc
            timing = CommitTiming(submitted_ns, started_ns, perf_counter_ns())
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                loop.call_soon_threadsafe(done, result, timing)

    def stop(self) -> None:
        """Finish the batch in hand (if any) and end the thread."""
        self._work.put(None)
        self._thread.join()


def _seq_ranges(heads: Sequence[tuple[int, ...]]) -> dict[int, tuple[int, int]]:
    """Each publisher's (first, last) seq among the publishes `heads`, in their order."""
    ranges: dict[int, tuple[int, int]] = {}
    for head in heads:
        publisher_id, seq = head[6], head[7]
        low = ranges.get(publisher_id)
        ranges[publisher_id] = (seq if low is None else low[0], seq)
    return ranges


class Journal:
    """A directory of append-only segments `<first txid>.journal`, each sealed with a summary."""

    # Small batches fsynced by the kernel where it can (tests turn it off for the writer thread).
    kernel_fsync_allowed = True

    def __init__(self, directory: Path, *, segment_size_bytes: int, flush_interval_ms: int,
                 instance_name: str, group: str, read_only: bool,
                 archive_directory: Path | None = None) -> None:  # fmt: skip
        assert segment_size_bytes >= 4096, segment_size_bytes
        assert 1 <= flush_interval_ms <= 1000, flush_interval_ms
        self.directory = directory
        # Archived segments stay part of the log, read from here (JournalArchiveDirectory).
        self.archive_directory = archive_directory
        self._archived: set[int] = set()
        self._compressed: set[int] = set()  # read through amps.log.compressed
        # The marks of removed segments (clients.ack), kept so dedup survives removal (L4).
        self.retired_marks = PublisherMarks()
        self.segment_size_bytes = segment_size_bytes
        self.flush_interval_ms = flush_interval_ms
        self.instance_name = instance_name
        self.group = group
        self.read_only = read_only
        self.marks = PublisherMarks()
        self.on_fsync: FsyncObserver | None = None
        self.on_commit_hops: CommitHopsObserver | None = None
        self.on_durable: DurableObserver | None = None
        # Told once when a write or an fsync fails (every waiter gets the error too).
        self.on_failure: Callable[[JournalError], None] | None = None
        # The latest batch the writer finished, as the event loop saw it back: a replicated
        # batch made durable by it is timed stage by stage (hops `replicated_stages`).
        self.last_flush: CommitTiming | None = None
        self.first_txid = 1
        self._next_txid = 1
        self._durable_txid = 0
        self._last_timestamp_us = 0
        self._sealed: list[SegmentSummary] = []
        self._active: SegmentBuilder = SegmentBuilder(1)
        self._pending: list[bytes | Rotate] = []
        self._pending_bytes = 0
        self._writer: SegmentWriter | None = None
        self._writer_thread: _WriterThread | None = None
        # The kernel's fsync for small batches: None until the first one; why not, where the
        # kernel refuses it (the writer thread does every batch then).
        self._kernel_fsync: KernelFsync | str | None = None
        self._kernel_fsync_loop: asyncio.AbstractEventLoop | None = None
        self._flushing = False  # a batch is being written and fsynced
        self._flush_waiters: list[asyncio.Future[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._failure: JournalError | None = None
        self._lock_fd = -1
        self._closed = False
        self._checkpoint_at_bytes = CHECKPOINT_EVERY_BYTES
        self.recovery_note = ""
        self.reader = SegmentReader(self.segment_path)
        # The latest commits' frames by txid, up to `keep_frames`' bound, from the oldest one a
        # link has still to send (`drop_frames_before`): replication links ship a publish's
        # frame as appended instead of encoding it again. Kept a commit at a time, as handed to
        # the writer (`_start_flush`): links send only what is durable.
        self.frames = KeptFrames()

    def keep_frames(self, max_bytes: int) -> None:
        """Keep the frames of the latest commits in `frames`, up to `max_bytes` (0: none)."""
        self.frames.max_bytes = max_bytes
        self.frames.clear()

    # ----------------------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        segment_size_bytes: int = 1 << 30,
        flush_interval_ms: int = 100,
        instance_name: str = "amps-1",
        group: str = "amps-1",
        read_only: bool = False,
        archive_directory: Path | None = None,
    ) -> Journal:
        """Open (creating if needed) and recover; read-only never cuts, locks or writes.

        Segments in `archive_directory` (moved there by the archive action) are part of the log.
        """
        directory = Path(directory)
        journal = cls(directory, segment_size_bytes=segment_size_bytes,
                      flush_interval_ms=flush_interval_ms, instance_name=instance_name,
                      group=group, read_only=read_only,
                      archive_directory=archive_directory)  # fmt: skip
        if not read_only:
            directory.mkdir(parents=True, exist_ok=True)
            journal._lock()
        try:
            journal._recover()
        except BaseException:
            journal._unlock()
            raise
        return journal

    def _lock(self) -> None:
        self._lock_fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise JournalError(f"journal directory {self.directory} is in use") from None

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _recover(self) -> None:
        archived = list_segments(self.archive_directory)
        local = list_segments(self.directory)
        # A segment in both places was being archived when the instance stopped: the journal
        # directory's copy stays the one in use until a later archive completes the move.
        self._archived = set(archived) - set(local)
        named = sorted({**archived, **local}.items())
        self._compressed = {f for f, path in named if path.name.endswith(COMPRESSED_SUFFIX)}
        sealed: list[tuple[str, SegmentSummary]] = []
        tail: TailScan | None = None
        tail_builder: SegmentBuilder | None = None
        # The publisher marks with their gaps (L4), in log order: from the marks of removed
        # segments (no gaps: all below them was held), a summary raises the marks and brings
        # the gaps as of its end, a scanned segment advances them record by record.
        self.retired_marks = read_marks(self.directory)
        marks = self.retired_marks.copy()
        for i, (first, path) in enumerate(named):
            if first in self._compressed:
                sealed.append((path.name, compressed_summary(path, first)))
                take_summary(marks, sealed[-1][1])
                continue
            size = path.stat().st_size
            summary = load_summary(path.parent, first, size)
            if summary is not None:
                sealed.append((path.name, summary))
                take_summary(marks, summary)
                continue
            if i == len(named) - 1:
                start = load_checkpoint(self.directory, first, size, marks)
                tail, tail_builder = scan_segment(
                    path, first, start or SegmentBuilder(first, marks)
                )
                break
            scan, _builder = scan_segment(path, first, SegmentBuilder(first, marks))
            check_sealed(scan)
            sealed.append((path.name, scan.summary))
            if not self.read_only:
                write_summary(path.parent, scan.summary)
        plan = plan_recovery(sealed, tail, read_only=self.read_only)
        if plan.truncate_to_bytes is not None and tail is not None and not self.read_only:
            self._truncate(self.directory / tail.name, plan.truncate_to_bytes)
        self.recovery_note = plan.cut_reason
        self.marks = marks.copy()  # the builder's own stay exact; these run ahead (claims)
        self.first_txid = plan.first_txid
        self._next_txid = plan.next_txid
        self._durable_txid = plan.next_txid - 1
        self._last_timestamp_us = plan.last_timestamp_us
        self._sealed = [summary for _name, summary in sealed]
        self._active = tail_builder or SegmentBuilder(plan.next_txid, marks)
        if not self.read_only and self._active.size_bytes == 0:
            self._active.add_control(codec.CONTROL_FRAME_BYTES)  # the writer opens it so
        self._checkpoint_at_bytes = self._active.size_bytes + CHECKPOINT_EVERY_BYTES
        if not self.read_only:
            self._writer = SegmentWriter(self.directory, self._active.first_txid)

    def _truncate(self, path: Path, size_bytes: int) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size_bytes)
            os.fsync(fd)
        finally:
            os.close(fd)

    # ----------------------------------------------------------------------------- appending

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise JournalError(f"journal failed earlier: {self._failure.message}")
        if self.read_only:
            raise JournalError("journal is open read-only")
        if self._closed:
            raise JournalError("journal is closed")

    def append_publish(
        self,
        *,
        topic: str,
        data: bytes,
        publisher_id: int,
        seq: int,
        timestamp_us: int,
        correlation_id: str = "",
        expiration_s: int = 0,
        origin_instance: str | None = None,
        origin_group: str = "",
        origin_txid: int = 0,
    ) -> PublishRecord:
        """Assign a txid and buffer a publish; advances `marks` (the caller checked them first).

        Without `origin_instance` the record originates here (origin txid = its txid).
        """
        if origin_instance is None:
            return self.append_client_publish(
                topic, data, publisher_id, seq, timestamp_us, correlation_id, expiration_s
            )
        self._check_writable()
        txid = self._next_txid
        record = codec.new_publish(
            txid, max(timestamp_us, self._last_timestamp_us), topic, data, publisher_id, seq,
            origin_instance, origin_group, origin_txid, correlation_id, expiration_s,
        )  # fmt: skip
        self._buffer(record, publisher_id, seq)
        self.marks.advance(publisher_id, seq)
        return record

    def append_client_publish(
        self, topic: str, data: bytes, publisher_id: int, seq: int, timestamp_us: int,
        correlation_id: str = "", expiration_s: int = 0,
    ) -> PublishRecord:  # fmt: skip
        """`append_publish` of a publish originating here: the per-message hot path.

        The same record and the same bytes as `append_publish`, with the frame encoded straight
        from the fields (no record built to encode).
        """
        if self._failure is not None or self.read_only or self._closed:
            self._check_writable()
        txid = self._next_txid
        if timestamp_us < self._last_timestamp_us:
            timestamp_us = self._last_timestamp_us
        instance, group = self.instance_name, self.group
        frame = codec.encode_publish(
            txid, timestamp_us, topic, data, publisher_id, seq, instance, group, txid,
            correlation_id, expiration_s,
        )  # fmt: skip
        self._buffer_frame(frame, txid, timestamp_us, publisher_id, seq)
        self.marks.advance(publisher_id, seq)
        return codec.new_publish(
            txid, timestamp_us, topic, data, publisher_id, seq, instance, group, txid,
            correlation_id, expiration_s,
        )  # fmt: skip

    def append_replicated(self, records: Iterable[PublishRecord]) -> list[PublishRecord]:
        """Append a peer's publishes under local txids, origin kept, one call per batch: each
        frame encoded straight from the fields. The caller decided they are new (L4:
        amps.publishing.PublishingCore.admit_replicated). Returns what was appended."""
        self._check_writable()
        appended: list[PublishRecord] = []
        add = appended.append
        encode_publish, new_publish = codec.encode_publish, codec.new_publish
        marks = self.marks
        for r in records:
            publisher_id, seq = r.publisher_id, r.seq
            txid = self._next_txid
            timestamp_us = max(r.timestamp_us, self._last_timestamp_us)
            fields = (
                txid, timestamp_us, r.topic, r.data, publisher_id, seq, r.origin_instance,
                r.origin_group, r.origin_txid, r.correlation_id, r.expiration_s,
            )  # fmt: skip
            self._buffer_frame(encode_publish(*fields), txid, timestamp_us, publisher_id, seq)
            marks.advance(publisher_id, seq)
            add(new_publish(*fields))
        return appended

    def append_received(
        self,
        frames: ReceivedFrames,
        indices: Sequence[int],
        *,
        run: tuple[int, int, int] | None = None,
    ) -> ReceivedRun:
        """Append publishes of a peer's batch (`indices` into `frames`, all publishes, in order)
        under local txids, origin kept: each frame restamped (txid, timestamp, CRC), neither
        decoded nor encoded again, and no record built. The caller decided they are new (L4:
        amps.publishing.PublishingCore.admit_received); `run` is `one_publisher_run` of the
        chosen heads when it has it (None: looked for here)."""
        self._check_writable()
        first_txid = self._next_txid
        out, timestamps = codec.restamp_publishes(
            frames.data, frames.offsets, frames.heads, indices, first_txid,
            self._last_timestamp_us,
        )  # fmt: skip
        if not out:
            return ReceivedRun(frames, indices, first_txid, timestamps)
        active = self._active
        heads = frames.heads
        chosen = heads if len(indices) == len(heads) else [heads[index] for index in indices]
        # Per record, in order: a seq below a mark may fill a gap (L4); the segment builder's
        # marks too when the run bypasses its per-frame `add`. One publisher's consecutive
        # numbers (the usual batch) move the marks at once.
        if run is None:
            run = one_publisher_run(chosen)
        if (
            not active.size_bytes
            or active.size_bytes + sum(map(len, out)) <= self.segment_size_bytes
        ):
            seq_ranges = {run[0]: (run[1], run[2])} if run is not None else _seq_ranges(chosen)
            self._buffer_run(out, first_txid, timestamps, seq_ranges)
            marks = [self.marks, active.marks]
        else:  # the run crosses into a new segment (once per segment): frame by frame
            for k, frame in enumerate(out):
                head = chosen[k]
                self._buffer_frame(frame, first_txid + k, timestamps[k], head[6], head[7])
            marks = [self.marks]
        for advancing in marks:
            if run is not None:
                advancing.advance_run(*run)
                continue
            claim = advancing.claim  # `advance`, one call fewer
            for head in chosen:
                claim(head[6], head[7])
        return ReceivedRun(frames, indices, first_txid, timestamps)

    def _buffer_run(
        self,
        frames: list[bytes],
        first_txid: int,
        timestamps: list[int],
        seq_ranges: dict[int, tuple[int, int]],
    ) -> None:
        """`_buffer_frame` for consecutive frames that fit in the active segment, at once."""
        sizes = [len(frame) for frame in frames]
        self._active.add_run(sizes, timestamps, seq_ranges)
        self._pending.extend(frames)
        self._pending_bytes += sum(sizes)
        self._next_txid = first_txid + len(frames)
        self._last_timestamp_us = timestamps[-1]

    def append(self, record: AnyRecord) -> AnyRecord:
        """Assign a txid to any record built with txid=0 and buffer it; the same kind back."""
        self._check_writable()
        assert record.txid == 0, "the journal assigns txids"
        txid = self._next_txid
        timestamp_us = max(record.timestamp_us, self._last_timestamp_us)
        if record.origin_instance:  # a peer's record, logged here with its origin
            stamped = replace(record, txid=txid, timestamp_us=timestamp_us)
        else:  # one replace, not two: this runs per queue and transfer record
            stamped = replace(record, txid=txid, timestamp_us=timestamp_us,
                              origin_instance=self.instance_name, origin_group=self.group,
                              origin_txid=txid)  # fmt: skip
        if isinstance(stamped, PublishRecord):
            self._buffer(stamped, stamped.publisher_id, stamped.seq)
            self.marks.advance(stamped.publisher_id, stamped.seq)
        else:
            self._buffer(stamped, 0, 0)
        return stamped

    def _buffer(self, record: Record, publisher_id: int, seq: int) -> None:
        self._buffer_frame(
            codec.encode(record), record.txid, record.timestamp_us, publisher_id, seq
        )

    def _buffer_frame(
        self, frame: bytes, txid: int, timestamp_us: int, publisher_id: int, seq: int
    ) -> None:
        size = len(frame)
        active = self._active
        if active.size_bytes and active.size_bytes + size > self.segment_size_bytes:
            sealed = active.summary()
            self._sealed.append(sealed)
            self._pending.append(Rotate(sealed, txid))
            active = self._active = SegmentBuilder(txid, active.marks)
            active.add_control(codec.CONTROL_FRAME_BYTES)  # the writer opens it with a header
            # Counted from the new segment's start: the old segment's threshold would leave it
            # without a checkpoint until it is as large, and every reopen scanning all of it.
            self._checkpoint_at_bytes = active.size_bytes + CHECKPOINT_EVERY_BYTES
        active.add(size, txid, timestamp_us, publisher_id, seq)
        self._pending.append(frame)
        self._pending_bytes += size
        self._next_txid = txid + 1
        self._last_timestamp_us = timestamp_us

    def drop_frames_before(self, txid: int) -> None:
        """Forget the kept frames below `txid`: every link has sent them (a link that resends
        after a reconnect reads the record cache or the segments, as for any frame not kept)."""
        self.frames.drop_before(txid)

    # ----------------------------------------------------------------------------- committing

    async def commit(self) -> int:
        """Return once everything appended before the call is durable; the durable txid."""
        target = self._next_txid - 1
        while self._durable_txid < target:
            if self._failure is not None:
                raise JournalError(f"journal failed earlier: {self._failure.message}")
            await self._next_flush()
        return self._durable_txid

    @property
    def flushing(self) -> bool:
        """A batch is with the writer thread (its result is still to come)."""
        return self._flushing

    def start_commit(self) -> None:
        """Hand what is appended to the writer now, without waiting for it (see `commit`)."""
        if self._pending and not self._flushing and self._failure is None:
            self._start_flush()

    async def _next_flush(self, *, force_checkpoint: bool = False) -> None:
        """Wait for the batch with the writer, or start one and wait for it."""
        if not self._flushing:
            self._start_flush(force_checkpoint=force_checkpoint)
        # One future per waiter: a waiter cancelled while it waits leaves the others waiting.
        waiter = asyncio.get_running_loop().create_future()
        self._flush_waiters.append(waiter)
        await waiter

    def _start_flush(self, *, force_checkpoint: bool = False) -> None:
        batch, last_txid, size = self._pending, self._next_txid - 1, self._pending_bytes
        self._pending, self._pending_bytes = [], 0
        if self.frames.max_bytes:
            # The batch holds the frames of the txids after the last batch's (the one before
            # is done: one at a time) and a segment's rotation between them, rarely. Neither
            # the writer nor `frames` changes the list: both may hold it.
            count = last_txid - self._durable_txid
            kept = [f for f in batch if type(f) is bytes] if len(batch) != count else batch
            if len(kept) == count:
                self.frames.add_run(last_txid - count + 1, cast(list[bytes], kept))
            else:  # not one frame per txid: keep none rather than misplace one
                self.frames.clear()
        assert self._writer is not None
        active = self._active
        checkpoint = None
        if force_checkpoint or active.size_bytes >= self._checkpoint_at_bytes:
            # Bounds the part of the newest segment that a reopen must scan (time to open).
            # Taken before the commit marker: a reopen scans from there and checks the marker.
            checkpoint = active.summary()
            self._checkpoint_at_bytes = active.size_bytes + CHECKPOINT_EVERY_BYTES
        commit = b""
        if last_txid > self._durable_txid:
            commit = codec.encode_commit(self._durable_txid + 1, last_txid)
            active.add_control(len(commit))
        self._flushing = True
        loop = asyncio.get_running_loop()
        if (
            checkpoint is None
            and size <= INLINE_COMMIT_MAX_BYTES
            and (kernel := self._kernel_fsync_on(loop)) is not None
            and all(type(item) is bytes for item in batch)
        ):
            self._flush_inline(kernel, cast(list[bytes], batch), commit, last_txid, loop)
        else:
            self._flush_in_thread(batch, checkpoint, commit, last_txid, loop)

    def _flush_in_thread(
        self,
        batch: list[bytes | Rotate],
        checkpoint: SegmentSummary | None,
        commit: bytes,
        last_txid: int,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Hand the batch to the writer thread (started on first use); `_flushed` runs after."""
        assert self._writer is not None
        if self._writer_thread is None:
            self._writer_thread = _WriterThread(self._writer)
        self._writer_thread.submit(
            batch, checkpoint, commit, loop, partial(self._flushed, last_txid)
        )

    def _kernel_fsync_on(self, loop: asyncio.AbstractEventLoop) -> KernelFsync | None:
        """The kernel's fsync, its eventfd watched by `loop` (opened on first use)."""
        if not self.kernel_fsync_allowed:
            return None
        if self._kernel_fsync is None:
            self._kernel_fsync = opened = KernelFsync.open()
            if isinstance(opened, str):
                log.info("%s: fsyncs from the writer thread (%s)", self.directory, opened)
            else:
                log.debug("%s: small commits fsynced through io_uring", self.directory)
        kernel = self._kernel_fsync
        if not isinstance(kernel, KernelFsync):
            return None
        if self._kernel_fsync_loop is not loop:  # a journal may outlive an asyncio.run
            self._unwatch_kernel_fsync()
            loop.add_reader(kernel.eventfd, kernel.reap)
            self._kernel_fsync_loop = loop
        return kernel

    @property
    def fsync_mode(self) -> str:
        """How small batches are fsynced: "kernel", "thread: <why not the kernel>", or
        "not yet" before the first commit."""
        if not self.kernel_fsync_allowed:
            return "thread: turned off"
        if isinstance(self._kernel_fsync, str):
            return f"thread: {self._kernel_fsync}"
        return "not yet" if self._kernel_fsync is None else "kernel"

    def _unwatch_kernel_fsync(self) -> None:
        loop, self._kernel_fsync_loop = self._kernel_fsync_loop, None
        kernel = self._kernel_fsync
        if loop is not None and not loop.is_closed() and isinstance(kernel, KernelFsync):
            loop.remove_reader(kernel.eventfd)

    def _flush_inline(
        self,
        kernel: KernelFsync,
        batch: list[bytes],
        commit: bytes,
        last_txid: int,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Write `batch` here and have the kernel fsync it; `_flushed` runs once it is done."""
        writer = self._writer
        assert writer is not None
        submitted_ns = perf_counter_ns()
        try:
            writer.write_frames(batch)
        except OSError as exc:
            # Reported from the next iteration, as a thread's result would be: the caller
            # adds its waiter after this returns.
            now = perf_counter_ns()
            loop.call_soon(self._flushed, last_txid, exc, CommitTiming(submitted_ns, now, now))
            return
        written_ns = perf_counter_ns()
        done = partial(self._fsynced_inline, writer, commit, last_txid, submitted_ns, written_ns)
        try:
            kernel.submit(writer.fd, done)
        except OSError as exc:
            # The ring refused the request, not the disk: the writer thread fsyncs what is
            # written (an empty batch) and writes the marker, and takes every batch from now on.
            log.warning("%s: io_uring refused an fsync (%s); fsyncs from the writer thread",
                        self.directory, exc)  # fmt: skip
            self._unwatch_kernel_fsync()
            kernel.close()
            self._kernel_fsync = f"io_uring refused an fsync: {exc}"
            self._flush_in_thread([], None, commit, last_txid, loop)

    def _fsynced_inline(
        self,
        writer: SegmentWriter,
        commit: bytes,
        last_txid: int,
        submitted_ns: int,
        written_ns: int,
        error: OSError | None,
    ) -> None:
        fsynced_ns = perf_counter_ns()  # the kernel's fsync and the loop's wake-up to reap it
        result: FlushResult = [(fsynced_ns - written_ns) / 1e9]
        if error is not None:
            result = error
        else:
            try:
                writer.fsynced(commit)
            except OSError as exc:
                result = exc
        timing = CommitTiming(submitted_ns, submitted_ns, perf_counter_ns())
        self._flushed(last_txid, result, timing)

    def _flushed(self, last_txid: int, result: FlushResult, timing: CommitTiming) -> None:
        """On the loop: the writer is done with a batch; wake everyone waiting for it."""
        returned_ns = perf_counter_ns()
        fsync_ns = 0 if isinstance(result, BaseException) else int(sum(result) * 1e9)
        self.last_flush = CommitTiming(  # built, not `replace`d: once per commit
            timing.submitted_ns, timing.started_ns, timing.finished_ns, returned_ns, fsync_ns
        )
        if self.on_commit_hops is not None:
            self.on_commit_hops(timing.handoff_ns, returned_ns - timing.finished_ns)
        self._flushing = False
        waiters, self._flush_waiters = self._flush_waiters, []
        if isinstance(result, BaseException):
            self._failure = JournalError(f"journal write or fsync failed: {result}")
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(self._failure)
            if self.on_failure is not None:
                self.on_failure(self._failure)
            return
        self._durable_txid = last_txid
        if self.on_fsync is not None:
            for seconds in result:
                self.on_fsync(seconds)
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self.on_durable is not None:
            self.on_durable(last_txid)

    def start_flusher(self) -> None:
        """Commit in the background so no record waits more than ~flush_interval_ms."""
        self._check_writable()
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_ms / 1000)
            if self._next_txid - 1 > self._durable_txid:
                try:
                    await self.commit()
                except JournalError:
                    return  # recorded in _failure; every later append or commit raises it

    async def close(self) -> None:
        """Stop the flusher, commit what is buffered (unless failed), release the directory."""
        if self._closed:
            return
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        try:
            if self._failure is None and not self.read_only:
                await self.commit()
                while self._flushing:  # one the commit loop started and no longer waits for
                    await self._next_flush()
                # A clean close reopens without any scan; that is all the checkpoint is for, so
                # one that cannot be written (a full disk) only costs the next open a scan.
                try:
                    await self._next_flush(force_checkpoint=True)
                except JournalError as exc:
                    log.warning("%s: no tail checkpoint at close (%s)", self.directory, exc)
        finally:
            self._closed = True
            if self._writer_thread is not None:
                self._writer_thread.stop()
                self._writer_thread = None
            if isinstance(self._kernel_fsync, KernelFsync):
                self._unwatch_kernel_fsync()
                self._kernel_fsync.close()
                self._kernel_fsync = None
            if self._writer is not None:
                self._writer.close()
            self.reader.close()
            self._unlock()

    def close_read_only(self) -> None:
        """Synchronous close for a read-only journal (the dump CLI)."""
        assert self.read_only
        self._closed = True
        self.reader.close()

    # ----------------------------------------------------------------------------- reading

    def read(
        self, from_txid: int, max_records: int, frames: dict[int, bytes] | None = None
    ) -> list[Record]:
        """Up to `max_records` durable records from `from_txid` on, in txid order; with
        `frames`, each one's frame as it is on disk goes there too, by txid."""
        from_txid = max(from_txid, self.first_txid)
        if max_records <= 0 or from_txid > self._durable_txid:
            return []
        return self.reader.read(self.segments(), from_txid, self._durable_txid, max_records, frames)

    def read_frames(self, from_txid: int, max_records: int) -> ReceivedFrames:
        """The durable record frames from `from_txid` on (at most `max_records`: a prefix of
        what `read` returns, from one read of one segment), checked and not built: what a
        replication link routes on their heads and ships as read."""
        from_txid = max(from_txid, self.first_txid)
        if max_records <= 0 or from_txid > self._durable_txid:
            return ReceivedFrames(b"")
        return self.reader.read_frames(self.segments(), from_txid, self._durable_txid, max_records)

    def read_heads(self, from_txid: int, max_records: int) -> list[Record | codec.PublishHead]:
        """`read`, with each publish as its `PublishHead` (what queue recovery needs of it)."""
        from_txid = max(from_txid, self.first_txid)
        if max_records <= 0 or from_txid > self._durable_txid:
            return []
        return self.reader.read_heads(self.segments(), from_txid, self._durable_txid, max_records)

    def read_publishes(
        self, from_txid: int, upper_txid: int, max_records: int, max_bytes: int
    ) -> list[PublishRecord]:
        """The durable publishes among from_txid..upper_txid, oldest first, bounded as
        `SegmentReader.read_publishes`; other records are checked, not built."""
        from_txid = max(from_txid, self.first_txid)
        upper_txid = min(upper_txid, self._durable_txid)
        if max_records <= 0 or from_txid > upper_txid:
            return []
        return self.reader.read_publishes(
            self.segments(), from_txid, upper_txid, max_records, max_bytes
        )

    def find_start(self, spec: BookmarkSpec) -> int:
        """The first txid a bookmark subscription with `spec` replays (see lookup.find_start)."""
        return find_start(self, spec)

    def segments(self) -> list[Segment]:
        """Every segment, oldest first; the last one is the active segment's live builder."""
        return [*self._sealed, self._active]

    def pending_keys(self) -> Iterator[tuple[int, int, int, int]]:
        """(txid, timestamp_us, publisher_id, seq) of records appended but not yet written."""
        for item in self._pending:
            if isinstance(item, bytes):
                _kind, txid, ts, pub, seq = codec.peek_payload(item, codec.HEADER_SIZE_BYTES)
                yield txid, ts, pub, seq

    # ----------------------------------------------------------------------------- lifecycle

    def segment_path(self, first_txid: int) -> Path:
        """The file of the segment starting at `first_txid`: in the journal or the archive
        directory, plain or compressed."""
        name = segment_name(first_txid)
        if first_txid in self._compressed:
            name += COMPRESSED_SUFFIX
        if first_txid in self._archived:
            assert self.archive_directory is not None
            return self.archive_directory / name
        return self.directory / name

    def segment_states(self) -> list[SegmentState]:
        """Every segment, oldest first (the last one active), as the lifecycle sees it."""
        return [
            SegmentState(s.first_txid, s.last_txid, s.last_timestamp_us, s.size_bytes,
                         s.first_txid in self._archived, s.first_txid in self._compressed)
            for s in self.segments()
        ]  # fmt: skip

    async def remove_segments(self, first_txids: list[int]) -> None:
        """Remove the oldest sealed segments, `first_txids` (a prefix of the log, oldest first).

        Their publishers' high-water marks are merged into clients.ack first, so duplicates are
        still recognised after the segments are gone (L4); readers stop seeing the segments
        before their files go. The caller runs one lifecycle action at a time.
        """
        self._check_writable()
        count = len(first_txids)
        removed = self._sealed[:count]
        assert [s.first_txid for s in removed] == first_txids, (first_txids, removed[:1])
        await self._retire_marks(removed)
        assert self._sealed[:count] == removed  # rotation only appends
        paths = [self.segment_path(first) for first in first_txids]
        del self._sealed[:count]
        self.first_txid = (self._sealed[0] if self._sealed else self._active).first_txid
        self._archived.difference_update(first_txids)
        self._compressed.difference_update(first_txids)
        await asyncio.to_thread(remove_segment_files, paths)

    async def archive_segments(self, first_txids: list[int]) -> None:
        """Move sealed segments to the archive directory, one at a time; they stay readable."""
        self._check_writable()
        assert self.archive_directory is not None
        sealed = {s.first_txid: s for s in self._sealed}
        # Marks too: an instance restarted without the archive directory still knows them.
        await self._retire_marks([sealed[first] for first in first_txids])
        for first in first_txids:
            assert first in sealed, first
            if first in self._archived:
                continue
            source = self.segment_path(first)
            await asyncio.to_thread(copy_to_archive, source, self.archive_directory, first)
            self._archived.add(first)
            await asyncio.to_thread(remove_segment_files, [source])

    async def compress_segments(self, first_txids: list[int]) -> None:
        """Compress sealed segments where they are, one at a time; they stay readable."""
        self._check_writable()
        sealed = {s.first_txid for s in self._sealed}
        for first in first_txids:
            assert first in sealed, first
            if first in self._compressed:
                continue
            source = self.segment_path(first)
            await asyncio.to_thread(compress_segment, source)
            self._compressed.add(first)
            await asyncio.to_thread(remove_file, source)

    async def _retire_marks(self, summaries: list[SegmentSummary]) -> None:
        """Merge the publishers' marks of `summaries` into clients.ack (durably) first."""
        marks = self.retired_marks.copy()
        for summary in summaries:
            for publisher_id, (_low, high) in summary.publishers.items():
                marks.advance(publisher_id, high)
        if marks != self.retired_marks:
            await asyncio.to_thread(write_marks, self.directory, marks)
            self.retired_marks = marks

    # ----------------------------------------------------------------------------- figures

    @property
    def last_txid(self) -> int:
        return self._next_txid - 1

    @property
    def durable_txid(self) -> int:
        return self._durable_txid

    @property
    def bytes_total(self) -> int:
        return sum(s.size_bytes for s in self._sealed) + self._active.size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._sealed) + 1

    @property
    def fsync_count(self) -> int:
        return 0 if self._writer is None else self._writer.fsync_count

    def statistics(self) -> JournalStatistics:
        return JournalStatistics(self.first_txid, self.last_txid, self._durable_txid,
                                 self.bytes_total, self._pending_bytes, self.segment_count,
                                 self.fsync_count)  # fmt: skip
