"""The kernel's fsync for the event loop (amps/log/kernel_fsync.py): an io_uring."""

from __future__ import annotations

import errno
import os
import select
from pathlib import Path

import pytest

from amps.log.kernel_fsync import KernelFsync


@pytest.fixture
def kernel() -> KernelFsync:
    opened = KernelFsync.open()
    if isinstance(opened, str):
        pytest.skip(f"no native AIO here: {opened}")
    return opened


def _wait_readable(fd: int) -> None:
    readable, _, _ = select.select([fd], [], [], 10)
    assert readable, "the eventfd never became readable"


def test_an_fsync_completes_through_the_eventfd(kernel: KernelFsync, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    results: list[OSError | None] = []
    try:
        for round_ in range(3):
            os.write(fd, b"x" * 4096)
            kernel.submit(fd, results.append)
            assert kernel.in_flight == 1
            while kernel.in_flight:
                _wait_readable(kernel.eventfd)
                kernel.reap()
            assert results == [None] * (round_ + 1)
        kernel.reap()  # nothing left: returns at once
    finally:
        os.close(fd)
        kernel.close()


def test_a_failed_fsync_is_reported_to_its_caller(kernel: KernelFsync) -> None:
    read_end, write_end = os.pipe()  # a pipe has no fsync: the kernel's worker fails it
    results: list[OSError | None] = []
    try:
        kernel.submit(write_end, results.append)
        while kernel.in_flight:
            _wait_readable(kernel.eventfd)
            kernel.reap()
        (error,) = results
        assert isinstance(error, OSError)
        assert error.errno == errno.EINVAL
    finally:
        os.close(read_end)
        os.close(write_end)
        kernel.close()


def test_a_closed_context_refuses_work(kernel: KernelFsync, tmp_path: Path) -> None:
    kernel.close()
    kernel.close()  # twice is harmless
    with pytest.raises(OSError, match="closed"):
        kernel.submit(0, lambda _error: None)
