"""The administrator's switches: `amps admin queue proxied-transfer QUEUE enable|disable` (R7)
and `amps admin transports` / `amps admin transport enable|disable NAME` (InitialState).

Both are the steps of docs/operations/losing-an-instance.md. A switch that can deliver a message
twice (proxied transfer) or disconnect every client (disabling a transport) asks for
confirmation unless `--yes`. Exit statuses as for the other admin commands (amps.cli.admin_cmds).
"""

from __future__ import annotations

import json
import urllib.parse

import click

from amps.cli.admin_cmds import (
    json_or_exit,
    output_option,
    server_option,
    table,
    timeout_option,
)

QUEUE_ACTIONS_PATH = "/amps/administrator/queues"
TRANSPORTS_PATH = "/amps/instance/transports.json"
TRANSPORT_ACTIONS_PATH = "/amps/administrator/transports"

ENABLE_PROXIED_WARNING = (
    "While an owner of its messages is unreachable, {server} will claim them for its own "
    "subscribers and grant other instances' requests for them. If that owner is in fact alive "
    "(a partition, not a crash), or another instance has proxied transfer on for {queue} too, "
    "messages can be delivered twice. Enable it on ONE surviving instance only, and disable it "
    "once the owner is back."
)
DISABLE_PROXIED_WARNING = (
    "Messages of an unreachable owner will wait for it again on {server} (nothing moves back)."
)
DISABLE_TRANSPORT_WARNING = (
    "{server} will disconnect every client of transport {name} (their leases return to the "
    "queues) and refuse logons until `amps admin transport enable {name}`."
)

yes_option = click.option(
    "--yes", "-y", "assume_yes", is_flag=True, help="Do not ask for confirmation (scripts)."
)


def _confirm(warning: str, question: str, assume_yes: bool) -> None:
    """Ask before a risky switch; `--yes` answers for the operator. No answer = no."""
    if assume_yes:
        return
    click.echo(warning, err=True)
    click.confirm(question, default=False, abort=True, err=True)


@click.group("queue")
def queue() -> None:
    """Administrator actions on one queue of this instance."""


@queue.command("proxied-transfer")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("action", type=click.Choice(["enable", "disable"]))
@server_option
@timeout_option
@yes_option
def proxied_transfer(
    queue_name: str, action: str, server: str, timeout_s: float, assume_yes: bool
) -> None:
    """Switch proxied transfer (R7) for the replicated QUEUE on this instance only. Enabling
    moves nothing by itself; it is off again after a restart. Asks first unless --yes."""
    if action == "enable":
        warning = ENABLE_PROXIED_WARNING.format(server=server, queue=queue_name)
    else:
        warning = DISABLE_PROXIED_WARNING.format(server=server)
    _confirm(warning, f"{action.capitalize()} proxied transfer for {queue_name}?", assume_yes)
    quoted = urllib.parse.quote(queue_name, safe="")
    path = f"{QUEUE_ACTIONS_PATH}/{quoted}/{action}_proxied_transfer"
    body = json_or_exit(server, path, timeout_s, method="POST")
    state = "enabled" if body.get("proxied_transfer") else "disabled"
    note = "" if body.get("changed") else " (it already was)"
    click.echo(f"proxied transfer {state} for queue {body.get('queue', queue_name)}{note}")


# (heading, key in the transport JSON, format)
TRANSPORT_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("TRANSPORT", "name", "s"),
    ("TYPE", "type", "s"),
    ("PORT", "port", "d"),
    ("STATE", "state", "s"),
    ("INITIAL", "initial_state", "s"),
    ("REFUSED", "refused_logons", "d"),
)


@click.command("transports")
@server_option
@timeout_option
@output_option("of every transport")
def transports(server: str, timeout_s: float, output: str) -> None:
    """Every transport: type, port, enabled or disabled, logons refused while disabled."""
    body = json_or_exit(server, TRANSPORTS_PATH, timeout_s)
    if output == "json":
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(table(body.get("transports", []), TRANSPORT_COLUMNS))


@click.command("transport")
@click.argument("action", type=click.Choice(["enable", "disable"]))
@click.argument("name")
@server_option
@timeout_option
@yes_option
def transport(action: str, name: str, server: str, timeout_s: float, assume_yes: bool) -> None:
    """Enable or disable the client transport NAME. Disabled, it refuses every logon and its
    clients are disconnected; `disable` asks first unless --yes."""
    if action == "disable":
        warning = DISABLE_TRANSPORT_WARNING.format(server=server, name=name)
        _confirm(warning, f"Disable transport {name}?", assume_yes)
    quoted = urllib.parse.quote(name, safe="")
    path = f"{TRANSPORT_ACTIONS_PATH}/{quoted}/{action}"
    body = json_or_exit(server, path, timeout_s, method="POST")
    note = "" if body.get("changed") else " (it already was)"
    click.echo(f"transport {body.get('transport', name)} {body.get('state', action)}{note}")
