"""`amps journal dump`: a transaction log as JSON lines, read-only (safe on a live instance)."""

from __future__ import annotations

import base64
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from amps.errors import AmpsError
from amps.log.bookmarks import Epoch, parse_bookmark_spec
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueRecord, Record

if TYPE_CHECKING:
    from amps.log.verify import SegmentReport

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
@click.option(
    "--archive-directory",
    "archive",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The JournalArchiveDirectory: archived segments are read as part of the log.",
)
def dump(
    directory: Path, topic: str | None, start: str, limit: int | None, archive: Path | None
) -> None:
    """Print every record as one JSON line; never writes to DIRECTORY."""
    try:
        log = Journal.open(directory, read_only=True, archive_directory=archive)
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
        out.flush()  # here, so a closed pipe is met inside `amps` (which ends quietly), not at exit
    except AmpsError as exc:
        out.flush()
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(EXIT_JOURNAL_ERROR)
    finally:
        log.close_read_only()
    if log.recovery_note:
        click.echo(f"note: {log.recovery_note.replace('cut', 'ignored')}", err=True)


EXIT_DAMAGED = 1


@journal.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per segment, then a summary object.",
)
def verify(directory: Path, output: str) -> None:
    """Check every record of every segment; list each damaged range.

    Read-only and takes no lock: safe on a running instance's directory. Exits 1 when any
    segment holds damage, 0 when every record checks out.
    """
    from amps.log.verify import verify_directory

    segments = records = damaged = 0
    out = sys.stdout
    for report in verify_directory(directory):
        segments += 1
        records += report.record_count
        damaged += len(report.damaged)
        if output == "json":
            out.write(orjson.dumps(_report_json(report)).decode() + "\n")
        else:
            _print_report(report)
    summary = f"checked {segments} segments, {records} records: {damaged} damaged ranges"
    if output == "json":
        line = {"segments": segments, "records": records, "damaged_ranges": damaged}
        out.write(orjson.dumps(line).decode() + "\n")
    else:
        click.echo(summary)
    if damaged:
        if output == "text":
            click.echo("see docs/operations/failures.md for what to do next", err=True)
        sys.exit(EXIT_DAMAGED)


def _txids(first: int, last: int) -> str:
    return f"txids {first}..{last}" if first else "no records"


def _print_report(report: SegmentReport) -> None:
    head = (
        f"{report.name}: {report.size_bytes} bytes, format {report.format_version}, "
        f"{report.record_count} records ({_txids(report.first_txid, report.last_txid)})"
    )
    click.echo(head + (": ok" if not report.damaged else ""))
    for damage in report.damaged:
        after = "?" if damage.next_good_txid is None else str(damage.next_good_txid - 1)
        state = (
            "durable: its records could have been acknowledged"
            if damage.committed
            else "after the last commit marker: never acknowledged, a restart cuts it"
        )
        click.echo(
            f"  DAMAGED offsets {damage.start_offset}..{damage.end_offset} "
            f"({damage.size_bytes} bytes: {damage.problem}); records lost: txids "
            f"{damage.last_good_txid + 1}..{after}; {state}"
        )
    if report.incomplete_tail_bytes:
        click.echo(
            f"  incomplete last record ({report.incomplete_tail_bytes} bytes): being written, "
            "or torn by a crash (a restart cuts it)"
        )


def _report_json(report: SegmentReport) -> dict[str, Any]:
    return {
        "segment": report.name,
        "size_bytes": report.size_bytes,
        "format_version": report.format_version,
        "records": report.record_count,
        "first_txid": report.first_txid,
        "last_txid": report.last_txid,
        "incomplete_tail_bytes": report.incomplete_tail_bytes,
        "damaged": [
            {
                "start_offset": d.start_offset,
                "end_offset": d.end_offset,
                "problem": d.problem,
                "last_good_txid": d.last_good_txid,
                "next_good_txid": d.next_good_txid,
                "committed": d.committed,
            }
            for d in report.damaged
        ],
    }
