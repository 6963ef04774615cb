"""The ownership machine: who may deliver a replicated queue's message (R2-R5, R7)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from amps.errors import OwnershipProtocolError
from replication.ownership import (
    AppendOwnership,
    MessageEntered,
    Offer,
    Ownership,
    OwnershipRecord,
    OwnershipRecorded,
    OwnershipState,
    Removed,
    SendOwnership,
    TakerWaiting,
    TransferKind,
    TransferRequested,
    Withdraw,
)

from .ownership_pair import TIMEOUT_MS, OwnershipCluster

KEY = (1, 7)
S = OwnershipState


def entered(cluster: OwnershipCluster, owner: str, key: tuple[int, int] = KEY) -> None:
    for name in cluster.machines:
        cluster.handle(name, MessageEntered(key, owner))


def test_only_the_initial_owner_delivers() -> None:
    """R2: a Queue message is owned where it was published, by that instance alone."""
    cluster = OwnershipCluster("a", "b", "c")
    entered(cluster, "a")
    assert cluster.owners(KEY) == {"a"}
    assert cluster.machines["b"].state_of(KEY) is S.OWNED_ELSEWHERE
    assert cluster.machines["a"].statistics().owned == 1


def test_the_owner_grants_only_the_first_request() -> None:
    """R5: b asks first and gets it; c's later request is silence; every copy agrees."""
    cluster = OwnershipCluster("a", "b", "c")
    entered(cluster, "a")
    cluster.handle("b", TakerWaiting(KEY))
    cluster.handle("c", TakerWaiting(KEY))
    cluster.deliver_all()
    assert cluster.owners(KEY) == {"b"}
    assert cluster.logged["a"] == [OwnershipRecord(KEY, TransferKind.GRANT, "a", "b", 1)]
    assert cluster.machines["a"].state_of(KEY) is S.GRANTED
    assert cluster.machines["c"].owner_of(KEY) == ("b", 1)
    assert cluster.machines["c"].state_of(KEY) is S.OWNED_ELSEWHERE  # its request is moot
    assert cluster.offered["b"] == [KEY]
    assert cluster.withdrawn["a"] == [KEY]
    stats = cluster.machines["a"].statistics()
    assert (stats.requests_granted, stats.transferred_out, stats.owned) == (1, 1, 0)
    assert cluster.machines["b"].statistics().transferred_in == 1


def test_a_refused_request_does_not_use_up_the_first() -> None:
    """R5: refused while a local subscriber could take it; the next request is granted."""
    cluster = OwnershipCluster("a", "b")
    entered(cluster, "a")
    cluster.held["a"] = True
    cluster.handle("b", TakerWaiting(KEY))
    cluster.deliver_all()
    assert cluster.owners(KEY) == {"a"}
    assert cluster.logged["a"] == []  # a refusal is silence
    cluster.now_ms += TIMEOUT_MS
    cluster.perform("b", cluster.machines["b"].on_deadline(cluster.now_ms))
    assert cluster.machines["b"].state_of(KEY) is S.OWNED_ELSEWHERE
    assert cluster.machines["b"].statistics().requests_unanswered == 1
    cluster.held["a"] = False
    cluster.handle("b", TakerWaiting(KEY))
    cluster.deliver_all()
    assert cluster.owners(KEY) == {"b"}


def test_a_request_is_not_sent_twice_while_outstanding() -> None:
    """R4: one request per message until it is answered or times out."""
    cluster = OwnershipCluster("a", "b")
    entered(cluster, "a")
    assert cluster.handle("b", TakerWaiting(KEY)) != []
    assert cluster.handle("b", TakerWaiting(KEY)) == []
    assert cluster.machines["b"].next_deadline_ms() == cluster.now_ms + TIMEOUT_MS


def test_a_grant_is_logged_before_it_is_sent() -> None:
    """Rule 5: Withdraw (local), then AppendOwnership, then SendOwnership of the same record."""
    cluster = OwnershipCluster("a", "b")
    entered(cluster, "a")
    actions = cluster.handle("a", TransferRequested(KEY, "b", held_here=False))
    record = OwnershipRecord(KEY, TransferKind.GRANT, "a", "b", 1)
    assert actions == [Withdraw(KEY), AppendOwnership(record), SendOwnership(record)]


