"""Admin commands over the admin HTTP interface: `amps admin queues`, `status`, `metrics`,
`replication`, `journals` and `journal remove|archive|compress` (the switches, `queue
proxied-transfer`, `transports` and `transport enable|disable`, are in admin_switch_cmds).

`--server` is the admin address (`Admin/InetAddr`), not the gRPC transport. Exit statuses:
0 success; 1 the admin interface answered with an HTTP error (or an unreadable body); 2 usage
error (click); 3 the admin address could not be reached within `--timeout`, or what answered
there is not an admin interface (the gRPC transport's port, most likely).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, NoReturn

import click

EXIT_OK = 0
EXIT_HTTP_ERROR = 1
EXIT_UNREACHABLE = 3

QUEUES_PATH = "/amps/instance/queues.json"
STATUS_PATH = "/amps/instance.json"
REPLICATION_PATH = "/amps/instance/replication.json"
REPLICATION_ACTIONS_PATH = "/amps/administrator/replication"
JOURNALS_PATH = "/amps/instance/journals.json"
JOURNAL_ACTIONS_PATH = "/amps/administrator/transaction_log/journals"
METRICS_PATH = "/metrics"

# (heading, key in the queue JSON, format)
TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("QUEUE", "name", "s"),
    ("DEPTH", "queue_depth", "d"),
    ("BACKLOG", "backlog", "d"),
    ("DELIVERABLE", "deliverable_count", "d"),
    ("INACTIVE", "inactive_message_count", "d"),
    ("OLDEST_S", "seconds_behind", ".1f"),
    ("OLDEST_LEASE_S", "age_of_oldest_lease", ".1f"),
    ("SUBS", "subscription_count", "d"),
)
# Replicated queues only (R2-R7): who owns what, transfers, and the proxied-transfer switch.
OWNERSHIP_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("QUEUE", "name", "s"),
    ("OWNED", "owned", "d"),
    ("ELSEWHERE", "owned_elsewhere_count", "d"),
    ("IN", "transferred_in", "d"),
    ("OUT", "transferred_out", "d"),
    ("REQUESTED", "transfer_requests_sent", "d"),
    ("GRANTED", "transfer_requests_granted", "d"),
    ("UNANSWERED", "transfer_requests_unanswered", "d"),
    ("CLAIMS", "proxied_claims", "d"),
    ("LATENCY_S", "transfer_latency_seconds", ".3f"),
    ("PROXIED", "proxied_transfer", "s"),
)


class AdminError(Exception):
    """A request failed; `status` is the exit status to use."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def base_url(server: str) -> str:
    """`HOST:PORT` or `http://HOST:PORT` -> `http://HOST:PORT`."""
    server = server.strip().rstrip("/")
    if "://" not in server:
        server = f"http://{server}"
    if not server.startswith(("http://", "https://")):
        raise click.BadParameter(f"{server!r}: expected HOST:PORT or http://HOST:PORT")
    return server


def fetch(server: str, path: str, timeout_s: float, *, method: str = "GET") -> bytes:
    """GET (or POST) one admin path; AdminError on an unreachable address or an HTTP error."""
    url = base_url(server) + path
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    authorization = _authorization()
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=_ssl_context()) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", "replace").strip()
        with contextlib.suppress(ValueError, AttributeError):
            detail = str(json.loads(detail).get("error", detail))
        message = f"{url}: HTTP {error.code} {error.reason}" + (f": {detail}" if detail else "")
        raise AdminError(EXIT_HTTP_ERROR, message) from error
    except http.client.HTTPException as error:
        # An HTTP/2-only listener (the gRPC transport) answers HTTP/1.1 with bytes that are not
        # a status line: by far the likeliest cause is the client port given for the admin one.
        raise AdminError(
            EXIT_UNREACHABLE,
            f"{url} did not answer as an admin interface ({type(error).__name__}): is this the "
            "gRPC transport's port? --server takes the admin address (Admin/InetAddr)",
        ) from error
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        raise AdminError(
            EXIT_UNREACHABLE, f"cannot reach the admin interface at {url}: {reason}"
        ) from error


def fetch_json(server: str, path: str, timeout_s: float, *, method: str = "GET") -> Any:
    body = fetch(server, path, timeout_s, method=method)
    try:
        return json.loads(body)
    except ValueError as error:
        raise AdminError(EXIT_HTTP_ERROR, f"{path}: not JSON: {error}") from error


def json_or_exit(server: str, path: str, timeout_s: float, *, method: str = "GET") -> Any:
    """`fetch_json`, or the error printed and the command ended with its exit status."""
    try:
        return fetch_json(server, path, timeout_s, method=method)
    except AdminError as error:
        exit_on_error(error)


