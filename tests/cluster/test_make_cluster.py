"""`make cluster` and Prometheus for real (issue 8, D5): the cluster tool starts the three
deploy/amps-N.xml configurations and a real Prometheus server (deploy/prometheus.yml) scrapes
all three, finding the per-destination replication series. Skipped with a reason where
Debian's prometheus package is not installed (tests/unit/test_deploy_files.py runs promtool).
Ports are rewritten to free ones, so a test never takes the fixed ports."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.cluster import free_ports
from tests.harness.instance import ROOT, process_env

DEPLOY = ROOT / "deploy"
CONFIGS = [DEPLOY / f"amps-{n}.xml" for n in (1, 2, 3)]
PROMETHEUS_YML = DEPLOY / "prometheus.yml"
TIMEOUT_S = 60.0
# 127.0.0.1:PORT, also as the default of ${AMPS_BIND:-127.0.0.1}:PORT and of peers' hosts.
PORT = re.compile(r"(127\.0\.0\.1\}?:)(\d+)")


def targets(text: str) -> list[int]:
    return [int(port) for _, port in PORT.findall(text)]


def rewrite(text: str, mapping: dict[int, int]) -> str:
    return PORT.sub(lambda m: f"{m.group(1)}{mapping[int(m.group(2))]}", text)


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: dict[str, object] = json.loads(response.read())
    return body


@pytest.fixture
def cluster_tool(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[int, int]]]:
    """`python -m amps.tools.cluster` (what `make cluster` runs) on configurations whose
    ports are all rewritten to free ones; yields the process and the port map."""
    fixed = sorted({p for path in CONFIGS for p in targets(path.read_text())})
    mapping = dict(zip(fixed, free_ports(len(fixed)), strict=True))
    paths = []
    for path in CONFIGS:
        text = rewrite(path.read_text(), mapping)
        copy = tmp_path / path.name
        copy.write_text(text)
        paths.append(str(copy))
    process = subprocess.Popen(
        [sys.executable, "-m", "amps.tools.cluster", *paths],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=process_env(),
        start_new_session=True,  # its own process group: cleanup takes the instances too
    )
    try:
        yield process, mapping
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def test_prometheus_scrapes_the_three_instances_of_make_cluster(
    tmp_path: Path, cluster_tool: tuple[subprocess.Popen[str], dict[int, int]]
) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not installed (Debian package prometheus)")
    tool, mapping = cluster_tool
    assert tool.stdout is not None
    lines = []
    deadline = time.monotonic() + TIMEOUT_S
    for line in tool.stdout:  # bounded by the tool's own start timeout
        lines.append(line)
        if "cluster ready" in line or time.monotonic() > deadline:
            break
    described = [next(tool.stdout) for _ in range(3)]
    assert "cluster ready" in lines[-1], "".join(lines)
    assert [d.split(":")[0].strip() for d in described] == ["amps-1", "amps-2", "amps-3"]
    config = rewrite(PROMETHEUS_YML.read_text(), mapping).replace(
        "scrape_interval: 5s", "scrape_interval: 1s"
    )
    (tmp_path / "prometheus.yml").write_text(config)
    (web_port,) = free_ports(1)
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        api = f"http://127.0.0.1:{web_port}/api/v1"
        series: list[object] = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                active = get_json(f"{api}/targets")["data"]["activeTargets"]  # type: ignore[index]
                up = [t for t in active if t["health"] == "up"]
                query = get_json(f"{api}/query?query=amps_replication_connected")
                series = query["data"]["result"]  # type: ignore[index]
                if len(up) == 3 and len(series) == 6:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert len(series) == 6, series
        assert {s["metric"]["node"] for s in series} == {"amps-1", "amps-2", "amps-3"}  # type: ignore[index]
        assert {s["value"][1] for s in series} == {"1"}  # type: ignore[index]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    tool.send_signal(signal.SIGINT)
    assert tool.wait(timeout=30) == 0
