"""Shared helpers for the expression tests."""

from __future__ import annotations

import orjson

from amps.expr import EvalContext, Message, compile_filter


def value(text: str, doc: object = None, **ctx: object) -> object:
    """The value of `text` over `doc` (compiled path)."""
    msg = Message(orjson.dumps({} if doc is None else doc))
    return compile_filter(text).evaluate(msg, EvalContext(**ctx))  # type: ignore[arg-type]


def matches(text: str, doc: object = None) -> bool:
    return compile_filter(text).matches(Message(orjson.dumps({} if doc is None else doc)))
