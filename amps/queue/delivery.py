"""Choosing and sending messages (Q6–Q9, Q14, A2, A3): the pump that runs after each step.

Invariant after every step: no available, eligible message matches a subscription with
backlog room while the queue-wide MaxBacklog has room. Each event disturbs that locally (a new
message, a freed backlog, a returned message), and the pump restores it by repeatedly taking
the oldest (highest priority first) message some subscription with room matches, and handing
it to the one that fairness picks among those that match it.
"""

from __future__ import annotations

import heapq

from amps.queue.actions import (
    Action,
    Deliver,
    DeliverBarrier,
    ExpireReason,
    RemovalReason,
)
from amps.queue.policy import Fairness
from amps.queue.state import NO_LIMIT, QueueState
from amps.queue.subscriptions import Subscription
from amps.queue.table import AVAILABLE, COUNT_MAX, INACTIVE, LEASED


def settle(state: QueueState, now_ms: int, actions: list[Action]) -> None:
    """Activate, deliver and release barriers until nothing more can happen."""
    if state.policy.target_queue_depth is None and not state.barriers:
        # The common shape: nothing to activate, no barrier to release; one pump does it all.
        if state.order:
            pump(state, now_ms, actions)
        return
    while True:
        refill(state)
        if state.order:
            pump(state, now_ms, actions)
        released = release_barriers(state, actions)
        if not released and not _can_refill(state):
            return


def _can_refill(state: QueueState) -> bool:
    target = state.policy.target_queue_depth
    return target is not None and state.active_count < target and state.inactive_count > 0


def refill(state: QueueState) -> int:
    """A4: activate inactive messages, oldest first, up to TargetQueueDepth."""
    target = state.policy.target_queue_depth
    if target is None:
        return 0
    table = state.table
    activated = 0
    while state.active_count < target and state.inactive_count > 0:
        slot = state.activation_slot
        while table.state[slot] != INACTIVE:
            slot += 1
        state.activate(slot)
        state.activation_slot = slot + 1
        activated += 1
    return activated


def pump(state: QueueState, now_ms: int, actions: list[Action]) -> int:
    """Deliver while some subscription with room matches an eligible message.

    One call delivers as many messages as there is room for. The subscriptions with room are
    listed once and a subscription leaves the list when it fills (only a delivery changes
    room during the pump), so a step never rescans full subscriptions per message.
    """
    ready = [sub for sub in state.order if len(sub.leased) < sub.backlog]
    if not ready:
        return 0
    max_backlog = state.policy.max_backlog
    queue_limit = NO_LIMIT if max_backlog is None else max_backlog
    fairness = state.policy.effective_fairness
    table = state.table
    filtered = [sub for sub in ready if sub.matches is not None]
    delivered = 0
    if not filtered and not state.barriers and state.table.priority is None:
        delivered = _pump_fresh(state, ready, queue_limit, fairness, now_ms, actions)
    while ready and state.leased_total < queue_limit:
        found = _next_message(state, ready, filtered)
        if found is None:
            break
        txid, candidates = found
        slot = table.slot_of(txid)
        if state.expire_at_ms(slot) <= now_ms:
            # Found before the sweep reached it: an expired message is never delivered.
            state.remove(slot, RemovalReason.EXPIRED, actions, ExpireReason.TIME_LIMIT)
        else:
            holder = state.returned_from.get(txid) if state.returned_from else None
            sub = _pick(state, candidates, fairness, holder)
            deliver(state, slot, sub, now_ms, actions)
            if len(sub.leased) >= sub.backlog:
                ready.remove(sub)
                if sub.matches is not None:
                    filtered.remove(sub)
        delivered += 1
    return delivered


