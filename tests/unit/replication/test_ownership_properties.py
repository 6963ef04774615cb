"""Hypothesis over every (ownership state, event) pair (STYLE §4.7 item 8, h2 style).

Each pair either moves the message to a state the table allows or raises
`OwnershipProtocolError` with the machine unchanged; and every action list keeps Rule 5.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.errors import OwnershipProtocolError
from replication.ownership import (
    TRANSITIONS,
    Action,
    AppendOwnership,
    Event,
    MessageEntered,
    Offer,
    Ownership,
    OwnershipRecord,
    OwnershipRecorded,
    OwnershipState,
    Removed,
    RequestExpired,
    SendOwnership,
    TakerWaiting,
    TransferKind,
    TransferRequested,
)

HERE = "b"
NAMES = ["a", "b", "c"]
KEY = (1, 1)
S = OwnershipState
EVENT_TYPES: list[type[Event]] = [
    MessageEntered,
    TakerWaiting,
    TransferRequested,
    OwnershipRecorded,
    RequestExpired,
    Removed,
]


def machine_in(state: OwnershipState) -> Ownership:
    """A machine on HERE whose message KEY is in `state`, reached by legal events only."""
    machine = Ownership(HERE, request_timeout_ms=100)
    owner = HERE if state in (S.OWNED_HERE, S.GRANTED) else "a"
    machine.handle(MessageEntered(KEY, owner), 1)
    if state is S.REQUESTED:
        machine.handle(TakerWaiting(KEY), 1)
    elif state is S.GRANTED:
        machine.handle(TransferRequested(KEY, "c", held_here=False), 1)
    elif state is S.CLAIMED_BY_PROXY:
        machine.proxied_transfer = True
        machine.unreachable = frozenset({"a"})
        machine.handle(TakerWaiting(KEY), 1)
    elif state is S.REMOVED:
        machine.handle(Removed(KEY), 1)
    assert machine.state_of(KEY) is state
    return machine


records = st.builds(
    OwnershipRecord,
    key=st.just(KEY),
    kind=st.sampled_from(TransferKind),
    by=st.sampled_from(NAMES),
    owner=st.sampled_from(NAMES),
    epoch=st.integers(0, 3),
)
EVENTS: dict[type[Event], st.SearchStrategy[Event]] = {
    MessageEntered: st.builds(MessageEntered, key=st.just(KEY), owner=st.sampled_from(NAMES)),
    TakerWaiting: st.just(TakerWaiting(KEY)),
    TransferRequested: st.builds(
        TransferRequested,
        key=st.just(KEY),
        requester=st.sampled_from(NAMES),
        held_here=st.booleans(),
    ),
    OwnershipRecorded: st.builds(OwnershipRecorded, record=records),
    RequestExpired: st.just(RequestExpired(KEY)),
    Removed: st.just(Removed(KEY)),
}


def check_log_before_send(actions: list[Action]) -> None:
    """Rule 5: a sent record, or an offer, follows the append of the record behind it."""
    appended: list[OwnershipRecord] = []
    for action in actions:
        if isinstance(action, AppendOwnership):
            appended.append(action.record)
        elif isinstance(action, SendOwnership):
            assert action.record in appended
        elif isinstance(action, Offer) and appended:
            assert appended[-1].owner == HERE


@pytest.mark.parametrize("state", list(OwnershipState), ids=lambda s: s.value)
@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_pair_transitions_by_the_table_or_raises_unchanged(
    state: OwnershipState, event_type: type[Event], data: st.DataObject
) -> None:
    machine = machine_in(state)
    machine.proxied_transfer = data.draw(st.booleans())
    machine.unreachable = frozenset(data.draw(st.sets(st.sampled_from(NAMES))))
    event = data.draw(EVENTS[event_type])
    before = (machine.state_of(KEY), machine.owner_of(KEY), machine.statistics())
    try:
        actions = machine.handle(event, 2)
    except OwnershipProtocolError:
        assert (machine.state_of(KEY), machine.owner_of(KEY), machine.statistics()) == before
    else:
        assert (state, event_type) in TRANSITIONS
        assert machine.state_of(KEY) in TRANSITIONS[(state, event_type)]
        check_log_before_send(actions)
    if (state, event_type) not in TRANSITIONS:
        with pytest.raises(OwnershipProtocolError):
            machine_in(state).handle(event, 2)
    machine.check_invariants()


def test_the_table_names_only_known_states_and_events() -> None:
    for (state, event_type), targets in TRANSITIONS.items():
        assert state in OwnershipState
        assert event_type in EVENT_TYPES
        assert targets
        assert targets <= set(OwnershipState)
