"""Reading a path out of a parsed JSON document (AMPS-EXPRESSIONS.md §2.1, §2.2, Q4).

Arrays met along the way are expanded, so `/legs/px` collects the `px` of every leg (and nested
arrays are flattened). A subscript picks the i-th collected value, on any step: `/legs[1]/px` is
the px of the second leg. Only the steps named by the expression are visited.
"""

from __future__ import annotations

from amps.expr.lexer import PathStep
from amps.expr.values import Value, norm


def _expand(items: list[object], out: list[object]) -> None:
    stack = [iter(items)]
    while stack:
        for item in stack[-1]:
            if type(item) is list:
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()


def read_path(doc: dict[str, object], steps: tuple[PathStep, ...]) -> Value:
    """The value at `steps` in `doc`: NULL when absent; an array when an array was crossed."""
    current: list[object] = [doc]
    crossed_array = False
    for step in steps:
        if step.index is not None:
            if step.index >= len(current):
                return None
            current = [current[step.index]]
            crossed_array = False
            continue
        found: list[object] = []
        name = step.name
        for node in current:
            if type(node) is dict:
                child = node.get(name, _MISSING)
                if type(child) is list:
                    _expand(child, found)
                    crossed_array = True
                elif child is not _MISSING:
                    found.append(child)
        if not found:
            return None
        current = found
    if crossed_array:
        return norm(current)
    return norm(current[0])


_MISSING = object()
