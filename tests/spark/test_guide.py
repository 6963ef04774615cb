"""The examples of docs/guide/spark.md run as written, in order (issue 10): each `python
fragment` there uses `spark`, `journal` and `server`, defined here for a running instance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from amps.client import BlockingClient
from tests.harness.instance import InstanceProcess

# A Spark session starts in ~10 s on a quiet machine and in minutes on a busy one.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "spark.md"
FENCE = re.compile(r"^```python fragment\n(.*?)^```[ \t]*$", re.S | re.M)


def test_the_guide_s_examples_run(spark: SparkSession, instance: InstanceProcess) -> None:
    with BlockingClient("guide-orders") as client:
        client.connect(instance.address)
        for i in (1, 2, 3):
            client.publish("orders", json.dumps({"id": i, "qty": i}))
        client.flush(30)
    examples = FENCE.findall(GUIDE.read_text())
    assert len(examples) >= 5
    namespace = {
        "spark": spark,
        "journal": str(instance.workdir / "journal"),
        "server": instance.address,
    }
    for number, code in enumerate(examples, start=1):
        exec(compile(code, f"{GUIDE.name} example {number}", "exec"), namespace)
