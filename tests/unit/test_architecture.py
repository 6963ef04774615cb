"""The sans-IO split (STYLE.md §4.6): core modules import no I/O, clock or adapter code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE_PACKAGES = ["amps/queue", "amps/expr"]
CORE_MODULES = [
    "amps/errors.py",
    "amps/log/records.py",
    "amps/log/codec.py",
    "amps/log/received.py",
    "amps/log/dedup.py",
    "amps/log/recovery.py",
    "amps/log/retention.py",
    "amps/client/policy.py",
    "amps/batching.py",
    "amps/publishing.py",
    "replication/frames.py",
    "replication/initial_owners.py",
    "replication/latency.py",
    "replication/origins.py",
    "replication/link_core.py",
    "replication/admission.py",
    "replication/ownership.py",
    "replication/queue_replica.py",
    "replication/queue_snapshot.py",
    "amps/security/users.py",
    "replication/positions.py",
    "replication/reachability.py",
    "replication/routing.py",
    "replication/topology.py",
    "replication/transfers.py",
]
FORBIDDEN = {
    "asyncio",
    "grpc",
    "time",
    "socket",
    "threading",
    "aiosqlite",
    "prometheus_client",
    "amps.server",
    "amps.client.aio",
    "amps.client.blocking",
    "replication.link",
}


def core_files() -> list[Path]:
    files = [ROOT / m for m in CORE_MODULES if (ROOT / m).exists()]
    for package in CORE_PACKAGES:
        files.extend(sorted((ROOT / package).rglob("*.py")))
    return files


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_module_imports_no_io(path: Path) -> None:
    """Cores take time and randomness as arguments and never do I/O."""
    bad = [
        name
        for name in imported_modules(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_public_exports_are_sorted_and_exist() -> None:
    import amps

    assert amps.__all__ == sorted(amps.__all__)
    for name in amps.__all__:
        assert hasattr(amps, name)


def test_generated_protobuf_code_is_fresh() -> None:
    """`make proto` output is committed; stale generated code fails here and in `make lint`."""
    pytest.importorskip("grpc_tools")
    from amps.tools.genproto import main

    assert main(["--check", str(ROOT / "proto"), str(ROOT)]) == 0


# What `amps server` must not import before its first delivery (issue 4, Q16: restart time).
# Each is imported on first use instead: a scrape, a reflection request, an expression, a command.
NOT_IMPORTED_AT_START = (
    "prometheus_client",
    "grpc_reflection.v1alpha",  # (grpc itself imports the empty top-level package)
    "amps.metrics",
    "amps.expr.parser",
    "amps.expr.codegen",
    "amps.expr.nodes",
    "amps.expr.registry",
    "amps.cli.client_cmds",
    "amps.cli.expr_cmd",
    "amps.cli.journal_cmd",
    "amps.cli.admin_cmds",
    "amps.client",
    "argon2",  # the users file's hashing: only with a users file (Server._authenticator)
    "amps.security.users",
    "numpy",  # a snapshot's look-up of live bookmarks (amps.queue.bulk.sorted_members)
)


def test_server_start_imports_only_what_a_first_delivery_needs() -> None:
    code = (
        "import sys, click\n"
        "from amps.cli.main import cli\n"
        "cli.get_command(click.Context(cli), 'server')\n"
        "import amps.server.app\n"
        "print('\\n'.join(sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = set(result.stdout.split())
    assert "amps.cli.server_cmd" in loaded
    assert "amps.server.app" in loaded
    early = [
        name
        for name in loaded
        if any(name == m or name.startswith(m + ".") for m in NOT_IMPORTED_AT_START)
    ]
    assert not early, f"imported at server start: {sorted(early)}"
