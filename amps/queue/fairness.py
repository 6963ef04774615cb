"""Delivery fairness (Q9) as pure functions over the candidates for one message.

Candidates are the subscriptions with backlog room that match the message, in subscription
order; each function returns the index of the winner in that list.
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
