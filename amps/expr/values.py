"""The value model and the operator semantics of AMPS-EXPRESSIONS.md §3 and §5.

A *value* is one of: ``None`` (NULL), ``bool``, ``int``, ``float`` (NaN included), a non-empty
``str``, or a non-empty ``list`` of those scalars (an array; NULL elements are kept as ``None``).
Raw JSON values (Python objects or simdjson proxies, see `jsondoc`) are turned into values by
`norm`: ``""``, ``null``, objects and empty arrays are NULL, nested arrays are flattened. Every
helper here is total: it never raises on any value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import TypeAlias

from amps.expr.jsondoc import Array

Scalar: TypeAlias = bool | int | float | str
Value: TypeAlias = Scalar | list[Scalar | None] | None

NAN = float("nan")
MIN_INT = -(2**63)
MAX_UINT = 2**64 - 1

# A numeric string is a numeric literal of the language, optionally signed; no spaces, no hex.
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def norm(raw: object) -> Value:
    """Turn a raw JSON value (or an already-normalised value) into a value."""
    kind = type(raw)
    if kind is str:
        return raw or None  # type: ignore[return-value]
    if kind is int or kind is float or kind is bool:
        return raw  # type: ignore[return-value]
    if kind is list or kind is Array:  # a simdjson Array is converted here, at the boundary
        return _norm_list(raw)  # type: ignore[arg-type]
    return None  # dict, simdjson Object, anything else


def _norm_list(raw: list[object]) -> Value:
    out: list[Scalar | None] = []
    # Iterative flattening: a hostile document may nest arrays a thousand deep.
    stack: list[Iterator[object]] = [iter(raw)]
    while stack:
        for item in stack[-1]:
            kind = type(item)
            if kind is list or kind is Array:
                stack.append(iter(item))  # type: ignore[call-overload]
                break
            if kind is str:
                out.append(item or None)  # type: ignore[arg-type]
            elif kind is int or kind is float or kind is bool or item is None:
                out.append(item)  # type: ignore[arg-type]
            # Objects have no value of their own (§2.2): they are skipped at a leaf.
        else:
            stack.pop()
    return out or None


def first(value: Value) -> Scalar | None:
    """Scalar operators and functions see only the first element of an array (§5.10)."""
    if type(value) is list:
        return value[0]
    return value  # type: ignore[return-value]


def elements(value: Value) -> list[Scalar]:
    """The non-NULL elements of a value (one for a scalar, none for NULL)."""
    if value is None:
        return []
    if type(value) is list:
        return [item for item in value if item is not None]
    return [value]  # type: ignore[list-item]


def int_or_float(number: int) -> int | float:
    """Q6: integers outside [-2**63, 2**64-1] are promoted to double rather than wrapped."""
    if MIN_INT <= number <= MAX_UINT:
        return number
    return float(number)


def text_to_number(text: str) -> int | float:
    """§3.2: a string that looks like a numeric literal converts; anything else is NaN."""
    if _INT_TEXT.fullmatch(text):
        return int_or_float(int(text))
    if len(text) < 400 and _FLOAT_TEXT.fullmatch(text):
        return float(text)
    return NAN


def to_number(value: Value) -> int | float | None:
    """The numeric reading of a value's first element: NULL stays NULL, bool is 1/0."""
    scalar = first(value)
    kind = type(scalar)
    if kind is int or kind is float:
        return scalar  # type: ignore[return-value]
    if kind is bool:
        return int(scalar)  # type: ignore[arg-type]
    if kind is str:
        return text_to_number(scalar)  # type: ignore[arg-type]
    return None


def to_text(value: Value) -> str | None:
    """The string reading of a value's first element (JSON spelling for numbers and booleans)."""
    scalar = first(value)
    return None if scalar is None else scalar_text(scalar)


def scalar_text(scalar: Scalar) -> str:
    """The text of one scalar: numbers and booleans as JSON writes them."""
    kind = type(scalar)
    if kind is str:
        return scalar  # type: ignore[return-value]
    if kind is bool:
        return "true" if scalar else "false"
    if kind is float:
        if scalar != scalar:
            return "NaN"
        return repr(scalar)
    return str(scalar)


def is_nan(value: object) -> bool:
    return type(value) is float and value != value


def compare(left: Scalar, right: Scalar) -> int | None:
    """§3.3 ordering of two non-NULL scalars: -1, 0, 1, or None when unordered (NaN)."""
    left_is_text = type(left) is str
    right_is_text = type(right) is str
    if left_is_text and right_is_text:
        # Python orders str by code point, which is the byte order of their UTF-8 encoding.
        return (left > right) - (left < right)  # type: ignore[operator]
    left_number: float = text_to_number(left) if left_is_text else left  # type: ignore[arg-type, assignment]
    right_number: float = text_to_number(right) if right_is_text else right  # type: ignore[arg-type, assignment]
    left_nan = left_number != left_number
    right_nan = right_number != right_number
    if left_nan or right_nan:
        # An unconvertible string is greater than any number, but NaN itself is unordered.
        if left_is_text and left_nan and not right_is_text and not right_nan:
            return 1
        if right_is_text and right_nan and not left_is_text and not left_nan:
            return -1
        return None
    return (left_number > right_number) - (left_number < right_number)


