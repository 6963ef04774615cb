"""`amps report queues`: queue health computed by Spark from a journal, as one HTML page.

Per queue, from the removal records (which name each message's last delivery time and delivery
count, queue record format 2) joined to the publishes they remove: publish -> acknowledge
latency percentiles per minute, split into waiting (publish -> last delivery) and processing
(last delivery -> acknowledgement); deliveries per message and redeliveries; expiries and dead
letters by reason; removals per minute; the oldest message still unacknowledged; ownership
transfers per instance pair; and messages acknowledged on two instances (only a proxied
transfer can cause that).
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PERCENTILES = (0.5, 0.9, 0.99)
EXPIRY_ACTIONS = ("expired", "expire")


@dataclass
class QueueHealth:
    """The figures of one queue; times in seconds."""

    queue: str
    acknowledged: int = 0
    latency_s: dict[str, float] = field(default_factory=dict)  # p50/p90/p99 publish -> ack
    waiting_s: dict[str, float] = field(default_factory=dict)  # publish -> last delivery
    processing_s: dict[str, float] = field(default_factory=dict)  # last delivery -> ack
    deliveries: dict[int, int] = field(default_factory=dict)  # deliveries -> messages
    redeliveries: int = 0
    expired_by_reason: dict[str, int] = field(default_factory=dict)
    oldest_unacknowledged: str | None = None  # bookmark
    oldest_unacknowledged_age_s: float | None = None
    transfers: dict[str, int] = field(default_factory=dict)  # "from -> to" -> count
    double_acknowledged: list[str] = field(default_factory=list)  # bookmarks
    per_minute: list[dict[str, Any]] = field(default_factory=list)  # plots' rows


def queue_report(spark: SparkSession, journal: str) -> tuple[list[QueueHealth], datetime]:
    """The figures of every queue named in the journal at `journal`, and the journal's end."""
    from pyspark.sql import functions as F

    records = spark.read.format("amps").option("kinds", "all").load(journal).cache()
    end = records.agg(F.max("timestamp")).first()[0]  # type: ignore[index]
    publishes = records.where(F.col("kind") == "publish").select(
        F.col("txid").alias("message_txid"), F.col("timestamp").alias("published_at"),
        "bookmark", "topic",
    )  # fmt: skip
    queue_records = records.where(F.col("kind") == "queue")
    zipped = queue_records.select(
        "queue", "action", "reason", F.col("timestamp").alias("removed_at"), "origin_instance",
        F.posexplode("txids").alias("pos", "message_txid"), "delivered", "deliveries",
    )  # fmt: skip
    by_txid = zipped.select(
        "queue",
        "action",
        "reason",
        "removed_at",
        "origin_instance",
        "message_txid",
        F.when(F.col("delivered").isNotNull(), F.col("delivered")[F.col("pos")]).alias(
            "delivered_at"
        ),
        F.when(F.col("deliveries").isNotNull(), F.col("deliveries")[F.col("pos")]).alias(
            "delivery_count"
        ),
    ).join(publishes, "message_txid", "left")
    # A peer's removal, logged here with its origin, names its messages by bookmark (their
    # txids are the peer's): matched to this log's publishes by bookmark.
    by_bookmark = (
        queue_records.where(F.col("txids").isNull() | (F.size("txids") == 0))
        .select(
            "queue", "action", "reason", F.col("timestamp").alias("removed_at"),
            "origin_instance", F.explode("bookmarks").alias("bookmark"),
        )
        .join(publishes, "bookmark", "left")
    )  # fmt: skip
    removals = (
        by_txid.unionByName(by_bookmark, allowMissingColumns=True)
        .withColumn(
            "latency_s",
            F.col("removed_at").cast("double") - F.col("published_at").cast("double"),
        )
        .withColumn(
            "waiting_s",
            F.when(
                F.col("delivered_at") > F.lit(0).cast("timestamp"),
                F.col("delivered_at").cast("double") - F.col("published_at").cast("double"),
            ),
        )
        .withColumn(
            "processing_s",
            F.when(
                F.col("delivered_at") > F.lit(0).cast("timestamp"),
                F.col("removed_at").cast("double") - F.col("delivered_at").cast("double"),
            ),
        )
        .cache()
    )
    queues = [r.queue for r in removals.select("queue").distinct().orderBy("queue").collect()]
    report = [_queue_health(q, removals, records, publishes, end) for q in queues]
    return report, end


def _percentiles(df: DataFrame, column: str) -> dict[str, float]:
    from pyspark.sql import functions as F

    row = (
        df.where(F.col(column).isNotNull())
        .agg(F.percentile(column, list(PERCENTILES)).alias("p"), F.count(column).alias("n"))
        .first()
    )
    if row is None or not row.n:
        return {}
    return {f"p{round(p * 100)}": float(v) for p, v in zip(PERCENTILES, row.p, strict=True)}


