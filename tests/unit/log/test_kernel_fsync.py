"""The kernel's fsync for the event loop (amps/log/kernel_fsync.py): an io_uring."""

from __future__ import annotations

import errno
import os
import select
from pathlib import Path

import pytest

from amps.log.journal import Journal
from amps.log.kernel_fsync import FsyncDone, KernelFsync


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


async def _publish(journal: Journal, seqs: range) -> None:
    for seq in seqs:
        journal.append_publish(topic="t", data=b"x" * 99, publisher_id=3, seq=seq, timestamp_us=seq)
    await journal.commit()


async def test_a_refused_request_falls_back_to_the_writer_thread(
    kernel: KernelFsync, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ring refusing a request is not the disk failing: the journal's batch already
    written is fsynced by its writer thread, and every later batch goes there too."""
    kernel.close()  # the fixture's only says the ring is available here
    journal = Journal.open(tmp_path / "j")
    await _publish(journal, range(1, 3))
    assert journal.fsync_mode == "kernel"

    def refusing_submit(self: KernelFsync, fd: int, done: FsyncDone) -> None:
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(KernelFsync, "submit", refusing_submit)
    await _publish(journal, range(3, 5))
    assert journal.durable_txid == 4
    assert journal.fsync_mode.startswith("thread: io_uring refused an fsync")
    await _publish(journal, range(5, 7))
    await journal.close()
    reopened = Journal.open(tmp_path / "j")
    assert [record.txid for record in reopened.read(1, 100)] == list(range(1, 7))
    await reopened.close()
