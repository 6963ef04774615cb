"""FileBackedMetadata (Q17): the queue engine's per-message columns in a memory-mapped file.

The engine creates every per-message structure through an injected `ColumnFactory`
(`amps.queue.columns`). `FileColumnFactory(path)` hands out `FileColumn`s whose items live in
one file per queue, `<journal>/queues/<name>.meta`: the file grows in 4 MiB steps (each step
one shared mapping), cut into 64 KiB chunks; a column is a list of chunks, and a column the
engine drops (compaction) gives its chunks back for reuse, so the file never shrinks while
running (as in AMPS) but stops growing once the queue's size is steady.

Pages of a shared file mapping are page cache, not anonymous memory: the kernel may write them
back and drop them under memory pressure, and they fault back in on use, so state stays in
memory while memory allows. Each time the file grows, and on `page_out()`, the mappings are
`madvise(MADV_DONTNEED)`-ed: the pages leave this process's resident set (RSS) at once and stay
in the page cache until the kernel needs the memory; the next access is a minor fault.

The file is never the only copy of anything: it is truncated when the engine starts, and the
queue is rebuilt from its snapshot and the log as for an in-memory queue (Q16).
"""

from __future__ import annotations

import mmap
import os
import weakref
from array import array
from collections.abc import Iterator
from itertools import chain, islice
from pathlib import Path

from amps.queue.columns import Column, Initial

CHUNK_BYTES = 1 << 16
STEP_BYTES = 4 << 20


class FileColumnFactory:
    """A `ColumnFactory` whose columns live in one memory-mapped file (see the module doc)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._maps: list[mmap.mmap] = []
        self._free: list[memoryview] = []  # unused chunks, raw bytes
        self.size = 0  # bytes in the file
        weakref.finalize(self, os.close, self._fd)

    def __call__(self, typecode: str, initial: Initial = b"", /) -> Column:
        return FileColumn(self, typecode, initial)

    def take_chunk(self) -> memoryview:
        """A free chunk (its old contents are garbage)."""
        if not self._free:
            self._grow()
        return self._free.pop()

    def give_back(self, chunks: list[memoryview]) -> None:
        """Chunks of a dropped column, for reuse."""
        self._free.extend(chunks)

    def page_out(self) -> None:
        """Drop every page from this process's resident set; the data stays in the file."""
        for mapping in self._maps:
            mapping.madvise(mmap.MADV_DONTNEED)

    def _grow(self) -> None:
        self.page_out()  # older steps: out of RSS, still in the page cache
        offset = self.size
        os.ftruncate(self._fd, offset + STEP_BYTES)  # sparse: no disk until written
        mapping = mmap.mmap(self._fd, STEP_BYTES, offset=offset)
        self.size = offset + STEP_BYTES
        self._maps.append(mapping)
        view = memoryview(mapping)
        self._free.extend(
            view[start : start + CHUNK_BYTES]
            for start in range(STEP_BYTES - CHUNK_BYTES, -1, -CHUNK_BYTES)
        )


class FileColumn:
    """A growable column of one typecode stored in chunks of a `FileColumnFactory`'s file."""

    __slots__ = ("__weakref__", "_chunks", "_factory", "_len", "_per_chunk", "_raw", "typecode")

    def __init__(self, factory: FileColumnFactory, typecode: str, initial: Initial) -> None:
        self._factory = factory
        self.typecode = typecode
        self._per_chunk = CHUNK_BYTES // array(typecode).itemsize
        self._chunks: list[memoryview] = []  # cast to typecode
        raw: list[memoryview] = []
        weakref.finalize(self, factory.give_back, raw)
        self._len = 0
        self._raw = raw
        if isinstance(initial, (bytes, bytearray)):
            data = memoryview(initial)
        elif isinstance(initial, array) and initial.typecode == typecode:
            data = memoryview(initial).cast("B")
        else:
            data = memoryview(array(typecode, initial)).cast("B")
        for start in range(0, len(data), CHUNK_BYTES):
            piece = data[start : start + CHUNK_BYTES]
            self._add_chunk()[: len(piece)] = piece
        self._len = len(data) // array(typecode).itemsize

    def _add_chunk(self) -> memoryview:
        chunk = self._factory.take_chunk()
        self._raw.append(chunk)
        self._chunks.append(chunk.cast(self.typecode))  # type: ignore[call-overload]
        return chunk

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> int:
        if index < 0:
            index += self._len
            if index < 0:
                raise IndexError("column index out of range")
        elif index >= self._len:
            raise IndexError("column index out of range")
        per = self._per_chunk
        value: int = self._chunks[index // per][index % per]
        return value

    def __setitem__(self, index: int, value: int) -> None:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("column index out of range")
        per = self._per_chunk
        self._chunks[index // per][index % per] = value

    def append(self, value: int) -> None:
        count = self._len
        per = self._per_chunk
        if count == len(self._chunks) * per:
            self._add_chunk()
        self._chunks[count // per][count % per] = value
        self._len = count + 1

    def __iter__(self) -> Iterator[int]:
        per = self._per_chunk
        full, rest = divmod(self._len, per)
        parts = self._chunks[:full]
        if rest:
            parts = [*parts, self._chunks[full][:rest]]
        return chain.from_iterable(parts)

    def to_array(self, start: int = 0) -> array[int]:
        """A copy of the items from `start`, as an array (one copy per chunk)."""
        result = array(self.typecode)
        size = result.itemsize
        per = self._per_chunk
        first = start // per
        for number in range(first, len(self._chunks)):
            end = min(self._len - number * per, per)
            begin = start - number * per if number == first else 0
            if end > begin:
                result.frombytes(self._raw[number][begin * size : end * size])
        return result

    def tail(self, start: int) -> Iterator[int]:
        """Items from `start`."""
        return islice(iter(self), start, None)
