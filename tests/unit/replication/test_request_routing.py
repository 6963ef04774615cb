"""Where a transfer request goes from an instance (R4, R9: `routing.route_request`)."""

from __future__ import annotations

from dataclasses import replace

from replication.frames import TransferRequest
from replication.routing import RequestsSeen, route_request


def request(hops_left: int = 3) -> TransferRequest:
    return TransferRequest("work", ((1, 1),), requester="a", owner="d", hops_left=hops_left)


def test_straight_to_an_owner_that_is_a_ready_neighbour() -> None:
    assert route_request(request(), ["b", "d", "c"], "b") == (request(), ("d",))


def test_onwards_by_passthrough_with_one_hop_less_never_back_or_to_the_requester() -> None:
    sent, targets = route_request(request(), ["a", "b", "c"], "b")
    assert targets == ("c",)
    assert sent == request(hops_left=2)


def test_a_request_made_here_goes_to_every_ready_neighbour() -> None:
    assert route_request(request(), ["b", "c"], "")[1] == ("b", "c")


def test_nowhere_once_its_hops_are_spent_unless_the_owner_is_next() -> None:
    assert route_request(request(hops_left=0), ["b", "c"], "") == (request(hops_left=0), ())
    assert route_request(request(hops_left=0), ["d"], "") == (request(hops_left=0), ("d",))


def test_each_request_is_taken_once_by_requester_and_id_its_copies_dropped() -> None:
    """Routing Rule 5: a copy by a second path is dropped; another requester's request with
    the same id, or a later id, is new; a request without an id (an older peer) always is."""
    seen = RequestsSeen(capacity=2)
    first = replace(request(), request_id=7)
    assert seen.first(first)
    assert not seen.first(replace(first, hops_left=1))  # the same request by another path
    assert seen.first(replace(first, requester="b"))
    assert seen.first(replace(request(), request_id=0))
    assert seen.first(replace(request(), request_id=0))
    assert seen.copies == 1
    assert seen.first(replace(first, request_id=8))  # the oldest (a, 7) is forgotten now
    assert seen.first(first)
