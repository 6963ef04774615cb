"""Whole-column arithmetic without a Python call per item (snapshot and restore, Q16).

The standard library has no vector add, but a column of n signed 64-bit words is also one
n*64-bit integer, and CPython adds two big integers in C. Adding a constant to every word this
way carries from one word into the next only if a word overflows; offset binary (flip each
word's sign bit) turns every in-range signed result into an in-range unsigned one, so no word
carries or borrows. Precondition: every value and every result lies within ±2**62 (times in
milliseconds are far inside; NO_EXPIRY is not, so callers keep it out).
"""

from __future__ import annotations

import sys
from array import array

_BIG = sys.byteorder == "big"
_ONE = bytes(7) + b"\x01" if _BIG else b"\x01" + bytes(7)
LIMIT = 1 << 62


def add_constant(values: array[int], constant: int) -> array[int]:
    """A new array("q") of `values[i] + constant`, computed in C (see the module docstring)."""
    assert values.typecode == "q"
    assert -LIMIT < constant < LIMIT
    count = len(values)
    if not constant or not count:
        return values[:]
    order = sys.byteorder
    ones = int.from_bytes(_ONE * count, order)  # 1 in every word
    sign = ones << 63  # the sign bit of every word
    words = int.from_bytes(values.tobytes(), order) ^ sign
    words += constant * ones
    result = array("q")
    result.frombytes((words ^ sign).to_bytes(8 * count, order))
    return result
