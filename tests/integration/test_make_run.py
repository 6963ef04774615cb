"""`make run` then the README's `amps publish` / `amps subscribe` / `amps journal dump` lines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tests.harness.instance import process_env

ROOT = Path(__file__).resolve().parents[2]
SERVER = "127.0.0.1:9007"
AMPS = [sys.executable, "-m", "amps"]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run(
    args: list[str], *, stdin: str | None = None, cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
        env=process_env(),
    )


@pytest.mark.skipif(not port_free(9007) or not port_free(8085), reason="9007 or 8085 in use here")
def test_make_run_then_publish_subscribe_and_dump(tmp_path: Path) -> None:
    server = subprocess.Popen(
        ["make", "-s", "-C", str(ROOT), "run", f"RUN_DIR={tmp_path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 120
        ready = False
        lines = []
        while time.monotonic() < deadline:
            line = server.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "listening on 127.0.0.1:9007" in line:
                ready = True
                break
        assert ready, "".join(lines)

        one = run(
            [
                *AMPS,
                "publish",
                "--server",
                SERVER,
                "--topic",
                "orders",
                "--data",
                '{"id":1,"qty":5}',
            ],
            cwd=tmp_path,
        )
        assert one.returncode == 0, one.stderr
        many = "".join(f'{{"id":{i}}}\n' for i in range(2, 1002))
        bulk = run(
            [*AMPS, "publish", "--server", SERVER, "--topic", "orders"], stdin=many, cwd=tmp_path
        )
        assert bulk.returncode == 0, bulk.stderr
        assert "1000" in bulk.stderr

        sub = run(
            [
                *AMPS,
                "subscribe",
                "--server",
                SERVER,
                "--topic",
                "orders",
                "--bookmark",
                "epoch",
                "--count",
                "10",
            ],
            cwd=tmp_path,
        )
        assert sub.returncode == 0, sub.stderr
        rows = [orjson.loads(line) for line in sub.stdout.splitlines()]
        assert [row["data"]["id"] for row in rows] == list(range(1, 11))
        assert all(row["topic"] == "orders" and row["bookmark"] for row in rows)

        dump = run([*AMPS, "journal", "dump", "./data/journal", "--topic", "orders"], cwd=tmp_path)
        assert dump.returncode == 0, dump.stderr
        dumped = [orjson.loads(line) for line in dump.stdout.splitlines()]
        assert len(dumped) == 1001
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()
