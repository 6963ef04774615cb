"""Delivery fairness (Q9) as pure functions over the candidates for one message.

Candidates are the subscriptions with backlog room that match the message, in search order;
each function returns the index of the winner in that list. The search order is subscription
order, or for a returned message (Q6) subscription order from after the subscription that last
held it, wrapping around; round-robin then takes the first of them.
"""

from __future__ import annotations

from collections.abc import Sequence


def pick_fast(leased_counts: Sequence[int], backlogs: Sequence[int]) -> int:
    """Q9 fast: the first subscription found with room."""
    assert len(leased_counts) == len(backlogs) > 0
    return 0


def pick_proportional(leased_counts: Sequence[int], backlogs: Sequence[int]) -> int:
    """Q9 proportional: the smallest leased/backlog ratio, the first found on a tie."""
    assert len(leased_counts) == len(backlogs) > 0
    best = 0
    for i in range(1, len(backlogs)):
        assert backlogs[i] > leased_counts[i]
        # leased[i]/backlog[i] < leased[best]/backlog[best], without floating point.
        if leased_counts[i] * backlogs[best] < leased_counts[best] * backlogs[i]:
            best = i
    return best


def pick_round_robin(positions: Sequence[int], last_position: int) -> int:
    """Q9 round-robin: the first candidate after `last_position` in turn, wrapping around.

    `positions` are the candidates' places in subscription order (increasing); the engine
    remembers the position it served last.
    """
    assert len(positions) > 0
    for i, position in enumerate(positions):
        if position > last_position:
            return i
    return 0


def search_order(positions: Sequence[int], returned_from: int | None) -> list[int]:
    """Q6: indexes of the candidates in search order; for a returned message, from after the
    position of the subscription that last held it, wrapping around (it comes last)."""
    order = list(range(len(positions)))
    if returned_from is None:
        return order
    start = next((i for i, p in enumerate(positions) if p > returned_from), 0)
    return order[start:] + order[:start]
