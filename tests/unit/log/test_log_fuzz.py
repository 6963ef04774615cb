"""Fuzzing the journal's readers with bytes from disk (issue 11, "Also"): the record decoder,
the segment scan, `amps journal verify`'s check and a read-only journal over a segment file of
any content. Only the declared error (`CorruptRecord`) ever comes out, memory per input is
bounded, and every loop advances (the suite's timeout bounds the time)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.bookmarks import Bookmark
from amps.log.journal import Journal
from amps.log.raw import RawReader
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from amps.log.storage import scan_segment
from amps.log.verify import verify_segment
from tests.harness.bounds import peak_memory_below

FUZZ = settings(
    max_examples=150,
    deadline=None,  # bounded by the input size and the memory bound, not the clock
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# A scan reads a file in chunks of up to 16 MiB (os.pread allocates the full size before it
# shrinks to what was read); the search after damage reads 17 MiB windows.
FIXED_MEMORY_BYTES = 48 << 20
MEMORY_PER_INPUT_BYTE = 64
SEGMENT = "00000000000000000001.journal"


def _record(txid: int, kind: int, size: int) -> Record:
    if kind == 0:
        return PublishRecord(txid, txid, "t", b"d" * size, 7, txid, "i", "g", txid, "c", 1)
    if kind == 1:
        return QueueRecord(txid, txid, "q", QueueAction.ACK, txids=(txid - 1,), reason="r")
    return TransferRecord(txid, txid, "q", Bookmark(7, txid), "a", "b")


@st.composite
def segments(draw: st.DrawFn) -> bytes:
    """A segment as the writer makes it (header, records, commit markers) with damage: bytes
    flipped, cut, inserted or overwritten; or any bytes at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=2048))
    frames = [codec.encode_segment_header(1)] if draw(st.booleans()) else []
    txid = 0
    for _ in range(draw(st.integers(0, 12))):
        if txid and draw(st.integers(0, 3)) == 0:
            frames.append(codec.encode_commit(1, txid))
            continue
        txid += 1
        frames.append(
            codec.encode(_record(txid, draw(st.integers(0, 2)), draw(st.integers(0, 300))))
        )
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(0, 4))):
        position = draw(st.integers(0, len(data)))
        change = draw(st.integers(0, 3))
        if change == 0 and position < len(data):
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif change == 1:
            del data[position : position + draw(st.integers(1, 64))]
        elif change == 2:
            data[position:position] = draw(st.binary(min_size=1, max_size=64))
        else:  # a length field that promises more than there is
            data[position : position + 4] = draw(st.sampled_from([b"\xff\xff\xff\x03", b"\0" * 4]))
    return bytes(data)


def _decode_buffer(data: bytes) -> None:
    reached = -1
    damage_at = -1
    try:
        reached = codec.decode(data)[1]
    except CorruptRecord as exc:
        damage_at = exc.offset
    assert reached <= len(data)
    assert damage_at < len(data)
    out: list[PublishRecord] = []
    try:
        reached = codec.decode_publishes(data, 0, len(data), 1, 2**63, 10**6, out)[0]
    except CorruptRecord as exc:
        damage_at = exc.offset
    assert reached <= len(data)
    assert damage_at < len(data)
    for commit_only in (False, True):
        found = codec.find_next_frame(data, 0, len(data), commit_only=commit_only)
        assert found is None or 0 < found < len(data)


def _read_segment_file(directory: Path, data: bytes) -> str:
    path = directory / SEGMENT
    path.write_bytes(data)
    scan, _builder = scan_segment(path, 1)
    assert scan.summary.size_bytes <= scan.file_size_bytes == len(data)
    report = verify_segment(path, newest=True)
    for damage in report.damaged:
        assert 0 <= damage.start_offset < damage.end_offset <= len(data)
    try:
        journal = Journal.open(directory, read_only=True)
    except CorruptRecord:
        return "refused"
    try:
        records = journal.read(1, 10**6)
        assert [r.txid for r in records] == list(range(1, len(records) + 1))
        journal.read_publishes(1, 2**63, 10**6, 1 << 30)
        reader = RawReader(journal)
        try:
            reader.read(1, 2**63, 10**6)
        finally:
            reader.close()
    except CorruptRecord:
        return "damage met on read"
    finally:
        journal.close_read_only()
    return "read" if not scan.problem else "tail cut"


@FUZZ
@given(segments())
def test_any_segment_bytes_give_records_or_corrupt_record(data: bytes) -> None:
    with (
        tempfile.TemporaryDirectory() as directory,
        peak_memory_below(FIXED_MEMORY_BYTES + MEMORY_PER_INPUT_BYTE * len(data)),
    ):
        _decode_buffer(data)
        event(_read_segment_file(Path(directory), data))
