"""Compiled expressions: `Filter` (boolean contexts) and `Priority` (SPEC A2).

The parser, checker and code generator are imported by the first expression compiled, not with
this module: an instance whose configuration and clients use no expression never loads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from amps.errors import FilterSyntaxError
from amps.expr.kinds import ExprKind
from amps.expr.message import EvalContext, Message

if TYPE_CHECKING:
    from amps.expr import nodes as n


class MatchFunction(Protocol):
    def __call__(self, msg: Message, ctx: EvalContext | None = None) -> bool: ...


class ValueFunction(Protocol):
    def __call__(self, msg: Message, ctx: EvalContext | None = None) -> object: ...


class KeyFunction(Protocol):
    def __call__(self, msg: Message, ctx: EvalContext | None = None) -> int: ...


class RankFunction(Protocol):
    def __call__(self, msg: Message, ctx: EvalContext | None = None) -> tuple[int, int]: ...


def parse_expression(text: str, kind: ExprKind = ExprKind.FILTER) -> n.Node:
    """Parse and check `text` for `kind`; raises FilterSyntaxError."""
    if not isinstance(text, str):
        raise FilterSyntaxError(repr(text), 1, "an expression must be text")
    if not text.strip():
        raise FilterSyntaxError(text, 1, "the expression is empty")
    from amps.expr.check import check_tree
    from amps.expr.parser import parse

    root = parse(text)
    check_tree(text, root, kind)
    return root


def render(node: n.Node) -> str:
    """A readable, fully parenthesised form of the tree (printed by `amps expr check`)."""
    from amps.expr.nodes import render as render_node

    return render_node(node)


class Filter:
    """A compiled boolean expression; `matches` is the generated function itself (no wrapper)."""

    __slots__ = ("evaluate", "kind", "matches", "text", "tree")

    matches: MatchFunction  # TRUE -> True; FALSE or NULL -> False
    evaluate: ValueFunction  # the raw value (bool, number, str, list or None)

    def __init__(self, text: str, kind: ExprKind, tree: n.Node) -> None:
        from amps.expr.codegen import build

        self.text = text
        self.kind = kind
        self.tree = tree
        self.matches = _cast_match(build(text, tree, "matches"))
        self.evaluate = _cast_value(build(text, tree, "value"))

    def __repr__(self) -> str:
        return f"Filter({self.text!r}, {self.kind.name})"


class Priority:
    """A compiled Priority (A2): `key` is 0..2**64-1; NULL, NaN, non-numeric and negatives are 0."""

    __slots__ = ("evaluate", "key", "rank", "text", "tree")

    key: KeyFunction
    rank: RankFunction  # (0, 0) for NULL/NaN/non-numeric, else (1, key): sorts NaN below 0
    evaluate: ValueFunction

    def __init__(self, text: str, tree: n.Node) -> None:
        from amps.expr.codegen import build

        self.text = text
        self.tree = tree
        self.key = _cast_key(build(text, tree, "key"))
        self.rank = _cast_rank(build(text, tree, "rank"))
        self.evaluate = _cast_value(build(text, tree, "value"))

    def __repr__(self) -> str:
        return f"Priority({self.text!r})"


def compile_filter(text: str, kind: ExprKind = ExprKind.FILTER) -> Filter:
    """Parse, check and compile a boolean expression once; raises FilterSyntaxError."""
    if kind is ExprKind.PRIORITY:
        raise ValueError("use compile_priority for ExprKind.PRIORITY")
    return Filter(text, kind, parse_expression(text, kind))


def compile_priority(text: str) -> Priority:
    """Compile a queue Priority expression (A2); raises FilterSyntaxError."""
    return Priority(text, parse_expression(text, ExprKind.PRIORITY))


def check_expression(text: str, kind: ExprKind) -> None:
    """Validate only (config loading): raises FilterSyntaxError, compiles nothing."""
    parse_expression(text, kind)


# The generated functions are typed by construction; these only narrow Callable for mypy.
def _cast_match(fn: Callable[..., object]) -> MatchFunction:
    return fn  # type: ignore[return-value]


def _cast_value(fn: Callable[..., object]) -> ValueFunction:
    return fn


def _cast_key(fn: Callable[..., object]) -> KeyFunction:
    return fn  # type: ignore[return-value]


def _cast_rank(fn: Callable[..., object]) -> RankFunction:
    return fn  # type: ignore[return-value]
