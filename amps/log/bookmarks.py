"""Bookmarks (L1, L7): the `publisher|seq|` text form, replay specs and publisher ids. [core]

A bookmark names one message forever: the publisher id (a 64-bit hash of the client name) plus
that publisher's sequence number. A *spec* says where a bookmark subscription starts replaying.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import starmap
from typing import overload

from amps.errors import InvalidBookmark

__all__ = [
    "U64_MAX",
    "AtBookmark",
    "AtTimestamp",
    "Bookmark",
    "BookmarkList",
    "BookmarkSpec",
    "Epoch",
    "Now",
    "PackedBookmarks",
    "bookmark_pairs",
    "parse_bookmark_spec",
    "publisher_id_for",
    "server_publisher_id_for",
]

U64_MAX = (1 << 64) - 1

_BOOKMARK_RE = re.compile(r"(\d{1,20})\|(\d{1,20})\|")
# AMPS accepts 16-23 characters with `T` at index 8: seconds, optional fraction, optional `Z`.
_TIMESTAMP_RE = re.compile(r"(\d{8})T(\d{6})(?:\.(\d{1,6}))?(Z?)")


def _hash64(person: bytes, text: bytes) -> int:
    value = int.from_bytes(hashlib.blake2b(text, digest_size=8, person=person).digest(), "little")
    # 0 is reserved: `0` is EPOCH and `0|1|` is NOW.
    return value or 1


def publisher_id_for(client_name: str) -> int:
    """Stable nonzero 64-bit publisher id of a client name (the `publisher` of its bookmarks)."""
    return _hash64(b"amps-publisher", client_name.encode("utf-8"))


def server_publisher_id_for(client_name: str, instance_name: str) -> int:
    """Publisher id for sequence numbers the instance assigns to `client_name` (L5)."""
    text = client_name.encode("utf-8") + b"\x00" + instance_name.encode("utf-8")
    return _hash64(b"amps-srv-pub", text)


@dataclass(frozen=True, slots=True, order=True)
class Bookmark:
    """One message: `publisher_id|seq|`."""

    publisher_id: int
    seq: int

    def __post_init__(self) -> None:
        assert 0 <= self.publisher_id <= U64_MAX, self.publisher_id
        assert 0 <= self.seq <= U64_MAX, self.seq

    def format(self) -> str:
        """The AMPS text form, e.g. `12290412031115262887|42|`."""
        return f"{self.publisher_id}|{self.seq}|"

    def __str__(self) -> str:
        return self.format()

    @classmethod
    def parse(cls, text: str) -> Bookmark:
        """Parse `publisher|seq|`; raise InvalidBookmark saying what is wrong."""
        match = _BOOKMARK_RE.fullmatch(text.strip())
        if match is None:
            raise InvalidBookmark(
                f"invalid bookmark {text!r}: expected <publisher>|<sequence>| "
                "with unsigned decimal integers"
            )
        publisher_id, seq = int(match.group(1)), int(match.group(2))
        if publisher_id > U64_MAX or seq > U64_MAX:
            raise InvalidBookmark(f"invalid bookmark {text!r}: a field exceeds 2**64-1")
        if publisher_id == 0:
            raise InvalidBookmark(f"invalid bookmark {text!r}: publisher id 0 is reserved")
        return cls(publisher_id, seq)


_PAIR = struct.Struct("<QQ")
_new = object.__new__
_set_publisher_id = Bookmark.__dict__["publisher_id"].__set__
_set_seq = Bookmark.__dict__["seq"].__set__


def _unchecked(publisher_id: int, seq: int) -> Bookmark:
    """A Bookmark of two values read as u64 (in range by construction), built without the
    dataclass's __init__ and checks (a third of the cost)."""
    bookmark: Bookmark = _new(Bookmark)
    _set_publisher_id(bookmark, publisher_id)
    _set_seq(bookmark, seq)
    return bookmark


