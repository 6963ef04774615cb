"""`make` refuses a Python older than requires-python before it makes a virtualenv, and names
one to use (issue 11, item 9): a half-made .venv used to stay and fail every later `make run`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Python 3.10 as far as a version check can tell; anything else it is asked to do fails loudly.
OLD_PYTHON = f"""#!{sys.executable}
import sys
sys.version_info = (3, 10, 13, "final", 0)
if sys.argv[1] == "--version":
    print("Python 3.10.13")
elif sys.argv[1] == "-c":
    code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
    exec(compile(code, "<string>", "exec"))
else:
    sys.exit("not a version check: " + " ".join(sys.argv[1:]))
"""


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    checkout = tmp_path / "amps"
    checkout.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, checkout / name)
    old_python = tmp_path / "python3"
    old_python.write_text(OLD_PYTHON)
    old_python.chmod(0o755)
    return checkout, old_python


def _make(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-C", str(checkout), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_old_python_is_refused_before_the_venv_is_made(tmp_path: Path) -> None:
    checkout, old_python = _checkout(tmp_path)
    done = _make(checkout, "run", f"PYTHON={old_python}")
    assert done.returncode != 0
    assert "amps needs Python >= 3.11" in done.stderr
    assert "Python 3.10.13" in done.stderr
    assert "make PYTHON=" in done.stderr
    assert not (checkout / ".venv").exists()


def test_a_venv_left_by_an_old_python_says_make_clean(tmp_path: Path) -> None:
    checkout, old_python = _checkout(tmp_path)
    bin_dir = checkout / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "activate").touch()
    (bin_dir / "python").symlink_to(old_python)
    done = _make(checkout, "test")
    assert done.returncode != 0
    assert "amps needs Python >= 3.11" in done.stderr
    assert "make clean" in done.stderr
