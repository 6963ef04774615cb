"""Units as AMPS writes them (AMPS-REFERENCE §1.1): times, 1024-based sizes, k/M counts, ${ENV}."""

from __future__ import annotations

import pytest

from amps.config.units import (
    expand_env,
    parse_count,
    parse_duration_ns,
    parse_enabled,
    parse_size_bytes,
)


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("1ns", 1),
        ("250us", 250_000),
        ("100ms", 100_000_000),
        ("30s", 30_000_000_000),
        ("1.5s", 1_500_000_000),
        ("2m", 120_000_000_000),
        ("1h", 3_600_000_000_000),
        ("1d", 86_400_000_000_000),
        ("86400s", 86_400_000_000_000),
        ("1w", 7 * 86_400_000_000_000),
        ("10 MS", 10_000_000),
        ("1D", 86_400_000_000_000),
        (" 5s ", 5_000_000_000),
    ],
)
def test_durations_convert_every_unit_case_insensitively(text: str, nanoseconds: int) -> None:
    assert parse_duration_ns(text) == nanoseconds


@pytest.mark.parametrize("text", ["30", "", "s", "-1s", "1y", "1.5.2s", "1e3s", "ten s", "1 s s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration with a unit"):
        parse_duration_ns(text)


@pytest.mark.parametrize(
    ("text", "size_bytes"),
    [
        ("4096", 4096),
        ("4096b", 4096),
        ("1kb", 1024),
        ("1KB", 1024),
        ("64k", 65_536),
        ("1MB", 1_048_576),
        ("10M", 10_485_760),
        ("1gb", 1_073_741_824),
        ("1.5GB", 1_610_612_736),
        ("1TB", 1_099_511_627_776),
    ],
)
def test_sizes_are_1024_based(text: str, size_bytes: int) -> None:
    assert parse_size_bytes(text) == size_bytes


@pytest.mark.parametrize("text", ["1pb", "1.5", "MB", "-1kb", "1kib"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="size in bytes"):
        parse_size_bytes(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("100", 100), ("10k", 10_000), ("10K", 10_000), ("2M", 2_000_000), ("1.5k", 1500)],
)
def test_counts_use_k_and_m_powers_of_ten(text: str, value: int) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["1.5", "1g", "-3", "x"])
def test_bad_counts_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="whole number"):
        parse_count(text)


def test_values_beyond_64_bits_are_refused() -> None:
    with pytest.raises(ValueError, match="below 2"):
        parse_count("9" * 30)


@pytest.mark.parametrize(
    ("text", "value"), [("enabled", True), ("TRUE", True), ("disabled", False), ("false", False)]
)
def test_enabled_flags(text: str, value: bool) -> None:
    assert parse_enabled(text) is value


def test_env_references_expand_from_the_given_mapping() -> None:
    env = {"DIR": "/data", "PORT": "9100"}
    assert expand_env("${DIR}/journal", env) == "/data/journal"
    assert expand_env("host:${PORT}", env) == "host:9100"
    assert expand_env("${MISSING:-7}${PORT}", env) == "79100"
    assert expand_env("${EMPTY:-}", env) == ""
    assert expand_env("no references", env) == "no references"


def test_an_unset_env_variable_names_itself() -> None:
    with pytest.raises(ValueError, match="environment variable MISSING to be set"):
        expand_env("${MISSING}", {})


@pytest.mark.parametrize("text", ["${}", "${1X}", "${A B}", "${OPEN", "x ${OPEN"])
def test_malformed_env_references_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"\$\{"):
        expand_env(text, {"OPEN": "x"})
