"""fatal(): one line for the operator whatever logging does, and the reason's exit status
(issue 11, item 9: it was printed twice when the log went to stderr)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.instance import process_env

SETUPS = {
    # `amps server`: the log goes to stderr, so the log line is the one line.
    "stderr": "logging.basicConfig(stream=sys.stderr)",
    # Nothing configured: Python's last-resort handler writes the record to stderr.
    "unconfigured": "",
    # The log goes to a file: stderr still gets the `amps: fatal` line.
    "file": "logging.basicConfig(filename=sys.argv[1])",
}


@pytest.mark.parametrize("setup", SETUPS)
def test_a_fatal_error_reaches_stderr_once_and_exits_with_its_status(
    setup: str, tmp_path: Path
) -> None:
    log_file = tmp_path / "amps.log"
    code = "\n".join(
        [
            "import logging, sys",
            SETUPS[setup],
            "from amps.server.fatal import FatalReason, fatal",
            "fatal(FatalReason.JOURNAL_IO, 'disk on fire')",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(log_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=process_env(),
    )
    assert done.returncode == 74
    assert done.stderr.count("fatal (journal_io): disk on fire") == 1, done.stderr
    if setup == "file":
        assert "fatal (journal_io): disk on fire" in log_file.read_text()
