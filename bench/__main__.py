"""Run every benchmark module in turn (`make bench`): small sizes unless `--full`.

`.venv/bin/python -m bench [--full] [--only NAME ...]`

Each module runs in its own interpreter with a time limit, so one stuck benchmark cannot hang
the others; figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time

# (module, arguments in the default quick mode, arguments with --full, time limit in seconds)
MODULES: list[tuple[str, list[str], list[str], float]] = [
    ("bench_broker", ["--quick"], [], 1800.0),
    ("bench_journal", ["--records", "200000"], [], 900.0),
    ("bench_expr", [], [], 300.0),
    ("bench_queue_memory", ["--messages", "100000"], [], 900.0),
    ("bench_queue_engine", [], [], 300.0),
    ("bench_client", [], [], 600.0),
    ("bench_queues", ["--quick"], [], 2700.0),
    ("bench_backlog", ["--quick"], [], 900.0),
    ("bench_replication", ["--quick"], [], 1800.0),
    ("bench_replicated_queues", ["--quick"], [], 1800.0),
    ("bench_tls", ["--quick"], [], 1800.0),
    ("bench_docker", [], ["--messages", "100000"], 1200.0),
    ("soak", ["--seconds", "60"], ["--seconds", "600"], 900.0),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="the sizes quoted in the docs")
    parser.add_argument("--only", nargs="*", choices=[m[0] for m in MODULES], default=None)
    args = parser.parse_args()
    failures = 0
    for name, quick, full, limit_s in MODULES:
        if args.only and name not in args.only:
            continue
        if importlib.util.find_spec(f"bench.{name}") is None:
            print(f"== {name}: not present, skipped", flush=True)
            continue
        argv = [sys.executable, "-m", f"bench.{name}", *(full if args.full else quick)]
        print(f"== {name}: {' '.join(argv[1:])}", flush=True)
        started = time.monotonic()
        # Its own process group: on timeout, the instances it started go with it.
        child = subprocess.Popen(argv, start_new_session=True)
        try:
            status = child.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            status = -1
            print(f"== {name}: stopped after its {limit_s:.0f} s limit", flush=True)
        failures += status != 0
        print(f"== {name}: exit {status} after {time.monotonic() - started:.1f} s\n", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
