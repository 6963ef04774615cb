"""The error tree: stable codes, rebuilt on the client, documented (STYLE.md §4.4)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from amps import errors
from amps.tools import errorsdoc
from tests.harness.instance import process_env

ALL: list[type[errors.AmpsError]] = [errors.AmpsError, *errors._all_subclasses(errors.AmpsError)]


def test_codes_are_unique() -> None:
    codes = [cls.code for cls in ALL]
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_class_is_rebuilt_from_its_code(cls: type[errors.AmpsError]) -> None:
    rebuilt = errors.error_for_code(cls.code, "detail")
    assert type(rebuilt) is cls
    assert rebuilt.message == "detail"


def test_unknown_code_becomes_a_server_error() -> None:
    assert type(errors.error_for_code("no-such-code", "x")) is errors.ServerError


def test_config_error_names_path_value_and_expectation() -> None:
    error = errors.ConfigError("AMPSConfig/Name", "", "a non-empty name")
    assert str(error) == "AMPSConfig/Name: '': expected a non-empty name"


def test_errors_reference_page_is_current() -> None:
    assert errorsdoc.main(["--check"]) == 0


def test_cli_reference_page_is_current() -> None:
    """docs/reference/cli.md is generated from the commands' help (amps.tools.clidoc), in a fresh
    process as `python -m amps.tools.clidoc` renders it: tests that ran before in this process
    (commands imported and registered, Spark's modules loaded) must not change the page."""
    done = subprocess.run(
        [sys.executable, "-m", "amps.tools.clidoc", "--check"],
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
