"""The hops' histogram (amps.server.hops.Histogram): the replication lag's percentiles (issue 8)."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from amps.server.gc_pauses import GcPauses
from amps.server.hops import Histogram, HopStatistics


def test_percentiles_are_the_upper_bounds_of_their_buckets_within_five_percent() -> None:
    histogram = Histogram()
    for duration_us in range(1, 10_001):  # 1 us .. 10 ms, evenly
        histogram.add_us(duration_us)
    for fraction, exact in ((0.5, 5_000), (0.9, 9_000), (0.99, 9_900)):
        found = histogram.percentile_us(fraction)
        assert exact <= found <= exact * 1.05, (fraction, found)
    summary = histogram.as_json()
    assert summary["count"] == 10_000
    assert summary["max_us"] == 10_000
    assert summary["mean_us"] == 5000.5
    assert sum(summary["buckets"].values()) == 10_000


def test_a_run_counts_one_duration_per_timestamp() -> None:
    one_by_one, as_run = Histogram(), Histogram()
    timestamps = [1_000, 1_400, 9_000, 9_990]
    for timestamp_us in timestamps:
        one_by_one.add_us(10_000 - timestamp_us)
    as_run.add_since_us(10_000, timestamps)
    assert as_run.as_json() == one_by_one.as_json()


def test_the_tail_beyond_the_last_bound_reads_as_the_maximum() -> None:
    histogram = Histogram()
    histogram.add_us(3_600_000_000)  # an hour behind
    assert histogram.percentile_us(0.99) == 3_600_000_000
    assert Histogram().percentile_us(0.5) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=-10_000, max_value=10**10), max_size=50).map(sorted),
    st.integers(min_value=0, max_value=10**10),
)
def test_a_run_of_timestamps_that_never_decrease_counts_as_one_by_one(
    timestamps: list[int], now_us: int
) -> None:
    """The run's bisection over buckets against one `add_us` per timestamp, including
    timestamps after `now_us` (an origin's clock ahead) and runs spanning many buckets."""
    one_by_one, as_run = Histogram(), Histogram()
    for timestamp_us in timestamps:
        one_by_one.add_us(now_us - timestamp_us)
    as_run.add_since_us(now_us, timestamps)
    assert as_run.buckets == one_by_one.buckets
    assert (as_run.count, as_run.total_us, as_run.max_us) == (
        one_by_one.count,
        one_by_one.total_us,
        one_by_one.max_us,
    )


def test_collections_are_timed_per_generation_while_installed() -> None:
    """Issue 8: a collection's pause (the event loop runs nothing meanwhile) is counted in its
    generation's histogram, and nothing is once the observer is removed."""
    hops = HopStatistics()
    pauses = GcPauses(hops.gc_pauses)
    pauses.install()
    pauses.install()  # once only
    try:
        gc.collect(2)
        gc.collect(0)
    finally:
        pauses.remove()
    assert pauses not in gc.callbacks
    full, young = hops.gc_pauses["2"].as_json(), hops.gc_pauses["0"].as_json()
    assert full["count"] == 1, hops.gc_pauses
    assert young["count"] >= 1, hops.gc_pauses
    gc.collect(2)
    assert hops.gc_pauses["2"].count == 1
    assert set(hops.as_json()["gc_pauses"]) == {"0", "1", "2"}
