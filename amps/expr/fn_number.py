"""Numeric, array-reduce and checksum functions (AMPS-EXPRESSIONS.md §6.4–§6.6).

Out-of-domain input gives NaN, NULL input gives NULL; nothing raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import google_crc32c

from amps.expr.values import (
    NAN,
    Scalar,
    Value,
    compare,
    elements,
    int_or_float,
    scalar_text,
    to_number,
    to_text,
)


def float_function(fn: Callable[..., float]) -> Callable[..., Value]:
    """Wrap a math function: NULL in, NULL out; NaN in or a domain error, NaN out."""

    def apply(*args: Value) -> Value:
        numbers = [to_number(a) for a in args]
        if any(x is None for x in numbers):
            return None
        try:
            return float(fn(*(float(x) for x in numbers)))  # type: ignore[arg-type]
        except (ValueError, OverflowError, ZeroDivisionError):
            return NAN

    return apply


def _cot(x: float) -> float:
    return 1.0 / math.tan(x)


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else NAN


FLOAT_FUNCTIONS: dict[str, tuple[int, Callable[..., float]]] = {
    "EXP": (1, math.exp),
    "LN": (1, math.log),
    "LOG2": (1, _log2),
    "LOG10": (1, math.log10),
    "POWER": (2, math.pow),
    "SQRT": (1, math.sqrt),
    "RADIANS": (1, math.radians),
    "DEGREES": (1, math.degrees),
    "SIN": (1, math.sin),
    "COS": (1, math.cos),
    "TAN": (1, math.tan),
    "COT": (1, _cot),
    "ASIN": (1, math.asin),
    "ACOS": (1, math.acos),
    "ATAN": (1, math.atan),
    "SINH": (1, math.sinh),
    "COSH": (1, math.cosh),
    "TANH": (1, math.tanh),
    "ATAN2": (2, math.atan2),
}


def absolute(value: Value) -> Value:
    number = to_number(value)
    if number is None:
        return None
    return int_or_float(abs(number)) if type(number) is int else abs(number)


def sign(value: Value) -> Value:
    number = to_number(value)
    if number is None or number != number:
        return number
    return (number > 0) - (number < 0)


def _rounded(value: Value, to_int: Callable[[float], float]) -> Value:
    number = to_number(value)
    if number is None or type(number) is int or not math.isfinite(number):
        return number
    return int_or_float(int(to_int(number)))


def ceiling(value: Value) -> Value:
    return _rounded(value, math.ceil)


def floor(value: Value) -> Value:
    return _rounded(value, math.floor)


def round_half_away(value: Value, places: Value = 0) -> Value:
    """ROUND: halves go away from zero, as C round() does; negative places round left of '.'."""
    number, digits = to_number(value), to_number(places)
    if number is None or digits is None:
        return None
    if digits != digits or number != number or not math.isfinite(number):
        return NAN if digits != digits else number
    digits = int(max(-400, min(400, digits)))
    if type(number) is int:
        if digits >= 0:
            return number
        unit = 10**-digits
        return int_or_float((abs(number) + unit // 2) // unit * unit * (1 if number >= 0 else -1))
    scale = 10.0**digits
    try:
        scaled = math.floor(abs(number) * scale + 0.5)
        return math.copysign(scaled / scale, number)
    except (OverflowError, ValueError, ZeroDivisionError):
        return number


def _numeric_arguments(values: tuple[Value, ...]) -> tuple[list[int | float], bool]:
    numbers = [to_number(v) for v in values]
    found = [x for x in numbers if x is not None and x == x]
    return found, any(x is not None for x in numbers)


def greatest(*values: Value) -> Value:
    """The largest numeric argument; NaN when no argument is a number, NULL when all are NULL."""
    found, any_value = _numeric_arguments(values)
    return max(found) if found else (NAN if any_value else None)


def least(*values: Value) -> Value:
    found, any_value = _numeric_arguments(values)
    return min(found) if found else (NAN if any_value else None)


def width_bucket(value: Value, low: Value, high: Value, count: Value) -> Value:
    """Buckets 1..count over [low, high); below is 0, at or above high is count + 1 (Q10)."""
    x, lo, hi, n = (to_number(v) for v in (value, low, high, count))
    if x is None or lo is None or hi is None or n is None:
        return None
    if x != x or lo != lo or hi != hi or n != n or n < 1 or not lo < hi:
        return NAN
    buckets = int(n)
    if x < lo:
        return 0
    if x >= hi:
        return buckets + 1
    try:
        return min(buckets, int((x - lo) * buckets / (hi - lo)) + 1)
    except (OverflowError, ValueError):
        return NAN


def array_count(value: Value) -> Value:
    if value is None:
        return 0
    return len(value) if type(value) is list else 1


def _array_extreme(value: Value, want: int) -> Value:
    best: Scalar | None = None
    for item in elements(value):
        if best is None:
            best = item if compare(item, item) is not None else None
            continue
        order = compare(item, best)
        if order == want:
            best = item
    return best


def array_max(value: Value) -> Value:
    return _array_extreme(value, 1)


def array_min(value: Value) -> Value:
    return _array_extreme(value, -1)


def array_sum(value: Value) -> Value:
    total: int | float = 0
    found = False
    for item in elements(value):
        number = to_number(item)
        if number is None:
            continue
        found = True
        total = total + number
    if not found:
        return None
    return int_or_float(total) if type(total) is int else total


def array_to_string(value: Value, delimiter: Value, null_text: Value) -> Value:
    if value is None:
        return None
    items: list[Scalar | None] = value if type(value) is list else [value]  # type: ignore[list-item]
    fill = to_text(null_text) or ""
    parts = [fill if item is None else scalar_text(item) for item in items]
    return (to_text(delimiter) or "").join(parts) or None


def _encode(value: Value) -> bytes:
    text = to_text(value)
    return b"" if text is None else text.encode("utf-8", "surrogatepass")


def crc32(value: Value) -> Value:
    """CRC-32C (Castagnoli); NULL hashes as the empty string."""
    return int(google_crc32c.value(_encode(value)))


def _crc64_table() -> list[int]:
    reflected = 0x95AC9329AC4BC9B5  # the Jones polynomial, bit-reversed, as Redis uses it
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ reflected if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC64_TABLE = _crc64_table()


def crc64(value: Value) -> Value:
    """CRC-64 (reflected Jones polynomial, init 0, no final xor); NULL hashes as ''."""
    crc = 0
    table = _CRC64_TABLE
    for byte in _encode(value):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc
