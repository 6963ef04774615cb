"""The AMPS expression language: parse once, compile to a Python function, evaluate per message.

Pure core: no I/O, no clock (time arrives as `EvalContext.now_us`), no threads, no randomness.
See docs/reference/expressions.md for the language and the decisions on open questions.
"""

from amps.expr.api import (
    Filter,
    Priority,
    check_expression,
    compile_filter,
    compile_priority,
    parse_expression,
    render,
)
from amps.expr.kinds import ExprKind
from amps.expr.message import EvalContext, Message

__all__ = [
    "EvalContext",
    "ExprKind",
    "Filter",
    "Message",
    "Priority",
    "check_expression",
    "compile_filter",
    "compile_priority",
    "parse_expression",
    "render",
]
