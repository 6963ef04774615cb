"""File-backed columns (Q17) behave like the in-memory arrays the engine uses by default."""

from __future__ import annotations

from array import array
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from amps.queue import Acked, MessagePublished, QueueEngine, QueuePolicy, Subscribed
from amps.queue.columns import as_array
from amps.server.file_columns import CHUNK_BYTES, FileColumnFactory


def test_a_column_grows_across_chunks_and_file_steps(tmp_path: Path) -> None:
    factory = FileColumnFactory(tmp_path / "q.meta")
    column = factory("q")
    count = 3 * CHUNK_BYTES // 8 + 5
    for value in range(count):
        column.append(value * 3 - 7)
    assert len(column) == count
    assert column[0] == -7
    assert column[-1] == (count - 1) * 3 - 7
    column[10] = 42
    assert list(column)[:12] == [v * 3 - 7 for v in range(10)] + [42, 26]
    assert as_array(column, "q", count - 2).tolist() == [(count - 2) * 3 - 7, (count - 1) * 3 - 7]
    assert factory.size >= 3 * CHUNK_BYTES


def test_dropped_columns_give_their_chunks_back(tmp_path: Path) -> None:
    factory = FileColumnFactory(tmp_path / "q.meta")
    for _ in range(500):
        factory("q", array("q", range(CHUNK_BYTES // 8 * 2)))  # dropped at once
    assert factory.size == 4 << 20, "the file stops growing once its size is steady"


@settings(max_examples=50, deadline=None)
@given(
    typecode=st.sampled_from(["q", "Q", "H", "i", "B"]),
    values=st.lists(st.integers(0, 200), max_size=300),
    start=st.integers(0, 310),
)
def test_same_as_an_array(
    tmp_path_factory: object, typecode: str, values: list[int], start: int
) -> None:
    factory = FileColumnFactory(tmp_path_factory.mktemp("fc") / "q.meta")  # type: ignore[attr-defined]
    column = factory(typecode, array(typecode, values))
    assert list(column) == values
    assert as_array(column, typecode, start).tolist() == values[start:]
    column.append(7)
    assert column[len(values)] == 7


def test_engine_with_file_columns_matches_the_in_memory_engine(tmp_path: Path) -> None:
    policy = QueuePolicy(expiration_ms=60_000, max_per_subscription_backlog=5)
    engines = [QueueEngine(policy), QueueEngine(policy, columns=FileColumnFactory(tmp_path / "m"))]
    outputs: list[list[object]] = [[], []]
    for engine, out in zip(engines, outputs, strict=True):
        for first in range(1, 20_001, 500):
            events = [MessagePublished(t, 7, t, t) for t in range(first, first + 500)]
            out.extend(engine.handle_many(events, 0))
        out.extend(engine.handle(Subscribed("s", "c", 5, None), 1))
        out.extend(engine.handle(Acked("c", [(7, t) for t in range(1, 15_000)]), 2))
        engine.check_invariants()
        snap = engine.snapshot()
        restored = QueueEngine.restore(policy, snap, 10, columns=FileColumnFactory(tmp_path / "r"))
        restored.check_invariants()
        out.append(restored.deliverable(10))
        out.append(snap)
    assert outputs[0] == outputs[1]
