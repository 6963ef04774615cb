"""Spark fixtures: one local session for the whole run (a session takes ~10 s or more to start),
and a real instance per test module."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.harness.instance import InstanceProcess, config_xml

pytest.importorskip("pyspark", reason="the Spark tests need pip install 'amps[spark]'")

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# local[2, 3]: two cores, and a failed task is tried up to three times (as on a cluster).
MASTER = "local[2,3]"


def session_builder(master: str, app_name: str) -> SparkSession.Builder:
    """A quiet session for tests: no UI, no progress bars, two shuffle partitions."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Spark tests run first. pyspark starts its JVM gateway by a fork that runs Python in
    the child (preexec_fn); once a CI run had left gRPC threads in this process, gRPC skipped its
    fork handlers and the child died before its exec (JAVA_GATEWAY_EXITED: every Spark test an
    error; alone they passed). Before any other test, no gRPC thread runs here."""
    items.sort(key=lambda item: item.get_closest_marker("spark") is None)  # stable


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one Spark session of the test run; its Python workers run this interpreter."""
    if shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime (17 or later) on PATH")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = session_builder(MASTER, "amps-tests").getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstanceProcess]:
    """A running instance for the module's tests (each test uses topics of its own)."""
    workdir: Path = tmp_path_factory.mktemp("spark") / "amps"
    process = InstanceProcess(workdir, config_xml(journal_size="1MB", extra=QUEUES)).start()
    try:
        yield process
    finally:
        process.kill()


QUEUES = """<SOW><Queue>
  <Name>jobs</Name><UnderlyingTopic>jobs-topic</UnderlyingTopic><MessageType>json</MessageType>
  <LeasePeriod>30s</LeasePeriod><MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>
</Queue></SOW>"""