def _pump_fresh(
    state: QueueState,
    ready: list[Subscription],
    queue_limit: int,
    fairness: Fairness,
    now_ms: int,
    actions: list[Action],
) -> int:
    """The common shape, at-least-once: one level, no filter, no barrier, no returned message.

    Delivers from the head of the fresh list while every entry from the head on is known
    valid (`fresh_live` counts them all: no removal left garbage), so no entry is validated
    one by one; the messages and subscriptions chosen are those of the general loop, which
    takes over at the first message this path does not handle (expired, or returned ones
    waiting). Removes filled subscriptions from `ready`; returns how many it delivered.
    """
    policy = state.policy
    level = state.level0
    head = level.head
    fresh = level.fresh
    available = level.fresh_live
    if policy.at_most_once or level.returned or len(fresh) - head != available:
        return 0
    limit = min(available, queue_limit - state.leased_total)
    if limit <= 0:
        return 0
    table = state.table
    expire_column = table.expire_at_ms  # else expiry is the timestamp + queue Expiration
    expiration_ms = policy.expiration_ms
    timestamps_ms = table.timestamp_ms
    rows = table.txid
    row_state = table.state
    delivery_count = table.delivery_count
    lease_sub = table.lease_sub
    base = table.base
    row_count = len(rows)
    period = policy.lease_period_ms
    deadline_ms = None if period is None else now_ms + period
    lease_heap = state.lease_heap
    push = heapq.heappush
    append = actions.append
    done = 0
    expired = False
    while done < limit and ready and not expired:
        if len(ready) == 1:  # the usual case after an ack: a run of deliveries to that one
            sub: Subscription | None = ready[0]
            run_end = min(limit, done + ready[0].backlog - len(ready[0].leased))
        else:
            sub = None  # picked once the message is known deliverable, as the general loop
            run_end = done + 1
        run_start = done
        while done < run_end:
            txid = fresh[head + done]
            slot = txid - base
            if not (0 <= slot < row_count and rows[slot] == txid):
                slot = table.slot_of(txid)
            if expire_column is not None:
                expired = expire_column[slot] <= now_ms
            elif expiration_ms is not None:
                expired = timestamps_ms[slot] + expiration_ms <= now_ms
            if expired:
                break  # the general loop removes it (found before the sweep)
            if sub is None:
                sub = _pick(state, ready, fairness)
                if fairness == "fast":  # the first with room stays first until it fills
                    run_end = min(limit, done + sub.backlog - len(sub.leased))
            assert row_state[slot] == AVAILABLE
            row_state[slot] = LEASED  # deliver(), inlined for a never delivered message
            delivery_count[slot] = 1
            lease_sub[slot] = sub.index
            push(lease_heap, (now_ms, txid, 1))
            sub.leased.add(txid)
            append(Deliver(sub.sub_id, sub.client_id, txid, deadline_ms, 1))
            done += 1
        if sub is not None and done > run_start:
            state.round_robin_last = sub.position  # as _pick does for every delivery
            if len(sub.leased) >= sub.backlog:
                ready.remove(sub)
    if done:
        level.head = head + done
        level.fresh_live -= done
        state.leased_total += done
        state.counters.delivered_total += done
    return done


def _next_message(
    state: QueueState, ready: list[Subscription], filtered: list[Subscription]
) -> tuple[int, list[Subscription]] | None:
    """The next message to send and the ready subscriptions that match it (Q14).

    `filtered` lists the subscriptions of `ready` that have a content filter.
    """
    limit = state.limit_txid()
    any_unfiltered = len(filtered) < len(ready)
    for priority in state.level_order:
        level = state.levels[priority]
        if any_unfiltered:
            txid = level.peek_oldest(state.valid_fresh, state.valid_returned)
            if txid is None:
                continue
            if txid >= limit:
                return None
            if not filtered:
                return txid, ready
            return txid, [sub for sub in ready if sub.wants(txid)]
        best: int | None = None
        candidates: list[Subscription] = []
        for sub in ready:
            assert sub.matches is not None
            txid = level.peek_matching(
                sub.index, sub.matches, state.valid_fresh, state.valid_returned, limit
            )
            if txid is None or (best is not None and txid > best):
                continue
            if best is None or txid < best:
                best, candidates = txid, []
            candidates.append(sub)
        if best is not None:
            return best, candidates
    return None


