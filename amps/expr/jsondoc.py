"""Parsing a message body into the document expressions read (docs/reference/expressions.md,
"Parse backend").

A body is parsed by pysimdjson into lazy proxies (`Object`, `Array`): only the fields an
expression reads are turned into Python values, by `paths.read_path`, `values.norm` and the
generated code, which all accept the proxies beside `dict`/`list`. A duplicated key reads as its
**first** occurrence, as in AMPS by default (AMPS-EXPRESSIONS.md §2.2): simdjson's key lookup does
that, and every other way of reading a body here (`to_python`, the standard-library fallback)
keeps the first occurrence as well.

What simdjson refuses (integers beyond 64 bits, invalid UTF-8, lone surrogates, nesting past
1,024 levels, `NaN`, ...) goes to `json.loads`, which keeps the first occurrence of a key and
reads integers outside [-2**63, 2**64-1] as doubles (Q6); slow, but rare. Without pysimdjson
every body takes that path, with the same answers.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any


class _Never:
    """Stands for the proxy types when pysimdjson is absent: no value ever has this type."""


Object: type
Array: type
_Parser: Any
_simdjson: Any
try:
    _simdjson = importlib.import_module("simdjson")
except ImportError:  # pragma: no cover - pysimdjson is a dependency; the fallback stays exact
    _simdjson = None
    Object = Array = _Never
    _Parser = None
else:
    Object = _simdjson.Object
    Array = _simdjson.Array
    _Parser = _simdjson.Parser

AVAILABLE = _simdjson is not None
_EMPTY: dict[str, object] = {}
_MIN_INT = -(2**63)
_MAX_UINT = 2**64 - 1
_lazy = AVAILABLE


def use_simdjson(enabled: bool) -> None:
    """Choose the backend (tests run the document semantics over both)."""
    global _lazy
    _lazy = enabled and AVAILABLE


def backend() -> str:
    return "simdjson" if _lazy else "stdlib"


# A parser holds the document its proxies read, so it may be reused only once no proxy from its
# last parse is alive: each proxy holds a reference to its parser, which `sys.getrefcount` sees.
# (pysimdjson would refuse the reuse with RuntimeError anyway; that would only cost the slow
# fallback.) A parser still referenced is left to its proxies and a new one becomes current.
_current: list[Any] = [_Parser() if AVAILABLE else None]


def _refs() -> int:
    parser = _current[0]
    return sys.getrefcount(parser)


_FREE = _refs()  # the count with no proxy alive, measured with the same code shape as below


def _parser() -> Any:
    parser = _current[0]
    if sys.getrefcount(parser) > _FREE:
        parser = _current[0] = _Parser()
    return parser


def parse_document(data: bytes) -> Any:
    """The top-level JSON object of `data`: a simdjson `Object` or a `dict`; anything that is not
    a JSON object reads as an empty document."""
    if _lazy:
        try:
            doc = _parser().parse(data)
        except (ValueError, RuntimeError):  # UnicodeDecodeError is a ValueError
            return parse_stdlib(data)
        return doc if type(doc) is Object else _EMPTY
    return parse_stdlib(data)


def _first_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, item in pairs:
        if key not in out:
            out[key] = item
    return out


def _parse_int(text: str) -> int | float:
    """Q6: integers outside [-2**63, 2**64-1] read as doubles (as orjson and AMPS do)."""
    if len(text) < 19:
        return int(text)
    if len(text) < 100:
        number = int(text)
        if _MIN_INT <= number <= _MAX_UINT:
            return number
    return float(text)


def parse_stdlib(data: bytes) -> dict[str, object]:
    """The standard-library parse, first occurrence of a key wins."""
    try:
        doc = json.loads(data, object_pairs_hook=_first_pairs, parse_int=_parse_int)
    except (ValueError, RecursionError, TypeError):
        return _EMPTY
    return doc if type(doc) is dict else _EMPTY


def to_python(value: Any) -> Any:
    """`value` with every simdjson proxy turned into `dict`/`list`, first key wins (iterative:
    a document may nest 1,024 levels). Plain values are returned as they are."""
    kind = type(value)
    if kind is not Object and kind is not Array:
        return value
    root: Any = {} if kind is Object else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        is_list = type(target) is list
        # `Object.items()` would convert nested values itself, last key winning: instead list the
        # keys (duplicates included) and look each up once; the lookup finds the first occurrence.
        pairs = enumerate(source) if is_list else ((key, None) for key in source.keys())  # noqa: SIM118
        for key, item in pairs:
            if not is_list:
                if key in target:
                    continue  # a later duplicate: the first occurrence wins
                item = source[key]
            item_kind = type(item)
            if item_kind is Object or item_kind is Array:
                child: Any = {} if item_kind is Object else []
                stack.append((item, child))
                item = child
            if is_list:
                target.append(item)
            else:
                target[key] = item
    return root
