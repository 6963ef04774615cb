"""Where each origin instance's publishes stand, per topic: a `positions_only` probe's answer
(the Spark source's planning, docs/guide/spark.md) without reading the log.

The instance records, per topic and origin, the origin txid and local txid of the last publish
it dispatched. What was in the log before the instance started is read once, by the first probe
(`OriginPositions.load`); every later probe is answered from memory. A probe from a start txid
counts an origin only if its last publish of a matching topic lies at or after that txid: an
instance holds each origin's publishes in origin order, so that is exactly the origins a replay
from there would have met, with the positions it would have found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from amps.log.raw import RawReader
from amps.log.records import PublishRecord

if TYPE_CHECKING:
    from amps.log.journal import Journal
    from amps.server.lifecycle import HoldRegistry

# A record's (origin txid, local txid), per origin instance, per topic.
Positions = dict[str, dict[str, tuple[int, int]]]

READ_BATCH = 8192  # records per read of the history


class OriginPositions:
    """Per topic and origin instance, the last publish dispatched: (origin txid, local txid)."""

    def __init__(self, history_through: int) -> None:
        self._last: Positions = {}
        # Publishes at or below this txid were in the log at start: known once `load` ran.
        self.history_through = history_through
        self._loading: asyncio.Task[None] | None = None
        self.loaded = history_through == 0

    def dispatched(self, records: Iterable[PublishRecord]) -> None:
        """Record durable publishes as they are dispatched (in txid order)."""
        last = self._last
        for record in records:
            origins = last.get(record.topic)
            if origins is None:
                origins = last[record.topic] = {}
            origins[record.origin_instance] = (record.origin_txid, record.txid)

    def positions(
        self, matches: Callable[[str], bool], start_txid: int, literal: str | None = None
    ) -> dict[str, int]:
        """Per origin, the origin txid of its last publish to a matching topic at or after
        local txid `start_txid` (call `load` first). A `literal` topic is looked up rather
        than every topic matched (a stream probes every trigger)."""
        assert self.loaded, "OriginPositions.load has not run"
        out: dict[str, int] = {}
        topics = self._last.items() if literal is None else [(literal, self._last.get(literal))]
        for topic, origins in topics:
            if origins is None or not matches(topic):
                continue
            for origin, (origin_txid, txid) in origins.items():
                if txid >= start_txid and origin_txid > out.get(origin, 0):
                    out[origin] = origin_txid
        return out

    async def load(self, journal: Journal, holds: HoldRegistry) -> None:
        """Read the log's publishes up to `history_through` once (probes meanwhile wait for
        the same read; a read that failed, on damage, is tried again by the next probe)."""
        if self.loaded:
            return
        if self._loading is None or (self._loading.done() and self._loading.exception()):
            self._loading = asyncio.ensure_future(self._read_history(journal, holds))
        await asyncio.shield(self._loading)

    async def _read_history(self, journal: Journal, holds: HoldRegistry) -> None:
        history: dict[bytes, dict[bytes, tuple[int, int]]] = {}
        reader = RawReader(journal)
        # The lifecycle keeps the log from where the read is.
        unregister = holds.register("origin positions", lambda: reader.next_txid)
        try:
            position = 0
            while position <= self.history_through:
                publishes, reached = reader.read(position, self.history_through, READ_BATCH)
                if reached == position:
                    break  # nothing (more) durable there: the log starts later, or is empty
                position = reached
                for txid, _ts, _pub, _seq, _exp, topic, _corr, _data, origin, otx in publishes:
                    seen = history.get(topic)
                    if seen is None:
                        seen = history[topic] = {}
                    seen[origin] = (otx, txid)
                await asyncio.sleep(0)  # let live traffic run between batches
        finally:
            unregister()
            reader.close()
        # What was dispatched meanwhile is later than anything read here: it stays.
        for topic, raw in history.items():
            known = self._last.setdefault(topic.decode(), {})
            for origin, pair in raw.items():
                known.setdefault(origin.decode(), pair)
        self.loaded = True
