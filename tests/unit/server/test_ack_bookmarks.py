"""The fast queue-ack bookmark parsing accepts and refuses exactly what `Bookmark.parse` does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps import errors
from amps.log.bookmarks import Bookmark
from amps.server.queues import parse_ack_bookmarks

U64 = st.integers(0, 2**64 - 1)


def reference(text: str) -> list[tuple[int, int]]:
    """The straightforward form: every item through `Bookmark.parse`."""
    found = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        bookmark = Bookmark.parse(item)
        found.append((bookmark.publisher_id, bookmark.seq))
    if not found:
        raise errors.InvalidBookmark("no bookmark given to acknowledge")
    return found


def outcome(parse: object, text: str) -> object:
    try:
        return parse(text)  # type: ignore[operator]
    except errors.AmpsError as error:
        return (type(error), error.message)


@given(st.lists(st.tuples(U64, U64), min_size=1, max_size=40))
def test_valid_lists_parse_like_the_reference(pairs: list[tuple[int, int]]) -> None:
    text = ",".join(f"{p}|{s}|" for p, s in pairs)
    assert outcome(parse_ack_bookmarks, text) == outcome(reference, text)


@given(
    st.lists(
        st.text(alphabet="0123456789|, x-٣", max_size=30)
        | st.sampled_from(["1|2|", "0|5|", " 1|2| ", "01|002|", "18446744073709551616|1|"]),
        max_size=6,
    )
)
def test_any_text_is_accepted_or_refused_like_the_reference(items: list[str]) -> None:
    text = ",".join(items)
    assert outcome(parse_ack_bookmarks, text) == outcome(reference, text)


@pytest.mark.parametrize(
    "text",
    ["", ",", "1|2|,", ",1|2|", "1|2|, 3|4|", "0|1|", "1|2", "1|2|3|", "a|1|", "٣|1|",
     "99999999999999999999|1|", "18446744073709551615|18446744073709551615|"],
)  # fmt: skip
def test_edge_cases_match_the_reference(text: str) -> None:
    assert outcome(parse_ack_bookmarks, text) == outcome(reference, text)


@given(
    st.lists(st.tuples(st.sampled_from(["7", "007", "0", "18446744073709551615"]), U64),
             min_size=1, max_size=40)
)  # fmt: skip
def test_lists_of_few_publishers_parse_like_the_reference(pairs: list[tuple[str, int]]) -> None:
    """The one-publisher fast path: the same publisher written alike, or not (leading zeros)."""
    text = ",".join(f"{p}|{s}|" for p, s in pairs)
    assert outcome(parse_ack_bookmarks, text) == outcome(reference, text)
