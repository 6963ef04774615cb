"""When a sync destination is downgraded to async, and upgraded again (L2). [core]

Rule 1: a sync destination becomes async only by an action or an administrator, never by
itself: this function is what `amps-action-on-schedule` runs, each `Every`.
Rule 2: `amps-action-do-downgrade-replication` downgrades a sync destination whose oldest
unacknowledged record is older than `Age`, releasing the persisted acks it held, unless that
would leave fewer than `Tuning/Replication/MinSyncDestinations` sync destinations.
Rule 3: `amps-action-do-upgrade-replication` upgrades a downgraded destination that is
connected and at most `Age` behind.
"""

from __future__ import annotations

from collections.abc import Sequence

from replication.link_core import LinkState, LinkStatistics


def sync_decisions(
    links: Sequence[LinkStatistics],
    *,
    downgrade_age_ms: int | None,
    upgrade_age_ms: int | None,
    min_sync_destinations: int = 0,
) -> list[tuple[str, bool]]:
    """(destination, downgraded) changes to make now, in destination order."""
    changes: list[tuple[str, bool]] = []
    sync_now = sum(1 for s in links if s.sync and not s.downgraded)
    for stats in sorted(links, key=lambda s: s.peer):
        if not stats.sync:
            continue
        if not stats.downgraded and downgrade_age_ms is not None:
            if stats.oldest_unacked_ms > downgrade_age_ms and sync_now > min_sync_destinations:
                changes.append((stats.peer, True))
                sync_now -= 1
        elif stats.downgraded and upgrade_age_ms is not None:
            connected = stats.state == LinkState.READY.value
            if connected and stats.oldest_unacked_ms <= upgrade_age_ms:
                changes.append((stats.peer, False))
                sync_now += 1
    return changes
