"""A commit is dispatched as soon as the journal's writer reports it durable, before anything
waiting for that commit resumes: the records are in the record cache, the persisted acks are
released and the links have been stepped in that same loop iteration (issue 8, L1, L2)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from amps.config import load_config
from amps.errors import JournalError
from amps.log.journal import Journal
from amps.server.instance import Instance
from tests.harness.failing_disk import fail_fsyncs

CONFIG = """<AMPSConfig><Name>a</Name>
<Transports><Transport><Name>clients</Name><Type>grpc</Type><InetAddr>0</InetAddr></Transport>
</Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
</AMPSConfig>"""


async def test_a_commit_is_dispatched_before_its_waiters_resume(tmp_path: Path) -> None:
    fatal: list[BaseException] = []
    journal = Journal.open(tmp_path / "j", instance_name="a", group="a")
    instance = Instance(load_config(CONFIG), journal, fatal.append)
    await instance.start(tmp_path)
    try:
        for n in range(1, 4):
            instance.publish_internal("orders", b'{"n":%d}' % n)
            # Waiting here first (the commit callback has not run yet): this waiter resumes
            # before anything else looks at the commit.
            durable = await journal.commit()
            assert durable == n
            assert instance.dispatched_txid == n
            assert instance.records.records[n].data == b'{"n":%d}' % n
        # Nothing was dispatched twice: the commit callback, running after, finds it done.
        await instance.wait_durable()
        assert instance.dispatched_txid == 3
    finally:
        await instance.stop()
        await journal.close()
    assert fatal == []


async def test_a_failed_fsync_stops_the_instance_and_acknowledges_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never pretend success: the writer's failure reaches the instance's fatal handler, and
    what waited for that commit is not told it is durable."""
    fatal: list[BaseException] = []
    stopped = asyncio.Event()

    def on_fatal(exc: BaseException) -> None:
        fatal.append(exc)
        stopped.set()

    journal = Journal.open(tmp_path / "j", instance_name="a", group="a")
    instance = Instance(load_config(CONFIG), journal, on_fatal)
    await instance.start(tmp_path)
    try:
        fail_fsyncs(monkeypatch, "disk on fire")
        instance.publish_internal("orders", b'{"n":1}')
        waiter = asyncio.ensure_future(instance.wait_durable())
        async with asyncio.timeout(10):
            await stopped.wait()
        assert isinstance(fatal[0], JournalError)
        assert "disk on fire" in str(fatal[0])
        assert instance.dispatched_txid == 0
        assert not waiter.done() or waiter.exception() is not None
        waiter.cancel()
    finally:
        monkeypatch.undo()
        await instance.stop()
        await journal.close()
