"""String functions of AMPS-EXPRESSIONS.md §6.1, §6.2 and §6.8 (ASCII case rules; positions count
characters, which equals bytes for ASCII text)."""

from __future__ import annotations

import hashlib

from amps.expr.regex import Pattern
from amps.expr.values import NAN, Value, first, to_number, to_text

_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_upper(text: str) -> str:
    return text.translate(_UPPER)


def ascii_lower(text: str) -> str:
    return text.translate(_LOWER)


def _int_arg(value: Value) -> int | None:
    number = to_number(value)
    if number is None or number != number or number in (float("inf"), float("-inf")):
        return None
    return int(number)


def instr(text: Value, part: Value) -> Value:
    haystack, needle = to_text(text), to_text(part)
    if haystack is None or needle is None:
        return None
    return haystack.find(needle) + 1


def instr_i(text: Value, part: Value) -> Value:
    haystack, needle = to_text(text), to_text(part)
    if haystack is None or needle is None:
        return None
    return ascii_lower(haystack).find(ascii_lower(needle)) + 1


def strequal_i(left: Value, right: Value) -> Value:
    a, b = to_text(left), to_text(right)
    if a is None or b is None:
        return False
    return ascii_lower(a) == ascii_lower(b)


def length(text: Value) -> Value:
    value = to_text(text)
    return None if value is None else len(value)


def concat(*parts: Value) -> Value:
    """Q11 decision: NULL arguments add nothing."""
    return "".join(t for t in map(to_text, parts) if t is not None) or None


def upper(text: Value) -> Value:
    value = to_text(text)
    return None if value is None else ascii_upper(value)


def lower(text: Value) -> Value:
    value = to_text(text)
    return None if value is None else ascii_lower(value)


def replace(text: Value, find: Value, replacement: Value) -> Value:
    value, old = to_text(text), to_text(find)
    if value is None or old is None:
        return value
    return value.replace(old, to_text(replacement) or "") or None


def regexp_replace(pattern: Pattern, text: Value, _pattern: Value, replacement: Value) -> Value:
    """Every match replaced by the replacement text, taken literally (no backreferences)."""
    value = to_text(text)
    if value is None:
        return None
    literal = (to_text(replacement) or "").replace("\\", "\\\\")
    try:
        return pattern.sub(literal, value) or None
    except Exception:  # the engine must never take the instance down
        return None


def regexp_match(pattern: Pattern, text: Value, _pattern: Value) -> Value:
    value = to_text(text)
    if value is None:
        return None
    found = pattern.search(value)
    if found is None:
        return None
    return found.group() or None  # type: ignore[attr-defined]


def substr(text: Value, start: Value, count: Value = 1 << 62) -> Value:
    """1-based; a negative start counts from the end; a start before the beginning is clamped."""
    value, begin, size = to_text(text), _int_arg(start), _int_arg(count)
    if value is None or begin is None or size is None or size <= 0:
        return None
    if begin < 0:
        begin = len(value) + begin + 1
    begin = max(begin, 1)
    return value[begin - 1 : begin - 1 + size] or None


def left(text: Value, count: Value) -> Value:
    value, size = to_text(text), _int_arg(count)
    if value is None or size is None or size <= 0:
        return None
    return value[:size]


def right(text: Value, count: Value) -> Value:
    value, size = to_text(text), _int_arg(count)
    if value is None or size is None or size <= 0:
        return None
    return value[-size:]


def _trim(text: Value, chars: Value, mode: str) -> Value:
    value = to_text(text)
    if value is None:
        return None
    strip = " " if chars is None else to_text(chars)
    if mode == "both":
        return value.strip(strip) or None
    return (value.lstrip(strip) if mode == "left" else value.rstrip(strip)) or None


def trim(text: Value, chars: Value = None) -> Value:
    return _trim(text, chars, "both")


def ltrim(text: Value, chars: Value = None) -> Value:
    return _trim(text, chars, "left")


def rtrim(text: Value, chars: Value = None) -> Value:
    return _trim(text, chars, "right")


def reverse(text: Value) -> Value:
    value = to_text(text)
    return None if value is None else value[::-1]


def coalesce(*values: Value) -> Value:
    """The first non-NULL argument; arrays contribute their first element."""
    for value in values:
        scalar = first(value)
        if scalar is not None:
            return scalar
    return None


def char_value(code: Value) -> Value:
    number = _int_arg(code)
    if number is None or not 0 <= number <= 255:
        return None
    return chr(number)


def md5(text: Value) -> Value:
    value = to_text(text)
    if value is None:
        return None
    return hashlib.md5(value.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


def true_value() -> Value:
    return True


def false_value() -> Value:
    return False


def nan_value() -> Value:
    return NAN
