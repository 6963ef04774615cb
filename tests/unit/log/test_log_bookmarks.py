"""Bookmark text forms and replay specs (L1, L5, L7)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.errors import InvalidBookmark
from amps.log.bookmarks import (
    AtBookmark,
    AtTimestamp,
    Bookmark,
    BookmarkList,
    Epoch,
    Now,
    parse_bookmark_spec,
    publisher_id_for,
    server_publisher_id_for,
)


def test_bookmark_text_form() -> None:
    """L1: a bookmark renders as `<publisher>|<seq>|`."""
    bookmark = Bookmark(12290412031115262887, 1484244707000000008)
    assert bookmark.format() == "12290412031115262887|1484244707000000008|"
    assert Bookmark.parse(bookmark.format()) == bookmark


@given(st.integers(1, 2**64 - 1), st.integers(0, 2**64 - 1))
@settings(max_examples=100)
def test_bookmark_round_trip(publisher_id: int, seq: int) -> None:
    assert Bookmark.parse(Bookmark(publisher_id, seq).format()) == Bookmark(publisher_id, seq)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("12|", "expected <publisher>|<sequence>|"),
        ("a|1|", "expected <publisher>|<sequence>|"),
        ("1|2|3|", "expected <publisher>|<sequence>|"),
        ("18446744073709551616|1|", "exceeds 2\\*\\*64-1"),
        ("0|5|", "publisher id 0 is reserved"),
    ],
)
def test_bad_bookmarks_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidBookmark, match=message):
        Bookmark.parse(text)


def test_specs() -> None:
    """L7: epoch, now, a bookmark, a timestamp and comma lists parse to typed specs."""
    assert parse_bookmark_spec("0") == Epoch()
    assert parse_bookmark_spec(" 0|1| ") == Now()
    assert parse_bookmark_spec("5|6|") == AtBookmark(Bookmark(5, 6))
    assert parse_bookmark_spec("19700101T000001Z") == AtTimestamp(1_000_000)
    assert parse_bookmark_spec("19700101T000001") == AtTimestamp(1_000_000)
    assert parse_bookmark_spec("20240229T120000.5Z") == AtTimestamp(1709208000_500000)
    assert parse_bookmark_spec("5|6|,7|8|") == BookmarkList(
        (AtBookmark(Bookmark(5, 6)), AtBookmark(Bookmark(7, 8)))
    )


@pytest.mark.parametrize(
    "spec", ["0", "0|1|", "5|6|", "19700101T000001Z", "20240229T120000.500000Z", "5|6|,0"]
)
def test_specs_format_back(spec: str) -> None:
    assert parse_bookmark_spec(spec).format() == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty bookmark"),
        ("1|2|,", "empty item"),
        ("recent", "client's bookmark store"),
        ("[0:5|6|)", "ranges are not supported"),
        ("20241301T000000Z", "not a valid date/time"),
        ("2024-01-01", "expected 0 \\(epoch\\)"),
        ("20240101T000000+01", "expected 0 \\(epoch\\)"),
    ],
)
def test_bad_specs(text: str, message: str) -> None:
    with pytest.raises(InvalidBookmark, match=message):
        parse_bookmark_spec(text)


def test_publisher_ids_are_stable_nonzero_and_distinct() -> None:
    """L5: the instance's publisher id for a client never equals the client's own."""
    assert publisher_id_for("client-a") == publisher_id_for("client-a")
    assert publisher_id_for("client-a") != publisher_id_for("client-b")
    assert 0 < publisher_id_for("client-a") < 2**64
    server_id = server_publisher_id_for("client-a", "amps-1")
    assert server_id not in (0, publisher_id_for("client-a"))
    assert server_id != server_publisher_id_for("client-a", "amps-2")
    assert 0 < server_id < 2**64