def table(items: list[dict[str, Any]], columns: tuple[tuple[str, str, str], ...]) -> str:
    """A fixed-width table, one row per item: (heading, JSON key, format) per column."""
    rows = [[heading for heading, _, _ in columns]]
    for item in items:
        row = []
        for _, key, fmt in columns:
            value = item.get(key)
            if isinstance(value, bool):
                row.append("yes" if value else "no")
            else:
                row.append("-" if value is None else format(value, fmt))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = []
    for row in rows:
        cells = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def queues_table(queues: list[dict[str, Any]]) -> str:
    """A fixed-width table, one row per queue; then the ownership of the replicated ones."""
    text = table(queues, TABLE_COLUMNS)
    replicated = [q for q in queues if q.get("replicated")]
    if replicated:
        text += "\n\n" + table(replicated, OWNERSHIP_COLUMNS)
    return text


def exit_on_error(error: AdminError) -> NoReturn:
    click.echo(f"amps: {error.message}", err=True)
    sys.exit(error.status)


def _tls_ca_callback(ctx: click.Context, _param: click.Parameter, path: str | None) -> None:
    if path is not None:
        ctx.meta["amps.admin.tls_ca"] = path


def server_option(command: Callable[..., None]) -> Callable[..., None]:
    """--server (the admin address), --tls-ca (for https) and --user (HTTP Basic)."""
    from amps.cli.client_cmds import credentials_callback

    command = click.option(
        "--user",
        envvar="AMPS_USER",
        expose_value=False,
        callback=credentials_callback,
        help="User for an instance with authentication (env AMPS_USER); the password from "
        "AMPS_PASSWORD or a prompt.",
    )(command)
    command = click.option(
        "--tls-ca",
        envvar="AMPS_TLS_CA",
        expose_value=False,
        type=click.Path(exists=True, dir_okay=False),
        callback=_tls_ca_callback,
        help="Trust this CA file (PEM) for an https:// admin address (env AMPS_TLS_CA).",
    )(command)
    return click.option(
        "--server",
        required=True,
        envvar="AMPS_ADMIN",
        help="Admin HTTP address HOST:PORT or https://HOST:PORT (Admin/InetAddr; env AMPS_ADMIN).",
    )(command)


def _authorization() -> str | None:
    """HTTP Basic credentials from --user (None without)."""
    context = click.get_current_context(silent=True)
    found = None if context is None else context.meta.get("amps.credentials")
    if not found:
        return None
    pair = f"{found['user']}:{found['password']}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def _ssl_context() -> ssl.SSLContext | None:
    context = click.get_current_context(silent=True)
    ca = None if context is None else context.meta.get("amps.admin.tls_ca")
    if ca is None:
        return None
    from amps.security.tls import client_ssl_context

    return client_ssl_context(ca)


timeout_option = click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the admin interface before exiting with status 3.",
)


def output_option(what: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """`--output table|json`; `what` says what the JSON holds beyond the table."""
    return click.option(
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help=f"A readable table, or the full JSON {what}.",
    )


@click.group("admin")
def admin() -> None:
    """Inspect a running instance through its admin HTTP interface."""


@admin.command("queues")
@server_option
@timeout_option
@output_option("of every queue")
def queues(server: str, timeout_s: float, output: str) -> None:
    """Depth, backlog (leased), deliverable and oldest ages of every queue; for replicated
    queues, a second table: owned here and elsewhere, transfers, requests, proxied claims, the
    transfer-latency estimate and whether proxied transfer is on."""
    body = json_or_exit(server, QUEUES_PATH, timeout_s)
    items: list[dict[str, Any]] = body.get("queues", []) if isinstance(body, dict) else []
    if output == "json":
        click.echo(json.dumps(body, indent=2))
    elif not items:
        click.echo("no queues configured")
    else:
        click.echo(queues_table(items))


@admin.command("status")
@server_option
@timeout_option
def status(server: str, timeout_s: float) -> None:
    """The instance status JSON (/amps/instance.json)."""
    body = json_or_exit(server, STATUS_PATH, timeout_s)
    click.echo(json.dumps(body, indent=2))


@admin.command("metrics")
@server_option
@timeout_option
def metrics(server: str, timeout_s: float) -> None:
    """The raw Prometheus exposition (/metrics)."""
    try:
        body = fetch(server, METRICS_PATH, timeout_s)
    except AdminError as error:
        exit_on_error(error)
    click.echo(body.decode("utf-8", "replace"), nl=False)


# (heading, key in the destination JSON, format)
REPLICATION_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("DESTINATION", "name", "s"),
    ("CONNECTED", "connected", "s"),
    ("SYNC", "sync_type", "s"),
    ("DOWNGRADED", "downgraded", "s"),
    ("BEHIND", "messages_behind", "d"),
    ("BEHIND_S", "seconds_behind", ".1f"),
    ("ACKED_TXID", "acknowledged_txid", "d"),
    ("RESYNCS", "resyncs", "d"),
)


