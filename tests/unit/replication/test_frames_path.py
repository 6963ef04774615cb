"""A link that reads its journal as frames routes on their heads and ships them as read: it
sends what the record path sends, batch for batch and record for record, whatever the route
(Topics, Filters, PassThrough, queue acks by bookmark) and the batch bounds (issue 8: R1, R9,
R10)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from amps.config.model import DestinationConfig, ReplicationTopicConfig
from amps.errors import CorruptRecord
from amps.log import codec
from amps.log.bookmarks import Bookmark
from amps.log.journal import Journal
from amps.log.received import ChosenFrames, ReceivedFrames
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from amps.v1 import replication_pb2 as pb
from replication.convert import encode_batch, from_pb, to_pb
from replication.frames import PROTOCOL_VERSION, Batch, Digest, Hello, OriginPosition
from replication.link_core import Connected, FrameReceived, LinkCore, LinkLimits, LogAdvanced, Send
from replication.positions import PositionBook
from replication.routing import Route

SEGMENT_SIZE_BYTES = 8 * 1024  # a few dozen records: reads cross segments


async def _journal(directory: Path) -> Journal:
    """a's log: its own publishes on three topics, copies of c's (group gc) and of b's (the
    destination: never sent back), queue acks by txid, a transfer record; many commits, so
    the segments hold commit markers between runs of records."""
    journal = Journal.open(
        directory, segment_size_bytes=SEGMENT_SIZE_BYTES, instance_name="a", group="ga"
    )
    topics = ("orders", "audit", "other")
    for n in range(1, 121):
        data = orjson.dumps({"x": n % 10, "pad": "p" * (n % 7) * 40})
        if n % 5 == 0:
            journal.append_publish(
                topic=topics[n % 3], data=data, publisher_id=30, seq=n, timestamp_us=n,
                origin_instance="c" if n % 10 else "b", origin_group="gc" if n % 10 else "gb",
                origin_txid=1000 + n,
            )  # fmt: skip
        else:
            journal.append_publish(
                topic=topics[n % 3], data=data, publisher_id=7, seq=n, timestamp_us=n,
                correlation_id="corr" if n % 4 else "",
            )  # fmt: skip
        if n % 17 == 0:
            journal.append(QueueRecord(0, n, "orders", QueueAction.ACK, txids=(n - 3, n - 2)))
        if n == 60:
            journal.append(TransferRecord(0, n, "orders", Bookmark(7, 2), "a", "b", False))
        if n % 3 == 0:
            await journal.commit()
    await journal.commit()
    return journal


class _FramesView:
    """The journal as the links read it: frames."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    @property
    def first_txid(self) -> int:
        return self.journal.first_txid

    @property
    def durable_txid(self) -> int:
        return self.journal.durable_txid

    def read(self, from_txid: int, max_records: int) -> Sequence[Record]:
        return self.journal.read_frames(from_txid, max_records)


class _RecordsView(_FramesView):
    """The same journal read as records (what links read before)."""

    def read(self, from_txid: int, max_records: int) -> Sequence[Record]:
        return self.journal.read(from_txid, max_records)


def _steps(
    view: _FramesView,
    route: Route,
    limits: LinkLimits,
    held: tuple[OriginPosition, ...] = (),
) -> tuple[LinkCore, list[list[Batch]]]:
    """A link from a to b brought up and stepped until it asks for no more: the batches each
    step sent."""
    core = LinkCore("a", "ga", view, {"b": route}, PositionBook(), "b", limits=limits)
    core.handle(Connected(dialled=True), 0)
    hello = Hello(PROTOCOL_VERSION, "b", route.group, "a", "ga", Digest(sends=False), held)
    steps = [core.handle(FrameReceived(hello), 0)]
    while core.wants_to_send:
        steps.append(core.handle(LogAdvanced(), 0))
        core.check_invariants()
    core.check_invariants()
    return core, [
        [a.frame for a in step if isinstance(a, Send) and isinstance(a.frame, Batch)]
        for step in steps
    ]


