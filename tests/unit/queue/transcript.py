"""A small transcript runner (raft datadriven style) for the queue engine.

A transcript is a text file of commands, each followed by the lines it printed, indented by
two spaces. The runner replays the commands and compares the whole text; set
``AMPS_REWRITE=1`` to write the new output back (review the diff before committing).

Commands: ``policy key=value ...`` (first), ``subscribe SUB client=C [max_backlog=N]
[filter=F]``, ``unsubscribe SUB client=C``, ``disconnect C``, ``publish xN [priority=P]
[barrier] [expiration=MS]``, ``tick +MS`` / ``tick MS``, ``ack C T1,T2 [cancel|expire]``,
``ackfilter C F [cancel|expire]``, ``sow [N]``, ``stats``. Messages get txids 1, 2, ...
and bookmarks (1, txid). Filters: ``all``, ``none``, ``even``, ``odd``, ``ids:1:4``,
``below:5``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from amps.queue import (
    Acked,
    AckedByFilter,
    AckOption,
    Action,
    ClientDisconnected,
    QueueEngine,
    QueuePolicy,
    Unsubscribed,
)
from tests.unit.queue.helpers import bookmarks, published, render, subscribed

Filter = Callable[[int], bool] | None


def parse_filter(text: str) -> Filter:
    """Filter names usable in transcripts."""
    if text == "all":
        return None
    if text == "none":
        return lambda txid: False
    if text == "even":
        return lambda txid: txid % 2 == 0
    if text == "odd":
        return lambda txid: txid % 2 == 1
    if text.startswith("ids:"):
        wanted = {int(t) for t in text[4:].split(":")}
        return lambda txid: txid in wanted
    if text.startswith("below:"):
        limit = int(text[6:])
        return lambda txid: txid < limit
    raise ValueError(f"unknown filter {text}")


class Transcript:
    """Holds the engine, the clock and the next txid while a transcript runs."""

    def __init__(self) -> None:
        self.engine = QueueEngine(QueuePolicy())
        self.now_ms = 0
        self.next_txid = 1

    def run(self, command: str) -> list[str]:
        """Execute one command line; return the lines it prints."""
        word, *args = command.split()
        options = dict(a.split("=", 1) for a in args if "=" in a)
        flags = [a for a in args if "=" not in a]
        handler = getattr(self, f"_cmd_{word}")
        result: list[str] = handler(flags, options)
        self.engine.check_invariants()
        return result

    def _actions(self, actions: list[Action]) -> list[str]:
        return [render(a) for a in actions]

    def _cmd_policy(self, flags: list[str], options: dict[str, str]) -> list[str]:
        values: dict[str, object] = {}
        for key, raw in options.items():
            if key in ("semantics", "fairness", "leasing"):
                values[key] = raw
            elif key in ("has_priority", "has_barrier"):
                values[key] = raw == "true"
            else:
                values[key] = int(raw)
        self.engine = QueueEngine(QueuePolicy(**values))  # type: ignore[arg-type]
        return []

    def _cmd_subscribe(self, flags: list[str], options: dict[str, str]) -> list[str]:
        backlog = int(options["max_backlog"]) if "max_backlog" in options else None
        matches = parse_filter(options.get("filter", "all"))
        event = subscribed(flags[0], options["client"], backlog, matches)
        return self._actions(self.engine.handle(event, self.now_ms))

    def _cmd_unsubscribe(self, flags: list[str], options: dict[str, str]) -> list[str]:
        event = Unsubscribed(flags[0], options["client"])
        return self._actions(self.engine.handle(event, self.now_ms))

    def _cmd_disconnect(self, flags: list[str], options: dict[str, str]) -> list[str]:
        return self._actions(self.engine.handle(ClientDisconnected(flags[0]), self.now_ms))

    def _cmd_publish(self, flags: list[str], options: dict[str, str]) -> list[str]:
        count = int(flags[0][1:]) if flags and flags[0].startswith("x") else 1
        expiration = int(options["expiration"]) if "expiration" in options else None
        out: list[str] = []
        for _ in range(count):
            event = published(
                self.next_txid,
                self.now_ms,
                priority=int(options.get("priority", "0")),
                barrier="barrier" in flags,
                expiration_ms=expiration,
            )
            self.next_txid += 1
            out.extend(self._actions(self.engine.handle(event, self.now_ms)))
        return out

    def _cmd_tick(self, flags: list[str], options: dict[str, str]) -> list[str]:
        step = flags[0]
        self.now_ms = self.now_ms + int(step[1:]) if step.startswith("+") else int(step)
        return [f"now={self.now_ms}", *self._actions(self.engine.on_deadline(self.now_ms))]

    def _cmd_ack(self, flags: list[str], options: dict[str, str]) -> list[str]:
        option = AckOption(flags[2]) if len(flags) > 2 else AckOption.NONE
        txids = [int(t) for t in flags[1].split(",")]
        event = Acked(flags[0], bookmarks(*txids), option)
        return self._actions(self.engine.handle(event, self.now_ms))

    def _cmd_ackfilter(self, flags: list[str], options: dict[str, str]) -> list[str]:
        option = AckOption(flags[2]) if len(flags) > 2 else AckOption.NONE
        matches = parse_filter(flags[1]) or (lambda txid: True)
        event = AckedByFilter(flags[0], matches, option)
        return self._actions(self.engine.handle(event, self.now_ms))

    def _cmd_sow(self, flags: list[str], options: dict[str, str]) -> list[str]:
        limit = int(flags[0]) if flags else 100
        return ["sow: " + (" ".join(map(str, self.engine.deliverable(limit))) or "-")]

    def _cmd_stats(self, flags: list[str], options: dict[str, str]) -> list[str]:
        stats = self.engine.statistics(self.now_ms)
        shown = [f"{f.name}={getattr(stats, f.name)}" for f in fields(stats)]
        wanted = set(flags)
        return [s for s in shown if not wanted or s.split("=")[0] in wanted]


def replay(text: str) -> str:
    """Run every command of a transcript; return the transcript with fresh output."""
    runner = Transcript()
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("  "):
            continue
        out.append(line)
        if line.strip() and not line.startswith("#"):
            out.extend("  " + printed for printed in runner.run(line))
    return "\n".join(out) + "\n"
