"""Values as AMPS writes them: durations, sizes and counts with units, booleans, `${ENV}`.

Every parser takes the element's text and returns a plain int or str, or raises `ValueError` whose
message is the "expected ..." part of a ConfigError (the caller adds the path and the value).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation

MAX_INT64 = 2**63 - 1

# Durations are computed in nanoseconds so every unit converts exactly.
DURATION_UNITS_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3_600 * 1_000_000_000,
    "d": 86_400 * 1_000_000_000,
    "w": 7 * 86_400 * 1_000_000_000,
}
# AMPS sizes are 1024-based; the one-letter forms ("10M") appear in AMPS's own defaults.
SIZE_UNITS_BYTES: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
}
COUNT_UNITS: dict[str, int] = {"": 1, "k": 1_000, "m": 1_000_000}

_NUMBER_WITH_UNIT = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)", re.ASCII)
_ENV_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)


def _split(text: str, units: Mapping[str, int], expected: str) -> int:
    match = _NUMBER_WITH_UNIT.fullmatch(text.strip())
    if match is None:
        raise ValueError(expected)
    unit = match.group(2).lower()
    if unit not in units:
        raise ValueError(expected)
    try:
        scaled = Decimal(match.group(1)) * units[unit]
    except InvalidOperation:
        raise ValueError(expected) from None
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{expected}, a whole number once converted")
    if scaled > MAX_INT64:
        raise ValueError(f"{expected}, below 2^63")
    return int(scaled)


def parse_duration_ns(text: str) -> int:
    """`30s`, `100ms`, `1d` -> nanoseconds; a unit is required (ns us ms s m h d w)."""
    return _split(text, DURATION_UNITS_NS, "a duration with a unit (ns, us, ms, s, m, h, d, w)")


def parse_size_bytes(text: str) -> int:
    """`1MB`, `10M`, `4096` -> bytes, 1024-based (kb mb gb tb; a bare number is bytes)."""
    return _split(text, SIZE_UNITS_BYTES, "a size in bytes, optionally with kb, mb, gb or tb")


def parse_count(text: str) -> int:
    """`100`, `10k`, `2M` -> an integer count (k = 10^3, M = 10^6)."""
    return _split(text, COUNT_UNITS, "a whole number, optionally with k (10^3) or M (10^6)")


def _in_range(value: int, low: int, high: int, low_text: str, high_text: str) -> None:
    if value < low or value > high:
        raise ValueError(f"a value from {low_text} to {high_text}")


MAX_DURATION_NS = 3650 * DURATION_UNITS_NS["d"]


def duration(
    per_unit_ns: int,
    low_ns: int,
    low_text: str,
    high_ns: int = MAX_DURATION_NS,
    high_text: str = "3650d",
) -> Callable[[str], int]:
    """A parser returning whole multiples of `per_unit_ns` between two bounds (both inclusive)."""
    unit_name = {1_000: "microseconds", 1_000_000: "milliseconds"}[per_unit_ns]

    def parse(text: str) -> int:
        nanoseconds = parse_duration_ns(text)
        _in_range(nanoseconds, low_ns, high_ns, low_text, high_text)
        if nanoseconds % per_unit_ns:
            raise ValueError(f"a whole number of {unit_name}")
        return nanoseconds // per_unit_ns

    return parse


def size(low_bytes: int, high_bytes: int, low_text: str, high_text: str) -> Callable[[str], int]:
    """A size parser with inclusive bounds."""

    def parse(text: str) -> int:
        value = parse_size_bytes(text)
        _in_range(value, low_bytes, high_bytes, low_text, high_text)
        return value

    return parse


def count(low: int, high: int = MAX_INT64) -> Callable[[str], int]:
    """A count parser with inclusive bounds."""

    def parse(text: str) -> int:
        value = parse_count(text)
        if value < low or value > high:
            raise ValueError(
                f"a whole number of at least {low}"
                if high == MAX_INT64
                else f"a whole number from {low} to {high}"
            )
        return value

    return parse


def choice(*allowed: str) -> Callable[[str], str]:
    """A parser accepting one of `allowed`, case-insensitively; returns the canonical spelling."""
    by_folded = {value.casefold(): value for value in allowed}

    def parse(text: str) -> str:
        found = by_folded.get(text.strip().casefold())
        if found is None:
            raise ValueError("one of " + ", ".join(allowed))
        return found

    return parse


def parse_percent(text: str) -> int:
    """`50%` or `50`: a whole percentage from 1 to 100."""
    digits = text.strip().removesuffix("%").strip()
    if not digits.isascii() or not digits.isdigit() or not 1 <= int(digits) <= 100:
        raise ValueError("a percentage from 1% to 100%")
    return int(digits)


def parse_enabled(text: str) -> bool:
    """`enabled`/`true` -> True, `disabled`/`false` -> False."""
    folded = text.strip().casefold()
    if folded in ("enabled", "true"):
        return True
    if folded in ("disabled", "false"):
        return False
    raise ValueError("enabled or disabled")


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """Replace `${NAME}` and `${NAME:-default}` from `env`; an unset NAME without default fails."""
    if "${" not in text:
        return text
    parts: list[str] = []
    position = 0
    for match in _ENV_REFERENCE.finditer(text):
        parts.append(text[position : match.start()])
        name, has_default, default = match.group(1).partition(":-")
        if _ENV_NAME.fullmatch(name) is None:
            raise ValueError("an environment reference of the form ${NAME} or ${NAME:-default}")
        if name in env:
            parts.append(env[name])
        elif has_default:
            parts.append(default)
        else:
            raise ValueError(f"environment variable {name} to be set (or ${{{name}:-default}})")
        position = match.end()
    rest = text[position:]
    if "${" in rest:
        raise ValueError("a closing '}' after '${'")
    parts.append(rest)
    return "".join(parts)
