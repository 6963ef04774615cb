"""Per-context checks after parsing: known functions, arity, and what each context allows."""

from __future__ import annotations

from amps.errors import FilterSyntaxError
from amps.expr import nodes as n
from amps.expr.kinds import ExprKind
from amps.expr.registry import FUNCTIONS, Category, FunctionSpec

__all__ = ["ExprKind", "check_tree"]


_CONFIG_KINDS = frozenset({ExprKind.QUEUE_FILTER, ExprKind.PRIORITY, ExprKind.BARRIER})
_WHERE = {
    ExprKind.QUEUE_FILTER: "a queue Filter",
    ExprKind.PRIORITY: "a queue Priority",
    ExprKind.BARRIER: "a queue BarrierExpression",
}
_WHY = {
    Category.NONDETERMINISTIC: "is not deterministic",
    Category.CLIENT: "describes a connected client, and there is none",
    Category.QUEUE_STATE: "describes lease state that does not exist yet",
}


def check_tree(text: str, root: n.Node, kind: ExprKind) -> None:
    """Raise FilterSyntaxError for the first call that is unknown, mis-counted or not allowed."""
    for node in n.walk(root):
        if isinstance(node, n.Call):
            spec = FUNCTIONS.get(node.name)
            if spec is None:
                raise FilterSyntaxError(text, node.column, f"unknown function {node.name}")
            _check_arity(text, node, spec)
            if kind in _CONFIG_KINDS and spec.category in _WHY:
                detail = (
                    f"{node.name}() {_WHY[spec.category]}, so it cannot be used in {_WHERE[kind]}"
                )
                raise FilterSyntaxError(text, node.column, detail)


def _check_arity(text: str, node: n.Call, spec: FunctionSpec) -> None:
    count = len(node.args)
    if spec.min_args <= count and (spec.max_args is None or count <= spec.max_args):
        return
    if spec.max_args is None:
        wanted = f"at least {spec.min_args}"
    elif spec.min_args == spec.max_args:
        wanted = str(spec.min_args)
    else:
        wanted = f"{spec.min_args} to {spec.max_args}"
    noun = "argument" if wanted == "1" else "arguments"
    raise FilterSyntaxError(text, node.column, f"{node.name} takes {wanted} {noun}, not {count}")
