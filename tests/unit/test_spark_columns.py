"""The Spark journal read's columnar decode agrees with the journal's own reader and codec, and
hands every chunk it does not decode plainly back to them (issue 10). No Spark needed."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow", reason="the Spark source needs pip install 'amps[spark]'")

import numpy as np
import pyarrow as pa

from amps.errors import CorruptRecord, InvalidOptions
from amps.log import codec
from amps.log.bookmarks import Bookmark
from amps.log.compressed import COMPRESSED_SUFFIX
from amps.log.journal import Journal
from amps.log.records import QueueAction, QueueRecord, TransferRecord
from amps.spark import columns, journal_read
from amps.spark.options import ReadOptions
from amps.spark.rows import _SPARK_TYPES, projection, records_batch

T0 = 1_800_000_000_000_000


def _journal(directory: Path, bodies: list[bytes], seed: int = 7) -> None:
    """Publishes of several topics, publishers and origins (some with correlation ids), queue
    and transfer records between them, and a commit (marker) every few records."""
    rng = random.Random(seed)

    async def write() -> None:
        journal = Journal.open(directory)
        for i, body in enumerate(bodies):
            origin = rng.choice([None, "peer-b", "p\u00e9er-c"])
            journal.append_publish(
                topic=rng.choice(["orders", "trades", "\u00e9v\u00e9nements"]), data=body,
                publisher_id=rng.choice([3, 2**64 - 5]), seq=i + 1, timestamp_us=T0 + i,
                correlation_id=rng.choice(["", f"corr-{i}"]), origin_instance=origin,
                origin_group="" if origin is None else "grp",
                origin_txid=0 if origin is None else 100 + i,
            )  # fmt: skip
            if i % 7 == 3:
                journal.append(QueueRecord(0, T0 + i, "jobs", QueueAction.ACK, txids=(i,)))
            if i % 11 == 5:
                journal.append(TransferRecord(0, T0 + i, "jobs", Bookmark(3, 1), "a", "b"))
            if i % 5 == 4:
                await journal.commit()
        await journal.commit()
        await journal.close()

    asyncio.run(write())


def _both(directory: Path, options: ReadOptions) -> tuple[pa.Table, pa.Table]:
    """The rows of every piece: columnar (`read`) and through the journal's reader."""
    pieces = journal_read.plan(str(directory), options)
    new = [b for p in pieces for b in journal_read.read(p, options)]
    old = [b for p in pieces for b in journal_read.read_records(p, options, p.first_txid)]
    schema = new[0].schema if new else old[0].schema
    return pa.Table.from_batches(new, schema), pa.Table.from_batches(old, schema)


def test_columns_agree_with_the_journals_reader(tmp_path: Path) -> None:
    rng = random.Random(1)
    bodies = [rng.randbytes(rng.randrange(0, 600)).replace(b"\x7e\x1a", b"..") for _ in range(700)]
    _journal(tmp_path / "j", bodies)
    hundredth = _both(tmp_path / "j", ReadOptions())[1].column("bookmark")[100].as_py()
    for options in (
        ReadOptions(),
        ReadOptions(topic="orders"),
        ReadOptions(topic="^(trades|\u00e9v.*)$"),
        ReadOptions(start=hundredth, records_per_partition=97),  # pieces start mid-segment
    ):
        new, old = _both(tmp_path / "j", options)
        assert new.num_rows > 0
        assert new.equals(old), options


