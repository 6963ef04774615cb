"""What an expression evaluates over: the message, and the facts of the evaluation context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from amps.expr.jsondoc import parse_document, to_python


@dataclass(frozen=True, slots=True)
class EvalContext:
    """Facts that client and non-deterministic functions need; the caller reads the clock."""

    now_us: int = 0
    client_name: str = ""
    user_id: str = ""
    instance_name: str = ""
    group_name: str = ""


_EMPTY: dict[str, object] = {}


class Message:
    """A message under evaluation; its JSON body is parsed on first use, at most once."""

    __slots__ = (
        "_doc",
        "bookmark",
        "correlation_id",
        "data",
        "expiration_s",
        "last_leased_us",
        "lease_count",
        "timestamp_us",
        "topic",
    )

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
        # A dict or a simdjson Object (jsondoc.parse_document); read directly by generated code.
        self._doc: Any = None
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
        message._doc = obj if type(obj) is dict else _EMPTY
        return message

    @property
    def doc(self) -> dict[str, object]:
        """The whole top-level JSON object as Python values (empty when the body is not a JSON
        object); the first occurrence of a duplicated key wins, as everywhere."""
        doc = self.document()
        if type(doc) is not dict:
            # Converted once; the dict then replaces the lazy proxy (same answers, parser freed).
            doc = self._doc = to_python(doc)
        return doc  # type: ignore[no-any-return]

    def document(self) -> Any:
        """The document expressions read, parsed on first use, at most once: a dict, or a lazy
        simdjson Object that converts only the fields read (see `jsondoc`)."""
        doc = self._doc
        if doc is None:
            doc = self._doc = parse_document(self.data)
        return doc

    def size_bytes(self) -> int:
        """Payload size; for `from_obj` messages, the size of the compact JSON encoding."""
        if self.data:
            return len(self.data)
        try:
            return len(orjson.dumps(self.doc))
        except (TypeError, orjson.JSONEncodeError):
            return 0