def test_a_proxied_claim_is_logged_before_it_is_acted_on() -> None:
    """R7: with the owner unreachable, the claim is appended, sent, then offered here."""
    cluster = OwnershipCluster("a", "b")
    entered(cluster, "a")
    machine = cluster.machines["b"]
    machine.proxied_transfer = True
    machine.unreachable = frozenset({"a"})
    actions = cluster.handle("b", TakerWaiting(KEY))
    record = OwnershipRecord(KEY, TransferKind.CLAIM, "b", "b", 1)
    assert actions == [AppendOwnership(record), SendOwnership(record), Offer(KEY)]
    assert machine.state_of(KEY) is S.CLAIMED_BY_PROXY
    assert machine.statistics().proxied_claims == 1


def test_proxied_transfer_never_bypasses_a_reachable_owner() -> None:
    """R7: enabled, but the owner is reachable: an ordinary request goes to it."""
    cluster = OwnershipCluster("a", "b", "c")
    entered(cluster, "a")
    cluster.machines["b"].proxied_transfer = True
    assert [type(a).__name__ for a in cluster.handle("b", TakerWaiting(KEY))] == [
        "SendTransferRequest"
    ]
    # Nor does it grant for an owner it can reach.
    assert cluster.handle("b", TransferRequested(KEY, "c", held_here=False)) == []


def test_a_proxy_grants_for_an_unreachable_owner() -> None:
    """R7: c asks b; a is down; b grants what it does not own, and everyone follows."""
    cluster = OwnershipCluster("a", "b", "c")
    entered(cluster, "a")
    cluster.machines["b"].proxied_transfer = True
    cluster.machines["b"].unreachable = frozenset({"a"})
    cluster.handle("b", TransferRequested(KEY, "c", held_here=False))
    cluster.deliver_all()
    assert cluster.owners(KEY) == {"c"}
    assert cluster.machines["a"].owner_of(KEY) == ("c", 1)


def test_a_claim_and_a_grant_in_one_epoch_converge_on_the_lower_name() -> None:
    """Rule 3 (seed 004's warning): a grants to c while b claims by proxy, both epoch 1."""
    cluster = OwnershipCluster("a", "b", "c")
    entered(cluster, "a")
    b = cluster.machines["b"]
    b.proxied_transfer = True
    b.unreachable = frozenset({"a"})
    cluster.handle("a", TransferRequested(KEY, "c", held_here=False))  # a grants c (epoch 1)
    cluster.handle("b", TakerWaiting(KEY))  # b claims (epoch 1) and may deliver at once
    cluster.deliver_all()
    assert cluster.owners(KEY) == {"b"}  # "b" < "c": the claim wins everywhere
    assert {m.owner_of(KEY) for m in cluster.machines.values()} == {("b", 1)}
    assert cluster.withdrawn["c"] == [KEY]  # c was offered it, then lost it: the duplicate
    assert cluster.machines["c"].statistics().superseded_records == 0
    assert cluster.machines["b"].statistics().superseded_records == 1


def test_a_higher_epoch_wins_whatever_the_name() -> None:
    """Rule 3: epoch first; the name breaks ties only."""
    cluster = OwnershipCluster("a", "b", "z")
    entered(cluster, "a")
    late = OwnershipRecord(KEY, TransferKind.GRANT, "b", "z", 2)
    early = OwnershipRecord(KEY, TransferKind.GRANT, "a", "b", 1)
    for record in (late, early):  # arriving in either order ends the same
        cluster.handle("a", OwnershipRecorded(record))
    assert cluster.machines["a"].owner_of(KEY) == ("z", 2)


