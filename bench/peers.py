"""Peers the benchmarks compare with, installed by the benchmark's own setup (issue 14).

Redis Streams: `redis-server` from the Debian package (installed with apt-get when missing and
running as root) and redis-py from PyPI (installed into this interpreter when missing). Neither
is a dependency of amps. The server runs on 127.0.0.1 with `appendonly yes` and
`appendfsync always` (every write fsynced before its reply), in a temporary directory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REDIS_PY = "redis>=5,<9"


def ensure_redis() -> str | None:
    """Install redis-server and redis-py if missing; None when ready, else why not."""
    if shutil.which("redis-server") is None:
        if os.geteuid() != 0:
            return "redis-server is not installed (apt-get install redis-server, as root)"
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-qq", "redis-server"]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
        if shutil.which("redis-server") is None:
            return "apt-get could not install redis-server"
        # The package starts a system service on port 6379; ours run on their own ports.
    if importlib.util.find_spec("redis") is None:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", REDIS_PY]
        if subprocess.run(pip, capture_output=True).returncode != 0:
            return f"pip could not install {REDIS_PY}"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server(timeout_s: float = 20.0) -> Iterator[int]:
    """A redis-server on 127.0.0.1 with every write fsynced before its reply; yields its port."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {port}")
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
