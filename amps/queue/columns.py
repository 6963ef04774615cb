"""Where the per-message columns live (Q3, Q17): injected, so the core stays free of I/O.

Every structure that grows with the number of queued messages (the table's columns, the
bookmark index's runs, the levels' fresh lists) is created through a `ColumnFactory`. The
default keeps them in memory as `array`s (`bytearray` for typecode "B"); the adapter may inject
a factory whose columns live in a memory-mapped file (FileBackedMetadata,
`amps.server.file_columns`), so large idle queues can be paged out of memory.

A column is a growable sequence of integers of one typecode: `len`, index (negative too),
assign, `append`, iterate. Nothing else is asked of it: code that needs a range reads it through
`tail()` or `items()`, which take the C fast path for arrays.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Protocol, TypeAlias


class Column(Protocol):
    """A growable sequence of integers of one typecode (see the module docstring)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> int: ...

    def __setitem__(self, index: int, value: int, /) -> None: ...

    def __iter__(self) -> Iterator[int]: ...

    def append(self, value: int, /) -> None: ...


Initial: TypeAlias = "bytes | bytearray | array[int] | Iterable[int]"


class ColumnFactory(Protocol):
    """Makes a column of `typecode` holding `initial` (bytes are raw machine words)."""

    def __call__(self, typecode: str, initial: Initial = b"", /) -> Column: ...


def memory_columns(typecode: str, initial: Initial = b"", /) -> Column:
    """The default factory: in-memory arrays (a `bytearray` for typecode "B")."""
    if typecode == "B":
        return bytearray(initial)
    if isinstance(initial, array) and initial.typecode == typecode:
        return initial[:]  # one copy of the whole buffer
    if isinstance(initial, (bytes, bytearray)):
        column = array(typecode)
        column.frombytes(initial)
        return column
    return array(typecode, initial)


def as_array(column: Column, typecode: str, start: int = 0) -> array[int]:
    """A copy of `column[start:]` as an array (one buffer copy for in-memory columns)."""
    if isinstance(column, array) and column.typecode == typecode:
        return column[start:]
    if isinstance(column, (bytes, bytearray)):
        copy = array(typecode)
        copy.frombytes(column[start:])
        return copy
    to_array = getattr(column, "to_array", None)
    if to_array is not None:
        result: array[int] = to_array(start)
        return result
    return array(typecode, islice(column, start, None))


def extend(column: Column, values: Iterable[int]) -> None:
    """Append every value: in C for in-memory columns, one `append` each otherwise."""
    method = getattr(column, "extend", None)
    if method is not None:
        method(values)
    else:
        for value in values:
            column.append(value)


def tail(column: Column, start: int) -> Iterator[int]:
    """Iterate `column[start:]` without copying a Python list."""
    return islice(column, start, None)


def column_bytes(column: Column, start: int = 0) -> bytes:
    """`column[start:]` of a typecode "B" column as bytes."""
    if isinstance(column, (bytes, bytearray)):
        return bytes(column[start:])
    return as_array(column, "B", start).tobytes()
