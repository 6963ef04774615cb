"""The journal's kept frames (amps/log/kept_frames.py) against a dict of the same frames that
forgets the oldest one at a time: what a link finds, whole or as a slice, and the byte bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.log.kept_frames import KeptFrames

# add_run(count, frame size) | drop_before(txid offset from the oldest kept)
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 12), st.integers(1, 40)),
        st.tuples(st.just("drop"), st.integers(-3, 20), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(steps=_STEPS, max_bytes=st.integers(1, 400))
def test_kept_frames_hold_what_a_dict_bounded_frame_by_frame_holds(
    steps: list[tuple[str, int, int]], max_bytes: int
) -> None:
    kept = KeptFrames(max_bytes)
    model: dict[int, bytes] = {}
    next_txid = 1
    for step, a, b in steps:
        if step == "add":
            frames = [bytes([t % 251]) * b for t in range(next_txid, next_txid + a)]
            kept.add_run(next_txid, frames)
            model.update(zip(range(next_txid, next_txid + a), frames, strict=True))
            next_txid += a
            while sum(map(len, model.values())) > max_bytes:
                del model[min(model)]
        else:
            txid = (min(model) if model else next_txid) + a
            kept.drop_before(txid)
            model = {t: f for t, f in model.items() if t >= txid}
        assert dict(kept) == model
        assert kept.size_bytes == sum(map(len, model.values())) <= max_bytes
        for first in range(max(1, next_txid - 15), next_txid + 1):
            for count in (1, 3, 8):
                wanted = list(range(first, first + count))
                expected = [model[t] for t in wanted] if set(wanted) <= set(model) else None
                assert kept.span(first, count) == expected


def test_a_run_must_follow_what_is_kept() -> None:
    kept = KeptFrames(1 << 20)
    kept.add_run(5, [b"a", b"b"])
    with pytest.raises(ValueError, match="overlap"):
        kept.add_run(6, [b"c"])
    kept.add_run(9, [b"d"])  # after a gap (frames not kept): a span across it is not whole
    assert kept.span(6, 4) is None
    assert kept.span(9, 1) == [b"d"]
    assert 7 not in kept
    assert kept.get(9) == b"d"


def test_nothing_is_kept_without_a_bound() -> None:
    kept = KeptFrames()
    kept.add_run(1, [b"a"])
    assert not kept
    assert kept.span(1, 1) is None
