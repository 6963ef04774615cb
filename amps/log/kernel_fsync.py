"""An fsync the kernel runs for the event loop: an io_uring with an eventfd. [io]

A commit's fsync used to cross to a Python writer thread and back. Each crossing waits for the
GIL behind the event loop's work (the `journal_handoff` and `journal_return` hops: ~0.2-0.5 ms
mean, p99 over 1 ms at 5,000 msg/s), and each costs CPU in thread switches. Here the loop writes
a small batch itself (a page-cache copy) and queues `IORING_OP_FSYNC` on an io_uring: one of
the ring's kernel workers runs the fsync on whichever core is free, and the eventfd wakes the
loop when it is done. No Python thread and no GIL is involved.

Linux native AIO (`io_submit` with `IOCB_CMD_FSYNC`) was tried first and is not usable here: it
runs the fsync from a kernel worker bound to the submitting core, so while the event loop keeps
that core busy the fsync waits for the scheduler's next tick (~4 ms at p50, measured).

The rings are shared memory with the kernel; this module writes a submission and reads a
completion with plain loads and stores, which x86-64's ordering makes safe (the kernel's side
uses release/acquire). Elsewhere, and wherever the kernel or a container's seccomp profile
refuses `io_uring_setup`, `KernelFsync.open` says why and the journal keeps its writer thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import platform
import struct
import sys
import weakref
from collections.abc import Callable

__all__ = ["FsyncDone", "KernelFsync"]

# Told each completed fsync's result: None, or an OSError built from the kernel's -errno.
FsyncDone = Callable[[OSError | None], None]

_SETUP, _ENTER, _REGISTER = 425, 426, 427  # x86-64
_ENTRIES = 8  # one fsync is in flight per journal
_OP_FSYNC = 3
_REGISTER_EVENTFD = 4
_FEAT_SINGLE_MMAP = 1
_OFF_SQES = 0x10000000
_SQE = struct.Struct("<BBHiQQIIQ")  # opcode, flags, ioprio, fd, off, addr, len, op flags, data
_SQE_SIZE = 64
_CQE = struct.Struct("<QiI")  # user_data, res, flags
_U32 = struct.Struct("<I")


class KernelFsync:
    """An io_uring and its eventfd: `submit(fd, done)` queues fd's fsync; `reap()`, run when
    the eventfd is readable, calls each finished fsync's `done` on the caller's thread."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        self._syscall = libc.syscall
        params = ctypes.create_string_buffer(120)  # struct io_uring_params
        ring_fd = self._syscall(_SETUP, _ENTRIES, params)
        if ring_fd < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"io_uring_setup: {os.strerror(error)}")
        self._ring_fd = int(ring_fd)
        try:
            sq_entries, cq_entries, _, _, _, features = struct.unpack_from("<6I", params, 0)
            if not features & _FEAT_SINGLE_MMAP:
                raise OSError(0, "io_uring without IORING_FEAT_SINGLE_MMAP (Linux < 5.4)")
            _, self._sq_tail, sq_mask, _, _, _, self._sq_array = struct.unpack_from(
                "<7I", params, 40
            )
            self._cq_head, self._cq_tail, cq_mask, _, _, self._cqes = struct.unpack_from(
                "<6I", params, 80
            )
            size = max(self._sq_array + sq_entries * 4, self._cqes + cq_entries * _CQE.size)
            self._ring = mmap.mmap(self._ring_fd, size, offset=0)
            self._sqe_area = mmap.mmap(self._ring_fd, sq_entries * _SQE_SIZE, offset=_OFF_SQES)
            self._sq_mask = _U32.unpack_from(self._ring, sq_mask)[0]
            self._cq_mask = _U32.unpack_from(self._ring, cq_mask)[0]
            self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            efd = ctypes.c_int(self.eventfd)
            if self._syscall(_REGISTER, ring_fd, _REGISTER_EVENTFD, ctypes.byref(efd), 1) < 0:
                error = ctypes.get_errno()
                os.close(self.eventfd)
                raise OSError(error, f"io_uring_register: {os.strerror(error)}")
        except BaseException:
            os.close(self._ring_fd)
            raise
        self._pending: dict[int, FsyncDone] = {}
        self._next_tag = 1
        self._closed = False
        # A journal that is never closed (a test's, a crashed start) still gives its fds back.
        self._release = weakref.finalize(
            self, _release, self._ring_fd, self.eventfd, self._ring, self._sqe_area
        )

    @classmethod
    def open(cls) -> KernelFsync | str:
        """A ring, or why there is none here (the journal then fsyncs from a thread)."""
        if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
            return f"no io_uring fsync on {sys.platform}/{platform.machine()}"
        try:
            # PyDLL keeps the GIL across the call: io_uring_enter hands the fsync to a kernel
            # worker and returns at once; giving the GIL up there would only invite a switch.
            libc = ctypes.PyDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            return cls(libc)
        except (OSError, ValueError, AttributeError) as exc:
            return str(exc)

    @property
    def in_flight(self) -> int:
        """Fsyncs submitted and not reaped yet."""
        return len(self._pending)

    def submit(self, fd: int, done: FsyncDone) -> None:
        """Queue an fsync of `fd`; raise OSError if the ring refuses it."""
        if self._closed:
            raise OSError("the journal's io_uring is closed")
        if len(self._pending) >= _ENTRIES:
            raise OSError(f"more than {_ENTRIES} fsyncs in flight")
        tag = self._next_tag
        self._next_tag += 1
        tail = _U32.unpack_from(self._ring, self._sq_tail)[0]
        index = tail & self._sq_mask
        at = index * _SQE_SIZE
        self._sqe_area[at : at + _SQE_SIZE] = bytes(_SQE_SIZE)
        _SQE.pack_into(self._sqe_area, at, _OP_FSYNC, 0, 0, fd, 0, 0, 0, 0, tag)
        _U32.pack_into(self._ring, self._sq_array + index * 4, index)
        _U32.pack_into(self._ring, self._sq_tail, (tail + 1) & 0xFFFFFFFF)
        self._pending[tag] = done
        if self._syscall(_ENTER, self._ring_fd, 1, 0, 0, None, 0) != 1:
            del self._pending[tag]
            error = ctypes.get_errno()
            raise OSError(error, f"io_uring_enter: {os.strerror(error)}")

    def reap(self) -> None:
        """Call `done` for every fsync that has finished (run when the eventfd is readable)."""
        with contextlib.suppress(BlockingIOError):  # woken by a completion already reaped
            os.eventfd_read(self.eventfd)
        head = _U32.unpack_from(self._ring, self._cq_head)[0]
        tail = _U32.unpack_from(self._ring, self._cq_tail)[0]
        finished = []
        while head != tail:
            tag, res, _ = _CQE.unpack_from(self._ring, self._cqes + (head & self._cq_mask) * 16)
            finished.append((tag, res))
            head = (head + 1) & 0xFFFFFFFF
        _U32.pack_into(self._ring, self._cq_head, head)  # the slots are free before any `done`
        for tag, res in finished:
            done = self._pending.pop(tag, None)
            if done is not None:
                done(None if res >= 0 else OSError(-res, os.strerror(-res)))

    def close(self) -> None:
        """Release the ring (the kernel finishes an fsync still in flight) and the eventfd."""
        self._closed = True
        self._release()


def _release(ring_fd: int, eventfd: int, *areas: mmap.mmap) -> None:
    for area in areas:
        area.close()
    os.close(ring_fd)
    os.close(eventfd)