def test_a_record_that_overtakes_its_message_is_applied_when_it_enters() -> None:
    """A grant can arrive by another path before the publish; it waits for it."""
    cluster = OwnershipCluster("c")
    record = OwnershipRecord(KEY, TransferKind.GRANT, "a", "c", 1)
    assert cluster.handle("c", OwnershipRecorded(record)) == []
    assert cluster.machines["c"].state_of(KEY) is None
    cluster.handle("c", MessageEntered(KEY, "a"))
    assert cluster.owners(KEY) == {"c"}


def test_recovery_replays_this_instances_own_records() -> None:
    """Rebuilt from the log: its own grant means GRANTED, its own claim CLAIMED_BY_PROXY."""
    cluster = OwnershipCluster("a")
    cluster.handle("a", MessageEntered(KEY, "a"))
    cluster.handle("a", OwnershipRecorded(OwnershipRecord(KEY, TransferKind.GRANT, "a", "b", 1)))
    assert cluster.machines["a"].state_of(KEY) is S.GRANTED
    other = (2, 1)
    cluster.handle("a", MessageEntered(other, "b"))
    cluster.handle("a", OwnershipRecorded(OwnershipRecord(other, TransferKind.CLAIM, "a", "a", 1)))
    assert cluster.machines["a"].state_of(other) is S.CLAIMED_BY_PROXY
    cluster.machines["a"].check_invariants()


def test_an_ack_before_the_message_keeps_it_removed() -> None:
    """Deferred acks: a message acked before it arrived never becomes owned or offered."""
    cluster = OwnershipCluster("a")
    cluster.handle("a", Removed(KEY))
    cluster.handle("a", MessageEntered(KEY, "a"))
    assert cluster.machines["a"].state_of(KEY) is S.REMOVED
    assert not cluster.machines["a"].owned_here(KEY)
    record = OwnershipRecord(KEY, TransferKind.GRANT, "b", "a", 3)
    assert cluster.handle("a", OwnershipRecorded(record)) == []


def test_illegal_events_raise_and_change_nothing() -> None:
    """Rule 7: a taker waiting on the owner, or a request from itself, is a protocol error."""
    cluster = OwnershipCluster("a")
    cluster.handle("a", MessageEntered(KEY, "a"))
    machine = cluster.machines["a"]
    before = machine.statistics()
    with pytest.raises(OwnershipProtocolError, match=r"TakerWaiting.*owned_here"):
        machine.handle(TakerWaiting(KEY), 1)
    with pytest.raises(OwnershipProtocolError, match="from itself"):
        machine.handle(TransferRequested(KEY, "a", held_here=False), 1)
    with pytest.raises(OwnershipProtocolError, match="malformed"):
        machine.handle(OwnershipRecorded(OwnershipRecord(KEY, TransferKind.GRANT, "b", "b", 0)), 1)
    with pytest.raises(OwnershipProtocolError):
        machine.handle(MessageEntered(KEY, "a"), 1)
    assert machine.state_of(KEY) is S.OWNED_HERE
    assert machine.statistics() == before


