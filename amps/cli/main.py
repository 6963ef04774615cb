"""Entry point of the `amps` command: one click group; each command family lives in its module."""

from __future__ import annotations

import importlib

import click

# Each module defines a click command or group named by the second element; adding a family is one
# line here. Modules are imported lazily so `amps --help` stays fast.
COMMAND_MODULES: list[tuple[str, str]] = [
    ("amps.cli.server_cmd", "server"),
    ("amps.cli.client_cmds", "COMMANDS"),
    ("amps.cli.expr_cmd", "expr"),
    ("amps.cli.journal_cmd", "journal"),
    ("amps.cli.admin_cmds", "admin"),
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="amps")
def cli() -> None:
    """AMPS-style broker: durable topics, bookmark replay and queues over gRPC."""


def _register() -> None:
    for module_name, attribute in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        command = getattr(module, attribute)
        if isinstance(command, list):
            for item in command:
                cli.add_command(item)
        else:
            cli.add_command(command)


def main() -> None:
    """Run the CLI (console script `amps`)."""
    _register()
    cli(prog_name="amps")


if __name__ == "__main__":
    main()
