"""Downgrade and upgrade decisions of the scheduled replication actions (L2)."""

from __future__ import annotations

from dataclasses import replace

from replication.downgrade import sync_decisions
from replication.link_core import LinkStatistics

BASE = LinkStatistics(
    peer="b", state="ready", sends=True, sync=True, downgraded=False, acked_through_txid=0,
    behind_records=0, oldest_unacked_ms=0, batches_sent=0, records_sent=0, batches_received=0,
    records_received=0, received_through_txid=0, resyncs=0, sync_changes=0, last_heard_ms=None,
)  # fmt: skip


def test_a_sync_destination_behind_longer_than_age_is_downgraded() -> None:
    late = replace(BASE, oldest_unacked_ms=600, state="idle")
    assert sync_decisions([late], downgrade_age_ms=500, upgrade_age_ms=None) == [("b", True)]
    on_time = replace(BASE, oldest_unacked_ms=500)
    assert sync_decisions([on_time], downgrade_age_ms=500, upgrade_age_ms=None) == []


def test_async_destinations_are_never_touched() -> None:
    late = replace(BASE, sync=False, oldest_unacked_ms=10_000)
    assert sync_decisions([late], downgrade_age_ms=1, upgrade_age_ms=1) == []


def test_min_sync_destinations_bounds_downgrades() -> None:
    """Tuning/Replication/MinSyncDestinations: never fewer sync destinations than that."""
    b = replace(BASE, oldest_unacked_ms=900)
    c = replace(BASE, peer="c", oldest_unacked_ms=900)
    assert sync_decisions(
        [c, b], downgrade_age_ms=500, upgrade_age_ms=None, min_sync_destinations=1
    ) == [("b", True)]
    assert (
        sync_decisions([b], downgrade_age_ms=500, upgrade_age_ms=None, min_sync_destinations=1)
        == []
    )


def test_a_downgraded_destination_is_upgraded_once_connected_and_caught_up() -> None:
    down = replace(BASE, downgraded=True, oldest_unacked_ms=50)
    assert sync_decisions([down], downgrade_age_ms=500, upgrade_age_ms=100) == [("b", False)]
    behind = replace(down, oldest_unacked_ms=150)
    assert sync_decisions([behind], downgrade_age_ms=500, upgrade_age_ms=100) == []
    gone = replace(down, state="idle")
    assert sync_decisions([gone], downgrade_age_ms=500, upgrade_age_ms=100) == []
