"""Segment files moved or removed by the journal lifecycle (archive, remove). [io]

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

from amps.log.segments import checkpoint_name, parse_segment_name, segment_name, summary_name

__all__ = ["copy_to_archive", "list_segments", "remove_segment_files"]


def list_segments(directory: Path | None) -> dict[int, Path]:
    """first txid -> path of every segment file in `directory` (none if it does not exist)."""
    if directory is None or not directory.is_dir():
        return {}
    return {
        first: entry
        for entry in directory.iterdir()
        if (first := parse_segment_name(entry.name)) is not None
    }


def copy_to_archive(source: Path, archive: Path, first_txid: int) -> Path:
    """Copy one sealed segment and its summary into `archive`; the archived segment's path."""
    archive.mkdir(parents=True, exist_ok=True)
    for name in (summary_name(first_txid), segment_name(first_txid)):  # the segment last
        src = source / name
        if not src.exists():
            continue
        tmp = archive / (name + ".tmp")
        with src.open("rb") as reader, tmp.open("wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
            writer.flush()
            os.fsync(writer.fileno())
        os.replace(tmp, archive / name)
    _fsync_directory(archive)
    return archive / segment_name(first_txid)


def remove_segment_files(paths: Iterable[Path]) -> None:
    """Remove segments (oldest first), each before its summary and tail checkpoint."""
    directories: set[Path] = set()
    for path in paths:
        first_txid = parse_segment_name(path.name)
        assert first_txid is not None, path
        path.unlink(missing_ok=True)
        for name in (summary_name(first_txid), checkpoint_name(first_txid)):
            (path.parent / name).unlink(missing_ok=True)
        directories.add(path.parent)
    for directory in directories:
        _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
