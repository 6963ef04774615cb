"""The hold registry the journal lifecycle asks before removing anything (issue 11 item 8)."""

from __future__ import annotations

from amps.log.retention import Hold
from amps.server.lifecycle import HoldRegistry


def test_holds_are_read_when_asked_and_leave_when_unregistered() -> None:
    registry = HoldRegistry()
    position = [10]
    unregister = registry.register("replay c#1/s", lambda: position[0])
    registry.register("queue work", lambda: 5)
    registry.register("destination idle", lambda: None)  # needs nothing now
    assert registry.holds() == [Hold("queue work", 5), Hold("replay c#1/s", 10)]
    position[0] = 40
    assert registry.holds()[1] == Hold("replay c#1/s", 40)
    unregister()
    unregister()  # twice is harmless
    assert registry.holds() == [Hold("queue work", 5)]


def test_one_name_held_twice_holds_from_the_older_point() -> None:
    """A subscription replaced while its old replay winds down: both hold until each ends."""
    registry = HoldRegistry()
    first = registry.register("replay c#1/s", lambda: 7)
    registry.register("replay c#1/s", lambda: 30)
    assert registry.holds() == [Hold("replay c#1/s", 7)]
    first()
    assert registry.holds() == [Hold("replay c#1/s", 30)]
