"""Topic names and topic regular expressions (linear-time RE2: a client's regex cannot stall us)."""

from __future__ import annotations

from typing import Protocol

import re2

from amps.errors import InvalidTopic

# AMPS treats a topic containing any of these as a regular expression.
REGEX_CHARACTERS = frozenset("^$*+?()[]{}|\\")
MAX_TOPIC_LENGTH = 1024


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
            self._pattern = re2.compile(text)
        except re2.error as exc:
            raise InvalidTopic(f"bad regex topic {text!r}: {exc}") from None

    def matches(self, topic: str) -> bool:
        return self._pattern.search(topic) is not None


def is_regex(text: str) -> bool:
    """Whether AMPS would read this topic as a regular expression."""
    return any(ch in REGEX_CHARACTERS for ch in text)


def validate_topic_name(topic: str) -> None:
    """A topic to publish to: non-empty, bounded, and not a regular expression."""
    if not topic:
        raise InvalidTopic("no topic given")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopic(f"topic longer than {MAX_TOPIC_LENGTH} characters")
    if is_regex(topic):
        raise InvalidTopic(f"cannot publish to a regular expression: {topic!r}")
    if any(ord(ch) < 32 for ch in topic):
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