def test_the_magic_inside_a_body_and_damage_go_to_the_journals_reader(tmp_path: Path) -> None:
    magic = codec._MAGIC_BYTES
    bodies = [b"x" * 40 for _ in range(50)]
    bodies[20] = b"before " + magic + b"\x00\x00\x00\x00\xff\x00\x00\x00 after"
    _journal(tmp_path / "j", bodies)
    segment = next((tmp_path / "j").glob("*.journal"))
    raw = segment.read_bytes()
    assert columns.decode(raw[raw.index(magic) :], 1, 10**9) is None  # a chain it does not trust
    new, old = _both(tmp_path / "j", ReadOptions())
    assert new.equals(old)
    assert new.num_rows == 50
    assert new.column("data").to_pylist() == bodies

    at = raw.index(b"x" * 40, len(raw) // 2)  # a body in the second half: damage it
    segment.write_bytes(raw[:at] + b"y" + raw[at + 1 :])
    piece = journal_read.plan(str(tmp_path / "j"), ReadOptions())[0]
    with pytest.raises(CorruptRecord) as new_error:
        list(journal_read.read(piece, ReadOptions()))
    with pytest.raises(CorruptRecord) as old_error:
        list(journal_read.read_records(piece, ReadOptions(), piece.first_txid))
    assert new_error.value.offset == old_error.value.offset
    assert new_error.value.segment == old_error.value.segment


def test_an_incomplete_last_frame_and_a_range_are_not_consumed() -> None:
    frames = [
        codec.encode_publish(t, T0 + t, "t", b"body-%d" % t, 9, t, "a", "g", t, "", 0)
        for t in range(1, 6)
    ]
    chunk = b"".join(frames)
    whole = columns.decode(chunk + frames[0][:20], 1, 10)
    assert whole is not None
    assert whole.consumed == len(chunk)
    assert whole.next_txid == 6
    assert whole.batch is not None
    assert whole.batch.column("txid").to_pylist() == [1, 2, 3, 4, 5]
    middle = columns.decode(chunk, 2, 3)
    assert middle is not None
    assert middle.next_txid == 4
    assert middle.consumed == len(frames[0]) + len(frames[1]) + len(frames[2])
    assert middle.batch is not None
    assert middle.batch.column("data").to_pylist() == [
        b"body-2",
        b"body-3",
    ]


def test_short_empty_and_long_bodies_up_to_the_chunks_last_byte() -> None:
    """Bodies of 12 bytes or fewer are held inline in the data column's views, longer ones are
    copied from the chunk: both, mixed, and one ending at the chunk's very last byte."""
    bodies = [b"", b"a", b"twelve bytes", b"thirteen byte", b"x" * 300, b"end"]
    frames = [
        codec.encode_publish(t, T0 + t, "t", body, 9, t, "a", "g", t, "", 0)
        for t, body in enumerate(bodies, start=1)
    ]
    for chosen in (frames, frames[:3], frames[3:5]):
        decoded = columns.decode(b"".join(chosen), 1, 10)
        assert decoded is not None
        assert decoded.batch is not None
        expected = [bodies[frames.index(f)] for f in chosen]
        assert decoded.batch.column("data").to_pylist() == expected


def test_any_damaged_byte_of_any_frame_is_refused() -> None:
    """The frames' checksums are checked together in one CRC call: a change to any byte of any
    frame (header, length, payload, stored CRC), or to two frames at once, is still refused."""
    frames = [
        codec.encode_publish(t, T0 + t, "t", b"body-%d" % t * t, 9, t, "a", "g", t, "", 0)
        for t in range(1, 6)
    ]
    chunk = b"".join(frames)
    assert columns.decode(chunk, 1, 10) is not None
    frame_at = [sum(map(len, frames[:k])) for k in range(len(frames))]
    for at in range(len(chunk)):
        for flip in (0x01, 0x80):
            damaged = bytearray(chunk)
            damaged[at] ^= flip
            decoded = columns.decode(bytes(damaged), 1, 10)
            # Refused, or (a txid made larger than the range's end) the frames before it only.
            assert decoded is None or decoded.consumed <= max(f for f in frame_at if f <= at)
    second, fourth = len(frames[0]) + 30, sum(map(len, frames[:3])) + 30
    twice = bytearray(chunk)
    twice[second] ^= 0x04
    twice[fourth] ^= 0x04
    assert columns.decode(bytes(twice), 1, 10) is None


def test_pieces_are_about_even_across_segments_of_different_sizes(tmp_path: Path) -> None:
    """minPartitions cuts the range into pieces of about the same size (a read is as fast as
    its largest piece), each within one segment, together every record once."""

    async def write() -> None:
        journal = Journal.open(tmp_path / "j", segment_size_bytes=16 * 1024)
        for i in range(250):
            journal.append_publish(
                topic="t", data=b"x" * 150, publisher_id=3, seq=i + 1, timestamp_us=T0 + i
            )
        await journal.commit()
        await journal.close()

    asyncio.run(write())
    directory = str(tmp_path / "j")
    whole = journal_read.plan(directory, ReadOptions())
    assert len({p.path for p in whole}) > 2  # several segments, the last one partly filled
    for parts in (2, 3, 7):
        options = ReadOptions(min_partitions=parts)
        pieces = journal_read.plan(directory, options)
        assert len(pieces) >= parts
        assert [p.first_txid for p in pieces] == [1] + [p.last_txid + 1 for p in pieces[:-1]]
        assert pieces[-1].last_txid == 250
        assert max(p.last_txid - p.first_txid + 1 for p in pieces) <= -(-250 // parts)
        rows = [
            r
            for p in pieces
            for b in journal_read.read(p, options)
            for r in b["sequence"].to_pylist()
        ]
        assert rows == list(range(1, 251))
        # A partition gathers pieces across segments: no more partitions than asked for, each
        # at most an even share, and together every row once, in order.
        grouped = journal_read.parts(directory, options)
        assert len(grouped) == parts
        share = -(-250 // parts)
        assert all(sum(p.last_txid - p.first_txid + 1 for p in g.pieces) <= share for g in grouped)
        rows = [
            r
            for g in grouped
            for b in journal_read.read(g, options)
            for r in b["sequence"].to_pylist()
        ]
        assert rows == list(range(1, 251))


_PUBLISHERS = st.sampled_from([3, 77, 2**63 + 9, 2**64 - 5])  # one past Spark's signed longs


@st.composite
def _publishes(draw: st.DrawFn) -> list[bytes]:
    """Frames of publishes as an instance writes them: one publisher or several, sequence
    numbers of one width or of several (the bookmarks' two ways), names alike or not, bodies
    that hold the magic's third byte (the frame search) or not."""
    body = st.binary(max_size=40) | st.sampled_from([b"\xb5", b"\xb5\xb5\xb5", b"x" * 13])
    bodies = draw(st.lists(body, min_size=1, max_size=20))
    rng = draw(st.randoms(use_true_random=False))
    publishers = rng.sample([3, 77, 2**63 + 9, 2**64 - 5], rng.choice([1, 2]))
    first = rng.choice([1, 95, 9_990, 2**62, 2**63 - 10, 2**64 - 60])  # past a long: null
    topics = rng.sample(["t", "orders", "\u00e9v"], rng.choice([1, 2]))
    return [
        codec.encode_publish(
            i + 1, T0 + i, rng.choice(topics), data, rng.choice(publishers),
            first + rng.randrange(30) + i, "inst", "", i + 1, rng.choice(["", "c-1"]), 0,
        )
        for i, data in enumerate(bodies)
    ]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(frames=_publishes())
def test_the_columns_are_the_codecs_records(frames: list[bytes]) -> None:
    """Whatever the frames, the columnar decode is the codec's records as rows, or it hands the
    chunk back (None) and the journal's reader decides: it never decodes differently."""
    chunk = b"".join(frames)
    records, consumed = codec.decode(chunk)
    decoded = columns.decode(chunk, 1, 10**9)
    if decoded is None:
        return  # a body that looks like a frame: the journal's reader reads this chunk
    assert decoded.consumed == consumed == len(chunk)
    assert decoded.batch is not None
    assert decoded.batch.equals(records_batch(records))


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), byte=st.sampled_from([0, 0xB5, 0x7E]))
def test_every_position_of_a_byte_is_found(data: bytes, byte: int) -> None:
    found = columns._positions(np.frombuffer(data, np.uint8), byte)
    assert found.tolist() == [i for i, b in enumerate(data) if b == byte]


def test_compressed_segments_read_as_plain_ones(tmp_path: Path) -> None:
    """The columnar read takes a compressed segment's bytes as a plain one's (pread_into)."""

    async def write() -> None:
        journal = Journal.open(tmp_path / "j", segment_size_bytes=8 * 1024)
        for i in range(200):
            journal.append_publish(
                topic="t", data=b"x%d" % i * 20, publisher_id=3, seq=i + 1, timestamp_us=T0 + i
            )
        await journal.commit()
        sealed = [s.first_txid for s in journal.segment_states()][:2]
        await journal.compress_segments(sealed)
        await journal.close()

    asyncio.run(write())
    assert len(list((tmp_path / "j").glob("*" + COMPRESSED_SUFFIX))) == 2
    new, old = _both(tmp_path / "j", ReadOptions())
    assert new.equals(old)
    assert new.column("sequence").to_pylist() == list(range(1, 201))


def test_a_read_of_some_columns_skips_the_others(tmp_path: Path) -> None:
    """A read of some columns (a schema given to the reader) returns what the whole read does
    for them: skipped columns (data, bookmark, publisher) are built only when asked for."""
    _journal(tmp_path / "j", [b"body-%d" % i for i in range(300)])
    whole = _both(tmp_path / "j", ReadOptions())[0]
    for chosen in (("txid", "topic"), ("data", "txid"), ("bookmark",), ("publisher", "topic")):
        options = ReadOptions(columns=chosen)
        pieces = journal_read.plan(str(tmp_path / "j"), options)
        batches = [b for p in pieces for b in journal_read.read(p, options)]
        got = pa.Table.from_batches(batches, batches[0].schema)
        assert got.select(list(chosen)).equals(whole.select(list(chosen))), chosen
        for name in {"data", "bookmark"} - set(chosen):  # the dearest (publisher makes bookmarks)
            assert got.column(name).null_count == got.num_rows, name


def test_a_schema_must_name_the_sources_columns_with_their_types() -> None:
    assert projection([(name, kind) for name, kind in _SPARK_TYPES.items()]) == ()
    assert projection([("data", "binary"), ("txid", "bigint")]) == ("data", "txid")
    with pytest.raises(InvalidOptions, match="'price' is not one of the source's"):
        projection([("price", "double")])
    with pytest.raises(InvalidOptions, match="'txid' is int, the source's is bigint"):
        projection([("txid", "int")])


def test_sequence_numbers_past_a_signed_long_keep_their_bookmark() -> None:
    """A client may number with any unsigned 64-bit value (L3): a Spark long cannot hold those
    at 2**63 and above, so `sequence` is null there, and the bookmark still spells the number."""
    seqs = [1, 2**63 - 1, 2**63, 2**64 - 1]
    frames = [
        codec.encode_publish(t, T0 + t, "t", b"x", 9, seq, "a", "g", t, "", 0)
        for t, seq in enumerate(seqs, start=1)
    ]
    one_publisher = columns.decode(b"".join(frames), 1, 10)
    assert one_publisher is not None
    assert one_publisher.batch is not None
    records, _ = codec.decode(b"".join(frames))
    for batch in (one_publisher.batch, records_batch(records)):
        assert batch.column("sequence").to_pylist() == [1, 2**63 - 1, None, None]
        assert batch.column("bookmark").to_pylist() == [f"9|{seq}|" for seq in seqs]
    mixed = [
        codec.encode_publish(t, T0 + t, "t", b"x", 9 + t % 2, seq, "a", "g", t, "", 0)
        for t, seq in enumerate(seqs, start=1)
    ]
    two_publishers = columns.decode(b"".join(mixed), 1, 10)
    assert two_publishers is not None
    assert two_publishers.batch is not None
    assert two_publishers.batch.column("bookmark").to_pylist() == [
        f"{9 + t % 2}|{seq}|" for t, seq in enumerate(seqs, start=1)
    ]
    assert two_publishers.batch.column("sequence").to_pylist() == [1, 2**63 - 1, None, None]
