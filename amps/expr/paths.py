"""Reading a path out of a parsed JSON document (AMPS-EXPRESSIONS.md §2.1, §2.2, Q4).

Arrays met along the way are expanded, so `/legs/px` collects the `px` of every leg (and nested
arrays are flattened). A subscript picks the i-th collected value, on any step: `/legs[1]/px` is
the px of the second leg. Only the steps named by the expression are visited.
"""

from __future__ import annotations

from typing import Any

from amps.expr.jsondoc import Array, Object
from amps.expr.lexer import PathStep
from amps.expr.values import Value, norm


def _expand(items: Any, out: list[object]) -> None:
    stack = [iter(items)]
    while stack:
        for item in stack[-1]:
            kind = type(item)
            if kind is list or kind is Array:
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()


def read_path(doc: Any, steps: tuple[PathStep, ...]) -> Value:
    """The value at `steps` in `doc`: NULL when absent; an array when an array was crossed.

    `doc` is a `dict` or a simdjson `Object` (whose lookup returns the first occurrence of a
    duplicated key); arrays met on the way may be `list` or simdjson `Array`."""
    current: list[Any] = [doc]
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
            kind = type(node)
            if kind is dict or kind is Object:
                child = node.get(name, _MISSING)
                child_kind = type(child)
                if child_kind is list or child_kind is Array:
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