def _sent(
    view: _FramesView,
    route: Route,
    limits: LinkLimits,
    held: tuple[OriginPosition, ...] = (),
) -> list[Batch]:
    return [batch for step in _steps(view, route, limits, held)[1] for batch in step]


async def test_a_link_reading_its_journal_keeps_the_catch_up_window_in_flight(
    tmp_path: Path,
) -> None:
    """Rule 3: reading its journal (the peer is further behind than the record cache: a
    catch-up), a link sends until `catch_up_window_bytes` are unacknowledged; reading records
    (the record cache: live traffic), until `window_bytes` are."""
    journal = await _journal(tmp_path)
    try:
        limits = LinkLimits(max_batch_records=4, window_bytes=600, catch_up_window_bytes=3000)
        for view, window in ((_FramesView(journal), 3000), (_RecordsView(journal), 600)):
            core, _ = _steps(view, _route((), ".*"), limits)
            sizes = [size for _, _, size in core._in_flight]
            assert sum(sizes[:-1]) < window <= sum(sizes)  # stopped by the window, not the log
            assert core.unsent_from_txid <= journal.durable_txid
    finally:
        await journal.close()


async def test_a_link_reading_its_journal_sends_one_batch_a_step(tmp_path: Path) -> None:
    """Rule 3: reading its journal (catching the peer up), a link sends one batch per step and
    asks to be stepped again, so the adapter's event loop, which moves the stream's bytes,
    turns between batches; reading records (live traffic), up to `max_reads_per_step`. Either
    way it sends the same records in order."""
    journal = await _journal(tmp_path)
    try:
        limits = LinkLimits(max_batch_records=4, max_reads_per_step=3)
        sent_by_view: list[list[int]] = []
        for view, per_step in ((_FramesView(journal), 1), (_RecordsView(journal), 3)):
            _, batches = _steps(view, _route((), ".*"), limits)
            assert max(len(step) for step in batches) == per_step
            assert len(batches) > 2
            sent_by_view.append([r.txid for step in batches for b in step for r in b.records])
        assert sent_by_view[0] == sent_by_view[1]
    finally:
        await journal.close()


def _route(topics: tuple[tuple[str, str | None], ...], pass_through: str | None) -> Route:
    destination = DestinationConfig(
        "b",
        "gb",
        "async",
        (),
        tuple(ReplicationTopicConfig(name, "json", flt) for name, flt in topics),
        pass_through,
    )
    return Route("a", destination, frozenset())


@pytest.mark.parametrize(
    ("topics", "pass_through"),
    [
        ((), ".*"),  # everything but b's own records
        ((), None),  # only what originated here
        ((), "gc"),
        ((("orders", None),), ".*"),
        ((("orders", "/x > 5"), ("audit", None)), ".*"),  # a Filter decodes only its topic
        ((("o.*", "/x < 3"),), "gc"),
    ],
)
@pytest.mark.parametrize("limits", [LinkLimits(max_batch_records=1000), LinkLimits(
    max_batch_records=7, max_batch_bytes=2000, max_reads_per_step=3)])  # fmt: skip
async def test_frames_are_routed_and_sent_as_the_records_would_be(
    tmp_path: Path,
    topics: tuple[tuple[str, str | None], ...],
    pass_through: str | None,
    limits: LinkLimits,
) -> None:
    journal = await _journal(tmp_path)
    try:
        route = _route(topics, pass_through)
        as_frames = _sent(_FramesView(journal), route, limits)
        as_records = _sent(_RecordsView(journal), _route(topics, pass_through), limits)
        assert as_frames
        assert all(type(b.records) is ChosenFrames for b in as_frames)
        # Batches may end elsewhere (a read as frames stays in one segment, its size counts
        # frames, not data), not what they carry, in order.
        assert as_frames[-1].through_txid == as_records[-1].through_txid
        received: list[Record] = []
        for batch in as_frames:
            message = pb.LinkFrame.FromString(encode_batch(batch))
            assert message == to_pb(batch)
            wire = from_pb(message)
            assert isinstance(wire, Batch)
            assert (wire.batch_id, wire.through_txid) == (batch.batch_id, batch.through_txid)
            assert wire.records == batch.records
            received.extend(wire.records)  # what the peer receives, built into records
            assert all(r.txid <= batch.through_txid for r in batch.records)
        assert received == [r for b in as_records for r in b.records]
        assert not any(r.origin_instance == "b" for r in received)
    finally:
        await journal.close()