# (heading, key in an `origin_lag` entry, format): how far this instance is behind each origin
ORIGIN_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("ORIGIN", "origin", "s"),
    ("BEHIND", "messages_behind", "d"),
    ("BEHIND_S", "seconds_behind", ".1f"),
    ("HELD_TXID", "origin_txid", "d"),
)


def replication_table(destinations: list[dict[str, Any]]) -> str:
    """A fixed-width table, one row per destination."""
    return table(destinations, REPLICATION_COLUMNS)


@admin.command("replication")
@server_option
@timeout_option
@output_option("(links, per-origin positions, reachability)")
@click.argument("action", required=False, type=click.Choice(["downgrade", "upgrade"]))
@click.argument("destination", required=False)
def replication(
    server: str, timeout_s: float, output: str, action: str | None, destination: str | None
) -> None:
    """Per destination: connected, sync or async (downgraded?), messages and seconds behind,
    last acknowledged txid, resyncs; per origin: messages and seconds this instance is behind
    it, and the origin txid it holds. `downgrade DESTINATION` / `upgrade DESTINATION` change a
    sync destination (L2)."""
    if action is not None:
        if not destination:
            raise click.UsageError(f"{action} needs the DESTINATION's Name")
        _sync_action(server, timeout_s, destination, action)
        return
    body = json_or_exit(server, REPLICATION_PATH, timeout_s)
    if output == "json":
        click.echo(json.dumps(body, indent=2))
        return
    destinations = body.get("destinations", []) if isinstance(body, dict) else []
    if not destinations:
        click.echo("no replication destinations configured")
    else:
        click.echo(replication_table(destinations))
    origins = body.get("origin_lag", []) if isinstance(body, dict) else []
    if origins:
        click.echo("")
        click.echo(table(origins, ORIGIN_COLUMNS))
    heard = body.get("reachability", []) if isinstance(body, dict) else []
    if heard:
        click.echo("")
        for entry in heard:
            click.echo(f"heard from {entry['instance']} {entry['seconds_since_heard']:.1f} s ago")
    links = body.get("links", []) if isinstance(body, dict) else []
    refused = [(link["peer"], link["refused"]) for link in links if link.get("refused")]
    if refused:
        click.echo("")
        for peer, refusal in refused:
            click.echo(f"link with {peer} refused ({refusal['code']}): {refusal['message']}")


def _sync_action(server: str, timeout_s: float, destination: str, verb: str) -> None:
    path = f"{REPLICATION_ACTIONS_PATH}/{urllib.parse.quote(destination, safe='')}/{verb}"
    try:
        body = fetch(server, path, timeout_s, method="POST")
    except AdminError as error:
        exit_on_error(error)
    click.echo(body.decode("utf-8", "replace"))


@admin.command("journals")
@server_option
@timeout_option
@output_option("(segments, holds, lifecycle counters)")
def journals(server: str, timeout_s: float, output: str) -> None:
    """Journal segments (oldest first) and what holds them back from removal."""
    body = json_or_exit(server, JOURNALS_PATH, timeout_s)
    if output == "json":
        click.echo(json.dumps(body, indent=2))
        return
    rows = [("ID", "LAST_TXID", "BYTES", "NEWEST_RECORD", "WHERE")]
    for segment in body.get("segments", []):
        where = "archive" if segment.get("archived") else "journal"
        rows.append(
            (str(segment["id"]), str(segment["last_txid"]), str(segment["size_bytes"]),
             str(segment["last_timestamp"]), where)
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    for hold in body.get("holds", []):
        click.echo(f"hold: {hold['holder']} needs txid {hold['oldest_needed_txid']} on")


@admin.command("journal")
@click.argument("action", type=click.Choice(["remove", "archive", "compress"]))
@click.argument("journal_id")
@server_option
@timeout_option
@click.option(
    "--age",
    default="0s",
    show_default=True,
    help="Only segments whose newest record is at least this old (e.g. 1h, 7d).",
)
def journal(action: str, journal_id: str, server: str, timeout_s: float, age: str) -> None:
    """Remove, archive or compress journal JOURNAL_ID (a segment's first txid, or `all`) and
    every older one. Removal keeps what a queue or a destination still needs."""
    path = f"{JOURNAL_ACTIONS_PATH}/{journal_id}/{action}?age={urllib.parse.quote(age)}"
    body = json_or_exit(server, path, timeout_s, method="POST")
    done = {"remove": "removed", "archive": "archived", "compress": "compressed"}[action]
    segments = body.get("segments", [])
    click.echo(f"{done} {len(segments)} segment(s), {body.get('bytes', 0)} bytes")
    for held in body.get("held", []):
        click.echo(f"kept {held['id']}: needed by {', '.join(held['holders'])}")


def _add_switches() -> None:
    # Imported here: the switch commands use this module's helpers.
    from amps.cli.admin_switch_cmds import queue, transport, transports

    for command in (queue, transport, transports):
        admin.add_command(command)


_add_switches()
