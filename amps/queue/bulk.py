"""Whole-column arithmetic without a Python call per item (snapshot and restore, Q16).

The standard library has no vector add, but a column of n signed 64-bit words is also one
n*64-bit integer, and CPython adds two big integers in C. Adding a constant to every word this
way carries from one word into the next only if a word overflows; offset binary (flip each
word's sign bit) turns every in-range signed result into an in-range unsigned one, so no word
carries or borrows. Precondition: every value and every result lies within ±2**62 (times in
milliseconds are far inside; NO_EXPIRY is not, so callers keep it out).
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Callable, Sequence
from itertools import compress
from operator import and_, or_, xor

_BIG = sys.byteorder == "big"
_ONE = bytes(7) + b"\x01" if _BIG else b"\x01" + bytes(7)
LIMIT = 1 << 62
_CHUNK_WORDS = 4096  # 32 KiB of words per step of `add_constant`
_SET_RUNS = re.compile(rb"[^\x00]+")


def add_constant(values: array[int], constant: int) -> array[int]:
    """A new array("q") of `values[i] + constant`, computed in C (see the module docstring).

    A slice of `_CHUNK_WORDS` at a time: each step's integers then stay in the CPU's cache
    (one integer of the whole column took 3-4 times as long, in memory traffic)."""
    assert values.typecode == "q"
    assert -LIMIT < constant < LIMIT
    count = len(values)
    if not constant or not count:
        return values[:]
    order = sys.byteorder
    result = array("q")
    for start in range(0, count, _CHUNK_WORDS):
        part = values[start : start + _CHUNK_WORDS]
        size = len(part)
        ones = int.from_bytes(_ONE * size, order)  # 1 in every word
        sign = ones << 63  # the sign bit of every word
        words = (int.from_bytes(part, order) ^ sign) + constant * ones
        result.frombytes((words ^ sign).to_bytes(8 * size, order))
    return result


def or_bytes(first: bytes, second: bytes) -> bytes:
    """`bytes(map(or_, first, second))` of two byte strings of one length, computed in C (one
    big integer each: an OR carries nothing from one byte into the next)."""
    return _bitwise(or_, first, second)


def and_bytes(first: bytes, second: bytes) -> bytes:
    """`bytes(map(and_, first, second))`, as `or_bytes`."""
    return _bitwise(and_, first, second)


def xor_bytes(first: bytes, second: bytes) -> bytes:
    """`bytes(map(xor, first, second))`, as `or_bytes`."""
    return _bitwise(xor, first, second)


def _bitwise(op: Callable[[int, int], int], first: bytes, second: bytes) -> bytes:
    assert len(first) == len(second)
    count = len(first)
    return op(int.from_bytes(first, "little"), int.from_bytes(second, "little")).to_bytes(
        count, "little"
    )


def stretch_mask(column: array[int], first: int, last: int, values: Sequence[int]) -> bytes | None:
    """For slots `first..last` of `column`, 1 where the slot holds one of `values` (distinct)
    and 0 elsewhere, in one pass in C; None unless every one of `values` is there. Neighbours
    (as many slots as values) take one comparison."""
    count = len(values)
    part = column[first : last + 1]
    if len(part) == count:
        return b"\x01" * count if part == array(column.typecode, sorted(values)) else None
    wanted = set(values)
    if len(wanted) != count:
        return None
    mask = bytes(map(wanted.__contains__, part))
    return mask if mask.count(1) == count else None


def sorted_members(values: array[int], members: array[int]) -> bytes:
    """1 for each of `values` that is one of `members` (increasing), else 0: a binary search
    each, in numpy (~10x a set of `members` built and probed, at 500,000 of them). numpy is
    imported here, on the first call, not at start: a restart never needs it before
    serving (issue 9)."""
    import numpy as np

    assert values.typecode == members.typecode == "q"
    found = np.frombuffer(members, dtype=np.int64)
    wanted = np.frombuffer(values, dtype=np.int64)
    if not len(found):
        return bytes(len(wanted))
    where = np.searchsorted(found, wanted)
    np.minimum(where, len(found) - 1, out=where)
    mask: bytes = (found[where] == wanted).tobytes()
    return mask


def select(values: array[int], mask: bytes) -> array[int]:
    """`array(values.typecode, compress(values, mask))`: one slice per run of set bytes (a
    replicated queue's own messages come in runs, as each origin's group commits logged them),
    the rest compressed item by item once the runs turn out short."""
    assert len(values) == len(mask)
    out = array(values.typecode)
    budget = len(mask) // 64 + 1  # slices before short runs would cost more than compress
    for found in _SET_RUNS.finditer(mask):
        start, end = found.span()
        out += values[start:end]
        budget -= 1
        if not budget:
            out.extend(compress(values[end:], memoryview(mask)[end:]))
            break
    return out