async def test_a_commit_ships_as_one_run_of_the_bytes_read(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, instance_name="a", group="ga")
    try:
        for n in range(1, 31):
            journal.append_client_publish("orders", b'{"n": %d}' % n, 7, n, n)
            if n % 10 == 0:
                await journal.commit()  # a commit marker after every ten records
        (batch,) = _sent(_FramesView(journal), _route((), ".*"), LinkLimits())
        records = batch.records
        assert type(records) is ChosenFrames
        parts = records.parts()
        assert b"".join(parts) == b"".join(codec.encode(r) for r in records)
        assert [len(codec.decode(bytes(part))[0]) for part in parts] == [10, 10, 10]
    finally:
        await journal.close()


async def test_a_resync_resumes_after_what_the_peer_holds_when_the_log_agrees(
    tmp_path: Path,
) -> None:
    """R10 over frames: the peer's position is checked against the log read as frames."""
    journal = await _journal(tmp_path)
    try:
        (record,) = journal.read(50, 1)
        held = OriginPosition(record.origin_instance, record.origin_txid, record.txid)
        view, route = _FramesView(journal), _route((), ".*")
        resumed = _sent(view, route, LinkLimits(), (held,))
        assert resumed[0].records[0].txid > 50
        assert min(r.txid for b in resumed for r in b.records) == min(
            r.txid for r in journal.read(51, 1000) if route.wants(r)
        )
        foreign = OriginPosition("c", record.origin_txid + 1, record.txid)  # not what 50 is
        restarted = _sent(view, _route((), ".*"), LinkLimits(), (foreign,))
        assert restarted[0].records[0].txid == 1
    finally:
        await journal.close()


async def test_a_read_as_frames_is_a_read_as_records(tmp_path: Path) -> None:
    """From any txid: the same records, a prefix of `read` within one segment, damage refused."""
    journal = await _journal(tmp_path)
    try:
        last = journal.durable_txid
        for from_txid in range(1, last + 2):
            frames = journal.read_frames(from_txid, 10)
            assert type(frames) is ReceivedFrames
            records = journal.read(from_txid, 10)
            assert list(frames) == records[: len(frames)]
            assert bool(frames) == (from_txid <= last)
            assert b"".join(frames.runs(len(frames))) == b"".join(codec.encode(r) for r in frames)
    finally:
        await journal.close()
    _damage(tmp_path, 600)  # in the fourth record's frame
    journal = Journal.open(tmp_path, segment_size_bytes=SEGMENT_SIZE_BYTES, instance_name="a")
    try:
        with pytest.raises(CorruptRecord, match="segment"):
            journal.read_frames(2, 10)
    finally:
        await journal.close()


def _damage(directory: Path, offset: int) -> None:
    (segment, *_) = sorted(directory.glob("*.journal"))
    data = bytearray(segment.read_bytes())
    data[offset] ^= 0xFF
    segment.write_bytes(bytes(data))


def test_a_publish_verdict_is_wants_for_every_publish_of_its_names() -> None:
    route = _route((("orders", "/x > 5"), ("audit", None)), "gc")
    for topic in ("orders", "audit", "other"):
        for origin, group in (("a", "ga"), ("c", "gc"), ("b", "gb"), ("d", "gd")):
            for x in (1, 9):
                record = PublishRecord(1, 1, topic, b'{"x": %d}' % x, 1, 1, origin, group, 1)
                verdict = route.publish_verdict((topic, origin, group))
                wants = verdict if type(verdict) is bool else route.matches(verdict, record)
                assert wants == route.wants(record), (topic, origin, x)
