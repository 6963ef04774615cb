"""Helpers called by generated code for everything that is not on a fast path (all total)."""

from __future__ import annotations

from amps.expr.regex import Pattern
from amps.expr.values import MAX_UINT, Value, elements, first, scalar_text, to_number, truth


def like_any(pattern: Pattern, subject: Value) -> bool:
    """LIKE: any element's text matches, unanchored (§5.6); numbers match through their text."""
    return any(pattern.search(scalar_text(item)) is not None for item in elements(subject))


def not3(value: bool | None) -> bool | None:
    """NOT over TRUE/FALSE/NULL: NOT NULL is NULL (Q2 decision)."""
    return None if value is None else not value


def priority_key(value: Value) -> int:
    """A2: the value as unsigned 64-bit; NULL, NaN, non-numeric and negatives are 0 (Q7)."""
    number = to_number(value)
    if number is None or number != number or number <= 0:
        return 0
    if number >= MAX_UINT:
        return MAX_UINT
    return int(number)  # floats truncate toward zero


def priority_rank(value: Value) -> tuple[int, int]:
    """A sort key that puts NULL/NaN/non-numeric strictly below a real 0: (0, 0) or (1, key)."""
    number = to_number(value)
    if number is None or number != number:
        return (0, 0)
    return (1, priority_key(number))


__all__ = ["first", "like_any", "not3", "priority_key", "priority_rank", "truth"]
