"""Journal figures: append+commit throughput, replay reads, reopen time (prints, asserts nothing).

`.venv/bin/python -m bench.bench_journal [--records 1000000] [--dir /tmp]`
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from amps.log.journal import Journal

DATA = b"x" * 1024


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s ({seconds:.2f} s)"


async def bench_batches(directory: Path, records: int, batch: int) -> None:
    journal = Journal.open(directory / f"batch{batch}")
    started = time.perf_counter()
    for seq in range(1, records + 1):
        journal.append_publish(topic="bench", data=DATA, publisher_id=1, seq=seq, timestamp_us=seq)
        if seq % batch == 0:
            await journal.commit()
    await journal.commit()
    seconds = time.perf_counter() - started
    fsyncs = max(1, journal.fsync_count)
    print(f"append+commit, batches of {batch:>5}: {_rate(records, seconds)}, "
          f"{fsyncs} fsyncs ({records / fsyncs:.0f} msgs/fsync)")  # fmt: skip
    await journal.close()


async def bench_concurrent(directory: Path, records: int, publishers: int) -> None:
    """Many publishers each awaiting its own persisted ack: group commit at work."""
    journal = Journal.open(directory / f"conc{publishers}")
    latencies: list[float] = []
    journal.on_fsync = latencies.append
    per = records // publishers

    async def publisher(pid: int) -> None:
        for seq in range(1, per + 1):
            journal.append_publish(topic="bench", data=DATA, publisher_id=pid, seq=seq,
                                   timestamp_us=seq)  # fmt: skip
            await journal.commit()

    started = time.perf_counter()
    await asyncio.gather(*(publisher(p) for p in range(1, publishers + 1)))
    seconds = time.perf_counter() - started
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else 0.0
    print(f"{publishers} publishers each awaiting commit: {_rate(per * publishers, seconds)}, "
          f"{journal.fsync_count} fsyncs ({per * publishers / journal.fsync_count:.0f} msgs/fsync, "
          f"fsync p50 {p50:.2f} ms)")  # fmt: skip
    await journal.close()


async def build(directory: Path, records: int) -> float:
    journal = Journal.open(directory)
    started = time.perf_counter()
    for seq in range(1, records + 1):
        journal.append_publish(topic="bench", data=DATA, publisher_id=1 + seq % 100, seq=seq,
                               timestamp_us=seq)  # fmt: skip
        if seq % 2000 == 0:
            await journal.commit()
    await journal.close()
    return time.perf_counter() - started


def bench_read(directory: Path, batch: int) -> None:
    journal = Journal.open(directory, read_only=True)
    started = time.perf_counter()
    txid, total = journal.first_txid, 0
    while True:
        got = journal.read(txid, batch)
        if not got:
            break
        total += len(got)
        txid = got[-1].txid + 1
    seconds = time.perf_counter() - started
    print(f"read/replay, {batch} per read(): {_rate(total, seconds)} over {total:,} records")
    journal.close_read_only()


async def bench_reopen(directory: Path, label: str) -> None:
    started = time.perf_counter()
    journal = Journal.open(directory)
    seconds = time.perf_counter() - started
    print(f"reopen {label}: {seconds:.2f} s ({journal.last_txid:,} records, "
          f"{journal.segment_count} segments, {journal.bytes_total / 1e9:.2f} GB)")  # fmt: skip
    await journal.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-journal-", dir=args.dir))
    try:
        for batch in (100, 1000):
            await bench_batches(root, 100_000, batch)
        for publishers in (10, 100):
            await bench_concurrent(root, 50_000, publishers)
        big = root / "big"
        seconds = await build(big, args.records)
        print(f"built {args.records:,} x 1 KiB records: {_rate(args.records, seconds)}")
        bench_read(big, 1000)
        bench_read(big, 100)
        await bench_reopen(big, "after a clean close (summaries + checkpoint)")
        for checkpoint in big.glob("*.tail"):
            checkpoint.unlink()  # a crash before any checkpoint of the newest segment
        await bench_reopen(big, "newest segment scanned in full (no checkpoint)")
        for summary in big.glob("*.summary"):
            summary.unlink()  # nothing but segment files: every record is scanned
        await bench_reopen(big, "every segment scanned (no summaries, rebuilds them)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
