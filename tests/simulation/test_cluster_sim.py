"""The seeded cluster simulation: CI's seeds keep every invariant, and broken rules are caught."""

from __future__ import annotations

from collections import Counter

import pytest

from amps.log.records import QueueRecord, TransferRecord

from .cluster_sim import SimFailure, SimOptions, run_seed

CI_SEEDS = 1_000
PROXIED_SEEDS = 60
LINE_SEEDS = 50


# ~60 ms of CPU per seed (a flat profile: the real cores and their invariant checks), so about
# a minute in all; on a machine shared at load 10-18 that took up to ~4 minutes of wall time.
@pytest.mark.timeout(900)
def test_ci_seeds_keep_every_invariant() -> None:
    """R2-R6, R9, R10, Q13: one lease holder per message, one dead letter per message (per
    instance for a LocalQueue's copy or a barrier), nothing persisted lost, the same queue
    everywhere after heal, everything acked, released or dead-lettered everywhere, over
    crashes, cuts and partitions; with a Queue, a GroupLocalQueue and a LocalQueue, and in
    half the seeds sync destinations (a persisted ack only once each holds the message); a
    restart restores each replicated queue's stored snapshot and replays the log after it,
    and the queue equals the one a replay of the whole log rebuilds (Q16); publishers fail
    over across sync destinations, and a republished message's two epoch-0 owners settle on
    the lower origin everywhere (issue 9; seeds 12 and 61 found it)."""
    seen: Counter[str] = Counter()
    for seed in range(CI_SEEDS):
        cluster = run_seed(seed, SimOptions(failover=True))
        for instance in cluster.instances.values():
            for queue in instance.queues.values():
                seen[f"{queue.name} transfers"] += queue.replica.statistics().transferred_in
            for record in instance.disk.records:
                if isinstance(record, TransferRecord):
                    seen[f"{record.queue} records"] += 1
                    seen["origin records"] += record.epoch == 0
                mine = record.origin_instance == instance.name
                if isinstance(record, QueueRecord) and mine:
                    seen[f"{record.queue} {record.action.name} on {instance.name}"] += 1
        seen["seeds with sync destinations"] += any(cluster.sync_to.values())
        seen["snapshot restores"] += sum(i.restored for i in cluster.instances.values())
        seen["crashes"] += sum(1 for line in cluster.transcript if " crash " in line)
        seen["dead letters"] += len(cluster.dead_letters)
    assert seen["work transfers"] > CI_SEEDS  # the seeds move messages between instances,
    assert seen["group transfers"] > CI_SEEDS // 4  # away from the InitialOwner too,
    assert seen["local records"] == seen["local transfers"] == 0  # never a LocalQueue's,
    for name in ("i0", "i1", "i2"):  # whose copies every instance delivers for itself,
        assert seen[f"local ACK on {name}"] > CI_SEEDS // 2
        for kind in ("work", "group", "local"):  # and barriers are released everywhere,
            assert seen[f"{kind} BARRIER_RELEASED on {name}"] > CI_SEEDS // 20
    assert seen["seeds with sync destinations"] > CI_SEEDS // 4  # hold persisted acks (L2),
    assert seen["crashes"] > CI_SEEDS // 2  # crash instances,
    assert seen["snapshot restores"] > CI_SEEDS // 2  # restart them from snapshots,
    assert seen["dead letters"] > CI_SEEDS // 4  # owners expire messages,
    assert seen["origin records"] > 0  # and a failover republish had two owners to settle


@pytest.mark.parametrize(
    "options",
    [
        SimOptions(break_first_request=True),
        SimOptions(break_log_before_send=True),
        SimOptions(break_replay=True),
        SimOptions(topology="line", break_reachability=True),
    ],
    ids=[
        "first-request rule",
        "log-before-send rule",
        "replay-before-deadlines rule",
        "reachability-through-passthrough rule",
    ],
)
def test_a_broken_rule_fails_within_the_ci_seeds(options: SimOptions) -> None:
    """The simulation finds bugs: with R5's first-request rule, the ordering contract (a
    grant durable before it is sent), recovery's order (replay the log, then expire what
    is due, with records) or R7's reachability (heard from by any path, so an alive owner
    two hops away in a line is never taken for unreachable) broken, some CI seed fails,
    naming its seed."""
    for seed in range(CI_SEEDS):
        try:
            run_seed(seed, options)
        except SimFailure as failure:
            failed = (seed, str(failure))
            break
    else:
        pytest.fail("no CI seed noticed the broken rule")
    assert "reproduce with: make sim " in failed[1]
    assert f"SEED={failed[0]}\n" in failed[1]


@pytest.mark.parametrize("topology", ["mesh", "line"])
def test_proxied_transfer_duplicates_only_in_the_documented_way(topology: str) -> None:
    """R7, R9: with proxied transfer on one survivor (in a line, its end: i0 - i1 - i2), a
    message is leased on two instances only after a proxy took it from an owner it could
    not reach by any path; after heal every instance agrees on one owner, and everything is
    acked or dead-lettered."""
    claims = duplicates = 0
    for seed in range(PROXIED_SEEDS):
        cluster = run_seed(seed, SimOptions(topology=topology, proxied=True))
        replicas = [q.replica for i in cluster.instances.values() for q in i.queues.values()]
        claims += sum(r.statistics().proxied_claims for r in replicas)
        duplicates += cluster.documented_duplicates
    assert claims > 0  # the survivor did claim for its consumers
    assert duplicates < claims  # and a claim meets the owner's own delivery only sometimes


def test_in_a_line_requests_and_grants_cross_the_middle_instance() -> None:
    """R4, R9: in i0 - i1 - i2, the ends have no link to each other, yet each grants the
    other messages: requests went as `TransferRequest` frames through i1's link cores
    (forwarded by the link's routing), grants as records passed through."""
    crossed = 0
    for seed in range(LINE_SEEDS):
        cluster = run_seed(seed, SimOptions(topology="line"))
        crossed += sum(
            1
            for record in cluster.instances["i1"].disk.records
            if isinstance(record, TransferRecord)
            and {record.from_instance, record.to_instance} == {"i0", "i2"}
        )
    assert crossed > 0


def test_a_seed_replays_exactly() -> None:
    assert run_seed(42).transcript == run_seed(42).transcript


MESH_SEEDS = 4


def test_in_a_mesh_of_seven_each_instance_forwards_and_answers_a_request_once() -> None:
    """R4, R9 (routing Rule 5): with an owner down in a mesh of seven, passing everything
    through, a request reaches the others by every path; each instance forwards and answers
    it once (by requester and request id), so a request costs at most one frame per link
    direction, not (N-2)(N-4)^(h-1) frames on hop h."""
    instances = 7
    forwarded = 0
    for seed in range(MESH_SEEDS):
        cluster = run_seed(seed, SimOptions(instances=instances, crash_probability=0.05))
        frames = cluster.request_frames
        assert frames, "no transfer request was sent"
        worst = max(frames.values())
        assert worst <= instances * (instances - 1), (seed, worst)
        assert max(cluster.request_offers.values()) == 1, seed
        forwarded += sum(1 for count in frames.values() if count > 1)
    assert forwarded > 0  # some requests did go round an owner that was not a neighbour
