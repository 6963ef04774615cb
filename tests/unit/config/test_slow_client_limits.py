"""Slow-client limits: MessageMemoryLimit and ClientMaxCapacity (AMPS-REFERENCE §1.1, issue 11)."""

from __future__ import annotations

import pytest

from .helpers import document, errors_of, load


def test_limits_are_read_with_units_and_percentages() -> None:
    config = load(
        document("<MessageMemoryLimit>256MB</MessageMemoryLimit><ClientMaxCapacity>25%"
                 "</ClientMaxCapacity>")
    )  # fmt: skip
    assert config.message_memory_limit_bytes == 256 * 1024 * 1024
    assert config.client_max_capacity_percent == 25


def test_absent_limits_leave_the_instance_default() -> None:
    config = load(document(""))
    assert config.message_memory_limit_bytes is None
    assert config.client_max_capacity_percent == 50


@pytest.mark.parametrize("value", ["0%", "101%", "half", "-5", "50.5%"])
def test_a_bad_percentage_names_the_element(value: str) -> None:
    (error,) = errors_of(document(f"<ClientMaxCapacity>{value}</ClientMaxCapacity>"))
    assert error.path == "AMPSConfig/ClientMaxCapacity"
    assert "percentage" in error.expected


def test_a_share_too_small_for_the_largest_message_is_refused() -> None:
    """One message must never be enough to disconnect a subscriber."""
    (error,) = errors_of(document("<MessageMemoryLimit>3MB</MessageMemoryLimit>"))
    assert error.path == "AMPSConfig/MessageMemoryLimit"
    assert "MaxMessageSize" in error.expected
