"""Bookmark stores: what a subscription resumes after, in memory and in a file (issue 8, D3)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from amps.client import bookmarks
from amps.client.bookmarks import BookmarkStore, FileBookmarkStore, is_now, read_bookmark_file


def memory_store(path: Path) -> BookmarkStore:
    return BookmarkStore()


@pytest.mark.parametrize("make", [memory_store, FileBookmarkStore])
def test_a_store_keeps_the_last_bookmark_per_subscription(
    make: Callable[[Path], BookmarkStore], tmp_path: Path
) -> None:
    store = make(tmp_path / "bookmarks")
    assert store.get("s") is None
    store.record("s", "1|1|")
    store.record("t", "1|2|")
    store.record("s", "1|3|")
    assert (store.get("s"), store.get("t")) == ("1|3|", "1|2|")
    store.close()


def test_recent_resolves_to_the_stored_bookmark_or_epoch() -> None:
    store = BookmarkStore()
    assert store.resolve("s", "recent") == "0"
    store.record("s", "9|4|")
    assert store.resolve("s", "recent") == "9|4|"
    assert store.resolve("s", " RECENT ") == "9|4|"
    assert store.resolve("s", "epoch") == "epoch"
    assert store.resolve("s", None) is None
    assert store.resolve("other", "recent") == "0"


@pytest.mark.parametrize(("text", "now"), [("0|1|", True), ("now", True), ("0", False)])
def test_now_is_recognised(text: str, now: bool) -> None:
    assert is_now(text) is now


def test_the_file_store_survives_a_reopen_and_writes_before_returning(tmp_path: Path) -> None:
    path = tmp_path / "bookmarks"
    store = FileBookmarkStore(path)
    store.record("orders", "5|1|")
    store.record("orders", "5|2|")
    store.record('sub "two"\n', "5|3|")
    # Written to the OS at once: a process killed now would leave this behind.
    assert read_bookmark_file(path) == {"orders": "5|2|", 'sub "two"\n': "5|3|"}
    store.close()
    reopened = FileBookmarkStore(path)
    assert reopened.get("orders") == "5|2|"
    assert reopened.resolve('sub "two"\n', "recent") == "5|3|"
    reopened.close()
    # Opening compacts the file to one line per subscription.
    assert len(path.read_bytes().splitlines()) == 2


def test_a_torn_last_line_is_ignored_and_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "bookmarks"
    path.write_bytes(b'["s","1|1|"]\n["s","1|2|"]\n["s","1|')
    store = FileBookmarkStore(path)
    assert store.get("s") == "1|2|"
    store.record("s", "1|3|")
    store.close()
    assert path.read_bytes() == b'["s","1|2|"]\n["s","1|3|"]\n'


def test_a_malformed_complete_line_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bookmarks"
    path.write_bytes(b'["s","1|1|"]\n{"not": "an entry"}\n["s","1|2|"]\n')
    with pytest.raises(ValueError, match=r"bookmarks:2: not a bookmark store entry"):
        FileBookmarkStore(path)


def test_the_file_is_compacted_while_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bookmarks, "COMPACT_EVERY", 8)
    path = tmp_path / "bookmarks"
    store = FileBookmarkStore(path)
    for n in range(1, 20):
        store.record("a", f"1|{n}|")
    store.record("b", "2|1|")
    assert len(path.read_bytes().splitlines()) < 8
    assert read_bookmark_file(path) == {"a": "1|19|", "b": "2|1|"}
    store.sync()
    store.close()
    assert FileBookmarkStore(path).get("a") == "1|19|"
