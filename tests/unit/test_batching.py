"""The batching rule (amps.batching): idle -> immediate, in flight -> coalesced, bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from amps.batching import Coalescer, FrameLimits

LIMITS = FrameLimits(max_messages=3, max_bytes=100)


def test_idle_connection_sends_at_once() -> None:
    core = Coalescer(LIMITS)
    assert core.next_send_ms(5) is None  # nothing queued
    core.add(1, 10)
    assert core.next_send_ms(5) == 5
    assert core.take_frame() == 1
    assert core.frames_sent_idle == 1
    assert core.next_send_ms(5) is None


def test_what_arrives_during_a_write_rides_the_next_frame() -> None:
    core = Coalescer(LIMITS)
    core.add(1, 10)
    assert core.take_frame() == 1
    core.add(1, 10)
    core.add(1, 10)
    assert core.next_send_ms(6) is None  # a frame is in flight: no second write yet
    core.sent()
    assert core.next_send_ms(7) == 7
    assert core.take_frame() == 2  # both in one frame
    core.sent()
    assert (core.frames_sent, core.frames_sent_idle) == (2, 2)


def test_frames_are_bounded_by_messages_and_bytes() -> None:
    core = Coalescer(LIMITS)
    closed = [core.add(1, 10) for _ in range(7)]
    assert closed == [False, False, False, True, False, False, True]
    assert core.queued_frames == 3
    sizes = []
    while core.queued_messages:
        sizes.append(core.take_frame())
        core.sent()
    assert sizes == [3, 3, 1]
    core.add(1, 60)
    assert core.add(1, 60)  # 120 bytes would exceed 100
    assert core.take_frame() == 1


def test_one_message_larger_than_a_frame_travels_alone() -> None:
    core = Coalescer(LIMITS)
    assert not core.add(1, 500)
    assert core.add(1, 1)
    assert core.take_frame() == 1
    core.sent()
    assert core.take_frame() == 1


def test_a_chunk_of_messages_is_never_split() -> None:
    core = Coalescer(FrameLimits(max_messages=10, max_bytes=1000))
    core.add(4, 40)
    assert core.add(7, 70)  # 11 > 10: the chunk starts the next frame
    assert core.take_frame() == 4
    core.sent()
    assert core.take_frame() == 7


def test_linger_holds_a_partly_filled_frame_until_it_ends_or_fills() -> None:
    core = Coalescer(LIMITS, linger_ms=2)
    core.add(1, 10)
    assert core.next_send_ms(10) == 12  # the linger starts when the writer first looks
    assert core.next_send_ms(11) == 12
    assert core.next_send_ms(13) == 13
    assert core.take_frame() == 1
    core.sent()
    core.add(1, 10)
    assert core.next_send_ms(20) == 22  # a new linger for the new frame
    core.add(1, 10)
    core.add(1, 10)
    assert core.next_send_ms(20) == 20  # full: never held


def test_more_frames_in_flight_when_allowed() -> None:
    core = Coalescer(LIMITS, max_in_flight=2)
    core.add(1, 10)
    core.take_frame()
    core.add(1, 10)
    assert core.next_send_ms(0) == 0  # one in flight, two allowed
    core.take_frame()
    core.add(1, 10)
    assert core.next_send_ms(0) is None
    assert core.frames_sent_idle == 1
    core.sent()
    assert core.next_send_ms(1) == 1


def test_clear_forgets_queued_frames() -> None:
    core = Coalescer(LIMITS)
    for _ in range(5):
        core.add(1, 10)
    core.clear()
    assert core.queued_messages == core.queued_frames == 0
    assert core.next_send_ms(0) is None
    core.add(2, 10)
    assert core.take_frame() == 2


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(1, 5), st.integers(0, 150)),
            st.tuples(st.just("write"), st.just(0), st.just(0)),
            st.tuples(st.just("done"), st.just(0), st.just(0)),
        ),
        max_size=60,
    )
)
def test_frames_keep_order_and_bounds(ops: list[tuple[str, int, int]]) -> None:
    """A model keeps the (count, size) items; every frame taken is a prefix of what is queued,
    within the limits unless it is one item, and nothing is lost or written twice."""
    core = Coalescer(LIMITS, max_in_flight=2)
    queued: list[tuple[int, int]] = []
    frame_start = 0  # index in `queued` where the frame being filled starts
    boundaries: list[int] = []  # item counts of closed frames, oldest first
    taken = 0
    for op, count, size in ops:
        if op == "add":
            if core.add(count, size):
                boundaries.append(len(queued) - frame_start)
                frame_start = len(queued)
            queued.append((count, size))
        elif op == "write" and core.next_send_ms(0) == 0:
            items = boundaries.pop(0) if boundaries else len(queued) - frame_start
            if not boundaries and items == len(queued) - frame_start:
                frame_start = 0
            else:
                frame_start -= items
            frame, queued = queued[:items], queued[items:]
            messages = sum(c for c, _ in frame)
            assert core.take_frame() == messages
            taken += messages
            if len(frame) > 1:
                assert messages <= LIMITS.max_messages
                assert sum(s for _, s in frame) <= LIMITS.max_bytes
        elif op == "done" and core.in_flight:
            core.sent()
        assert core.in_flight <= 2
        assert core.queued_messages == sum(c for c, _ in queued)
        assert (core.queued_frames == 0) == (not queued)
