"""`make cluster`: three local instances that replicate to each other (deploy/amps-N.xml).

Starts `amps server` for each configuration, prints each instance's client, admin and
replication addresses once all are ready, and stops them all (SIGTERM, then SIGKILL after a
grace period) on Ctrl-C or SIGTERM. Journals are under ./data/<instance> of the directory it
runs in (deploy/README.md).
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType

READY = re.compile(r"amps (?P<name>\S+): listening on (?P<client>\S+)")
ADMIN = re.compile(r" admin (?P<admin>http://\S+)")
REPLICATION = re.compile(r" replication (?P<replication>\S+)")
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
DEFAULT_CONFIGS = ("deploy/amps-1.xml", "deploy/amps-2.xml", "deploy/amps-3.xml")


class Member:
    """One instance process and the ready line it printed."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.ready = threading.Event()
        self.line = ""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "amps", "server", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not self.ready.is_set() and READY.search(line):
                self.line = line
                self.ready.set()
            sys.stdout.write(f"[{self.config.stem}] {line}")
        self.ready.set()

    def describe(self) -> str:
        ready = READY.search(self.line)
        if ready is None:
            return f"{self.config.stem}: not ready"
        admin = ADMIN.search(self.line)
        replication = REPLICATION.search(self.line)
        return (
            f"{ready['name']}: client {ready['client']}"
            f"  admin {admin['admin'] if admin else '-'}"
            f"  replication {replication['replication'] if replication else '-'}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="*", type=Path, default=[Path(c) for c in DEFAULT_CONFIGS])
    ns = parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    members = [Member(config) for config in ns.configs]
    try:
        for member in members:
            member.ready.wait(START_TIMEOUT_S)
        failed = [m for m in members if not m.line]
        if failed:
            print("not started: " + ", ".join(str(m.config) for m in failed), file=sys.stderr)
            return 1
        print("\ncluster ready (Ctrl-C stops all):")
        for member in members:
            print("  " + member.describe())
        print(flush=True)
        while not stop.wait(0.5):
            if any(m.process.poll() is not None for m in members):
                print("an instance exited; stopping the others", file=sys.stderr)
                return 1
        return 0
    finally:
        for member in members:
            member.stop()
        for member in members:
            member.wait()


if __name__ == "__main__":
    sys.exit(main())
