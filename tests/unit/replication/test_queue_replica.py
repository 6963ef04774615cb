"""The replicated-queue glue core: owner rules, transfers, removal by the owner, acks (R2-R6)."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from amps.config.model import QueueKind
from amps.queue import (
    ExpireReason,
    MessagePublished,
    MessageRemoved,
    QueueEngine,
    QueuePolicy,
    RemovalReason,
    Subscribed,
)
from replication.ownership import (
    AppendOwnership,
    MessageKey,
    OwnershipRecord,
    OwnershipState,
    TransferKind,
)
from replication.queue_replica import QueueReplica, ReplicaAction, ReplicaOptions
from tests.unit.replication.replica_cluster import LATENCY, ReplicaCluster


def test_queue_owner_is_where_published_and_only_the_owner_delivers() -> None:
    cluster = ReplicaCluster()
    for name in cluster.nodes:
        cluster.subscribe(name)
    key = cluster.publish("b")
    cluster.flush()
    assert cluster.owners(key) == ["b"]
    assert cluster.holders(key) == ["b"]  # R2, R3: the owner's subscriber has it
    cluster.tick(1_000)
    cluster.flush()
    assert cluster.holders(key) == ["b"]  # leased on the owner: requests are refused
    cluster.check()


def test_group_local_queue_initial_owner_owns_wherever_published() -> None:
    cluster = ReplicaCluster(kind="GroupLocalQueue", initial_owner="c")
    cluster.subscribe("c")
    key = cluster.publish("a")
    cluster.flush()
    assert cluster.owners(key) == ["c"]
    assert cluster.holders(key) == ["c"]
    cluster.check()


def test_local_queue_every_instance_delivers_its_own_copy() -> None:
    cluster = ReplicaCluster(kind="LocalQueue")
    for name in cluster.nodes:
        cluster.subscribe(name)
    key = cluster.publish("a")
    cluster.flush()
    assert sorted(cluster.holders(key)) == ["a", "b", "c"]


def test_consumer_only_on_a_non_owner_gets_the_message_by_transfer() -> None:
    cluster = ReplicaCluster()
    cluster.subscribe("c")
    key = cluster.publish("a")
    cluster.flush()
    assert cluster.holders(key) == []
    assert cluster.nodes["c"].replica.next_deadline_ms() is not None  # R4: ask later
    cluster.tick(LATENCY.default_ms)  # not longer than the estimate yet
    cluster.flush()
    assert cluster.holders(key) == []
    cluster.tick(1)
    cluster.flush()
    assert cluster.holders(key) == ["c"]
    assert cluster.owners(key) == ["c"]
    (grant,) = cluster.nodes["a"].logged  # the owner logged the grant (R5)
    assert (grant.by, grant.owner, grant.epoch) == ("a", "c", 1)
    assert cluster.nodes["b"].replica.state_of(key) is OwnershipState.OWNED_ELSEWHERE
    stats = cluster.nodes["c"].replica.statistics()
    assert (stats.requests_sent, stats.transferred_in, stats.owned) == (1, 1, 1)
    assert cluster.nodes["a"].replica.statistics().requests_granted == 1
    cluster.ack("c", key)
    cluster.flush()
    assert all(n.replica.engine.txid_of(key) is None for n in cluster.nodes.values())
    cluster.check()


def test_owner_refuses_while_its_own_subscriber_can_take_it() -> None:
    cluster = ReplicaCluster()
    cluster.subscribe("a", backlog=1)
    cluster.subscribe("c")
    first = cluster.publish("a")
    second = cluster.publish("a")
    cluster.flush()
    assert cluster.holders(first) == ["a"]
    cluster.tick(50)
    cluster.flush()
    assert cluster.holders(second) == ["c"]  # a's subscriber is full: transferred
    cluster.ack("a", first)
    third = cluster.publish("a")
    cluster.flush()
    assert cluster.holders(third) == ["a"]  # served locally first (R3)
    cluster.check()


def test_a_refused_request_does_not_stall_the_later_messages() -> None:
    cluster = ReplicaCluster(policy=QueuePolicy())  # backlogs of 1
    cluster.subscribe("a")
    cluster.subscribe("c")
    first = cluster.publish("a")
    second = cluster.publish("a")
    cluster.flush()
    assert cluster.holders(first) == ["a"]
    for _ in range(4):
        cluster.tick(30)
        cluster.flush()
    assert cluster.holders(second) == ["c"]  # the refusal of `first` sent c to the next
    cluster.check()


def test_requests_are_bounded_by_the_backlog_room() -> None:
    cluster = ReplicaCluster()
    cluster.subscribe("b", backlog=2)
    keys = [cluster.publish("a") for _ in range(6)]
    cluster.flush()
    cluster.tick(50)
    cluster.flush()
    assert [k for k in keys if cluster.holders(k) == ["b"]] == keys[:2]
    assert cluster.nodes["b"].replica.statistics().requests_sent == 2
    cluster.ack_all()
    cluster.flush()
    cluster.tick(50)
    cluster.flush()
    assert [k for k in keys if cluster.holders(k) == ["b"]] == keys[2:4]
    cluster.check()


def test_only_the_owner_expires_and_the_removal_replicates_once() -> None:
    cluster = ReplicaCluster(policy=QueuePolicy(expiration_ms=100, max_per_subscription_backlog=10))
    key = cluster.publish("a")
    cluster.flush()
    cluster.tick(200)
    cluster.flush()
    expired = [
        (name, reason) for name, n in cluster.nodes.items() for k, reason in n.removals if k == key
    ]
    assert expired == [("a", RemovalReason.EXPIRED)]  # written once, by the owner
    assert all(n.replica.engine.txid_of(key) is None for n in cluster.nodes.values())
    cluster.check()


def test_ack_on_any_instance_removes_everywhere_even_before_the_message() -> None:
    cluster = ReplicaCluster()
    key = (7, 1)
    cluster._receive("c", "b", ("removed", key, RemovalReason.ACKED))  # ack overtakes publish
    assert cluster.nodes["b"].replica.engine.statistics(1).deferred_ack_count == 1
    assert cluster.publish("a") == key
    cluster.flush()
    assert all(n.replica.engine.txid_of(key) is None for n in cluster.nodes.values())
    other = cluster.publish("a")
    cluster.flush()
    cluster.ack("c", other)  # a non-owner acks a message it never delivered
    cluster.flush()
    assert all(n.replica.engine.txid_of(other) is None for n in cluster.nodes.values())
    cluster.check()


def test_barrier_released_per_instance() -> None:
    cluster = ReplicaCluster(policy=QueuePolicy(has_barrier=True, max_per_subscription_backlog=10))
    for name in cluster.nodes:
        cluster.subscribe(name)
    first = cluster.publish("a")
    barrier = cluster.publish("a", barrier=True)
    cluster.flush()
    assert all(barrier not in n.barriers for n in cluster.nodes.values())
    cluster.ack("a", first)
    cluster.flush()
    assert all(n.barriers == [barrier] for n in cluster.nodes.values())  # R6
    cluster.check()


def test_a_peers_removal_never_removes_a_barrier_here() -> None:
    """R6 (issue 9): a barrier is each holder's own to release or expire; a peer's removal
    of it (an older peer replicated its barrier expiries) leaves the copy here alone."""
    replica = QueueReplica("b", QueueEngine(QueuePolicy(has_barrier=True)), ReplicaOptions())
    ordinary = MessagePublished(1, 7, 1, 0)
    barrier = MessagePublished(2, 7, 2, 0, is_barrier=True)
    replica.published([ordinary, barrier], ["a", "a"], 0)
    replica.removed_by_peer([(7, 1), (7, 2)], 1, RemovalReason.EXPIRED)
    assert replica.engine.txid_of((7, 1)) is None
    assert replica.engine.txid_of((7, 2)) == 2
    replica.check_invariants()


def test_transfer_request_beyond_the_window_activates_up_to_it() -> None:
    cluster = ReplicaCluster(
        ("a", "b"), policy=QueuePolicy(target_queue_depth=2, max_per_subscription_backlog=10)
    )
    keys = [cluster.publish("a") for _ in range(5)]
    cluster.flush()
    b = cluster.nodes["b"].replica
    cluster.subscribe("b", backlog=1)
    a = cluster.nodes["a"].replica
    assert a.engine.statistics(cluster.now_ms).inactive_count == 3
    cluster.now_ms += 50
    # b asks for the fourth message directly (as if its own subscriber filtered the others).
    cluster._run("a", a.transfer_requested(keys[3], "b", cluster.now_ms))
    cluster.flush()
    assert cluster.owners(keys[3]) == ["b"]
    assert cluster.holders(keys[3]) == ["b"]
    stats = a.engine.statistics(cluster.now_ms)
    assert stats.inactive_count == 1  # A4: activated up to it, transferred it, stopped
    assert b.statistics().transferred_in == 1
    cluster.check()


def test_proxied_claim_only_for_an_unreachable_owner() -> None:
    cluster = ReplicaCluster()
    cluster.subscribe("b")
    key = cluster.publish("a")
    cluster.flush()
    b = cluster.nodes["b"]
    b.replica.proxied_transfer_switched(True, cluster.now_ms)
    cluster.tick(50)
    cluster.wire.clear()  # the request is lost: a is down
    assert cluster.holders(key) == []
    cluster._run("b", b.replica.reachability_changed({"a"}, cluster.now_ms))
    cluster.tick(100)
    assert cluster.holders(key) == ["b"]
    (claim,) = b.logged
    assert (claim.by, claim.owner, claim.epoch) == ("b", "b", 1)
    assert b.replica.statistics().proxied_claims == 1
    cluster.check()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["pub", "sub", "ack", "tick", "flush"]), st.sampled_from("abc")),
        max_size=60,
    )
)
def test_never_leased_twice_and_everything_drains(steps: list[tuple[str, str]]) -> None:
    """Without proxied transfer no message is leased on two instances at once, and once
    everyone consumes, every message is acked everywhere (R2, R4, R5)."""
    cluster = ReplicaCluster()
    published = []
    for op, at in steps:
        if op == "pub":
            published.append(cluster.publish(at))
        elif op == "sub":
            cluster.subscribe(at, sub_id=f"s{len(published)}", backlog=2)
        elif op == "ack" and cluster.nodes[at].leases:
            cluster.ack(at, next(iter(cluster.nodes[at].leases)))
        elif op == "tick":
            cluster.tick(7)
        else:
            cluster.flush()
        cluster.check()
        assert not cluster.double_leases
    cluster.flush()
    for name in cluster.nodes:
        cluster.subscribe(name, sub_id="drain", backlog=3)
    for _ in range(200):
        cluster.ack_all()
        cluster.flush()
        cluster.tick(20)
        cluster.flush()
        if all(
            n.replica.engine.txid_of(k) is None for k in published for n in cluster.nodes.values()
        ):
            break
    assert not cluster.double_leases
    left = [
        k
        for k in published
        if any(n.replica.engine.txid_of(k) is not None for n in cluster.nodes.values())
    ]
    assert not left
    cluster.check()


def test_the_latency_estimate_learns_from_peers_acks_of_waiting_messages() -> None:
    """R4: the time from a replicated message arriving to its replicated ack arriving, per
    owner; a message that moved here leaves no sample and opens no estimator of its own."""
    cluster = ReplicaCluster()
    cluster.subscribe("a")
    keys = [cluster.publish("a") for _ in range(4)]
    cluster.flush()
    cluster.now_ms += 30
    for key in keys:
        cluster.ack("a", key)
    cluster.flush()
    stats = cluster.nodes["b"].replica.statistics()
    assert stats.latency_estimates_ms == {"a": 30}
    moved = cluster.publish("b")
    cluster.flush()
    cluster.tick(200)
    cluster.flush()
    assert cluster.holders(moved) == ["a"]  # by transfer
    assert "a" not in cluster.nodes["a"].replica.latencies.estimates_ms()
    cluster.check()


def _granted_once() -> ReplicaCluster:
    """Owner a without consumers, c with one: a's first message moves to c after the default
    wait, by a granted request."""
    cluster = ReplicaCluster()
    cluster.subscribe("c")
    first = cluster.publish("a")
    cluster.flush()
    cluster.tick(LATENCY.default_ms + 1)
    cluster.flush()
    assert cluster.holders(first) == ["c"]
    return cluster


def test_an_owner_that_grants_is_asked_sooner_and_one_that_refuses_later() -> None:
    """R4, R5: after a grant (the owner had no taker) the next message is asked for before the
    default has passed; once the owner's own subscriber takes its messages and a request goes
    unanswered, the wait goes back up to the typical time."""
    cluster = _granted_once()
    estimates = cluster.nodes["c"].replica.latencies
    assert estimates.estimates_ms() == {"a": LATENCY.default_ms // 2}
    second = cluster.publish("a")
    cluster.flush()
    cluster.tick(LATENCY.default_ms // 2 + 1)
    cluster.flush()
    assert cluster.holders(second) == ["c"]  # sooner
    cluster.subscribe("a")
    third = cluster.publish("a")
    cluster.flush()
    assert cluster.holders(third) == ["a"]  # R3: the owner's subscriber first
    waited = estimates.estimates_ms()["a"]
    cluster.tick(waited + 1)
    cluster.flush()
    assert cluster.holders(third) == ["a"]  # refused: silence
    cluster.tick(50)  # the request timeout: unanswered
    cluster.flush()
    assert estimates.estimates_ms()["a"] == 2 * waited
    assert cluster.nodes["c"].replica.statistics().requests_unanswered == 1
    cluster.check()


class _OneEventEach(QueueReplica):
    """The reference: a peer's removal applied as one `MessageRemoved` by bookmark each."""

    def removed_by_peer(
        self,
        bookmarks: Iterable[MessageKey],
        now_ms: int,
        reason: RemovalReason = RemovalReason.ACKED,
        expire_reasons: ExpireReason = ExpireReason.TIME_LIMIT,
    ) -> list[ReplicaAction]:
        keys = [k for k in bookmarks if self.state_of(k) is not OwnershipState.REMOVED]
        self._removed_silently(keys, now_ms, sample=True)
        events = [MessageRemoved(reason, bookmark=k, expire_reasons=expire_reasons) for k in keys]
        out: list[ReplicaAction] = []
        self._engine_actions(self.engine.handle_many(events, now_ms), now_ms, out)
        self._request_waiting(now_ms, out)
        return out


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_publishing_columns_equals_one_event_each(data: st.DataObject) -> None:
    """`published_plain` (the server's path for a step's publishes, in bulk when one owner
    takes them all) decides as `published` with one event per message does, on the owner and
    on a peer holding the copy, with grants that came first, acks before the message, re-offers
    and mixed origins; and a peer's removals by txid in one pass as by bookmark one each."""
    kinds: list[QueueKind] = ["Queue", "GroupLocalQueue"]
    kind = data.draw(st.sampled_from(kinds))
    options = ReplicaOptions(
        kind=kind,
        initial_owner=data.draw(st.sampled_from(["a", "b"])) if kind == "GroupLocalQueue" else None,
        request_timeout_ms=50,
        latency=LATENCY,
    )
    policy = QueuePolicy(max_per_subscription_backlog=3)
    bulk = QueueReplica("b", QueueEngine(policy), options)
    each = _OneEventEach("b", QueueEngine(policy), options)
    now_ms, txid, seq = 1, 0, 0
    for _ in range(data.draw(st.integers(1, 20))):
        step = data.draw(
            st.sampled_from(["publish", "publish", "sub", "peer_ack", "record", "tick"])
        )
        if step == "publish":
            rows = []
            for _ in range(data.draw(st.integers(1, 6))):
                txid += 1
                if data.draw(st.booleans()) or not seq:
                    seq += 1
                rows.append((txid, 7, seq - data.draw(st.sampled_from([0, 0, 0, 1])), now_ms))
            origins = [data.draw(st.sampled_from(["a", "a", "b"])) for _ in rows]
            txids, publisher_ids, seqs, stamps = (list(c) for c in zip(*rows, strict=True))
            got = [
                bulk.published_plain(txids, publisher_ids, seqs, stamps, origins, now_ms),
                each.published([MessagePublished(*row) for row in rows], origins, now_ms),
            ]
        elif step == "sub":
            event = Subscribed("s", "c", data.draw(st.integers(1, 3)))
            got = [r.handle(event, now_ms) for r in (bulk, each)]
        elif step == "peer_ack":
            keys = [
                (7, data.draw(st.integers(1, seq + 2))) for _ in range(data.draw(st.integers(1, 3)))
            ]
            got = [r.removed_by_peer(keys, now_ms) for r in (bulk, each)]
        elif step == "record":
            key = (7, data.draw(st.integers(1, seq + 2)))
            record = OwnershipRecord(
                key, TransferKind.GRANT, "a", "b", data.draw(st.integers(1, 2))
            )
            got = [r.ownership_recorded(record, now_ms) for r in (bulk, each)]
        else:
            now_ms += data.draw(st.sampled_from([1, 20, 60]))
            got = [r.on_deadline(now_ms) for r in (bulk, each)]
        assert got[0] == got[1], step
        bulk.check_invariants()
        # The messages waiting to be asked for, in order, with their arrival (R4).
        assert list(bulk._waiting.items()) == list(each._waiting.items())
    assert bulk.statistics() == each.statistics()
    assert bulk.engine.snapshot() == each.engine.snapshot()
    for key in [(7, s) for s in range(1, seq + 2)]:
        assert bulk.state_of(key) == each.state_of(key)
        assert bulk.ownership.owner_of(key) == each.ownership.owner_of(key)