class PackedBookmarks(Sequence[Bookmark]):
    """Bookmarks as a queue record stores them, 16 bytes each (u64 publisher id, u64 seq), built
    into `Bookmark`s only when one is read: a reader that routes or skips a record of 500 acks
    builds none, and `pairs` gives (publisher id, seq) tuples at a tenth of the cost. Equal to
    any sequence of the same bookmarks."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        if len(data) % _PAIR.size:
            raise ValueError(f"packed bookmarks of {len(data)} bytes, not a multiple of 16")
        self.data = data

    def __len__(self) -> int:
        return len(self.data) // _PAIR.size

    @overload
    def __getitem__(self, index: int) -> Bookmark: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Bookmark, ...]: ...
    def __getitem__(self, index: int | slice) -> Bookmark | tuple[Bookmark, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("bookmark index out of range")
        return _unchecked(*_PAIR.unpack_from(self.data, index * _PAIR.size))

    def __iter__(self) -> Iterator[Bookmark]:
        return starmap(_unchecked, _PAIR.iter_unpack(self.data))

    def pairs(self) -> list[tuple[int, int]]:
        """(publisher id, seq) of each, in order, without building a Bookmark."""
        return list(_PAIR.iter_unpack(self.data))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedBookmarks):
            return self.data == other.data
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # as the tuple of the same bookmarks, which it equals

    def __repr__(self) -> str:
        return f"PackedBookmarks({list(self)!r})"


def bookmark_pairs(bookmarks: Sequence[Bookmark]) -> list[tuple[int, int]]:
    """(publisher id, seq) of each bookmark, in order (packed ones without building any)."""
    if type(bookmarks) is PackedBookmarks:
        return bookmarks.pairs()
    return [(b.publisher_id, b.seq) for b in bookmarks]


@dataclass(frozen=True, slots=True)
class Epoch:
    """Replay from the start of the log (`0`)."""

    def format(self) -> str:
        return "0"


@dataclass(frozen=True, slots=True)
class Now:
    """Only messages appended from now on (`0|1|`)."""

    def format(self) -> str:
        return "0|1|"


@dataclass(frozen=True, slots=True)
class AtBookmark:
    """Replay from the message after `bookmark`."""

    bookmark: Bookmark

    def format(self) -> str:
        return self.bookmark.format()


@dataclass(frozen=True, slots=True)
class AtTimestamp:
    """Replay from the first message logged at or after `timestamp_us` (UTC microseconds)."""

    timestamp_us: int

    def format(self) -> str:
        seconds, micros = divmod(self.timestamp_us, 1_000_000)
        text = datetime.fromtimestamp(seconds, UTC).strftime("%Y%m%dT%H%M%S")
        return f"{text}.{micros:06d}Z" if micros else f"{text}Z"


@dataclass(frozen=True, slots=True)
class BookmarkList:
    """Comma-separated specs; replay starts at the earliest of them."""

    items: tuple[Epoch | Now | AtBookmark | AtTimestamp, ...]

    def __post_init__(self) -> None:
        assert len(self.items) >= 1

    def format(self) -> str:
        return ",".join(item.format() for item in self.items)


BookmarkSpec = Epoch | Now | AtBookmark | AtTimestamp | BookmarkList


def _parse_timestamp(text: str) -> AtTimestamp | None:
    match = _TIMESTAMP_RE.fullmatch(text)
    if match is None:
        return None
    date, clock, fraction, _zone = match.groups()
    try:
        moment = datetime.strptime(date + clock, "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        raise InvalidBookmark(
            f"invalid bookmark {text!r}: not a valid date/time (YYYYmmddTHHMMSS[.ffffff][Z], UTC)"
        ) from None
    micros = int((fraction or "0").ljust(6, "0"))
    return AtTimestamp(max(0, int(moment.timestamp()) * 1_000_000 + micros))


def _parse_item(text: str) -> Epoch | Now | AtBookmark | AtTimestamp:
    if text == "0":
        return Epoch()
    if text == "0|1|":
        return Now()
    if text[:1] in "[(":
        raise InvalidBookmark(f"invalid bookmark {text!r}: bookmark ranges are not supported")
    if "|" in text:
        return AtBookmark(Bookmark.parse(text))
    stamp = _parse_timestamp(text)
    if stamp is not None:
        return stamp
    if text.lower() == "recent":
        raise InvalidBookmark("bookmark 'recent' is resolved by the client's bookmark store")
    raise InvalidBookmark(
        f"invalid bookmark {text!r}: expected 0 (epoch), 0|1| (now), <publisher>|<sequence>|, "
        "a timestamp YYYYmmddTHHMMSS[Z] or a comma-separated list of these"
    )


def parse_bookmark_spec(text: str) -> BookmarkSpec:
    """Parse the `bookmark` option of a subscribe command into a typed spec."""
    stripped = text.strip()
    if not stripped:
        raise InvalidBookmark("empty bookmark")
    if "," not in stripped:
        return _parse_item(stripped)
    parts = [part.strip() for part in stripped.split(",")]
    if any(not part for part in parts):
        raise InvalidBookmark(f"invalid bookmark list {text!r}: empty item")
    return BookmarkList(tuple(_parse_item(part) for part in parts))
