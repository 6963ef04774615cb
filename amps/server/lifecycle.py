"""The journal lifecycle: remove, archive and compress actions, on a schedule or on request.

AMPS-REFERENCE §1.4: journals leave the log only through `amps-action-do-remove-journal`,
`-archive-journal` and `-compress-journal`, each with an `Age`, usually under
`amps-action-on-schedule`. `amps.log.retention` decides which segments an action takes; this
module gathers the holds, runs one action at a time, logs what it did and what held it back.

Holds: anything that still needs the log from some txid on registers a function answering that
txid (`HoldRegistry.register`). Queues register their recovery point here; a replication link
registers each destination with the oldest position it has not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from amps.config import ActionConfig
from amps.config.actions import DO_JOURNAL_ACTIONS, ON_SCHEDULE
from amps.config.units import parse_duration_ns
from amps.errors import JournalError
from amps.log.journal import Journal
from amps.log.retention import ACTIONS, Action, Hold, Selection, select_segments

log = logging.getLogger("amps.lifecycle")

HoldSource = Callable[[], int | None]
"""Answers the oldest txid its holder still needs now, or None when it needs nothing."""


class HoldRegistry:
    """Who still needs which part of the log (the journal lifecycle never removes it)."""

    def __init__(self) -> None:
        self._sources: dict[int, tuple[str, HoldSource]] = {}
        self._next_token = 0

    def register(self, holder: str, oldest_needed_txid: HoldSource) -> Callable[[], None]:
        """Add a hold named `holder` (e.g. "destination amps-2"); returns its unregister."""
        self._next_token += 1
        token = self._next_token
        self._sources[token] = (holder, oldest_needed_txid)

        def unregister() -> None:
            self._sources.pop(token, None)

        return unregister

    def holds(self) -> list[Hold]:
        """Every current hold, by holder name (the oldest txid where a name holds twice)."""
        oldest: dict[str, int] = {}
        for holder, source in self._sources.values():
            txid = source()
            if txid is not None and txid < oldest.get(holder, txid + 1):
                oldest[holder] = txid
        return [Hold(holder, txid) for holder, txid in sorted(oldest.items())]


@dataclass(slots=True)
class LifecycleStatistics:
    """Counters for metrics and the admin interface."""

    segments_by_action: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))
    bytes_by_action: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))
    # Segments the last removal was asked for but kept, by the holder that kept them.
    held_segments: dict[str, int] = field(default_factory=dict)


class JournalLifecycle:
    """Runs lifecycle actions on a journal, one at a time."""

    def __init__(self, journal: Journal, holds: HoldRegistry, wall_us: Callable[[], int]) -> None:
        self.journal = journal
        self.holds = holds
        self.statistics = LifecycleStatistics()
        self._wall_us = wall_us
        self._lock = asyncio.Lock()
        self._schedules: list[asyncio.Task[None]] = []
        self._last_held_note = ""

    async def run(
        self, action: Action, *, age_us: int = 0, up_to_first_txid: int | None = None
    ) -> Selection:
        """Apply `action` to the segments older than `age_us` (and, if given, no newer than the
        segment starting at `up_to_first_txid`); JournalError when it cannot run at all."""
        journal = self.journal
        if action == "archive" and journal.archive_directory is None:
            raise JournalError("archive: no TransactionLog/JournalArchiveDirectory configured")
        async with self._lock:
            selection = select_segments(
                action,
                journal.segment_states(),
                self.holds.holds(),
                now_us=self._wall_us(),
                age_us=age_us,
                up_to_first_txid=up_to_first_txid,
            )
            firsts = [s.first_txid for s in selection.chosen]
            if action == "remove":
                if firsts:
                    await journal.remove_segments(firsts)
                self.statistics.held_segments = selection.held_by()
                self._note_held(selection)
            elif firsts and action == "archive":
                await journal.archive_segments(firsts)
            elif firsts:
                await journal.compress_segments(firsts)
        self._count(action, selection)
        return selection

    def _count(self, action: Action, selection: Selection) -> None:
        if not selection.chosen:
            return
        self.statistics.segments_by_action[action] += len(selection.chosen)
        self.statistics.bytes_by_action[action] += selection.chosen_bytes
        first, last = selection.chosen[0], selection.chosen[-1]
        log.info(
            "journal lifecycle: %s %d segment(s), %d bytes, txids %d..%d",
            {"remove": "removed", "archive": "archived", "compress": "compressed"}[action],
            len(selection.chosen),
            selection.chosen_bytes,
            first.first_txid,
            last.last_txid,
        )

    def _note_held(self, selection: Selection) -> None:
        """Log what keeps old segments, once per change (a schedule runs often)."""
        note = ""
        if selection.held:
            needed = {h.holder: h.oldest_needed_txid for h in self.holds.holds()}
            holders = "; ".join(
                f"{holder} needs txid {needed.get(holder, '?')} on ({count} segment(s))"
                for holder, count in sorted(selection.held_by().items())
            )
            count = len(selection.held)
            note = f"journal lifecycle: {count} segment(s) old enough to remove kept: {holders}"
        if note != self._last_held_note:
            if note:
                log.warning("%s", note)
            self._last_held_note = note

    # -- schedules ----------------------------------------------------------------------------

    def start_schedules(self, actions: tuple[ActionConfig, ...]) -> None:
        """One task per action with an `amps-action-on-schedule`, running its journal steps."""
        for action in actions:
            steps = [
                (DO_JOURNAL_ACTIONS[do.module], _duration_us(do.option("Age") or "0s"))
                for do in action.do
                if do.module in DO_JOURNAL_ACTIONS
            ]
            for on in action.on:
                if on.module == ON_SCHEDULE and steps:
                    every_s = _duration_us(on.option("Every") or "1h") / 1e6
                    self._schedules.append(asyncio.create_task(self._every(every_s, steps)))

    async def _every(self, every_s: float, steps: list[tuple[Action, int]]) -> None:
        while True:
            await asyncio.sleep(every_s)
            for action, age_us in steps:
                try:
                    await self.run(action, age_us=age_us)
                except JournalError as exc:
                    log.error("journal lifecycle: %s", exc.message)
                except Exception:
                    log.exception("journal lifecycle: %s failed; the journal is unchanged", action)

    async def stop(self) -> None:
        for task in self._schedules:
            task.cancel()
        for task in self._schedules:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._schedules.clear()


def _duration_us(text: str) -> int:
    return parse_duration_ns(text) // 1000
