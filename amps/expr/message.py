"""What an expression evaluates over: the message, and the facts of the evaluation context."""

from __future__ import annotations

import json
from dataclasses import dataclass

import orjson


@dataclass(frozen=True, slots=True)
class EvalContext:
    """Facts that client and non-deterministic functions need; the caller reads the clock."""

    now_us: int = 0
    client_name: str = ""
    user_id: str = ""
    instance_name: str = ""
    group_name: str = ""


_EMPTY: dict[str, object] = {}


def parse_document(data: bytes) -> dict[str, object]:
    """Parse JSON bytes once; anything that is not a JSON object reads as an empty document."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            # orjson refuses some valid JSON (integers beyond 64 bits, nesting past 1024 levels).
            doc = json.loads(data)
        except (ValueError, RecursionError, TypeError):
            return _EMPTY
    return doc if type(doc) is dict else _EMPTY


class Message:
    """A message under evaluation; its JSON body is parsed on first use, at most once."""

    __slots__ = (
        "bookmark",
        "correlation_id",
        "data",
        "doc",
        "expiration_s",
        "last_leased_us",
        "lease_count",
        "timestamp_us",
        "topic",
    )
    doc: dict[str, object]

    def __init__(
        self,
        data: bytes,
        topic: str = "",
        bookmark: str = "",
        *,
        timestamp_us: int = 0,
        correlation_id: str = "",
        expiration_s: int = 0,
        lease_count: int | None = None,
        last_leased_us: int | None = None,
    ) -> None:
        self.data = data
        self.topic = topic
        self.bookmark = bookmark
        self.timestamp_us = timestamp_us
        self.correlation_id = correlation_id
        self.expiration_s = expiration_s
        self.lease_count = lease_count
        self.last_leased_us = last_leased_us

    @classmethod
    def from_obj(cls, obj: object, topic: str = "", bookmark: str = "") -> Message:
        """A message over an already-parsed JSON value (its size is computed only if asked)."""
        message = cls(b"", topic, bookmark)
        message.doc = obj if type(obj) is dict else _EMPTY
        return message

    def __getattr__(self, name: str) -> dict[str, object]:
        # Called only while the `doc` slot is unset: this is the lazy parse, done once.
        if name != "doc":
            raise AttributeError(name)
        doc = parse_document(self.data)
        self.doc = doc
        return doc

    def size_bytes(self) -> int:
        """Payload size; for `from_obj` messages, the size of the compact JSON encoding."""
        if self.data:
            return len(self.data)
        try:
            return len(orjson.dumps(self.doc))
        except (TypeError, orjson.JSONEncodeError):
            return 0