def test_a_message_acked_elsewhere_while_asked_for_counts_as_refused() -> None:
    """R4: the owner's own consumer took a message we asked for (its ack reached us before
    our request timed out): the wait for that owner goes back up at once, and the request is
    unanswered (never granted to us) without waiting for its timeout."""
    cluster = _granted_once()
    estimates = cluster.nodes["c"].replica.latencies
    lowered = estimates.estimates_ms()["a"]
    assert lowered < LATENCY.default_ms
    cluster.subscribe("a")
    second = cluster.publish("a")
    cluster.flush()
    assert cluster.holders(second) == ["a"]
    cluster.tick(lowered + 1)  # c asks; a refuses (its subscriber holds it)
    cluster.flush()
    assert cluster.nodes["c"].replica.state_of(second) is OwnershipState.REQUESTED
    cluster.ack("a", second)
    cluster.flush()
    assert estimates.estimates_ms()["a"] == 2 * lowered
    assert cluster.nodes["c"].replica.statistics().requests_unanswered == 1
    cluster.check()


def _two_owners() -> tuple[QueueReplica, QueueReplica, tuple[int, int]]:
    """A failover republish (issue 9): "b" logged the publisher's message as its own before
    "a"'s copy (origin "a") reached it, so both own it at epoch 0 and deliver it."""
    options = ReplicaOptions(kind="Queue")
    a, b = (QueueReplica(n, QueueEngine(QueuePolicy()), options) for n in "ab")
    key = (7, 1)
    for replica, origin in ((a, "a"), (b, "b")):
        replica.published([MessagePublished(1, *key, 1)], [origin], 1)
    assert a.owned_here(key)
    assert b.owned_here(key)
    return a, b, key


