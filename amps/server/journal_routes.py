"""Journal pages of the admin HTTP interface, and the lifecycle actions (AMPS-REFERENCE §5.3).

GET  `/amps/instance/journals[.json]`: segments (oldest first), holds and lifecycle counters.
POST `/amps/administrator/transaction_log/journals/<id>/<action>[?age=<duration>]`: run
`remove`, `archive` or `compress` on journal `<id>` and every older one (AMPS's rule), where
`<id>` is the segment's first txid (its file name, with or without the zero padding and the
`.journal` suffix) or `all`. AMPS uses GET for admin actions; a change of state here takes POST,
so a crawler or a prefetching browser cannot remove journals.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from typing import TYPE_CHECKING, Any

import orjson

from amps.config.units import parse_duration_ns
from amps.errors import JournalError
from amps.log.retention import ACTIONS, Action, SegmentState, Selection

if TYPE_CHECKING:
    from amps.server.instance import Instance

JSON = "application/json"
JOURNALS_PATH = "/amps/instance/journals"
ACTIONS_PREFIX = "/amps/administrator/transaction_log/journals/"


def _dumps(body: object) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_INDENT_2)


def _segment_json(segment: SegmentState) -> dict[str, Any]:
    return {
        "id": segment.first_txid,
        "first_txid": segment.first_txid,
        "last_txid": segment.last_txid,
        "size_bytes": segment.size_bytes,
        "last_timestamp": dt.datetime.fromtimestamp(segment.last_timestamp_us / 1e6, dt.UTC)
        .isoformat()
        .replace("+00:00", "Z"),
        "archived": segment.archived,
        "compressed": segment.compressed,
    }


def selection_json(action: Action, selection: Selection) -> dict[str, Any]:
    """What an action did: the segments it took, and those a hold kept."""
    return {
        "action": action,
        "segments": [s.first_txid for s in selection.chosen],
        "bytes": selection.chosen_bytes,
        "held": [{"id": s.first_txid, "holders": list(h)} for s, h in selection.held],
    }


class JournalRoutes:
    """The journal pages and actions of one instance."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance

    def list_json(self) -> tuple[str, bytes]:
        journal = self.instance.journal
        archive = journal.archive_directory
        lifecycle = self.instance.lifecycle.statistics
        body = {
            "directory": str(journal.directory),
            "archive_directory": str(archive) if archive is not None else None,
            "first_txid": journal.first_txid,
            "last_txid": journal.last_txid,
            "segments": [_segment_json(s) for s in journal.segment_states()],
            "holds": [
                {"holder": h.holder, "oldest_needed_txid": h.oldest_needed_txid}
                for h in self.instance.holds.holds()
            ],
            "lifecycle": {
                "segments": lifecycle.segments_by_action,
                "bytes": lifecycle.bytes_by_action,
                "held_segments": lifecycle.held_segments,
            },
        }
        return JSON, _dumps(body)

    async def act(self, rest: str) -> tuple[int, str, bytes]:
        """POST `<id>/<action>[?age=...]`: 200 with what was done, 400 bad request, 409 when
        the action cannot run on this instance."""
        target, _, query = rest.partition("?")
        name, _, action = target.rpartition("/")
        if action not in ACTIONS:
            return _error(400, f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
        name = name.removesuffix(".journal")
        if name != "all" and not (name.isascii() and name.isdigit()):
            return _error(400, f"journal id {name!r}: a segment's first txid, or all")
        age_text = urllib.parse.parse_qs(query).get("age", ["0s"])[-1]
        try:
            age_us = parse_duration_ns(age_text) // 1000
        except ValueError as exc:
            return _error(400, f"age {age_text!r}: {exc}")
        up_to = None if name == "all" else int(name)
        try:
            selection = await self.instance.lifecycle.run(
                action, age_us=age_us, up_to_first_txid=up_to
            )
        except JournalError as exc:
            return _error(409, exc.message)
        return 200, JSON, _dumps(selection_json(action, selection))


def _error(status: int, message: str) -> tuple[int, str, bytes]:
    return status, JSON, _dumps({"error": message})
