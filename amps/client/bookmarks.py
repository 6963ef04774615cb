"""Bookmark stores: per subscription id, the last message the application is done with.

A subscription records the bookmark of a message it handed out when the application asks for
the next message, unsubscribes or closes the client. A subscription made with
`bookmark="recent"` starts after the stored bookmark (epoch when there is none): after a crash of
the client process it resumes with the message the application was processing (at least once).
A reconnect or failover inside a running client resumes after the last message handed out
(`Subscription.last_bookmark`), so the application sees no gap and no duplicate. The memory store
lives as long as the client; the file store survives a client restart.

File format (`FileBookmarkStore`): UTF-8 text, one JSON array `["<sub_id>","<bookmark>"]` per
line, appended each time a bookmark is recorded; the last line for a sub_id wins. A last line
without its newline or that does not parse (a torn write) is ignored. Opening the file, and every
`COMPACT_EVERY` appends once lines outnumber subscriptions four to one, rewrites it with one line
per subscription (a new file, fsync, rename, fsync of the directory).

Durability: each record is written to the operating system before `record` returns (one
`write`, no fsync), so a crash or SIGKILL of the client process loses nothing; `sync()` and
`close()` fsync, and only a power loss or kernel crash since the last fsync can lose records, in
which case the subscription replays the messages after an older bookmark again.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TypeGuard

import orjson

RECENT = "recent"
EPOCH = "0"
NOW = ("0|1|", "now")
COMPACT_EVERY = 4096


def is_now(bookmark: str) -> bool:
    """True for the bookmark that means "from now on" (live, no replay)."""
    return bookmark.strip().lower() in NOW


class BookmarkStore:
    """In memory: the last bookmark recorded per subscription id."""

    def __init__(self) -> None:
        self._bookmarks: dict[str, str] = {}

    def record(self, sub_id: str, bookmark: str) -> None:
        """The application is done with the message with this bookmark."""
        self._bookmarks[sub_id] = bookmark

    def get(self, sub_id: str) -> str | None:
        """The last bookmark recorded for `sub_id`, or None."""
        return self._bookmarks.get(sub_id)

    def resolve(self, sub_id: str, bookmark: str | None) -> str | None:
        """The bookmark to subscribe with: `recent` becomes the stored one, or epoch."""
        if bookmark is None or bookmark.strip().lower() != RECENT:
            return bookmark
        return self.get(sub_id) or EPOCH

    def sync(self) -> None:
        """Make every recorded bookmark durable (nothing to do in memory)."""

    def close(self) -> None:
        """Release the store's resources (nothing to do in memory)."""


class FileBookmarkStore(BookmarkStore):
    """A `BookmarkStore` kept in an append-only file (format and durability: module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._bookmarks.update(read_bookmark_file(self.path))
        self._rewrite()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._lines = len(self._bookmarks)

    def record(self, sub_id: str, bookmark: str) -> None:
        """Remember the bookmark and append it to the file (written before returning)."""
        self._bookmarks[sub_id] = bookmark
        assert self._fd is not None, "the bookmark store is closed"
        os.write(self._fd, orjson.dumps([sub_id, bookmark]) + b"\n")
        self._lines += 1
        if self._lines % COMPACT_EVERY == 0 and self._lines > 4 * len(self._bookmarks):
            self._compact()

    def sync(self) -> None:
        """fsync the file: every recorded bookmark survives a power loss from now on."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """fsync and close the file; the store must not be used afterwards."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _compact(self) -> None:
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        self._rewrite()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._lines = len(self._bookmarks)

    def _rewrite(self) -> None:
        """Replace the file by one line per subscription, atomically."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        text = b"".join(orjson.dumps([s, b]) + b"\n" for s, b in self._bookmarks.items())
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def read_bookmark_file(path: Path) -> dict[str, str]:
    """The last bookmark per subscription id in a bookmark file (empty when it does not exist).

    Only a torn last line is skipped; any other malformed line raises ValueError naming it,
    since guessing could resume a subscription from the wrong place.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    lines = data.split(b"\n")
    bookmarks: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        entry = None
        with contextlib.suppress(orjson.JSONDecodeError):
            entry = orjson.loads(line)
        if _is_entry(entry):
            bookmarks[entry[0]] = entry[1]
        elif number < len(lines):  # a complete line (a newline follows it) that is not an entry
            raise ValueError(f"{path}:{number}: not a bookmark store entry: {line[:80]!r}")
    return bookmarks


def _is_entry(entry: object) -> TypeGuard[list[str]]:
    return (
        isinstance(entry, list)
        and len(entry) == 2
        and isinstance(entry[0], str)
        and isinstance(entry[1], str)
    )
