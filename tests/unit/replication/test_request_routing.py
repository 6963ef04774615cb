"""Where a transfer request goes from an instance (R4, R9: `routing.route_request`)."""

from __future__ import annotations

from replication.frames import TransferRequest
from replication.routing import route_request


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
