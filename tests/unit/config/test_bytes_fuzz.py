"""Fuzzing configuration files as bytes (issue 11, "Also"): whatever a file holds, reading it
gives a Config or ConfigErrors (the one declared error, exit 78 in `amps server`), with memory
bounded by the file's size."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from amps.config import DEFAULT_CONFIG_XML, Config, ConfigErrors, decode_config, load_config
from tests.harness.bounds import peak_memory_below

FUZZ = settings(
    max_examples=200,
    deadline=None,  # bounded by the 4MB file limit and the memory bound, not the clock
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DEFAULT = DEFAULT_CONFIG_XML.encode()
# Parsing keeps a tree of the document: a few times its size, plus the loader's own fixed cost.
MEMORY_PER_INPUT_BYTE = 40
FIXED_MEMORY_BYTES = 2 * 1024 * 1024


@st.composite
def files(draw: st.DrawFn) -> bytes:
    """The default configuration with bytes replaced, inserted or cut, or any bytes at all."""
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.binary(max_size=4096))
    data = bytearray(DEFAULT)
    for _ in range(draw(st.integers(1, 6))):
        position = draw(st.integers(0, len(data)))
        insert = draw(
            st.sampled_from([b"", b"\xff", b"\x00", b"<", b"&", b"\xc3", b"\xef\xbb\xbf", b"]]>"])
            | st.binary(max_size=8)
        )
        cut = draw(st.integers(0, 8))
        data[position : position + cut] = insert
    if choice == 3:  # a long value where a name goes
        data = data.replace(b"amps-1", b"n" * draw(st.integers(200, 20_000)), 1)
    return bytes(data)


def _read(data: bytes) -> Config | ConfigErrors:
    try:
        return load_config(decode_config(data), {})
    except ConfigErrors as errors:
        return errors


@FUZZ
@given(files())
def test_any_file_gives_a_config_or_config_errors(data: bytes) -> None:
    with peak_memory_below(FIXED_MEMORY_BYTES + MEMORY_PER_INPUT_BYTE * len(data)):
        outcome = _read(data)
    event(type(outcome).__name__)
    if isinstance(outcome, ConfigErrors):
        assert outcome.errors
        # Each error is one readable line (a long value is quoted cut short).
        assert all(len(error.message) < 1000 for error in outcome.errors)
    else:
        assert isinstance(outcome, Config)
