"""The queue snapshot codec used by the queue state store (Q16)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import MessagePublished, QueueEngine, QueuePolicy
from amps.queue.snapshot_codec import SnapshotFormatError, decode_snapshot, encode_snapshot


def engine_with(count: int) -> QueueEngine:
    engine = QueueEngine(QueuePolicy(expiration_ms=60_000))
    for txid in range(1, count + 1):
        engine.handle(MessagePublished(txid, 7, txid, txid * 10), txid * 10)
    return engine


def test_round_trip_keeps_every_column_and_the_clocks() -> None:
    snapshot = engine_with(50).snapshot()
    data = encode_snapshot(snapshot, 1234, 5678)
    decoded, mono_ms, wall_us = decode_snapshot(data)
    assert decoded == snapshot
    assert (mono_ms, wall_us) == (1234, 5678)


def test_restored_engine_delivers_the_same_messages() -> None:
    """Q16: restore + replay after the snapshot rebuilds the queue."""
    original = engine_with(20)
    decoded, _, _ = decode_snapshot(encode_snapshot(original.snapshot(), 0, 0))
    restored = QueueEngine.restore(original.policy, decoded, 0)
    assert restored.deliverable(100) == original.deliverable(100)
    assert restored.low_water_txid() == original.low_water_txid()


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(min_value=0, max_value=2000))
def test_every_truncation_is_a_format_error(cut: int) -> None:
    data = encode_snapshot(engine_with(5).snapshot(), 0, 0)
    if cut >= len(data):
        return
    with pytest.raises(SnapshotFormatError):
        decode_snapshot(data[:cut])


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_decode_or_refuse(data: bytes) -> None:
    with contextlib.suppress(SnapshotFormatError):
        decode_snapshot(data)
