"""Start a real `python -m amps server` process on 127.0.0.1 with free ports (nats-server style)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

READY = re.compile(
    r"listening on (?P<host>[\d.]+):(?P<port>\d+)(?: admin https?://[\d.]+:(?P<admin>\d+))?"
)
START_TIMEOUT_S = 30.0
ROOT = Path(__file__).resolve().parents[2]


def process_env() -> dict[str, str]:
    """The environment for an instance process: this checkout's code first on the path, so a
    test always runs the code beside it whatever the virtualenv's install points at."""
    path = os.environ.get("PYTHONPATH", "")
    return dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), path])),
    )


def amps_cli(
    *args: str, cwd: Path | None = None, timeout_s: float = START_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """Run the real `amps` command of this checkout to its end; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "amps", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=process_env(),
        cwd=cwd,
    )


def config_xml(
    name: str = "amps-test",
    journal: str = "journal",
    grpc_port: int = 0,
    admin_port: int | None = 0,
    journal_size: str = "64MB",
    extra: str = "",
    topics: str = "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>",
    max_message_size: str | None = None,
    initial_state: str | None = None,
) -> str:
    """A configuration for tests: loopback only, port 0 (free ports) by default."""
    admin = (
        f"<Admin><InetAddr>127.0.0.1:{admin_port}</InetAddr></Admin>"
        if admin_port is not None
        else ""
    )
    limit = f"<MaxMessageSize>{max_message_size}</MaxMessageSize>" if max_message_size else ""
    if initial_state is not None:
        limit += f"<InitialState>{initial_state}</InitialState>"
    return f"""<AMPSConfig>
  <Name>{name}</Name>
  {admin}
  <Transports>
    <Transport><Name>grpc</Name><Type>grpc</Type><InetAddr>127.0.0.1:{grpc_port}</InetAddr>{limit}</Transport>
  </Transports>
  <TransactionLog>
    <JournalDirectory>{journal}</JournalDirectory>
    <JournalSize>{journal_size}</JournalSize>
    {topics}
  </TransactionLog>
  {extra}
</AMPSConfig>
"""


@dataclass
class InstanceProcess:
    """One instance process; `address` is host:port of its gRPC transport."""

    workdir: Path
    config_text: str
    process: subprocess.Popen[str] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    admin_port: int = 0
    output: list[str] = field(default_factory=list)
    _reader: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.workdir / "config.xml"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> InstanceProcess:
        """Start the process and wait for its ready line; raise with its output if it exits."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text)
        env = process_env()
        self.output = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "amps", "server", "--config", str(self.config_path)],
            cwd=self.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        ready = threading.Event()
        self._reader = threading.Thread(target=self._read_output, args=(ready,), daemon=True)
        self._reader.start()
        if not ready.wait(timeout_s) or self.port == 0:
            self.kill()
            raise RuntimeError("instance did not become ready:\n" + "".join(self.output))
        return self

    def _read_output(self, ready: threading.Event) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            match = READY.search(line)
            if match and not ready.is_set():
                self.host = match["host"]
                self.port = int(match["port"])
                self.admin_port = int(match["admin"] or 0)
                ready.set()
        self.process.stdout.close()
        ready.set()  # process ended: wake the waiter

    def run_to_exit(self, timeout_s: float = START_TIMEOUT_S) -> tuple[int, str]:
        """Start a process expected to exit by itself (bad config, corrupt journal)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text)
        done = subprocess.run(
            [sys.executable, "-m", "amps", "server", "--config", str(self.config_path)],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=process_env(),
        )
        return done.returncode, done.stdout + done.stderr

    def wait_for_output(self, text: str, timeout_s: float = 60.0) -> str:
        """The first output line containing `text` (bounded wait on the process's own output)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.output):
                if text in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no line with {text!r} in:\n" + "".join(self.output))

    def kill(self) -> None:
        """SIGKILL: no chance to flush anything."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=10)

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait for a graceful exit; returns the exit status."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return self.process.returncode

    def restart(self, *, kill: bool = False) -> InstanceProcess:
        """Stop (or kill) and start again on the same ports and journal."""
        if kill:
            self.kill()
        else:
            self.stop()
        port, admin = self.port, self.admin_port
        self.config_text = self.config_text.replace(
            "<Type>grpc</Type><InetAddr>127.0.0.1:0</InetAddr>",
            f"<Type>grpc</Type><InetAddr>127.0.0.1:{port}</InetAddr>",
        )
        self.config_text = self.config_text.replace(
            "<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>",
            f"<Admin><InetAddr>127.0.0.1:{admin}</InetAddr></Admin>",
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                return self.start()
            except RuntimeError:
                # The port may linger briefly after a kill; bounded retry.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