def test_the_state_diagram_is_current() -> None:
    """docs/design/ownership-states.md is rendered from TRANSITIONS."""
    path = Path(__file__).resolve().parents[3] / "docs" / "design" / "ownership_diagram.py"
    spec = importlib.util.spec_from_file_location("ownership_diagram", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0


def test_bulk_enter_and_remove_leave_what_one_at_a_time_leaves() -> None:
    """`enter_many` (one entry shared by messages entered alike) and `remove_many` against
    `enter` and `remove` of each key: same states, counts and snapshot, also for a key removed
    twice, an early record, and a shared entry that a later request changes."""
    from replication.ownership import Ownership

    machines = [Ownership("b", request_timeout_ms=TIMEOUT_MS, max_removed_remembered=5)
                for _ in range(2)]  # fmt: skip
    bulk, single = machines
    mine, theirs = [(1, s) for s in range(1, 6)], [(2, s) for s in range(1, 6)]
    assert bulk.enter_many(mine, "b")
    assert bulk.enter_many(theirs, "a")
    for key in mine:
        single.enter(key, "b")
    for key in theirs:
        single.enter(key, "a")
    for machine in machines:
        machine.handle(TakerWaiting((2, 1)), 0)  # changes one message of a shared entry
        machine.handle(
            OwnershipRecorded(OwnershipRecord((9, 9), TransferKind.GRANT, "a", "b", 1)), 0
        )
    for keys in ([(1, 1), (2, 2), (2, 1)], [(1, 2), (1, 2), (2, 3)], [(1, 3), (9, 9)]):
        bulk.remove_many(keys)
        for key in keys:
            single.remove(key)
    for machine in machines:
        machine.check_invariants()
    assert bulk.snapshot() == single.snapshot()
    assert bulk.statistics() == single.statistics()
    assert [bulk.state_of(k) for k in mine + theirs] == [single.state_of(k) for k in mine + theirs]
    assert bulk.state_of((2, 4)) is S.OWNED_ELSEWHERE
    assert bulk.state_of((1, 5)) is S.OWNED_HERE


def test_a_request_not_granted_to_its_requester_in_time_is_unanswered() -> None:
    """R4, R5 (issue 9): a refusal is silence, so every request sent ends either granted to
    its requester before the request timeout, or unanswered, whatever happened instead: the
    timeout, a grant to another instance, the message removed (acked elsewhere), or a proxied
    claim here. A grant that comes after the timeout does not undo the count."""
    cluster = OwnershipCluster("a", "b", "c")
    entered(cluster, "a")
    cluster.handle("b", TakerWaiting(KEY))
    cluster.handle("c", TakerWaiting(KEY))
    cluster.deliver_all()  # b asked first: granted to b, so c's request was not answered
    unanswered = {n: m.statistics().requests_unanswered for n, m in cluster.machines.items()}
    assert unanswered == {"a": 0, "b": 0, "c": 1}

    removed = (1, 8)
    entered(cluster, "a", removed)
    cluster.handle("b", TakerWaiting(removed))  # lost on the way
    cluster.handle("b", Removed(removed))  # a's own subscriber took it
    assert cluster.machines["b"].statistics().requests_unanswered == 1

    late = (1, 9)
    entered(cluster, "a", late)
    cluster.handle("c", TakerWaiting(late))
    cluster.now_ms += TIMEOUT_MS
    cluster.perform("c", cluster.machines["c"].on_deadline(cluster.now_ms))
    cluster.deliver_all()  # the grant arrives after the request timed out
    assert cluster.owners(late) == {"c"}
    assert cluster.machines["c"].statistics().requests_unanswered == 2

    claimed = (1, 10)
    entered(cluster, "a", claimed)
    machine = cluster.machines["b"]
    cluster.handle("b", TakerWaiting(claimed))  # lost: a is gone
    machine.proxied_transfer = True
    machine.unreachable = frozenset({"a"})
    cluster.handle("b", TakerWaiting(claimed))
    assert machine.state_of(claimed) is S.CLAIMED_BY_PROXY
    stats = machine.statistics()
    assert (stats.requests_sent, stats.requests_unanswered) == (3, 2)
    for name in cluster.machines:
        cluster.machines[name].check_invariants()  # sent = answered + unanswered + pending


def test_not_removed_keeps_what_state_of_does_not_call_removed() -> None:
    """The bulk filter a peer's ack record goes through equals asking each key's state: a
    removed key (remembered) goes, a live one, an unknown one and one entered again stay."""
    machine = Ownership("a", request_timeout_ms=TIMEOUT_MS, max_removed_remembered=3)
    for seq in range(1, 7):
        machine.enter((1, seq), "a" if seq % 2 else "b")
    for seq in (1, 2, 3, 4):
        machine.remove((1, seq))  # (1, 1) is forgotten again: three are remembered
    keys = [(1, seq) for seq in range(9)] + [(2, 1), (1, 3)]
    expected = [k for k in keys if machine.state_of(k) is not OwnershipState.REMOVED]
    assert machine.not_removed(keys) == expected
    assert (1, 1) in expected
    assert (1, 3) not in expected
    assert (1, 5) in expected
    assert machine.not_removed([(1, 5), (2, 1)]) == [(1, 5), (2, 1)]
