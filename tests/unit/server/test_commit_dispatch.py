"""A commit is dispatched as soon as the journal's writer reports it durable, before anything
waiting for that commit resumes: the records are in the record cache, the persisted acks are
released and the links have been stepped in that same loop iteration (issue 8, L1, L2)."""

from __future__ import annotations

from pathlib import Path

from amps.config import load_config
from amps.log.journal import Journal
from amps.server.instance import Instance

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
            # Waiting here first (the commit loop's task has not run yet): this waiter resumes
            # before the commit loop's.
            durable = await journal.commit()
            assert durable == n
            assert instance.dispatched_txid == n
            assert instance.records.records[n].data == b'{"n":%d}' % n
        # Nothing was dispatched twice: the commit loop, resuming after, finds it done.
        await instance.wait_durable()
        assert instance.dispatched_txid == 3
    finally:
        await instance.stop()
        await journal.close()
    assert fatal == []
