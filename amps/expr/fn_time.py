"""Date and time functions (AMPS-EXPRESSIONS.md §6.3): timestamps are UNIX seconds (double) or
ISO-8601 basic strings `YYYYmmddTHHMMSS[.ffffff][Z]`, always UTC. No clock is read here."""

from __future__ import annotations

import datetime as dt
import re

from amps.expr.values import Value, to_number, to_text

_ISO_BASIC = re.compile(r"(\d{8})T(\d{6})(?:\.(\d{1,6}))?Z?")
_WIDTH = re.compile(r"%[-_0^#]*[1-9]")
_MAX_FORMAT_CHARS = 128
_MAX_RESULT_CHARS = 128


def _to_datetime(value: Value) -> dt.datetime | None:
    text = to_text(value)
    if text is not None and (found := _ISO_BASIC.fullmatch(text)):
        date, clock, fraction = found.groups()
        try:
            parsed = dt.datetime.strptime(date + clock, "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
        except ValueError:
            return None
        return parsed + dt.timedelta(microseconds=int((fraction or "0").ljust(6, "0")))
    seconds = to_number(value)
    if seconds is None or seconds != seconds:
        return None
    try:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=float(seconds))
    except (OverflowError, ValueError):
        return None


def strftime(fmt: Value, timestamp: Value) -> Value:
    """Format first, then the timestamp; `%f` is microseconds and `%03f` milliseconds."""
    pattern, moment = to_text(fmt), _to_datetime(timestamp)
    if pattern is None or moment is None or len(pattern) > _MAX_FORMAT_CHARS:
        return None
    pattern = pattern.replace("%03f", f"{moment.microsecond // 1000:03d}")
    if _WIDTH.search(pattern):
        return None  # glibc honours field widths such as %999999Y: refuse them, keep memory bounded
    try:
        result = moment.strftime(pattern)
    except (ValueError, UnicodeError, OverflowError):
        return None
    return result[:_MAX_RESULT_CHARS] or None


def strptime(text: Value, fmt: Value) -> Value:
    """Text first, then the format; the result is UNIX seconds as a double (UTC)."""
    value, pattern = to_text(text), to_text(fmt)
    if value is None or pattern is None or len(pattern) > _MAX_FORMAT_CHARS:
        return None
    try:
        parsed = dt.datetime.strptime(value, pattern)
    except (ValueError, UnicodeError, OverflowError, re.error):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    try:
        return parsed.timestamp()
    except (OverflowError, ValueError, OSError):
        return None
