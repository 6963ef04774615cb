"""A slow, obviously-correct tree walker: the oracle the compiled code is tested against.

It shares the value helpers but none of the code generator's fast paths or chain tricks; it
implements the AND/OR tables of §5.1 literally. Never used on the hot path.
"""

from __future__ import annotations

from amps.expr import nodes as n
from amps.expr import values
from amps.expr.message import EvalContext, Message
from amps.expr.paths import read_path
from amps.expr.regex import compile_pattern
from amps.expr.registry import FUNCTIONS, Category
from amps.expr.runtime import like_any

Truth = bool | None
# The two tables of §5.1, row = left operand, column = right operand.
_AND: dict[tuple[Truth, Truth], Truth] = {
    (True, True): True, (True, False): False, (True, None): None,
    (False, True): False, (False, False): False, (False, None): False,
    (None, True): None, (None, False): None, (None, None): None,
}  # fmt: skip
_OR: dict[tuple[Truth, Truth], Truth] = {
    (True, True): True, (True, False): True, (True, None): True,
    (False, True): True, (False, False): False, (False, None): None,
    (None, True): None, (None, False): None, (None, None): None,
}  # fmt: skip


def _and(left: Truth, right: Truth) -> Truth:
    return _AND[left, right]


def _or(left: Truth, right: Truth) -> Truth:
    return _OR[left, right]


def truth_of(node: n.Node, msg: Message, ctx: EvalContext) -> bool | None:
    """The TRUE/FALSE/NULL reading of a node."""
    result = evaluate(node, msg, ctx)
    if isinstance(node, (*n.PREDICATES, n.And, n.Or, n.Not)):
        assert result is None or type(result) is bool
        return result
    return values.truth(result)


def evaluate(node: n.Node, msg: Message, ctx: EvalContext | None = None) -> values.Value:
    """The value of `node` over `msg`."""
    ctx = ctx or EvalContext()
    match node:
        case n.Literal(value=value):
            return value
        case n.Path(steps=steps):
            return read_path(msg.doc, steps)
        case n.Unary(op=op, operand=operand):
            inner = evaluate(operand, msg, ctx)
            return values.negate(inner) if op == "-" else values.plus(inner)
        case n.Arith(op=op, left=left, right=right):
            return values.ARITHMETIC[op](evaluate(left, msg, ctx), evaluate(right, msg, ctx))
        case n.Compare(op=op, left=left, right=right):
            return values.compare_any(op, evaluate(left, msg, ctx), evaluate(right, msg, ctx))
        case n.In(subject=subject, members=members, negated=negated):
            found = values.in_any(
                evaluate(subject, msg, ctx), tuple(evaluate(m, msg, ctx) for m in members)
            )
            return found != negated
        case n.Between(subject=subject, low=low, high=high, negated=negated):
            parts = (evaluate(x, msg, ctx) for x in (subject, low, high))
            return values.between_any(*parts) != negated
        case n.Like(subject=subject, pattern=pattern, negated=negated):
            return like_any(compile_pattern(pattern), evaluate(subject, msg, ctx)) != negated
        case n.Affix(subject=subject, affixes=affixes, at_start=at_start, negated=negated):
            return values.affix_any(evaluate(subject, msg, ctx), affixes, at_start) != negated
        case n.IsNull(subject=subject, negated=negated):
            return (evaluate(subject, msg, ctx) is None) != negated
        case n.IsNan(subject=subject, negated=negated):
            return values.nan_any(evaluate(subject, msg, ctx)) != negated
        case n.And(items=items):
            result = truth_of(items[0], msg, ctx)
            for item in items[1:]:
                # Evaluate only what the left-to-right rule needs (the result is the same).
                result = _and(result, truth_of(item, msg, ctx) if result is True else None)
            return result
        case n.Or(items=items):
            result = truth_of(items[0], msg, ctx)
            for item in items[1:]:
                result = _or(result, truth_of(item, msg, ctx) if result is False else None)
            return result
        case n.Not(item=item):
            inner = truth_of(item, msg, ctx)
            return None if inner is None else not inner
        case n.If(condition=condition, then=then, otherwise=otherwise):
            chosen = then if truth_of(condition, msg, ctx) is True else otherwise
            return evaluate(chosen, msg, ctx)
        case n.Call(name=name, args=args, pattern=pattern):
            spec = FUNCTIONS[name]
            if spec.category is not Category.PURE:
                return spec.impl(msg, ctx)
            argv = [evaluate(a, msg, ctx) for a in args]
            if spec.takes_pattern:
                return spec.impl(compile_pattern(pattern), *argv)
            return spec.impl(*argv)
    raise AssertionError(f"unknown node {node!r}")
