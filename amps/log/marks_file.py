"""`clients.ack`: the publisher high-water marks of removed segments (L4 across removal). [io]

A journal's marks are rebuilt at start from its segments' summaries. Before a lifecycle action
removes segments, the marks they hold are merged into this file (written atomically, fsynced),
so a publisher that republishes old sequence numbers after its segments are gone is still told
they are duplicates. The file is the only copy of those marks: damage refuses to start.
"""

from __future__ import annotations

import os
import struct
from array import array
from pathlib import Path

import google_crc32c

from amps.errors import CorruptRecord
from amps.log.dedup import PublisherMarks
from amps.log.storage import fsync_directory

__all__ = ["MARKS_FILE_NAME", "read_marks", "write_marks"]

MARKS_FILE_NAME = "clients.ack"
_MAGIC = b"AMPSACK1"
_HEAD = struct.Struct("<8sQ")


def read_marks(directory: Path) -> PublisherMarks:
    """The marks kept in `directory`, empty when there is no file; CorruptRecord when damaged."""
    path = directory / MARKS_FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return PublisherMarks()
    damaged = CorruptRecord(
        f"{path} is damaged: it holds the duplicate-detection marks of removed journal segments",
        segment=MARKS_FILE_NAME,
    )
    if len(data) < _HEAD.size + 4:
        raise damaged
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    magic, count = _HEAD.unpack_from(body)
    if google_crc32c.value(body) != crc or magic != _MAGIC or len(body) != _HEAD.size + 16 * count:
        raise damaged
    words = array("Q")
    words.frombytes(body[_HEAD.size :])
    return PublisherMarks(zip(words[0::2], words[1::2], strict=True))


def write_marks(directory: Path, marks: PublisherMarks) -> None:
    """Replace the file with `marks`: temporary file, fsync, rename, fsync the directory."""
    pairs = sorted(marks.items())
    words = array("Q", [value for pair in pairs for value in pair])
    body = _HEAD.pack(_MAGIC, len(pairs)) + words.tobytes()
    final = directory / MARKS_FILE_NAME
    tmp = final.with_name(final.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = memoryview(body + struct.pack("<I", google_crc32c.value(body)))
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    fsync_directory(directory)
