"""pyproject.toml as setuptools reads it: no deprecation warning at install (issue 11, item 9)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_setuptools_reads_the_project_table_without_a_warning() -> None:
    setuptools = pytest.importorskip("setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration

    distribution = setuptools.Distribution()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # `project.license` as a table warned three times
        apply_configuration(distribution, ROOT / "pyproject.toml")
    assert distribution.metadata.license_expression == "Apache-2.0"
