"""Fixtures: real instance processes on 127.0.0.1 with free ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.instance import InstanceProcess, config_xml


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[InstanceProcess]:
    """A running instance with every topic recorded; stopped after the test."""
    process = InstanceProcess(tmp_path / "amps", config_xml()).start()
    try:
        yield process
    finally:
        process.kill()