def _pick(
    state: QueueState,
    candidates: list[Subscription],
    fairness: Fairness,
    returned_from: int | None = None,
) -> Subscription:
    """Q9: the fairness model chooses among the candidates for one message.

    The same rules as `amps.queue.fairness`, applied to the subscriptions directly (no lists
    built per delivery): O(candidates), which are the subscriptions with room. For a returned
    message `returned_from` is the position of the subscription that last held it: the search
    starts after that one (Q6), so another with equal room gets it and ties rotate.
    """
    assert candidates
    if returned_from is not None and len(candidates) > 1:
        candidates = _search_after(candidates, returned_from)
        if fairness == "round-robin":
            fairness = "fast"  # the next in turn is the first after the last holder
    chosen = candidates[0]
    if len(candidates) > 1 and fairness != "fast":
        if fairness == "proportional":
            best_leased = len(chosen.leased)
            best_backlog = chosen.backlog
            for sub in candidates:
                leased = len(sub.leased)
                assert sub.backlog > leased
                # leased/backlog < best ratio, without floating point; first found on a tie.
                if leased * best_backlog < best_leased * sub.backlog:
                    chosen, best_leased, best_backlog = sub, leased, sub.backlog
        else:
            last = state.round_robin_last
            for sub in candidates:
                if sub.position > last:
                    chosen = sub
                    break
    state.round_robin_last = chosen.position
    return chosen


def _search_after(candidates: list[Subscription], position: int) -> list[Subscription]:
    """The candidates (in subscription order) in search order from after `position`, wrapping
    around: the subscription at `position` itself, if a candidate, comes last."""
    for i, sub in enumerate(candidates):
        if sub.position > position:
            return candidates[i:] + candidates[:i] if i else candidates
    return candidates


def deliver(
    state: QueueState, slot: int, sub: Subscription, now_ms: int, actions: list[Action]
) -> None:
    """Send one message: lease it (Q6) or remove it as sent (Q7)."""
    table = state.table
    assert table.state[slot] == AVAILABLE
    assert len(sub.leased) < sub.backlog
    txid = table.txid[slot]
    count = table.delivery_count[slot] + 1
    if count > COUNT_MAX:
        count = COUNT_MAX
    counters = state.counters
    counters.delivered_total += 1
    if count > 1:
        counters.redelivered_total += 1
    policy = state.policy
    if policy.at_most_once:
        # remove() logs the removal before the Deliver that follows (ordering contract).
        state.remove(slot, RemovalReason.SENT_AT_MOST_ONCE, actions)
        state.at_most_once_sent[txid] = sub.index
        deadline_ms = None
    else:
        state.leave_available(slot)  # reads the old delivery count: keep this order
        table.state[slot] = LEASED
        table.delivery_count[slot] = count
        table.lease_sub[slot] = sub.index
        heapq.heappush(state.lease_heap, (now_ms, txid, count))
        period = policy.lease_period_ms
        deadline_ms = None if period is None else now_ms + period
    sub.leased.add(txid)
    state.leased_total += 1
    actions.append(Deliver(sub.sub_id, sub.client_id, txid, deadline_ms, count))


def release_barriers(state: QueueState, actions: list[Action]) -> int:
    """A3: send the first barrier once every earlier message has left and someone listens.

    Waiting for at least one subscription is our choice: a barrier that nobody can see would
    otherwise vanish from an idle queue.
    """
    table = state.table
    released = 0
    while state.barriers and state.order:
        txid = state.barriers[0]
        slot = table.oldest_live_slot()
        if table.txid[slot] != txid:
            break
        subscriptions = tuple((s.client_id, s.sub_id) for s in state.order if s.wants(txid))
        state.remove(slot, RemovalReason.BARRIER_DELIVERED, actions)
        actions.append(DeliverBarrier(txid, subscriptions))
        released += 1
    return released
