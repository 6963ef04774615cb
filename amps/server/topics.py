"""Topic names and topic regular expressions (linear-time RE2: a client's regex cannot stall us)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from amps.errors import InvalidTopic
from amps.expr.regex import compile_re2
from amps.names import MAX_TOPIC_LENGTH

# AMPS treats a topic containing any of these as a regular expression.
REGEX_CHARACTERS = frozenset("^$*+?()[]{}|\\")
# Publishes name the same few topics over and over: each distinct valid name is checked once.
VALID_TOPIC_CACHE_ENTRIES = 4096
_valid_topics: dict[str, None] = {}
_CONTROL_CHARACTER = re.compile("[\x00-\x1f]")


class TopicMatcher(Protocol):
    """Decides whether a concrete topic matches a subscription's topic."""

    text: str

    def matches(self, topic: str) -> bool: ...


class LiteralTopic:
    """An exact topic name."""

    def __init__(self, text: str) -> None:
        self.text = text

    def matches(self, topic: str) -> bool:
        return topic == self.text


class RegexTopic:
    """A topic regular expression; unanchored, like AMPS (use ^ and $ to anchor)."""

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            self._pattern = compile_re2(text)
        except ValueError as exc:
            raise InvalidTopic(f"bad regex topic {text!r}: {exc}") from None

    def matches(self, topic: str) -> bool:
        return self._pattern.search(topic) is not None


class EntitledTopic:
    """A subscription topic narrowed to the topics its user may read (S2): a regex subscription
    never receives a topic the user is not entitled to."""

    def __init__(self, inner: TopicMatcher, can_read: Callable[[str], bool]) -> None:
        self.text = inner.text
        self._inner = inner
        self._can_read = can_read

    def matches(self, topic: str) -> bool:
        return self._inner.matches(topic) and self._can_read(topic)


def is_regex(text: str) -> bool:
    """Whether AMPS would read this topic as a regular expression."""
    return not REGEX_CHARACTERS.isdisjoint(text)


def validate_topic_name(topic: str) -> None:
    """A topic to publish to: non-empty, bounded, and not a regular expression."""
    if topic in _valid_topics:
        return
    _check_topic_name(topic)
    if len(_valid_topics) >= VALID_TOPIC_CACHE_ENTRIES:
        _valid_topics.clear()
    _valid_topics[topic] = None


def _check_topic_name(topic: str) -> None:
    if not topic:
        raise InvalidTopic("no topic given")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopic(f"topic longer than {MAX_TOPIC_LENGTH} characters")
    if is_regex(topic):
        raise InvalidTopic(f"cannot publish to a regular expression: {topic!r}")
    if _CONTROL_CHARACTER.search(topic) is not None:
        raise InvalidTopic("topic contains control characters")


def topic_matcher(text: str) -> TopicMatcher:
    """A matcher for a subscription topic (literal or regex)."""
    if not text:
        raise InvalidTopic("no topic given")
    if len(text) > MAX_TOPIC_LENGTH:
        raise InvalidTopic(f"topic longer than {MAX_TOPIC_LENGTH} characters")
    if is_regex(text):
        return RegexTopic(text)
    return LiteralTopic(text)
