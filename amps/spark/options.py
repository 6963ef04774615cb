"""The options of the `amps` Spark source and sink, checked once on the driver.

Options hold text only (they are pickled to executors); the topic matcher and the content filter
are compiled where the records are read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from amps.errors import InvalidOptions
from amps.expr import ExprKind, compile_filter
from amps.log.bookmarks import parse_bookmark_spec
from amps.log.records import PublishRecord, Record
from amps.server.topics import topic_matcher

KINDS = ("publish", "all")


def _int(options: Mapping[str, str], name: str, default: int, low: int = 1) -> int:
    text = options.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidOptions(f"option {name}={text!r}: expected an integer") from None
    if value < low:
        raise InvalidOptions(f"option {name}={text!r}: must be at least {low}")
    return value


def servers(options: Mapping[str, str]) -> tuple[str, ...]:
    """The `server` option: one host:port or several, comma-separated (one partition each)."""
    text = options.get("server", "")
    found = tuple(part.strip() for part in text.split(",") if part.strip())
    for server in found:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidOptions(f"option server={text!r}: expected host:port[,host:port...]")
    return found


@dataclass(frozen=True)
class ReadOptions:
    """What a read selects: topic (literal or regex), content filter, bookmark range, kinds."""

    topic: str = ""
    filter: str = ""
    start: str = ""  # a bookmark spec: where the read starts (default: the epoch)
    end: str = ""  # a bookmark spec: where it ends (default: the durable end at planning)
    kinds: str = "publish"
    archive: str = ""  # the journal's archive directory, where archived segments are
    records_per_partition: int = 1_000_000
    # A journal read's range is cut into at least this many pieces of about the same size, so
    # that every core reads (Kafka's source has the same option).
    min_partitions: int = 1
    # The columns a batch read returns, in this order, when the reader was given a schema of
    # some of the source's columns (`.schema(...)`); empty: every column.
    columns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Check the options a person gave; InvalidOptions names the bad one."""
        read = cls(
            topic=options.get("topic", ""),
            filter=options.get("filter", ""),
            start=options.get("from", ""),
            end=options.get("to", ""),
            kinds=options.get("kinds", "publish").lower(),
            archive=options.get("archive", ""),
            records_per_partition=_int(options, "recordsPerPartition", 1_000_000),
            min_partitions=_int(options, "minPartitions", os.cpu_count() or 1),
        )
        if read.kinds not in KINDS:
            raise InvalidOptions(f"option kinds={read.kinds!r}: expected publish or all")
        for spec in (read.start, read.end):
            if spec:
                parse_bookmark_spec(spec)  # raises InvalidBookmark with the reason
        read.selector()  # a bad topic regex or filter fails here, on the driver
        return read

    def selector(self) -> Callable[[Record], bool] | None:
        """Which records to keep; None for all of them."""
        from amps.server.instance import expr_message

        matcher = topic_matcher(self.topic) if self.topic else None
        flt = compile_filter(self.filter, ExprKind.FILTER) if self.filter else None
        publishes_only = self.kinds == "publish"
        if matcher is None and flt is None and not publishes_only:
            return None

        def keep(record: Record) -> bool:
            if type(record) is not PublishRecord:
                # Queue records and transfers: by queue name when a topic is given.
                return not publishes_only and (
                    matcher is None or matcher.matches(record.queue)  # type: ignore[union-attr]
                )
            if matcher is not None and not matcher.matches(record.topic):
                return False
            return flt is None or flt.matches(expr_message(record))

        return keep