def _queue_health(
    queue: str, removals: DataFrame, records: DataFrame, publishes: DataFrame, end: datetime
) -> QueueHealth:
    from pyspark.sql import functions as F

    mine = removals.where(F.col("queue") == queue)
    acked = mine.where(F.col("action") == "ack")
    health = QueueHealth(queue, acknowledged=acked.count())
    health.latency_s = _percentiles(acked, "latency_s")
    health.waiting_s = _percentiles(acked, "waiting_s")
    health.processing_s = _percentiles(acked, "processing_s")
    counted = mine.where(F.col("delivery_count").isNotNull())
    health.deliveries = {
        int(r.delivery_count): int(r["count"])
        for r in counted.groupBy("delivery_count").count().collect()
    }
    health.redeliveries = sum(max(0, d - 1) * n for d, n in health.deliveries.items())
    expired = mine.where(F.col("action").isin(*EXPIRY_ACTIONS))
    health.expired_by_reason = {
        (r.reason or "forced"): int(r["count"]) for r in expired.groupBy("reason").count().collect()
    }
    # Unacknowledged: publishes on this queue's topics (as its removals show them) never removed.
    topics = [r.topic for r in mine.select("topic").distinct().collect() if r.topic]
    if topics:
        removed = mine.select("message_txid")
        waiting = publishes.where(F.col("topic").isin(*topics)).join(
            removed, "message_txid", "left_anti"
        )
        oldest = waiting.orderBy("message_txid").first()
        if oldest is not None:
            health.oldest_unacknowledged = oldest.bookmark
            health.oldest_unacknowledged_age_s = (end - oldest.published_at).total_seconds()
    transfers = records.where((F.col("kind") == "transfer") & (F.col("queue") == queue))
    health.transfers = {
        f"{r.from_instance} -> {r.to_instance}": int(r["count"])
        for r in transfers.groupBy("from_instance", "to_instance").count().collect()
    }
    health.double_acknowledged = sorted(
        r.bookmark
        for r in acked.groupBy("bookmark")
        .agg(F.countDistinct("origin_instance").alias("instances"))
        .where(F.col("instances") > 1)
        .collect()
    )
    minute = F.date_trunc("minute", "removed_at").alias("minute")
    health.per_minute = [
        r.asDict()
        for r in mine.groupBy(minute)
        .agg(
            F.count("*").alias("removed"),
            F.sum(F.when(F.col("action") == "ack", 1).otherwise(0)).alias("acked"),
            F.percentile("waiting_s", 0.5).alias("waiting_p50"),
            F.percentile("waiting_s", 0.99).alias("waiting_p99"),
            F.percentile("processing_s", 0.5).alias("processing_p50"),
            F.percentile("processing_s", 0.99).alias("processing_p99"),
            F.percentile("latency_s", 0.99).alias("latency_p99"),
        )
        .orderBy("minute")
        .collect()
    ]
    return health


# --------------------------------------------------------------------------------- the page


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _plots(health: QueueHealth) -> list[tuple[str, str]]:
    """(title, base64 PNG) per plot of one queue."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    plots: list[tuple[str, str]] = []
    minutes = [r["minute"] for r in health.per_minute]
    figure, axes = plt.subplots(figsize=(8, 3))
    for key, label in (
        ("waiting_p50", "waiting p50"), ("waiting_p99", "waiting p99"),
        ("processing_p50", "processing p50"), ("processing_p99", "processing p99"),
        ("latency_p99", "publish -> ack p99"),
    ):  # fmt: skip
        axes.plot(minutes, [r[key] for r in health.per_minute], marker=".", label=label)
    axes.set_ylabel("seconds")
    axes.legend(fontsize="small")
    figure.autofmt_xdate()
    plots.append(("Latency per minute: waiting and processing", _png(figure)))
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(8, 3))
    axes.bar(minutes, [r["removed"] for r in health.per_minute], width=0.0005, label="removed")
    axes.plot(minutes, [r["acked"] for r in health.per_minute], "k.", label="acknowledged")
    axes.set_ylabel("messages per minute")
    axes.legend(fontsize="small")
    figure.autofmt_xdate()
    plots.append(("Throughput per minute", _png(figure)))
    plt.close(figure)

    if health.deliveries:
        figure, axes = plt.subplots(figsize=(5, 3))
        counts = sorted(health.deliveries)
        axes.bar([str(c) for c in counts], [health.deliveries[c] for c in counts])
        axes.set_xlabel("deliveries per message")
        axes.set_ylabel("messages")
        plots.append(("Deliveries per message", _png(figure)))
        plt.close(figure)
    return plots


def _table(rows: list[tuple[str, object]]) -> str:
    cells = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows
    )
    return f"<table>{cells}</table>"


def _seconds(figures: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f} s" for k, v in figures.items()) or "n/a"


def render(report: list[QueueHealth], journal: str, end: datetime | None) -> str:
    """The report as one self-contained HTML page (plots inlined as PNG data)."""
    sections = []
    for health in report:
        rows: list[tuple[str, object]] = [
            ("acknowledged", health.acknowledged),
            ("publish -> ack latency", _seconds(health.latency_s)),
            ("waiting (publish -> last delivery)", _seconds(health.waiting_s)),
            ("processing (last delivery -> ack)", _seconds(health.processing_s)),
            ("redeliveries", health.redeliveries),
            ("expired / dead-lettered by reason", health.expired_by_reason or "none"),
            ("oldest unacknowledged", health.oldest_unacknowledged or "none"),
            ("its age at the journal's end", "n/a" if health.oldest_unacknowledged_age_s is None
             else f"{health.oldest_unacknowledged_age_s:.1f} s"),
            ("ownership transfers", health.transfers or "none"),
            ("acknowledged on two instances", health.double_acknowledged or "none"),
        ]  # fmt: skip
        images = "".join(
            f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' "
            f"src='data:image/png;base64,{data}'>"
            for title, data in _plots(health)
        )
        sections.append(f"<h2>Queue {html.escape(health.queue)}</h2>{_table(rows)}{images}")
    when = "" if end is None else end.astimezone(UTC).isoformat()
    body = "".join(sections) or "<p>No queue records in this journal.</p>"
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Queue health</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>"
        f"<h1>Queue health</h1><p>Journal {html.escape(journal)}, up to {html.escape(when)}</p>"
        f"{body}</body></html>"
    )
