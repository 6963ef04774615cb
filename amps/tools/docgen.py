"""The command line shared by the reference-page generators (`--check` for freshness tests)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def run(
    module: str,
    doc: str | None,
    default_output: Path,
    render: Callable[[], str],
    argv: list[str] | None,
) -> int:
    """Write the page, or with --check fail (exit 1) if the committed page is not current."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    parser.add_argument("output", nargs="?", type=Path, default=default_output)
    parser.add_argument("--check", action="store_true", help="fail if the page is not current")
    args = parser.parse_args(argv)
    text = render()
    output: Path = args.output
    if args.check:
        current = output.read_text() if output.exists() else ""
        if current != text:
            print(f"{output} is stale: run python -m {module}", file=sys.stderr)
            return 1
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"wrote {output}")
    return 0
