"""Entry point of the `amps` command: one click group; each command family lives in its module."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

# Each command is named here with the module and attribute that define it; adding a family is a
# few lines here. A module is imported only when one of its commands runs (or for --help), so
# `amps server` does not pay for the client, expression, journal and admin commands at start.
COMMANDS: dict[str, tuple[str, str]] = {
    "server": ("amps.cli.server_cmd", "server"),
    "publish": ("amps.cli.client_cmds", "publish"),
    "subscribe": ("amps.cli.client_cmds", "subscribe"),
    "ping": ("amps.cli.client_cmds", "ping"),
    "sow": ("amps.cli.client_cmds", "sow"),
    "sow-delete": ("amps.cli.client_cmds", "sow_delete"),
    "expr": ("amps.cli.expr_cmd", "expr"),
    "journal": ("amps.cli.journal_cmd", "journal"),
    "admin": ("amps.cli.admin_cmds", "admin"),
    "users": ("amps.cli.users_cmd", "users"),
    "report": ("amps.cli.report_cmd", "report"),
}


def _load(name: str) -> click.Command:
    module_name, attribute = COMMANDS[name]
    command = getattr(importlib.import_module(module_name), attribute)
    assert isinstance(command, click.Command)
    return command


class LazyGroup(click.Group):
    """A group whose commands (from COMMANDS) are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a reader of stdout that goes away (`| head`) ends it quietly, 0."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # click would exit 1. Python flushes stdout again at exit and would fail again: point
            # it at /dev/null first.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(0)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            command = _load(cmd_name)
            self.add_command(command, cmd_name)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="amps")
def cli() -> None:
    """AMPS-style broker: durable topics, bookmark replay and queues over gRPC."""


def _register() -> None:
    """Import and add every command now (the CLI reference generator walks them all)."""
    for name in COMMANDS:
        if name not in cli.commands:
            cli.add_command(_load(name), name)


def main() -> None:
    """Run the CLI (console script `amps`)."""
    cli(prog_name="amps")


if __name__ == "__main__":
    main()
