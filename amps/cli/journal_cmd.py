"""`amps journal dump`: a transaction log as JSON lines, read-only (safe on a live instance)."""

from __future__ import annotations

import base64
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import orjson

from amps.errors import AmpsError
from amps.log.bookmarks import Epoch, parse_bookmark_spec
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueRecord, Record

BATCH_RECORDS = 4096
EXIT_JOURNAL_ERROR = 2


def _timestamp(timestamp_us: int) -> str:
    seconds, micros = divmod(timestamp_us, 1_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_json(record: Record) -> dict[str, Any]:
    """One record as a JSON-ready dict: data as UTF-8 text when it is, else base64."""
    out: dict[str, Any] = {
        "txid": record.txid,
        "timestamp": _timestamp(record.timestamp_us),
        "timestamp_us": record.timestamp_us,
    }
    if isinstance(record, PublishRecord):
        out |= {"kind": "publish", "topic": record.topic, "bookmark": record.bookmark.format()}
        try:
            out["data"] = record.data.decode("utf-8")
        except UnicodeDecodeError:
            out["data_base64"] = base64.b64encode(record.data).decode("ascii")
        if record.correlation_id:
            out["correlation_id"] = record.correlation_id
        if record.expiration_s:
            out["expiration_s"] = record.expiration_s
    elif isinstance(record, QueueRecord):
        out |= {
            "kind": "queue",
            "queue": record.queue,
            "action": record.action.name.lower(),
            "bookmarks": [b.format() for b in record.bookmarks],
        }
        if record.txids:
            out["txids"] = list(record.txids)
        if record.reason:
            out["reason"] = record.reason
        if record.deliveries:
            out["delivered_us"] = list(record.delivered_us)
            out["deliveries"] = list(record.deliveries)
    else:
        out |= {
            "kind": "transfer",
            "queue": record.queue,
            "bookmark": record.bookmark.format(),
            "from_instance": record.from_instance,
            "to_instance": record.to_instance,
            "proxied": record.proxied,
        }
    out |= {
        "origin_instance": record.origin_instance,
        "origin_group": record.origin_group,
        "origin_txid": record.origin_txid,
    }
    return out


@click.group()
def journal() -> None:
    """Inspect a transaction log directory."""


@journal.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--topic", default=None, help="Only publishes to this topic.")
@click.option("--from", "start", default="0", help="Bookmark spec to start from (default: 0).")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="Print at most N records.")
def dump(directory: Path, topic: str | None, start: str, limit: int | None) -> None:
    """Print every record as one JSON line; never writes to DIRECTORY."""
    try:
        log = Journal.open(directory, read_only=True)
    except AmpsError as exc:
        raise click.ClickException(exc.message) from None
    printed = 0
    out = sys.stdout.buffer
    try:
        spec = parse_bookmark_spec(start)
        txid = log.first_txid if isinstance(spec, Epoch) else log.find_start(spec)
        while limit is None or printed < limit:
            batch = log.read(txid, BATCH_RECORDS)
            if not batch:
                break
            txid = batch[-1].txid + 1
            for record in batch:
                if topic is not None and not (
                    isinstance(record, PublishRecord) and record.topic == topic
                ):
                    continue
                out.write(orjson.dumps(record_json(record)) + b"\n")
                printed += 1
                if limit is not None and printed >= limit:
                    break
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): as for `amps subscribe`, that ends the dump quietly.
        # Python would flush stdout again at exit and fail again; point it at /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    except AmpsError as exc:
        out.flush()
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(EXIT_JOURNAL_ERROR)
    finally:
        log.close_read_only()
    if log.recovery_note:
        click.echo(f"note: {log.recovery_note.replace('cut', 'ignored')}", err=True)
