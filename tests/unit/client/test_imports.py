"""The client's modules import each other without a cycle (issue 8), type-only imports included."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import amps.client

PACKAGE = "amps.client"
DIRECTORY = Path(amps.client.__file__).parent


def client_imports(path: Path) -> set[str]:
    """The amps.client modules a module imports (`from amps.client import x` names module x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            found.update(f"{PACKAGE}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PACKAGE + "."))
    return found


def test_client_modules_form_no_import_cycle() -> None:
    modules = {f"{PACKAGE}.{p.stem}": p for p in DIRECTORY.glob("*.py") if p.stem != "__init__"}
    graph = {name: client_imports(path) & modules.keys() for name, path in modules.items()}
    assert graph[f"{PACKAGE}.aio"], "the walk finds the client's imports"
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"import cycle: {' -> '.join(error.args[1])}") from None
