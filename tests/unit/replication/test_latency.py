"""R4's transfer-latency estimator: default first, then the windowed median, bounded memory."""

from __future__ import annotations

from replication.latency import LatencyOptions, TransferLatencies, TransferLatency

OPTIONS = LatencyOptions(default_ms=500, window=8, min_samples=4, max_ms=10_000)


def sample(estimator: TransferLatency, key: int, wait_ms: int) -> None:
    """The replicated ack of message `key`, which waited `wait_ms` here."""
    del key  # the estimator keeps waits, not messages
    estimator.acked_after([wait_ms])


def test_starts_from_the_default_until_enough_samples() -> None:
    """R4: an owner without acks still lets messages move after the configured default."""
    estimator = TransferLatency(OPTIONS)
    for key in range(3):
        sample(estimator, key, 10)
    assert estimator.estimate_ms() == 500
    sample(estimator, 3, 10)
    assert estimator.estimate_ms() == 10
    assert estimator.waited_long_enough(arrived_ms=0, now_ms=11)
    assert not estimator.waited_long_enough(arrived_ms=0, now_ms=10)


def test_a_few_stalled_acks_do_not_move_the_median() -> None:
    estimator = TransferLatency(OPTIONS)
    for key, wait in enumerate([20, 20, 20, 20, 20, 9_000_000, 9_000_000]):
        sample(estimator, key, wait)
    assert estimator.estimate_ms() == 20


def test_it_follows_a_change_of_load_within_the_window() -> None:
    estimator = TransferLatency(OPTIONS)
    for key in range(8):
        sample(estimator, key, 20)
    for key in range(8, 16):
        sample(estimator, key, 300)
    assert estimator.estimate_ms() == 300


def test_memory_is_the_window_and_a_steps_acks_are_one_call() -> None:
    """A step's replicated acks come in at once; only the newest `window` waits are kept."""
    estimator = TransferLatency(OPTIONS)
    estimator.acked_after([])
    assert estimator.estimate_ms() == 500
    estimator.acked_after([9_000] * 100 + [5, 6, 7, 8, 9, 10, 11, 12])
    assert estimator.samples_total == 108
    assert estimator.estimate_ms() == 9  # the median of the last 8: the 9,000s are gone


def test_the_estimate_is_clamped() -> None:
    estimator = TransferLatency(OPTIONS)
    for key in range(4):
        sample(estimator, key, 50_000)
    assert estimator.estimate_ms() == 10_000


def test_one_estimator_per_owner() -> None:
    latencies = TransferLatencies(OPTIONS)
    for key in range(4):
        sample(latencies.of("a"), key, 30)
    latencies.of("c")
    assert latencies.estimates_ms() == {"a": 30, "c": 500}


def test_grants_shorten_the_wait_and_refusals_restore_it() -> None:
    """R4: a granted request shows the owner had no local taker for a message that waited that
    long: ask sooner (halving, down to min_ms). An unanswered one (a refusal) shows its
    consumers take its messages: the wait doubles back, never beyond the typical time."""
    estimator = TransferLatency(OPTIONS)
    estimator.granted()
    assert estimator.estimate_ms() == 250
    estimator.granted()
    assert estimator.estimate_ms() == 125
    for _ in range(20):
        estimator.granted()
    assert estimator.estimate_ms() == OPTIONS.min_ms
    for _ in range(8):
        estimator.refused()
    assert estimator.estimate_ms() == 256
    estimator.refused()
    assert estimator.estimate_ms() == 500  # the default again, and no further
    estimator.refused()
    assert estimator.estimate_ms() == 500


def test_samples_bound_what_grants_learned() -> None:
    """The learned wait never exceeds the measured typical time, however that moves."""
    estimator = TransferLatency(OPTIONS)
    for _ in range(3):
        estimator.granted()  # 250, 125, 62
    for key in range(4):
        sample(estimator, key, 40)
    assert estimator.estimate_ms() == 40
    for key in range(4, 12):
        sample(estimator, key, 400)
    assert estimator.estimate_ms() == 62
    estimator.refused()
    assert estimator.estimate_ms() == 124
    for _ in range(3):
        estimator.refused()
    assert estimator.estimate_ms() == 400
