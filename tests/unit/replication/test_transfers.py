"""Grants and claims round-trip through the log's TransferRecord, epoch included (R5, R7)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps.errors import OwnershipProtocolError
from amps.log import codec
from amps.log.bookmarks import Bookmark
from amps.log.records import TransferRecord
from replication.ownership import OwnershipRecord, TransferKind
from replication.transfers import from_log, to_log

names = st.sampled_from(["amps-1", "amps-2", "amps-3"])
u64 = st.integers(0, 2**64 - 1)


@given(key=st.tuples(u64, u64), by=names, owner=names, epoch=st.integers(1, 2**40))
def test_an_ownership_record_survives_the_log(
    key: tuple[int, int], by: str, owner: str, epoch: int
) -> None:
    kind = TransferKind.CLAIM if by == owner else TransferKind.GRANT
    record = OwnershipRecord(key, kind, by, owner, epoch)
    logged = to_log("orders", record, proxied=kind is TransferKind.CLAIM)
    frame = codec.encode(logged)
    assert from_log(codec.decode(frame)[0][0]) == record  # type: ignore[arg-type]


def test_a_record_without_an_epoch_is_refused() -> None:
    old = TransferRecord(7, 1, "orders", Bookmark(1, 2), "amps-1", "amps-2", origin_instance="x")
    with pytest.raises(OwnershipProtocolError, match="no epoch"):
        from_log(old)


def test_an_origin_record_survives_the_log() -> None:
    record = OwnershipRecord((7, 1), TransferKind.ORIGIN, "amps-1", "amps-1", 0)
    frame = codec.encode(to_log("orders", record, proxied=False))
    assert from_log(codec.decode(frame)[0][0]) == record  # type: ignore[arg-type]
