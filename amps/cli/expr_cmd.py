"""`amps expr check` and `amps expr eval`: try an expression without a running instance."""

from __future__ import annotations

import sys

import click
import orjson

from amps.errors import FilterSyntaxError
from amps.expr import (
    EvalContext,
    ExprKind,
    Message,
    compile_filter,
    compile_priority,
    parse_expression,
    render,
)
from amps.expr.nodes import render_literal
from amps.expr.values import Value, scalar_text

EXIT_EXPRESSION_ERROR = 2


def format_error(error: FilterSyntaxError) -> str:
    """The expression, a caret under the column, and the sentence."""
    caret = " " * max(error.column - 1, 0) + "^"
    return f"{error.expression}\n{caret}\nerror: {error.message}"


def format_value(value: Value) -> str:
    """A value as the language would write it: 'text', 12, 0.5, true, NaN, NULL, [1, 'a']."""
    if type(value) is list:
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if value is None or type(value) is str:
        return render_literal(value)
    return scalar_text(value)  # type: ignore[arg-type]


def _fail(error: FilterSyntaxError) -> None:
    click.echo(format_error(error), err=True)
    sys.exit(EXIT_EXPRESSION_ERROR)


@click.group("expr")
def expr() -> None:
    """Check and evaluate filter, Priority and BarrierExpression expressions."""


@expr.command("check")
@click.argument("expression")
@click.option(
    "--kind",
    type=click.Choice([k.value for k in ExprKind]),
    default=ExprKind.FILTER.value,
    show_default=True,
    help="Where the expression is used; each place allows different functions.",
)
def check(expression: str, kind: str) -> None:
    """Parse EXPRESSION and print its fully parenthesised form (exit 2 on an error)."""
    try:
        tree = parse_expression(expression, ExprKind(kind))
    except FilterSyntaxError as error:
        _fail(error)
        return
    click.echo(render(tree))


@expr.command("eval")
@click.argument("expression")
@click.option("--data", default="{}", show_default=True, help="The message body (JSON).")
@click.option("--topic", default="", help="Topic name seen by TOPIC_NAME().")
@click.option("--bookmark", default="", help="Bookmark seen by BOOKMARK().")
@click.option(
    "--kind",
    type=click.Choice([k.value for k in ExprKind]),
    default=ExprKind.FILTER.value,
    show_default=True,
)
@click.option("--now-us", type=int, default=0, help="Clock for UNIX_TIMESTAMP() (microseconds).")
def evaluate(expression: str, data: str, topic: str, bookmark: str, kind: str, now_us: int) -> None:
    """Evaluate EXPRESSION over one message and print its value (and the match for filters)."""
    body = data.encode("utf-8", "surrogatepass")
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as error:
        # A filter over a body that is not JSON is simply false; here that would hide a typo.
        raise click.BadParameter(f"not JSON ({error})", param_hint="--data") from None
    msg = Message(body, topic, bookmark)
    ctx = EvalContext(now_us=now_us)
    try:
        if ExprKind(kind) is ExprKind.PRIORITY:
            priority = compile_priority(expression)
            click.echo(f"value: {format_value(priority.evaluate(msg, ctx))}")  # type: ignore[arg-type]
            click.echo(f"key: {priority.key(msg, ctx)}")
            return
        flt = compile_filter(expression, ExprKind(kind))
    except FilterSyntaxError as error:
        _fail(error)
        return
    click.echo(f"value: {format_value(flt.evaluate(msg, ctx))}")  # type: ignore[arg-type]
    click.echo(f"matches: {'true' if flt.matches(msg, ctx) else 'false'}")
