"""Peers the benchmarks compare with, installed by the benchmark's own setup (issue 14).

Redis Streams: `redis-server` from the Debian package (installed with apt-get when missing and
running as root) and redis-py from PyPI (installed into this interpreter when missing). Neither
is a dependency of amps. The server runs on 127.0.0.1 with `appendonly yes` and
`appendfsync always` (every write fsynced before its reply), in a temporary directory.

NATS JetStream (issue 8): `nats-server` from the Debian package and nats-py from PyPI, installed
the same way; three servers clustered on 127.0.0.1, each with a file store in a temporary
directory, started and stopped by the benchmark.
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
from collections.abc import Callable, Iterator
from pathlib import Path

REDIS_PY = "redis>=5,<9"
NATS_PY = "nats-py>=2.7,<3"  # 2.7 added JetStream's windowed publish_async


def _ensure(binary: str, package: str, module: str, requirement: str) -> str | None:
    """Install a peer's Debian package and Python client if missing; None when ready."""
    if shutil.which(binary) is None:
        if os.geteuid() != 0:
            return f"{binary} is not installed (apt-get install {package}, as root)"
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-qq", package]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
        if shutil.which(binary) is None:
            return f"apt-get could not install {package}"
    if importlib.util.find_spec(module) is None:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", requirement]
        if subprocess.run(pip, capture_output=True).returncode != 0:
            return f"pip could not install {requirement}"
    return None


def ensure_redis() -> str | None:
    """Install redis-server and redis-py if missing; None when ready, else why not."""
    # The package starts a system service on port 6379; ours run on their own ports.
    return _ensure("redis-server", "redis-server", "redis", REDIS_PY)


def ensure_nats() -> str | None:
    """Install nats-server and nats-py if missing; None when ready, else why not."""
    return _ensure("nats-server", "nats-server", "nats", NATS_PY)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(
    port: int,
    process: subprocess.Popen[bytes],
    deadline: float,
    name: str,
    answers: Callable[[socket.socket], bool],
) -> None:
    """Return once a connection to `port` `answers`; RuntimeError past `deadline` or when the
    process has ended."""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if answers(sock):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"{name} did not start on port {port}")
        time.sleep(0.05)


def _redis_pong(sock: socket.socket) -> bool:
    sock.sendall(b"PING\r\n")
    return sock.recv(16).startswith(b"+PONG")


def _nats_info(sock: socket.socket) -> bool:
    return sock.recv(4) == b"INFO"  # a nats-server greets every client with its INFO


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


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
        _wait_for(port, process, time.monotonic() + timeout_s, "redis-server", _redis_pong)
        yield port
    finally:
        _stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def nats_cluster(nodes: int = 3, timeout_s: float = 30.0) -> Iterator[list[str]]:
    """`nodes` nats-server processes clustered on 127.0.0.1 with JetStream (file store);
    yields their client URLs once each accepts connections (the caller waits for JetStream's
    meta leader, e.g. by retrying its first stream creation)."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-nats-"))
    client_ports = [free_port() for _ in range(nodes)]
    route_ports = [free_port() for _ in range(nodes)]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(nodes):
            routes = ", ".join(
                f"nats-route://127.0.0.1:{p}" for i, p in enumerate(route_ports) if i != index
            )
            config = workdir / f"n{index}.conf"
            config.write_text(
                f'server_name: n{index}\nlisten: "127.0.0.1:{client_ports[index]}"\n'
                f'jetstream {{ store_dir: "{workdir / f"n{index}"}" }}\n'
                f'cluster {{ name: bench, listen: "127.0.0.1:{route_ports[index]}", '
                f"routes: [{routes}] }}\n"
            )
            processes.append(
                subprocess.Popen(
                    ["nats-server", "-c", str(config)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + timeout_s
        for port, process in zip(client_ports, processes, strict=True):
            _wait_for(port, process, deadline, "nats-server", _nats_info)
        yield [f"nats://127.0.0.1:{port}" for port in client_ports]
    finally:
        for process in processes:
            _stop(process)
        shutil.rmtree(workdir, ignore_errors=True)
