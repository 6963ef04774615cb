"""The Spark source's option checks and its missing-dependency error, without Spark (issue 10)."""

from __future__ import annotations

import importlib.util

import pytest

from amps.errors import InvalidBookmark, InvalidOptions
from amps.spark import require_spark
from amps.spark.options import ReadOptions, servers
from amps.spark.sink import SinkOptions, check_schema, sequence_base


def test_read_options_are_checked_on_the_driver() -> None:
    assert ReadOptions.parse({"topic": "^a.*", "from": "0", "to": "1|2|"}).end == "1|2|"
    with pytest.raises(InvalidOptions, match="kinds"):
        ReadOptions.parse({"kinds": "queues"})
    with pytest.raises(InvalidBookmark):
        ReadOptions.parse({"from": "yesterday"})
    with pytest.raises(InvalidOptions, match="recordsPerPartition"):
        ReadOptions.parse({"recordsPerPartition": "0"})
    with pytest.raises(InvalidOptions, match="server"):
        servers({"server": "localhost"})
    assert servers({"server": "a:1, b:2"}) == ("a:1", "b:2")


def test_sink_options_name_what_is_missing() -> None:
    options = SinkOptions.parse({"server": "a:1", "topic": "t"}, "spark-t")
    assert options.publisher == "spark-t"
    with pytest.raises(InvalidOptions, match="publisher"):
        SinkOptions.parse({"server": "a:1", "publisher": "has space"}, "x")
    with pytest.raises(InvalidOptions, match="data"):
        check_schema(["value"], has_default_topic=True)
    with pytest.raises(InvalidOptions, match="topic"):
        check_schema(["data"], has_default_topic=False)
    # A batch write numbers from 1; stream batch b from (b + 1) * 2**32 + 1.
    assert (sequence_base(None), sequence_base(0), sequence_base(4)) == (0, 1 << 32, 5 << 32)


def test_without_pyspark_the_error_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install 'amps\[spark\]'"):
        require_spark()
