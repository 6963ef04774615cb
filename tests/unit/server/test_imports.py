"""The server's, the log's and replication's modules import each other without a cycle,
type-only imports included (issue 8): instance -> queue manager -> queues -> session -> outbox,
never back; the parts name what they need from the instance as protocols (amps/server/host.py),
as the bookmark look-up does from the journal (amps/log/lookup.py)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("amps/server", "amps/log", "replication")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The known modules `path` imports, anywhere in it (`from p import m` names module p.m)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & known


def test_server_log_and_replication_modules_form_no_import_cycle() -> None:
    paths = {module_name(p): p for package in PACKAGES for p in (ROOT / package).glob("*.py")}
    graph = {name: imports(path, set(paths)) - {name} for name, path in paths.items()}
    assert "amps.server.queue_manager" in graph["amps.server.instance"], "the walk sees imports"
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"import cycle: {' -> '.join(error.args[1])}") from None
