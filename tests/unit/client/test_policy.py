"""The client's pure decisions: addresses, backoff, failover order, publish store, ack batches."""

from __future__ import annotations

from random import Random

import pytest

from amps.client.policy import (
    AckBatch,
    AckBatcher,
    ExponentialBackoff,
    PublishStore,
    ServerRotation,
    ack_batch_size,
    is_link_dead,
    parse_max_backlog,
    parse_server,
    parse_servers,
)
from amps.errors import InvalidOptions

# --- Addresses and failover order ----------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "target"),
    [
        ("127.0.0.1:9007", "127.0.0.1:9007"),
        ("grpc://example.org:1234", "example.org:1234"),
        ("grpc://example.org:1234/", "example.org:1234"),
        ("localhost", "localhost:9007"),
        (" host:1 ", "host:1"),
        ("[::1]:9007", "[::1]:9007"),
    ],
)
def test_a_server_address_becomes_a_grpc_target(uri: str, target: str) -> None:
    assert parse_server(uri) == target


@pytest.mark.parametrize("uri", ["", "host:", ":9007", "host:port", "host:70000", "a/b:1"])
def test_a_malformed_server_address_is_an_invalid_options_error(uri: str) -> None:
    with pytest.raises(InvalidOptions):
        parse_server(uri)


def test_a_comma_list_and_a_python_list_keep_the_failover_order() -> None:
    assert parse_servers("a:1,b:2") == ["a:1", "b:2"]
    assert parse_servers(["b:2", "a:1"]) == ["b:2", "a:1"]
    with pytest.raises(InvalidOptions):
        parse_servers(" , ")


def test_a_failed_attempt_moves_to_the_next_server_and_wraps_around() -> None:
    """§7.3: the server chooser rotates through its URIs."""
    rotation = ServerRotation(["a:1", "b:2", "c:3"])
    seen = [rotation.current]
    for _ in range(3):
        rotation.report_failure()
        seen.append(rotation.current)
    assert seen == ["a:1", "b:2", "c:3", "a:1"]


def test_only_a_whole_failed_round_asks_for_a_backoff_delay() -> None:
    """D3: a dead instance costs one refused attempt, not a backoff, before the next server."""
    rotation = ServerRotation(["a:1", "b:2", "c:3"])
    assert [rotation.report_failure() for _ in range(6)] == [False, False, True] * 2
    rotation.report_failure()  # a fails; b works: the next round starts at b
    rotation.report_success()
    assert rotation.current == "b:2"
    assert [rotation.report_failure() for _ in range(3)] == [False, False, True]
    assert rotation.current == "b:2"
    single = ServerRotation(["a:1"])
    assert [single.report_failure() for _ in range(2)] == [True, True]


def test_a_success_keeps_the_current_server_for_the_next_loss() -> None:
    rotation = ServerRotation(["a:1", "b:2"])
    rotation.report_failure()
    rotation.report_success()
    assert rotation.current == "b:2"
    assert rotation.count == 2


# --- Reconnect backoff -----------------------------------------------------------------------


def test_backoff_doubles_from_200_ms_and_is_capped_at_20_s_without_jitter() -> None:
    """§7.3: ExponentialDelayStrategy(initial 200 ms, max 20 s, exponent 2)."""
    backoff = ExponentialBackoff(Random(1), jitter=0.0)
    delays = [backoff.next_delay_ms() for _ in range(10)]
    assert delays == [200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000, 20000]


def test_backoff_jitter_is_reproducible_from_a_seed_and_bounded() -> None:
    first = ExponentialBackoff(Random(42))
    second = ExponentialBackoff(Random(42))
    delays = [first.next_delay_ms() for _ in range(12)]
    assert delays == [second.next_delay_ms() for _ in range(12)]
    bases = [200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000, 20000, 20000, 20000]
    for delay, base in zip(delays, bases, strict=True):
        assert base <= delay <= min(20000, base + 200)
    assert delays[:3] != [200, 400, 800], "jitter is applied"


def test_backoff_starts_over_after_a_successful_connection() -> None:
    backoff = ExponentialBackoff(Random(0), jitter=0.0, max_delay_ms=1000)
    assert [backoff.next_delay_ms() for _ in range(4)] == [200, 400, 800, 1000]
    backoff.reset()
    assert backoff.next_delay_ms() == 200


def test_the_link_is_dead_after_two_silent_heartbeat_intervals() -> None:
    assert not is_link_dead(last_receive_ms=0, now_ms=2000, heartbeat_interval_ms=1000)
    assert is_link_dead(last_receive_ms=0, now_ms=2001, heartbeat_interval_ms=1000)


# --- Publish store ---------------------------------------------------------------------------


def _store_with(count: int, *, logon_seq: int = 0, **limits: int) -> PublishStore:
    store = PublishStore(**limits)
    store.on_logon(logon_seq)
    for index in range(count):
        store.add("orders", b"x" * (index + 1))
    return store


def test_numbering_starts_after_the_logon_ack_sequence() -> None:
    """L4, §7.4: sequence numbers continue from the logon ack's seq."""
    store = _store_with(3, logon_seq=41)
    assert [entry.seq for entry in store] == [42, 43, 44]
    assert store.last_seq == 44


