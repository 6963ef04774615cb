"""Fixtures shared by the cluster tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.cluster import Cluster


@pytest.fixture
def clusters() -> Iterator[list[Cluster]]:
    """Clusters a test starts (append them); every instance is killed at the end."""
    started: list[Cluster] = []
    try:
        yield started
    finally:
        for running in started:
            running.kill()
