"""The source and the sink on a real Spark cluster (issue 10): a standalone master and one
worker on loopback, started from the pyspark package itself (`bin/spark-class`), and a driver
process of its own (one SparkContext per process: the test run's local session stays up). A
journal read, a server read and the sink run there with the same exact results as locally, so
partitions really are planned, pickled and read in executor processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from amps.client import BlockingClient
from amps.log.bookmarks import publisher_id_for
from amps.log.journal import Journal
from amps.log.records import PublishRecord
from tests.harness.instance import ROOT, InstanceProcess, process_env

# A Spark session starts in ~10 s on a quiet machine and in minutes on a busy one.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

START_TIMEOUT_S = 300.0
MASTER_READY = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")
WORKER_READY = "Successfully registered with master"

DRIVER = """
import json, sys
from tests.spark.conftest import session_builder
master, journal, server = sys.argv[1:4]
spark = (
    session_builder(master, "amps-cluster-test")
    .config("spark.pyspark.python", sys.executable)
    .config("spark.executor.memory", "512m")
    .config("spark.cores.max", "2")
    .getOrCreate()
)
from_journal = spark.read.format("amps").option("topic", "cluster").load(journal)
from_server = spark.read.format("amps").option("server", server).option("topic", "cluster").load()
rows = spark.range(0, 100, numPartitions=2).selectExpr("to_json(named_struct('i', id)) AS data")
for _ in range(2):
    rows.write.format("amps").mode("append").option("server", server).option(
        "topic", "cluster-sink").option("publisher", "cluster-sink").save()
print("RESULT " + json.dumps({
    "journal": sorted(r.sequence for r in from_journal.select("sequence").collect()),
    "server": sorted(r.sequence for r in from_server.select("sequence").collect()),
    "partitions": from_journal.rdd.getNumPartitions(),
}))
spark.stop()
"""


class _Java:
    """A Spark daemon started through bin/spark-class in a process group of its own."""

    def __init__(self, args: list[str], ready: re.Pattern[str] | str, workdir: Path) -> None:
        import pyspark

        home = Path(pyspark.__file__).parent
        env = dict(process_env(), SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_WORKER_DIR=str(workdir), PYSPARK_PYTHON=sys.executable)  # fmt: skip
        self.lines: list[str] = []
        self.found: str | None = None
        self._ready = threading.Event()
        self.process = subprocess.Popen(
            [str(home / "bin" / "spark-class"), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, args=(ready,), daemon=True)
        self._reader.start()
        if not self._ready.wait(START_TIMEOUT_S) or self.found is None:
            self.stop()
            raise RuntimeError("Spark daemon did not start:\n" + "".join(self.lines[-40:]))

    def _read(self, ready: re.Pattern[str] | str) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if self.found is None:
                if isinstance(ready, str) and ready in line:
                    self.found = line
                elif not isinstance(ready, str) and (match := ready.search(line)):
                    self.found = match.group(1)
                if self.found is not None:
                    self._ready.set()
        self._ready.set()

    def stop(self) -> None:
        """Stop the JVM itself and what it started (its executors): its whole process group."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and one worker (2 cores) on 127.0.0.1; yields the master URL."""
    if shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime (17 or later) on PATH")
    master = _Java(
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
         "--webui-port", "0"],
        MASTER_READY, tmp_path,
    )  # fmt: skip
    try:
        assert master.found is not None
        worker = _Java(
            ["org.apache.spark.deploy.worker.Worker", master.found, "--host", "127.0.0.1",
             "--port", "0", "--webui-port", "0", "--cores", "2", "--memory", "1g",
             "--work-dir", str(tmp_path / "work")],
            WORKER_READY, tmp_path,
        )  # fmt: skip
        try:
            yield master.found
        finally:
            worker.stop()
    finally:
        master.stop()


def _sink_rows(journal: Path) -> list[tuple[int, int]]:
    wanted = {publisher_id_for(f"cluster-sink.p{p}"): p for p in (0, 1)}
    log = Journal.open(journal, read_only=True)
    try:
        return sorted(
            (wanted[r.publisher_id], r.seq)
            for r in log.read(log.first_txid, 1 << 30)
            if isinstance(r, PublishRecord) and r.topic == "cluster-sink"
        )
    finally:
        log.close_read_only()


def test_a_journal_read_a_server_read_and_the_sink_on_a_standalone_cluster(
    cluster: str, instance: InstanceProcess
) -> None:
    with BlockingClient("cluster-publisher") as client:
        client.connect(instance.address)
        for i in range(200):
            client.publish("cluster", json.dumps({"i": i}))
        client.flush(30)
    journal = instance.workdir / "journal"
    # Spark looks for Python data sources with PYSPARK_PYTHON (else `python3`): this interpreter.
    env = dict(process_env(), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster, str(journal), instance.address],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1000, check=False,
    )  # fmt: skip
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    errors = [line for line in done.stderr.splitlines() if "Exception:" in line or "Error:" in line]
    output = "\n".join(errors[:5]) + "\n" + done.stdout[-2000:] + done.stderr[-2000:]
    assert done.returncode == 0, output
    assert found, output
    result = json.loads(found[0][len("RESULT ") :])
    assert result["journal"] == list(range(1, 201))
    assert result["server"] == list(range(1, 201))
    assert _sink_rows(journal) == [(p, seq) for p in (0, 1) for seq in range(1, 51)]