_TESTS: dict[str, Callable[[int], bool]] = {
    "=": lambda c: c == 0,
    "!=": lambda c: c != 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
}


def compare_any(op: str, left: Value, right: Value) -> bool:
    """Array-aware comparison: true if any pair of non-NULL elements satisfies `op` (§5.10)."""
    if left is None or right is None:
        return False
    test = _TESTS[op]
    right_items = elements(right)
    for a in elements(left):
        for b in right_items:
            order = compare(a, b)
            if order is not None and test(order):
                return True
    return False


def in_any(subject: Value, members: tuple[Value, ...]) -> bool:
    """§5.4: x IN (m, ...) is the OR of x = m; NULLs never match."""
    return any(compare_any("=", subject, member) for member in members)


def between_any(subject: Value, low: Value, high: Value) -> bool:
    """Q3 decision: true if one element lies within [low, high] (bounds use their first element)."""
    low_scalar = first(low)
    high_scalar = first(high)
    if low_scalar is None or high_scalar is None:
        return False
    for item in elements(subject):
        above = compare(item, low_scalar)
        below = compare(item, high_scalar)
        if above is not None and below is not None and above >= 0 and below <= 0:
            return True
    return False


def affix_any(subject: Value, affixes: tuple[str, ...], at_start: bool) -> bool:
    """BEGINS WITH / ENDS WITH over any element's text (Q12 decision)."""
    for item in elements(subject):
        text = scalar_text(item)
        if text.startswith(affixes) if at_start else text.endswith(affixes):
            return True
    return False


def nan_any(value: Value) -> bool:
    """IS NAN: a NaN number among the elements; NULL is not NaN (§5.8)."""
    return any(is_nan(item) for item in elements(value))


def truth(value: Value) -> bool | None:
    """A value used as a condition: non-zero is TRUE; NULL, NaN and non-numeric text are NULL."""
    number = to_number(value)
    if number is None or number != number:
        return None
    return number != 0


def _c_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _c_mod(a: int, b: int) -> int:
    remainder = abs(a) % abs(b)
    return -remainder if a < 0 else remainder


def _numbers(left: Value, right: Value) -> tuple[int | float, int | float] | None:
    a = to_number(left)
    b = to_number(right)
    if a is None or b is None:
        return None
    return a, b


def add(left: Value, right: Value) -> Value:
    pair = _numbers(left, right)
    if pair is None:
        return None
    a, b = pair
    return int_or_float(a + b) if type(a) is int and type(b) is int else float(a) + float(b)


def subtract(left: Value, right: Value) -> Value:
    pair = _numbers(left, right)
    if pair is None:
        return None
    a, b = pair
    return int_or_float(a - b) if type(a) is int and type(b) is int else float(a) - float(b)


def multiply(left: Value, right: Value) -> Value:
    pair = _numbers(left, right)
    if pair is None:
        return None
    a, b = pair
    return int_or_float(a * b) if type(a) is int and type(b) is int else float(a) * float(b)


def divide(left: Value, right: Value) -> Value:
    """§3.4: integer division truncates toward zero; division by zero is NaN (Q5)."""
    pair = _numbers(left, right)
    if pair is None:
        return None
    a, b = pair
    if a != a or b != b or b == 0:
        return NAN
    if type(a) is int and type(b) is int:
        return int_or_float(_c_div(a, b))
    return float(a) / float(b)


def modulo(left: Value, right: Value) -> Value:
    """C remainder: the sign of the left operand; modulo by zero is NaN (Q5)."""
    pair = _numbers(left, right)
    if pair is None:
        return None
    a, b = pair
    if a != a or b != b or b == 0:
        return NAN
    if type(a) is int and type(b) is int:
        return _c_mod(a, b)
    if math.isinf(a):
        return NAN
    return math.fmod(float(a), float(b))


def negate(operand: Value) -> Value:
    number = to_number(operand)
    if number is None:
        return None
    return int_or_float(-number) if type(number) is int else -number


def plus(operand: Value) -> Value:
    return to_number(operand)


ARITHMETIC: dict[str, Callable[[Value, Value], Value]] = {
    "+": add,
    "-": subtract,
    "*": multiply,
    "/": divide,
    "%": modulo,
}


def same(left: object, right: object) -> bool:
    """Value equality for tests: NaN equals NaN, 1 differs from 1.0 and from True."""
    if type(left) is not type(right):
        return False
    if type(left) is list:
        assert type(right) is list
        return len(left) == len(right) and all(map(same, left, right))
    if is_nan(left):
        return True
    return left == right
