"""A peer's publishes appended in one journal call, and the frames the journal keeps for the
replication links that ship them as appended (issue 8, L4, R10)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from amps.log.bookmarks import Bookmark
from amps.log.codec import encode
from amps.log.journal import Journal
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record
from amps.publishing import PublishingCore
from amps.v1 import replication_pb2 as pb
from replication.convert import from_pb, to_pb
from replication.frames import Batch

SEGMENT_SIZE_BYTES = 16 * 1024


def _open(directory: Path) -> Journal:
    return Journal.open(
        directory, segment_size_bytes=SEGMENT_SIZE_BYTES, instance_name="b", group="g"
    )


def _peer_publish(origin_txid: int, publisher_id: int, seq: int) -> PublishRecord:
    return PublishRecord(
        origin_txid, 1_000 + origin_txid, "orders", b"m%d" % seq + b"." * 300, publisher_id, seq,
        "a", "ga", origin_txid, "corr" if seq % 2 else "", 0,
    )  # fmt: skip


async def test_a_batch_appends_like_one_publish_at_a_time(tmp_path: Path) -> None:
    batch = [_peer_publish(i, 7 + i % 2, 1 + i // 2) for i in range(1, 41)]
    one_by_one = _open(tmp_path / "one")
    expected = [
        one_by_one.append_publish(
            topic=r.topic,
            data=r.data,
            publisher_id=r.publisher_id,
            seq=r.seq,
            timestamp_us=r.timestamp_us,
            correlation_id=r.correlation_id,
            expiration_s=r.expiration_s,
            origin_instance=r.origin_instance,
            origin_group=r.origin_group,
            origin_txid=r.origin_txid,
        )
        for r in batch
    ]
    await one_by_one.commit()
    bulk = _open(tmp_path / "bulk")
    appended = bulk.append_replicated(batch)
    await bulk.commit()
    assert appended == expected
    assert bulk.read(1, 100) == one_by_one.read(1, 100) == expected  # the bytes on disk agree
    await one_by_one.close()
    await bulk.close()


async def test_a_resent_publish_is_skipped_within_and_across_batches(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    publishing: PublishingCore[str] = PublishingCore("b", journal.marks)

    def apply(batch: list[PublishRecord]) -> list[PublishRecord]:
        return journal.append_replicated(publishing.admit_replicated(batch))

    first = apply([_peer_publish(1, 7, 1), _peer_publish(2, 7, 2)])
    assert [r.txid for r in first] == [1, 2]
    # A resend after a broken link: seq 2 again, and seq 3 twice in one batch (L4).
    again = apply([_peer_publish(2, 7, 2), _peer_publish(3, 7, 3), _peer_publish(3, 7, 3)])
    assert publishing.statistics().duplicates == 2
    assert [(r.txid, r.seq) for r in again] == [(3, 3)]
    assert journal.marks.high_water(7) == 3
    # A local publish of the same publisher meets the same marks (one de-duplication, L4).
    assert publishing.sequence(7, 3, "client") is None
    assert publishing.sequence(7, 4, "client") == (7, 4)
    await journal.close()


async def test_a_seq_replicated_after_a_later_one_is_logged_once_and_after_a_restart(
    tmp_path: Path,
) -> None:
    """L4, chained failover (make sim FAILOVER=1 SEED=2174): seq 2 was republished here, seq
    1 comes later from a peer; it is logged, once, through the same core and batch append the
    server uses, and a restart (summaries, or a scan) still knows it is held."""
    journal = _open(tmp_path)
    publishing: PublishingCore[str] = PublishingCore("b", journal.marks)
    assert publishing.sequence(7, 2, "client") == (7, 2)
    journal.append_publish(topic="orders", data=b"m2", publisher_id=7, seq=2, timestamp_us=1)
    batch = [_peer_publish(1, 7, 1), _peer_publish(2, 7, 2), _peer_publish(3, 7, 1)]
    appended = journal.append_replicated(publishing.admit_replicated(batch))
    assert [(r.txid, r.seq) for r in appended] == [(2, 1)]
    await journal.close()
    reopened = _open(tmp_path)
    assert reopened.marks.gaps(7) == ()
    assert reopened.marks.is_duplicate(7, 1)
    again: PublishingCore[str] = PublishingCore("b", reopened.marks)
    assert again.admit_replicated([_peer_publish(1, 7, 1)]) == []
    await reopened.close()


async def test_kept_frames_are_the_appended_bytes_and_bounded(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    journal.keep_frames(4 * 1024)
    local = [
        journal.append_publish(topic="t", data=b"x" * 500, publisher_id=9, seq=s, timestamp_us=s)
        for s in range(1, 21)
    ]
    replicated = journal.append_replicated([_peer_publish(100, 7, 1)])
    queue = journal.append(QueueRecord(0, 0, "q", QueueAction.ACK, txids=(local[-1].txid,)))
    await journal.commit()
    kept = journal.frames
    assert sum(len(frame) for frame in kept.values()) <= 4 * 1024
    assert max(kept) == queue.txid
    assert min(kept) > 1  # the oldest went first
    appended: list[Record] = [*local, *replicated, queue]
    for record in appended:
        if record.txid in kept:
            assert kept[record.txid] == encode(record)
    # A batch sent with the kept frames is byte for byte the batch encoded from its records;
    # a queue record the link rewrote (bookmarks for txids) is encoded, not sent as kept.
    rewritten = replace(queue, bookmarks=(Bookmark(9, 20),), txids=())
    records: tuple[Record, ...] = (*(r for r in [*local, *replicated] if r.txid in kept), rewritten)
    batch = Batch(1, records[-1].txid, records)
    assert to_pb(batch, kept).SerializeToString() == to_pb(batch).SerializeToString()
    assert from_pb(pb.LinkFrame.FromString(to_pb(batch, kept).SerializeToString())) == batch
    # Publishes of consecutive txids, all kept: the frames are a slice of the kept commit.
    publishes = tuple(r for r in [*local, *replicated] if r.txid in kept)
    assert len(publishes) > 1
    live = Batch(2, publishes[-1].txid, publishes)
    assert to_pb(live, kept).SerializeToString() == to_pb(live).SerializeToString()
    journal.keep_frames(0)
    assert not journal.frames
    await journal.close()


async def test_kept_frames_go_once_every_link_has_read_past_them(tmp_path: Path) -> None:
    """A link sends a commit's records a commit or two after they were appended: frames are
    kept from the oldest one a link still needs, so the bound is spent on what is unsent."""
    journal = _open(tmp_path)
    journal.keep_frames(64 * 1024)
    for s in range(1, 11):
        journal.append_publish(topic="t", data=b"x" * 100, publisher_id=9, seq=s, timestamp_us=s)
    assert not journal.frames  # kept from the commit on: a link sends only what is durable
    await journal.commit()
    journal.drop_frames_before(4)
    assert sorted(journal.frames) == list(range(4, 11))
    journal.drop_frames_before(2)  # a link behind the others asks for nothing back
    assert sorted(journal.frames) == list(range(4, 11))
    journal.append_publish(topic="t", data=b"x" * 100, publisher_id=9, seq=11, timestamp_us=11)
    await journal.commit()
    journal.drop_frames_before(11)
    assert sorted(journal.frames) == [11]
    journal.append_publish(topic="t", data=b"x" * 3000, publisher_id=9, seq=12, timestamp_us=12)
    await journal.commit()
    # The bound still holds: what is kept is what the byte count says.
    assert sum(len(f) for f in journal.frames.values()) == journal.frames.size_bytes
    assert journal.frames.span(11, 2) == [journal.frames[11], journal.frames[12]]
    assert journal.frames.span(10, 2) is None  # 10 is gone
    journal.drop_frames_before(100)
    assert not journal.frames
    assert journal.frames.size_bytes == 0
    await journal.close()


async def test_a_read_gives_each_record_its_frame_as_on_disk(tmp_path: Path) -> None:
    journal = _open(tmp_path)  # 16 KiB segments: the read crosses segment headers and commits
    for s in range(1, 61):
        journal.append_publish(topic="t", data=b"y" * 700, publisher_id=9, seq=s, timestamp_us=s)
        if s % 7 == 0:
            await journal.commit()  # a commit marker between records
    journal.append(QueueRecord(0, 0, "q", QueueAction.ACK, txids=(3,)))
    await journal.commit()
    frames: dict[int, bytes] = {}
    records = journal.read(5, 100, frames)
    assert [r.txid for r in records] == list(range(5, 62))
    for record in records:
        assert frames[record.txid] == encode(record)
    await journal.close()
