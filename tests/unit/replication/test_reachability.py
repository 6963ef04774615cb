"""Which owners proxied transfer may act for (R7): only those not heard from, by any path,
within the interval; an owner never heard from is not known to be reachable."""

from __future__ import annotations

from replication.reachability import Reachability

INTERVAL_MS = 5_000


def test_heard_directly_within_the_interval_is_reachable_and_then_not() -> None:
    table = Reachability("b")
    table.heard_directly("a", 1_000)
    assert table.unreachable(["a"], 1_000 + INTERVAL_MS, INTERVAL_MS) == frozenset()
    assert table.unreachable(["a"], 1_001 + INTERVAL_MS, INTERVAL_MS) == {"a"}


def test_an_owner_heard_through_a_neighbour_is_reachable() -> None:
    # A line a - b - c: c has no link to a, but b's heartbeat says it heard a 200 ms ago.
    c = Reachability("c")
    c.heard_via((("a", 200), ("c", 0)), 10_000)
    assert c.unreachable(["a", "b"], 10_000 + INTERVAL_MS - 200, INTERVAL_MS) == {"b"}
    assert c.unreachable(["a"], 10_001 + INTERVAL_MS - 200, INTERVAL_MS) == {"a"}


def test_never_heard_counts_as_unreachable_and_this_instance_never_does() -> None:
    table = Reachability("b")
    assert table.unreachable(["a", "b"], 0, INTERVAL_MS) == {"a"}
