"""Topic names that may be regular expressions: detection, compilation and coverage.

A name is a regex when it contains a regex metacharacter (AMPS's rule). Regexes match anywhere in
the topic (search, not full match), so `^...$` anchors are how a regex names exact topics. They are
compiled with RE2, the engine the broker matches topics with, so what loads here also runs there.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Protocol

from amps.expr.regex import compile_re2

REGEX_CHARACTERS = frozenset(".^$*+?()[]{}|\\")
# Patterns that match every topic; the only regexes treated as covering any other regex.
UNIVERSAL_PATTERNS = frozenset({".*", "^.*", ".*$", "^.*$", "(.*)", "^(.*)$"})

_ESCAPED_OR_PLAIN = r"(?:\\[.^$*+?()\[\]{}|\\]|[^.^$*+?()\[\]{}|\\])+"
_ANCHORED_LITERAL = re.compile(r"\^(" + _ESCAPED_OR_PLAIN + r")\$")
_UNESCAPE = re.compile(r"\\(.)")


class _Compiled(Protocol):
    def search(self, text: str) -> object | None: ...


def is_regex(name: str) -> bool:
    """True when `name` holds a regex metacharacter, as AMPS decides for topic names."""
    return not REGEX_CHARACTERS.isdisjoint(name)


@functools.lru_cache(maxsize=1024)
def compile_topic_regex(pattern: str) -> _Compiled:
    """Compile with RE2 or raise ValueError naming the problem."""
    try:
        compiled: _Compiled = compile_re2(pattern)
    except ValueError as error:
        raise ValueError(f"a valid regular expression ({error})") from None
    return compiled


def topic_matches(name: str, topic: str) -> bool:
    """Whether the configured `name` (literal or regex) covers the concrete `topic`."""
    if not is_regex(name):
        return name == topic
    try:
        return compile_topic_regex(name).search(topic) is not None
    except ValueError:
        return False


def anchored_literals(pattern: str) -> tuple[str, ...] | None:
    """The exact topics of `^A$|^B$` style patterns, or None when the pattern is anything else."""
    literals: list[str] = []
    for branch in pattern.split("|"):
        match = _ANCHORED_LITERAL.fullmatch(branch)
        if match is None:
            return None
        literals.append(_UNESCAPE.sub(r"\1", match.group(1)))
    return tuple(literals)


def covering_names(pattern: str, recorded: Iterable[str]) -> tuple[str, ...] | None:
    """The recorded names that prove every topic `pattern` matches is recorded, or None.

    Sound, not complete: an identical regex, a catch-all regex, or (for `^A$|^B$`) names covering
    each literal. Anything else is refused, since regex inclusion is not checked in general.
    """
    names = tuple(recorded)
    if pattern in names:
        return (pattern,)
    universal = [name for name in names if name in UNIVERSAL_PATTERNS]
    if universal:
        return (universal[0],)
    literals = anchored_literals(pattern)
    if literals is None:
        return None
    found: list[str] = []
    for literal in literals:
        cover = next((name for name in names if topic_matches(name, literal)), None)
        if cover is None:
            return None
        found.append(cover)
    return tuple(found)
