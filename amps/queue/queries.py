"""Read-only views: the `sow` of a queue (Q19) and the statistics snapshot (§5.3)."""

from __future__ import annotations

import heapq
from itertools import islice

from amps.queue.actions import ExpireReason
from amps.queue.state import QueueState
from amps.queue.statistics import QueueStatistics


def deliverable(state: QueueState, limit: int) -> list[int]:
    """Active, unleased messages not held behind a barrier, in delivery order; nothing leased."""
    assert limit >= 0
    barrier = state.limit_txid()
    found: list[int] = []
    for priority in state.level_order:
        level = state.levels[priority]
        returned = sorted({t for t in level.returned if t < barrier and state.valid_returned(t)})
        fresh = (
            t for t in islice(level.fresh, level.head, None) if t < barrier and state.valid_fresh(t)
        )
        found.extend(islice(heapq.merge(returned, fresh), limit - len(found)))
        if len(found) >= limit:
            break
    return found


def statistics(state: QueueState, now_ms: int) -> QueueStatistics:
    """Gauges computed now plus the cumulative counters."""
    table = state.table
    counters = state.counters
    oldest = table.oldest_live_slot()
    heap = state.lease_heap
    while heap and not state.current_lease_slot(heap[0][1], heap[0][2]) >= 0:
        heapq.heappop(heap)
    leased_rows = 0 if state.policy.at_most_once else state.leased_total
    by_reason = counters.expired_by_reason
    return QueueStatistics(
        depth=state.active_count + state.elsewhere_count,  # held here, owned anywhere
        leased_count=state.leased_total,
        deliverable_count=max(0, state.active_count - leased_rows),
        inactive_count=state.inactive_count,
        deferred_ack_count=len(state.deferred),
        oldest_message_age_ms=None if oldest < 0 else now_ms - table.timestamp_ms[oldest],
        oldest_lease_age_ms=now_ms - heap[0][0] if heap else None,
        subscription_count=len(state.order),
        entered_total=counters.entered_total,
        delivered_total=counters.delivered_total,
        redelivered_total=counters.redelivered_total,
        acked_total=counters.acked_total,
        cancelled_total=counters.cancelled_total,
        expired_total=counters.expired_total,
        expired_time_limit_total=by_reason[ExpireReason.TIME_LIMIT],
        expired_forced_total=by_reason[ExpireReason.FORCED_EXPIRE],
        expired_max_cancels_total=by_reason[ExpireReason.MAX_CANCELS],
        expired_max_deliveries_total=by_reason[ExpireReason.MAX_DELIVERIES],
        sent_at_most_once_total=counters.sent_at_most_once_total,
        barrier_delivered_total=counters.barrier_delivered_total,
        expired_leases_total=counters.expired_leases_total,
    )
