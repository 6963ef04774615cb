"""Transcript scenarios in testdata/*.txt (STYLE §4.7 example 7); AMPS_REWRITE=1 rewrites."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.queue.transcript import replay

TESTDATA = Path(__file__).parent / "testdata"


@pytest.mark.parametrize("path", sorted(TESTDATA.glob("*.txt")), ids=lambda p: p.stem)
def test_transcript(path: Path) -> None:
    """Each transcript replays to exactly the output it records."""
    expected = path.read_text()
    actual = replay(expected)
    if os.environ.get("AMPS_REWRITE") == "1":
        path.write_text(actual)
        return
    assert actual == expected
