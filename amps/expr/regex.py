"""Regular expressions for LIKE, REGEXP_MATCH and REGEXP_REPLACE, on RE2 (Q13 decision).

RE2 matches in time linear in the subject, so no pattern can stall the instance; the price is
that PCRE-only constructs (backreferences, lookaround, possessive quantifiers, (?x)) are refused
when the expression is compiled, with the engine's reason.
"""

from __future__ import annotations

import functools
from typing import Protocol

import re2


class Pattern(Protocol):
    def search(self, text: str) -> object: ...
    def sub(self, repl: str, text: str) -> str: ...


# Bound the compiled program so one pattern cannot take a lot of memory.
_MAX_PROGRAM_BYTES = 1 << 20


def _options() -> object:
    options = re2.Options()
    # RE2 would log the error itself, through absl, on stderr (with an `absl::InitializeLog`
    # warning first); every caller reports it in its own words instead.
    options.log_errors = False
    options.max_mem = _MAX_PROGRAM_BYTES
    return options


def compile_re2(source: str) -> Pattern:
    """Compile with RE2, quietly and bounded; ValueError whose text is RE2's reason (as text)."""
    try:
        compiled: Pattern = re2.compile(source, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid pattern"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(str(reason)) from None
    except (TypeError, OverflowError, MemoryError) as exc:
        raise ValueError(str(exc)) from None
    return compiled


@functools.lru_cache(maxsize=1024)
def compile_pattern(source: str) -> Pattern:
    """Compile a pattern once; raises ValueError with a plain reason for unsupported syntax."""
    try:
        return compile_re2(source)
    except ValueError as exc:
        raise ValueError(f"unsupported regular expression ({exc})") from None
