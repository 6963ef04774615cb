"""Helpers shared by the benchmarks: temporary instances, admin metrics, payloads, formatting."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson

from tests.harness.instance import InstanceProcess, config_xml

PAYLOAD_BYTES = 1024


def json_payloads(count: int = 256, size: int = PAYLOAD_BYTES) -> list[bytes]:
    """`count` distinct JSON documents of exactly `size` bytes each."""
    payloads = []
    for index in range(count):
        head = {"id": index, "symbol": "IBM", "price": 100.25 + index, "qty": 100, "pad": ""}
        base = len(orjson.dumps(head))
        head["pad"] = "x" * (size - base)
        data = orjson.dumps(head)
        assert len(data) == size, len(data)
        payloads.append(data)
    return payloads


@contextlib.contextmanager
def temp_instance(
    prefix: str, *, journal_size: str = "1GB", root: Path | None = None
) -> Iterator[InstanceProcess]:
    """A real `python -m amps server` in a temporary directory, deleted afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-", dir=root))
    instance = InstanceProcess(workdir, config_xml(name=prefix, journal_size=journal_size))
    try:
        instance.start()
        yield instance
    except BaseException:
        print("instance output (tail):\n" + "".join(instance.output[-40:]), flush=True)
        raise
    finally:
        instance.kill()
        shutil.rmtree(workdir, ignore_errors=True)


METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)$")


def metrics_text(admin_port: int) -> str:
    """The instance's /metrics, as served."""
    url = f"http://127.0.0.1:{admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
    return text


def scrape(admin_port: int) -> dict[str, float]:
    """The instance's /metrics as {metric name: value} (labels dropped, one node)."""
    values: dict[str, float] = {}
    for line in metrics_text(admin_port).splitlines():
        match = METRIC_LINE.match(line)
        if match and not line.startswith("#"):
            values[match["name"]] = float(match["value"])
    return values


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s ({count:,} in {seconds:.2f} s)"
