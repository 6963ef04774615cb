"""Make the journal's fsyncs fail as a failing disk's do, on both of its paths: the writer
thread's `os.fsync` and the kernel's (kernel_fsync.py), whose fsync still runs but reports EIO."""

from __future__ import annotations

import errno

import pytest

from amps.log.kernel_fsync import FsyncDone, KernelFsync
from amps.log.storage import SegmentWriter


def fail_fsyncs(monkeypatch: pytest.MonkeyPatch, message: str = "Input/output error") -> None:
    """From now on every journal fsync fails with EIO and `message`."""

    def failing_fsync(self: SegmentWriter) -> float:
        raise OSError(errno.EIO, message)

    real_submit = KernelFsync.submit

    def failing_kernel_fsync(self: KernelFsync, fd: int, done: FsyncDone) -> None:
        real_submit(self, fd, lambda _error: done(OSError(errno.EIO, message)))

    monkeypatch.setattr(SegmentWriter, "_fsync", failing_fsync)
    monkeypatch.setattr(KernelFsync, "submit", failing_kernel_fsync)
