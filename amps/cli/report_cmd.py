"""`amps report queues`: a queue health report computed by Spark from a journal (issue 10)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click


@click.group()
def report() -> None:
    """Reports computed by Spark from a transaction log (needs pip install 'amps[spark]')."""


@report.command()
@click.option(
    "--journal",
    "journal",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Journal directory (read-only; safe while its instance runs).",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="HTML file to write (one page, plots inlined).",
)
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Spark master, e.g. spark://host:7077 (executors must see the journal path).",
)
def queues(journal: Path, out: Path, master: str) -> None:
    """Queue health: latency split into waiting and processing, redeliveries, expiries and dead
    letters by reason, throughput, the oldest unacknowledged message, transfers."""
    from amps.spark import require_spark

    try:
        require_spark()
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    from pyspark.sql import SparkSession

    from amps.spark.report import queue_report, render

    # Executors run this interpreter too, so they can import amps.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    ours = SparkSession.getActiveSession() is None  # else a caller's session: left running
    spark = SparkSession.builder.master(master).appName("amps-report-queues").getOrCreate()
    try:
        path = str(journal.resolve())
        health, end = queue_report(spark, path)
        out.write_text(render(health, path, end))
    finally:
        if ours:
            spark.stop()
    click.echo(f"wrote {out}: {len(health)} queue(s)")