def test_a_conflated_persisted_ack_releases_everything_up_to_its_seq() -> None:
    """L3: a persisted ack for N means every message up to N is persisted."""
    store = _store_with(5)
    assert store.on_persisted(3) == 3
    assert [entry.seq for entry in store] == [4, 5]
    assert store.size_bytes == 4 + 5
    assert store.persisted_seq == 3
    assert store.on_persisted(2) == 0, "an older ack releases nothing"
    assert store.persisted_seq == 3


def test_after_a_reconnect_entries_up_to_the_logon_seq_are_discarded_and_the_rest_republished() -> (
    None
):
    """D3: nothing the instance holds is sent twice; nothing it lacks is lost."""
    store = _store_with(6)
    store.on_persisted(2)
    republish = store.on_logon(4)
    assert [(entry.seq, entry.data) for entry in republish] == [(5, b"x" * 5), (6, b"x" * 6)]
    assert store.add("orders", b"y").seq == 7, "numbering continues after the store"


def test_a_logon_seq_above_the_last_assigned_moves_numbering_forward() -> None:
    store = _store_with(2)
    assert store.on_logon(10) == []
    assert store.add("orders", b"z").seq == 11


def test_a_rejected_publish_is_dropped_alone() -> None:
    store = _store_with(4)
    rejected = store.on_rejected(2)
    assert rejected is not None
    assert rejected.seq == 2
    assert [entry.seq for entry in store] == [1, 3, 4]
    assert store.size_bytes == 1 + 3 + 4
    assert store.on_rejected(2) is None
    assert store.on_rejected(99) is None


def test_persisted_through_accounts_for_released_and_rejected_entries() -> None:
    store = _store_with(3)
    assert not store.is_persisted_through(1)
    store.on_persisted(1)
    assert store.is_persisted_through(1)
    assert not store.is_persisted_through(3)
    store.on_rejected(2)
    assert store.is_persisted_through(2)
    store.on_persisted(3)
    assert store.is_persisted_through(3)
    assert len(store) == 0


def test_the_store_has_no_room_at_its_message_or_byte_limit() -> None:
    by_count = _store_with(2, max_messages=2)
    assert not by_count.has_room()
    by_count.on_persisted(1)
    assert by_count.has_room()
    by_bytes = _store_with(2, max_bytes=3)
    assert not by_bytes.has_room()


def test_an_explicit_seq_must_increase() -> None:
    store = _store_with(1)
    assert store.add("orders", b"a", seq=10).seq == 10
    with pytest.raises(InvalidOptions):
        store.add("orders", b"b", seq=10)
    assert store.add("orders", b"c").seq == 11


# --- Queue ack batching (§7.2) ---------------------------------------------------------------


def test_max_backlog_is_read_from_the_subscribe_ack_options() -> None:
    assert parse_max_backlog("max_backlog=10") == 10
    assert parse_max_backlog("replace, max_backlog=3") == 3
    assert parse_max_backlog("") is None
    assert parse_max_backlog("max_backlog=x") is None


@pytest.mark.parametrize(
    ("configured", "max_backlog", "size"),
    [(None, None, 1), (None, 1, 1), (None, 10, 3), (None, 300, 100), (50, 10, 10), (4, 10, 4)],
)
def test_the_batch_size_is_a_third_of_the_backlog_or_the_configured_size_capped(
    configured: int | None, max_backlog: int | None, size: int
) -> None:
    """§7.2: the client lowers the batch size to the granted max_backlog."""
    assert ack_batch_size(configured, max_backlog) == size


def test_a_batch_is_sent_when_it_reaches_its_size() -> None:
    batcher = AckBatcher(timeout_ms=1000)
    assert batcher.add("q", "b1", 3, now_ms=0) is None
    assert batcher.add("other", "c1", 3, now_ms=0) is None
    assert batcher.add("q", "b2", 3, now_ms=1) is None
    batch = batcher.add("q", "b3", 3, now_ms=2)
    assert batch == AckBatch("q", ("b1", "b2", "b3"))
    assert batch.bookmark_list == "b1,b2,b3"
    assert batcher.pending_count() == 1


def test_a_batch_size_of_one_sends_each_ack_at_once() -> None:
    batcher = AckBatcher()
    assert batcher.add("q", "b1", 1, now_ms=0) == AckBatch("q", ("b1",))
    assert batcher.next_deadline_ms() is None


def test_a_partial_batch_is_due_when_its_oldest_ack_times_out() -> None:
    batcher = AckBatcher(timeout_ms=1000)
    batcher.add("q", "b1", 10, now_ms=100)
    batcher.add("r", "c1", 10, now_ms=600)
    batcher.add("q", "b2", 10, now_ms=900)
    assert batcher.next_deadline_ms() == 1100
    assert batcher.take_due(1099) == []
    assert batcher.take_due(1100) == [AckBatch("q", ("b1", "b2"))]
    assert batcher.next_deadline_ms() == 1600
    assert batcher.take_all() == [AckBatch("r", ("c1",))]
    assert batcher.next_deadline_ms() is None


def test_a_zero_timeout_waits_for_a_full_batch_or_an_explicit_flush() -> None:
    batcher = AckBatcher(timeout_ms=0)
    batcher.add("q", "b1", 10, now_ms=0)
    assert batcher.next_deadline_ms() is None
    assert batcher.take_due(10**9) == []
    assert batcher.take_all() == [AckBatch("q", ("b1",))]