def test_a_failover_republish_from_another_origin_leaves_one_owner_by_the_lower_name() -> None:
    a, b, key = _two_owners()
    # each discards the other's copy as a duplicate (L4) and tells the queue its origin
    assert a.republished(key, "b", 2) == []  # "a" < "b": nothing changes on the winner
    out = b.republished(key, "a", 2)
    record = OwnershipRecord(key, TransferKind.ORIGIN, "a", "a", 0)
    assert out[0] == AppendOwnership(record)  # durable, so recovery and snapshots rebuild it
    assert a.owned_here(key)
    assert not b.owned_here(key)
    assert b.ownership.owner_of(key) == ("a", 0)
    assert b.republished(key, "c", 3) == []  # a higher name never wins
    # the record replayed (recovery) or replicated leaves every instance with the same owner
    c = QueueReplica("c", QueueEngine(QueuePolicy()), ReplicaOptions(kind="Queue"))
    c.published([MessagePublished(1, *key, 1)], ["b"], 1)
    c.ownership_recorded(record, 2)
    assert c.ownership.owner_of(key) == ("a", 0)
    a.ownership_recorded(record, 3)
    assert a.owned_here(key)
    for replica in (a, b, c):
        replica.check_invariants()


def test_a_republish_after_a_grant_or_in_a_group_local_queue_changes_nothing() -> None:
    _, b, key = _two_owners()
    b.ownership_recorded(OwnershipRecord(key, TransferKind.GRANT, "b", "c", 1), 2)
    assert b.republished(key, "a", 3) == []  # epoch 1 beats any epoch-0 owner
    group = QueueReplica(
        "b", QueueEngine(QueuePolicy()), ReplicaOptions("GroupLocalQueue", initial_owner="b")
    )
    group.published([MessagePublished(1, *key, 1)], ["b"], 1)
    assert group.republished(key, "a", 2) == []
    assert group.owned_here(key)
