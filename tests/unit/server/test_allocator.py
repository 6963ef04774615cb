"""The server's glibc settings (amps.server.app.fix_malloc_mmap_threshold): a replication
batch's 1 MiB buffers are reused from the heap, not mapped and faulted in again each time
(issue 8, R1)."""

from __future__ import annotations

import platform
import resource

import pytest

from amps.server.app import fix_malloc_mmap_threshold

BATCH_BYTES = 1 << 20
ROUNDS = 32


def _faults_per_round() -> float:
    """Minor page faults per round of allocating, touching and freeing two batch buffers (a
    batch's bytes and the copy made of them)."""
    parts = [bytes([k % 256]) * 1024 for k in range(BATCH_BYTES // 1024)]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(ROUNDS):
        joined = b"".join(parts)
        copied = joined[1:]
        del joined, copied
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / ROUNDS


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the setting is glibc's (mallopt); elsewhere it is a no-op",
)
def test_batch_sized_buffers_are_reused_without_page_faults() -> None:
    fix_malloc_mmap_threshold()
    _faults_per_round()  # the heap grows to hold them once
    # Mapped afresh, the two buffers fault ~512 pages a round; reused, next to none.
    assert _faults_per_round() < 16
