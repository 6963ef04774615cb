"""Segment files moved, compressed or removed by the journal lifecycle. [io]

Blocking; the journal runs these in a worker thread. Each step leaves a state recovery accepts:
an archived copy is complete (written, fsynced, renamed) before the original goes, and a segment
file goes before its summary, so a crash never leaves a segment without the rest of the log
around it or a summary that names a missing file as valid.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from amps.errors import CorruptRecord
from amps.log.compressed import COMPRESSED_SUFFIX, CompressedSegment
from amps.log.segments import SegmentSummary, checkpoint_name, parse_segment_name, summary_name
from amps.log.storage import fsync_directory, load_summary

__all__ = [
    "compressed_summary",
    "copy_to_archive",
    "first_txid_of",
    "list_segments",
    "remove_file",
    "remove_segment_files",
]


def first_txid_of(name: str) -> int | None:
    """The first txid of a segment file name, plain or compressed; None for other files."""
    return parse_segment_name(name.removesuffix(COMPRESSED_SUFFIX))


def list_segments(directory: Path | None) -> dict[int, Path]:
    """first txid -> path of every segment file in `directory` (none if it does not exist).

    A segment both plain and compressed was being compressed when the instance stopped: the
    plain file is the one in use until a later compress completes the change.
    """
    if directory is None or not directory.is_dir():
        return {}
    found: dict[int, Path] = {}
    for entry in sorted(directory.iterdir(), key=lambda p: p.name, reverse=True):
        first = first_txid_of(entry.name)
        if first is not None:
            found[first] = entry  # `X.journal` sorts after `X.journal.z` here, so it wins
    return found


def copy_to_archive(segment: Path, archive: Path, first_txid: int) -> Path:
    """Copy one sealed segment file and its summary into `archive`; the archived file's path."""
    archive.mkdir(parents=True, exist_ok=True)
    source = segment.parent
    for name in (summary_name(first_txid), segment.name):  # the segment last
        src = source / name
        if not src.exists():
            continue
        tmp = archive / (name + ".tmp")
        with src.open("rb") as reader, tmp.open("wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
            writer.flush()
            os.fsync(writer.fileno())
        os.replace(tmp, archive / name)
    fsync_directory(archive)
    return archive / segment.name


def remove_segment_files(paths: Iterable[Path]) -> None:
    """Remove segments (oldest first), each before its summary and tail checkpoint."""
    directories: set[Path] = set()
    for path in paths:
        first_txid = first_txid_of(path.name)
        assert first_txid is not None, path
        path.unlink(missing_ok=True)
        for name in (summary_name(first_txid), checkpoint_name(first_txid)):
            (path.parent / name).unlink(missing_ok=True)
        directories.add(path.parent)
    for directory in directories:
        fsync_directory(directory)


def remove_file(path: Path) -> None:
    """Remove one file (a segment replaced by its compressed copy), durably."""
    path.unlink(missing_ok=True)
    fsync_directory(path.parent)


def compressed_summary(path: Path, first_txid: int) -> SegmentSummary:
    """The summary of a compressed segment: its sidecar, which must match the segment's
    uncompressed size (a compressed segment is never scanned at start)."""
    segment = CompressedSegment(path)
    try:
        size = segment.size_bytes
    finally:
        segment.close()
    summary = load_summary(path.parent, first_txid, size)
    if summary is None:
        raise CorruptRecord(
            f"compressed segment {path.name} has no valid summary ({summary_name(first_txid)}): "
            "restore it from a backup, or decompress the segment beside it",
            segment=path.name,
        )
    return summary
