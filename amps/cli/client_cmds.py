"""Client commands: `amps publish`, `subscribe`, `ping`, `sow`, `sow-delete`.

Exit statuses: 0 success; 1 the instance refused something (a rejected publish, a failed
subscribe) or the client failed; 2 usage error (click); 3 no server reachable within
`--connect-timeout` (or, for publish, persistence not confirmed within `--flush-timeout`).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from amps.client import Client, Message, PublishFailure
    from amps.errors import AmpsError

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_UNREACHABLE = 3
PROGRESS_INTERVAL_S = 1.0
STDIN_CHUNK_BYTES = 1 << 16

F = TypeVar("F", bound=Callable[..., Any])


def credentials_callback(ctx: click.Context, _param: click.Parameter, user: str | None) -> None:
    """--user: the password comes from AMPS_PASSWORD or a prompt, never from an argument."""
    if not user:
        return
    password = os.environ.get("AMPS_PASSWORD")
    if password is None:
        if not sys.stdin.isatty():
            raise click.UsageError(
                "--user needs the password in AMPS_PASSWORD (standard input is not a terminal)"
            )
        password = click.prompt(f"password for {user}", hide_input=True)
    ctx.meta["amps.credentials"] = {"user": user, "password": password}


def _tls_callback(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    if path is not None:
        ctx.meta.setdefault("amps.tls", {})[str(param.name)] = path


def _logon_options() -> dict[str, Any]:
    """Client options from --user (user, password) and --tls-ca/--tls-cert/--tls-key."""
    meta = click.get_current_context().meta
    found: dict[str, Any] = {"user": "", "password": "", **meta.get("amps.credentials", {})}
    tls: dict[str, str] = meta.get("amps.tls", {})
    if ("tls_cert" in tls) != ("tls_key" in tls):
        raise click.UsageError("--tls-cert and --tls-key go together")
    if tls and "tls_ca" not in tls:
        raise click.UsageError("--tls-cert/--tls-key need --tls-ca (the CA to trust)")
    return found | tls


def _connection_options(command: F) -> F:
    """--server, --client-name, --connect-timeout, --user and --tls-*, shared by every client
    command."""
    for name, envvar, text in (
        ("--tls-key", "AMPS_TLS_KEY", "Client private key (PEM) for --tls-cert."),
        ("--tls-cert", "AMPS_TLS_CERT", "Client certificate (PEM), for a VerifyClient transport."),
        ("--tls-ca", "AMPS_TLS_CA", "Connect over TLS, trusting this CA file (PEM)."),
    ):
        command = click.option(
            name,
            envvar=envvar,
            expose_value=False,
            type=click.Path(exists=True, dir_okay=False),
            callback=_tls_callback,
            help=f"{text} (env {envvar})",
        )(command)
    command = click.option(
        "--user",
        envvar="AMPS_USER",
        expose_value=False,
        callback=credentials_callback,
        help="User to log on as (env AMPS_USER); the password from AMPS_PASSWORD or a prompt.",
    )(command)
    command = click.option(
        "--connect-timeout",
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        help="Seconds to keep trying to reach a server before exiting with status 3.",
    )(command)
    command = click.option(
        "--client-name",
        default=None,
        help="Client name (publish sequence numbers continue per name). Default: host and pid.",
    )(command)
    command = click.option(
        "--server",
        "servers",
        required=True,
        envvar="AMPS_SERVER",
        help="HOST:PORT, or a comma list tried in failover order (env AMPS_SERVER).",
    )(command)
    return command


def _default_name(kind: str) -> str:
    return f"amps-{kind}-{socket.gethostname()}-{os.getpid()}"


def _run(coroutine: Coroutine[Any, Any, int]) -> None:
    """Run a command body and exit with its status."""
    try:
        status = asyncio.run(coroutine)
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): not an error for a stream of lines.
        sys.stderr.close()
        status = EXIT_OK
    sys.exit(status)


async def _connect(client: Client, servers: str, timeout_s: float) -> int | None:
    """Connect; on failure print why and return the exit status."""
    from amps.errors import AmpsError, ConnectionBroken

    try:
        await client.connect(servers, timeout_s=timeout_s)
    except ConnectionBroken as error:
        click.echo(f"amps: cannot reach {servers} within {timeout_s:g} s: {error}", err=True)
        return EXIT_UNREACHABLE
    except AmpsError as error:
        click.echo(f"amps: logon refused: {type(error).__name__}: {error}", err=True)
        return EXIT_REFUSED
    return None


def _report_lost(server: str, error: AmpsError) -> None:
    """Say why a connection ended; the client reconnects (or fails over) on its own."""
    click.echo(f"amps: connection to {server} lost: {error}; reconnecting", err=True)


def message_json(message: Message) -> dict[str, Any]:
    """The JSON object printed for one message (payload parsed when it is JSON)."""
    import orjson

    try:
        data: Any = orjson.loads(message.data)
    except orjson.JSONDecodeError:
        data = message.text()
    result: dict[str, Any] = {"topic": message.topic, "bookmark": message.bookmark, "data": data}
    if message.is_queue and message.lease_deadline_us:
        deadline = datetime.datetime.fromtimestamp(
            message.lease_deadline_us / 1_000_000, tz=datetime.UTC
        )
        result["lease_deadline"] = deadline.isoformat(timespec="milliseconds").replace(
            "+00:00", "Z"
        )
    if message.is_queue and message.delivery_count:
        result["delivery_count"] = message.delivery_count
    return result


def _print_message(message: Message) -> None:
    import orjson

    sys.stdout.buffer.write(orjson.dumps(message_json(message)) + b"\n")
    sys.stdout.buffer.flush()


# --- publish ---------------------------------------------------------------------------------


@click.command("publish")
@_connection_options
@click.option("--topic", required=True, help="Topic to publish to.")
@click.option("--data", default=None, help="One message. Without it: one message per stdin line.")
@click.option(
    "--flush-timeout",
    type=click.FloatRange(min=0.1),
    default=120.0,
    show_default=True,
    help="Seconds to wait at the end for every message to be persisted (exit 3 when exceeded).",
)
def publish(
    servers: str,
    client_name: str | None,
    connect_timeout: float,
    topic: str,
    data: str | None,
    flush_timeout: float,
) -> None:
    """Publish messages and wait until every one is persisted (rides out instance restarts;
    with several servers, fails over to the next and republishes what was not persisted)."""
    _run(_publish(servers, client_name, connect_timeout, topic, data, flush_timeout))


async def _publish(
    servers: str,
    client_name: str | None,
    connect_timeout: float,
    topic: str,
    data: str | None,
    flush_timeout: float,
) -> int:
    from amps.client import Client

    def report(failure: PublishFailure) -> None:
        click.echo(f"amps: message {failure.seq} rejected: {failure.error}", err=True)

    client = Client(
        client_name or _default_name("publish"),
        **_logon_options(),
        publish_failed_callback=report,
        connection_lost_callback=_report_lost,
    )
    status = await _connect(client, servers, connect_timeout)
    if status is not None:
        return status
    started = time.monotonic()
    try:
        if data is not None:
            await client.publish(topic, data)
        else:
            await _publish_lines(client, topic, started)
        return await _finish_publish(client, started, flush_timeout)
    finally:
        await client.close()


async def _publish_lines(client: Client, topic: str, started: float) -> None:
    """Publish each non-empty stdin line, reporting progress about once a second."""
    loop = asyncio.get_running_loop()
    # read1 returns what is available, so a slow producer's lines are not held back.
    read: Callable[[int], bytes] = getattr(sys.stdin.buffer, "read1", sys.stdin.buffer.read)
    remainder = b""
    next_progress = started + PROGRESS_INTERVAL_S
    while True:
        chunk = await loop.run_in_executor(None, read, STDIN_CHUNK_BYTES)
        lines = (remainder + chunk).split(b"\n")
        remainder = lines.pop() if chunk else b""
        for line in lines:
            line = line.rstrip(b"\r")
            if line:
                await client.publish(topic, line)
        now = time.monotonic()
        if now >= next_progress:
            next_progress = now + PROGRESS_INTERVAL_S
            _print_progress(client, now - started)
        if not chunk:
            return


def _print_progress(client: Client, elapsed_s: float) -> None:
    stats = client.statistics()
    rate = stats.published / elapsed_s if elapsed_s > 0 else 0.0
    click.echo(
        f"amps: {stats.published} published, {stats.persisted} persisted "
        f"({rate:,.0f} msg/s, {stats.reconnects} reconnects)",
        err=True,
    )


async def _finish_publish(client: Client, started: float, flush_timeout: float) -> int:
    from amps.errors import AmpsError, ClientError

    try:
        await client.flush(flush_timeout)
    except TimeoutError:
        click.echo(f"amps: not all messages persisted within {flush_timeout:g} s", err=True)
        return EXIT_UNREACHABLE
    except ClientError:
        pass  # Each rejection was reported by the callback; the summary counts them.
    except AmpsError as error:
        click.echo(f"amps: publishing failed: {type(error).__name__}: {error}", err=True)
        return EXIT_REFUSED
    stats = client.statistics()
    elapsed_s = time.monotonic() - started
    rate = stats.persisted / elapsed_s if elapsed_s > 0 else 0.0
    click.echo(
        f"amps: {stats.persisted} persisted, {stats.rejected} rejected in {elapsed_s:.2f} s "
        f"({rate:,.0f} msg/s, {stats.republished} republished, {stats.reconnects} reconnects)",
        err=True,
    )
    return EXIT_REFUSED if stats.rejected else EXIT_OK


# --- subscribe -------------------------------------------------------------------------------


@click.command("subscribe")
@_connection_options
@click.option("--topic", required=True, help="Topic, topic regular expression, or queue.")
@click.option(
    "--bookmark",
    default=None,
    help="Replay from: epoch (or 0), now (or 0|1|), a bookmark, a time YYYYmmddTHHMMSSZ, or "
    "recent (after the --bookmark-store's bookmark for --sub-id; epoch when it has none).",
)
@click.option(
    "--bookmark-store",
    type=click.Path(dir_okay=False),
    default=None,
    help="File recording the last message printed per --sub-id, so a later run with "
    "--bookmark recent continues after it (a crash repeats at most the message being printed).",
)
@click.option(
    "--sub-id", default=None, help="Subscription id (the bookmark store's key). Default: generated."
)
@click.option("--filter", "filter_", default=None, help="Content filter expression.")
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after N messages.")
@click.option("--max-backlog", type=click.IntRange(min=0), default=None, help="Queue backlog.")
@click.option("--ack", is_flag=True, help="Acknowledge each queue message after printing it.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.0),
    default=None,
    help="Stop when no message arrives for this many seconds.",
)
def subscribe(
    servers: str,
    client_name: str | None,
    connect_timeout: float,
    topic: str,
    bookmark: str | None,
    bookmark_store: str | None,
    sub_id: str | None,
    filter_: str | None,
    count: int | None,
    max_backlog: int | None,
    ack: bool,
    timeout: float | None,
) -> None:
    """Print messages as JSON lines (topic, bookmark, data; lease_deadline for queues).

    With several servers it fails over to the next when its instance goes away, and resumes
    after the last message printed (a queue subscription takes new leases).
    """
    if bookmark_store is not None and sub_id is None:
        raise click.UsageError("--bookmark-store needs --sub-id (the store's key)")
    options = {"bookmark": bookmark, "filter": filter_, "max_backlog": max_backlog}
    options["sub_id"] = sub_id
    _run(
        _subscribe(
            servers, client_name, connect_timeout, topic, options, count, ack, timeout,
            bookmark_store,
        )
    )  # fmt: skip


async def _subscribe(
    servers: str,
    client_name: str | None,
    connect_timeout: float,
    topic: str,
    options: dict[str, Any],
    count: int | None,
    ack: bool,
    idle_timeout_s: float | None,
    bookmark_store: str | None,
) -> int:
    from amps.client import Client
    from amps.errors import AmpsError

    try:
        client = Client(
            client_name or _default_name("subscribe"),
            **_logon_options(),
            bookmark_store=bookmark_store,
            connection_lost_callback=_report_lost,
        )
    except (OSError, ValueError) as error:
        click.echo(f"amps: bookmark store: {error}", err=True)
        return EXIT_REFUSED
    status = await _connect(client, servers, connect_timeout)
    if status is not None:
        return status
    try:
        subscription = await client.subscribe(topic, **options)
        received = 0
        while count is None or received < count:
            message = await subscription.get(idle_timeout_s)
            if message is None:
                break
            _print_message(message)
            if ack:
                await message.ack()
            received += 1
    except AmpsError as error:
        click.echo(f"amps: {type(error).__name__}: {error}", err=True)
        return EXIT_REFUSED
    finally:
        await client.close()
    return EXIT_OK


# --- ping, sow, sow-delete -------------------------------------------------------------------


@click.command("ping")
@_connection_options
def ping(servers: str, client_name: str | None, connect_timeout: float) -> None:
    """Connect, log on and flush; print the round-trip time."""
    _run(_ping(servers, client_name, connect_timeout))


async def _ping(servers: str, client_name: str | None, connect_timeout: float) -> int:
    from amps.client import Client

    started = time.monotonic()
    client = Client(
        client_name or _default_name("ping"),
        **_logon_options(),
        reconnect=False,
    )
    status = await _connect(client, servers, connect_timeout)
    if status is not None:
        return status
    try:
        logon_ms = (time.monotonic() - started) * 1000.0
        round_trip_ms = await client.ping(connect_timeout)
        await client.flush(connect_timeout)
        target = client.statistics().connected_server
        click.echo(f"{target}: round trip {round_trip_ms:.2f} ms (connect+logon {logon_ms:.1f} ms)")
    except TimeoutError:
        click.echo("amps: no answer to flush", err=True)
        return EXIT_UNREACHABLE
    finally:
        await client.close()
    return EXIT_OK


@click.command("sow")
@_connection_options
@click.option("--topic", required=True, help="SOW topic or queue.")
@click.option("--filter", "filter_", default=None, help="Content filter expression.")
def sow(
    servers: str, client_name: str | None, connect_timeout: float, topic: str, filter_: str | None
) -> None:
    """Print the current messages of a SOW topic or queue as JSON lines."""
    _run(_query(servers, client_name, connect_timeout, lambda c: _sow(c, topic, filter_)))


async def _sow(client: Client, topic: str, filter_: str | None) -> None:
    for message in await client.sow(topic, filter_):
        _print_message(message)


@click.command("sow-delete")
@_connection_options
@click.option("--topic", required=True, help="SOW topic or queue.")
@click.option("--bookmark", default=None, help="Comma-separated bookmarks to delete/acknowledge.")
@click.option("--filter", "filter_", default=None, help="Delete/acknowledge what matches.")
@click.option("--cancel", is_flag=True, help="Queue: return the messages (with --bookmark).")
@click.option("--expire", is_flag=True, help="Queue: expire the messages (with --bookmark).")
def sow_delete(
    servers: str,
    client_name: str | None,
    connect_timeout: float,
    topic: str,
    bookmark: str | None,
    filter_: str | None,
    cancel: bool,
    expire: bool,
) -> None:
    """Delete from a SOW topic, or acknowledge queue messages; print how many."""
    if (bookmark is None) == (filter_ is None):
        raise click.UsageError("give exactly one of --bookmark and --filter")
    if cancel and expire:
        raise click.UsageError("--cancel and --expire exclude each other")
    if (cancel or expire) and bookmark is None:
        raise click.UsageError("--cancel and --expire need --bookmark")

    async def body(client: Client) -> None:
        deleted = await client.sow_delete(
            topic, bookmark=bookmark, filter=filter_, cancel=cancel, expire=expire
        )
        click.echo(f"{deleted} deleted")

    _run(_query(servers, client_name, connect_timeout, body))


async def _query(
    servers: str,
    client_name: str | None,
    connect_timeout: float,
    body: Callable[[Client], Coroutine[Any, Any, None]],
) -> int:
    from amps.client import Client
    from amps.errors import AmpsError

    client = Client(
        client_name or _default_name("query"),
        **_logon_options(),
        reconnect=False,
    )
    status = await _connect(client, servers, connect_timeout)
    if status is not None:
        return status
    try:
        await body(client)
    except AmpsError as error:
        click.echo(f"amps: {type(error).__name__}: {error}", err=True)
        return EXIT_REFUSED
    finally:
        await client.close()
    return EXIT_OK


COMMANDS: list[click.Command] = [publish, subscribe, ping, sow, sow_delete]
