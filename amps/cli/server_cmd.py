"""`amps server`: start an instance from an AMPS-style XML configuration."""

from __future__ import annotations

import gc
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from amps.config import Config


@click.command("server")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="AMPS-style XML configuration (default: the built-in configuration).",
)
@click.option("--print-default-config", is_flag=True, help="Print the built-in configuration.")
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def server(
    config_path: Path | None, print_default_config: bool, check: bool, log_level: str
) -> None:
    """Start an instance (gRPC client API, admin HTTP with /metrics, transaction log)."""
    # No cyclic garbage collection until the instance is ready (Server.start turns it back on):
    # the imports and the recovery make few cycles, and its passes would delay the first delivery.
    gc.disable()
    from amps.config import DEFAULT_CONFIG_XML, decode_config, load_config
    from amps.config.load import MAX_CONFIG_BYTES
    from amps.errors import ConfigError
    from amps.server.fatal import FatalReason, fatal

    if print_default_config:
        click.echo(DEFAULT_CONFIG_XML, nl=False)
        return
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Relative paths in a config file are relative to the directory the instance starts in, as
    # with AMPS.
    base = Path.cwd()
    try:
        if config_path is None:
            text = DEFAULT_CONFIG_XML
        else:
            try:
                with config_path.open("rb") as file:
                    data = file.read(MAX_CONFIG_BYTES + 1)  # one more byte shows it is too long
            except OSError as exc:
                fatal(FatalReason.CONFIG_INVALID, f"cannot read {config_path}: {exc.strerror}")
            text = decode_config(data)
        config = load_config(text, dict(os.environ), check_expression=_check_expression)
    except ConfigError as exc:
        fatal(FatalReason.CONFIG_INVALID, f"{config_path or 'default configuration'}: {exc}")
    if check:
        click.echo(f"configuration of instance {config.name} is valid")
        return
    _prefetch_queue_store(config, base)
    from amps.server.app import run

    run(config, base)


def _prefetch_queue_store(config: Config, base: Path) -> None:
    """Start reading the queue store in a thread, while the server's modules are imported."""
    txlog = config.transaction_log
    if txlog is None or not config.queues:
        return
    from amps.server.queue_store import STORE_FILE_NAME, prefetch

    directory = Path(txlog.journal_directory)
    prefetch((directory if directory.is_absolute() else base / directory) / STORE_FILE_NAME)


def _check_expression(text: str, kind: str) -> None:
    from amps.expr import ExprKind, check_expression

    kinds = {
        "queue-filter": ExprKind.QUEUE_FILTER,
        "priority": ExprKind.PRIORITY,
        "barrier": ExprKind.BARRIER,
        "filter": ExprKind.FILTER,
    }
    check_expression(text, kinds.get(kind, ExprKind.FILTER))
