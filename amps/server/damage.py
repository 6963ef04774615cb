"""Damaged journal records met while reading: each logged once and counted (issue 11).

A read that meets a bad record (a bookmark replay, a record cache miss, queue recovery) hands
the `CorruptRecord` here. The damage is named by segment and offset in one ERROR line per
damaged spot, however many readers meet it, and counted for `/metrics`
(`amps_journal_damaged_records_total`). What the reader does next is its own business: a replay
ends its subscription with a failed ack, start-up exits 65.
"""

from __future__ import annotations

import logging

from amps.errors import CorruptRecord

log = logging.getLogger("amps.journal")

# Distinct damaged spots remembered (so each is logged once); past this, new ones are still
# logged and counted, and the oldest remembered is forgotten.
MAX_REMEMBERED = 1024


class DamageLog:
    """The damaged spots of the journal that reads have met, by (segment, offset)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], str] = {}
        self.count = 0

    def report(self, error: CorruptRecord, reader: str) -> bool:
        """Log and count `error` unless this spot was reported before; True when it is new."""
        key = (error.segment, error.offset)
        if key in self._seen:
            return False
        if len(self._seen) >= MAX_REMEMBERED:
            del self._seen[next(iter(self._seen))]
        self._seen[key] = error.message
        self.count += 1
        log.error(
            "damaged journal record met by %s: %s; the records there cannot be served "
            "(`amps journal verify` lists every damaged range; see docs/operations/failures.md)",
            reader,
            error.message,
        )
        return True
