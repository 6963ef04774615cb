"""A full disk at stop: the instance says so and exits promptly (issue 11 item 3, Q16).

The data directory is a small tmpfs filled to the last byte while the instance runs, so every
write at stop (the queue checkpoint in queues.db, the journal's tail checkpoint) meets ENOSPC
for real. Mounting needs root; elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from amps.client import Client
from tests.harness.instance import InstanceProcess, config_xml
from tests.harness.streams import queue_ids

TIMEOUT_S = 30
DISK_BYTES = 16 << 20
QUEUE = (
    "<SOW><Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>"
    "<MessageType>json</MessageType><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue></SOW>"
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", f"amps-{uuid.uuid4().hex[:8]}",
         str(mount_point)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(directory: Path) -> None:
    """Write until the filesystem has no byte left (large writes, then single bytes)."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 16, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


async def test_a_stop_on_a_full_disk_says_so_and_exits(small_disk: Path) -> None:
    """The checkpoint is an optimisation: when it cannot be written the stop logs why and
    exits; the log still holds every acknowledged message, and the next start (disk freed)
    recovers the queue from it."""
    instance = InstanceProcess(small_disk / "amps", config_xml(extra=QUEUE)).start()
    try:
        async with Client("full-disk-pub") as client:
            await client.connect(instance.address)
            for i in range(1, 101):
                await client.publish("orders", orjson.dumps({"id": i}))
            await client.flush(timeout_s=TIMEOUT_S)
        _fill(small_disk)
        status = instance.stop(timeout_s=TIMEOUT_S)
        output = "".join(instance.output)
        assert status == 0, output
        assert "queue checkpoint at stop not written" in output, output
        assert "database or disk is full" in output, output
        assert "Traceback" not in output, output
    finally:
        instance.kill()
    (small_disk / "filler").unlink()
    instance.start()
    try:
        assert await queue_ids(instance.address, "work", 100) == list(range(1, 101))
    finally:
        instance.kill()
