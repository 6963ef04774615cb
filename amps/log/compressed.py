"""Compressed segments (`amps-action-do-compress-journal`): zlib in independent blocks. [io]

A sealed segment `<first txid>.journal` becomes `<first txid>.journal.z`: a header, a block
index, a CRC32C of both, then the segment's bytes in blocks of BLOCK_BYTES, each compressed on
its own. A read at any offset decompresses only the blocks it covers, so readers keep their
sparse-index seeks (`pread(size, offset)` over the uncompressed bytes). The segment's summary
sidecar is unchanged and still describes it (size = the uncompressed size).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections import OrderedDict
from pathlib import Path

import google_crc32c

from amps.errors import CorruptRecord
from amps.log.storage import fsync_directory

__all__ = [
    "BLOCK_BYTES",
    "COMPRESSED_SUFFIX",
    "CompressedSegment",
    "PlainSegment",
    "compress_segment",
]

COMPRESSED_SUFFIX = ".z"
BLOCK_BYTES = 1 << 20
# Decompressed blocks a reader keeps (sequential reads touch each block once or twice).
CACHED_BLOCKS = 4
_MAGIC = b"AMPSZ001"
_HEADER = struct.Struct("<8sQII")  # magic, uncompressed size, block size, block count
_ENTRY = struct.Struct("<QI")  # compressed offset in the file, compressed length
LEVEL = 6


class PlainSegment:
    """A segment file read as it is."""

    __slots__ = ("fd",)

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def pread_into(self, buffer: memoryview, offset: int) -> int:
        """`pread` into the caller's buffer (no bytes object, no copy of it); the bytes read."""
        return os.preadv(self.fd, [buffer], offset)

    def close(self) -> None:
        os.close(self.fd)


class CompressedSegment:
    """A compressed segment read as its uncompressed bytes."""

    __slots__ = ("_cache", "_index", "block_bytes", "fd", "name", "size_bytes")

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.fd = os.open(path, os.O_RDONLY)
        try:
            head = os.pread(self.fd, _HEADER.size, 0)
            if len(head) < _HEADER.size:
                raise self._damaged("truncated header")
            magic, self.size_bytes, self.block_bytes, count = _HEADER.unpack(head)
            index_bytes = os.pread(self.fd, count * _ENTRY.size + 4, _HEADER.size)
            body = head + index_bytes[:-4]
            crc_ok = index_bytes[-4:] == struct.pack("<I", google_crc32c.value(body))
            if magic != _MAGIC or len(index_bytes) != count * _ENTRY.size + 4 or not crc_ok:
                raise self._damaged("bad header or block index")
            self._index = [_ENTRY.unpack_from(index_bytes, i * _ENTRY.size) for i in range(count)]
        except BaseException:
            os.close(self.fd)
            raise
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    def _damaged(self, what: str, offset: int = 0) -> CorruptRecord:
        return CorruptRecord(
            f"compressed segment {self.name}: {what}", segment=self.name, offset=offset
        )

    def pread(self, size: int, offset: int) -> bytes:
        """Up to `size` uncompressed bytes from `offset` (fewer at the end, as os.pread)."""
        end = min(offset + size, self.size_bytes)
        parts: list[bytes] = []
        position = offset
        while position < end:
            number, start = divmod(position, self.block_bytes)
            block = self._block(number)
            piece = block[start : start + (end - position)]
            parts.append(piece)
            position += len(piece)
        return b"".join(parts)

    def pread_into(self, buffer: memoryview, offset: int) -> int:
        """`pread` into the caller's buffer; the bytes read."""
        data = self.pread(len(buffer), offset)
        buffer[: len(data)] = data
        return len(data)

    def _block(self, number: int) -> bytes:
        block = self._cache.get(number)
        if block is not None:
            self._cache.move_to_end(number)
            return block
        offset, length = self._index[number]
        data = os.pread(self.fd, length, offset)
        try:
            block = zlib.decompress(data)
        except zlib.error:
            raise self._damaged(f"block {number} does not decompress", offset) from None
        expected = min(self.block_bytes, self.size_bytes - number * self.block_bytes)
        if len(block) != expected:
            raise self._damaged(f"block {number} holds {len(block)} bytes, not {expected}", offset)
        self._cache[number] = block
        if len(self._cache) > CACHED_BLOCKS:
            self._cache.popitem(last=False)
        return block

    def close(self) -> None:
        os.close(self.fd)


def compress_segment(source: Path) -> Path:
    """Write `source` compressed beside it (temporary name, fsync, rename); the new path. The
    caller removes `source` once readers use the compressed file."""
    size = source.stat().st_size
    count = (size + BLOCK_BYTES - 1) // BLOCK_BYTES
    final = source.with_name(source.name + COMPRESSED_SUFFIX)
    tmp = final.with_name(final.name + ".tmp")
    index: list[tuple[int, int]] = []
    position = _HEADER.size + count * _ENTRY.size + 4
    with source.open("rb") as reader, tmp.open("wb") as writer:
        writer.seek(position)
        for _ in range(count):
            block = zlib.compress(reader.read(BLOCK_BYTES), LEVEL)
            writer.write(block)
            index.append((position, len(block)))
            position += len(block)
        head = _HEADER.pack(_MAGIC, size, BLOCK_BYTES, count)
        head += b"".join(_ENTRY.pack(offset, length) for offset, length in index)
        writer.seek(0)
        writer.write(head + struct.pack("<I", google_crc32c.value(head)))
        writer.flush()
        os.fsync(writer.fileno())
    os.replace(tmp, final)
    fsync_directory(final.parent)
    return final
