"""S5 IdleTimeout: the time this instance takes to answer a client is not the client's silence
(issue 8: a flush behind a busy disk closed a client that was waiting for its ack)."""

from __future__ import annotations

import asyncio

import pytest

from amps.config.model import ClientLimits
from amps.server.client_service import _watch_timeouts
from amps.server.send_budget import SendBudget
from amps.server.session import Session
from amps.v1 import client_pb2 as pb

IDLE = ClientLimits(logon_timeout_ms=0, idle_timeout_ms=50)


def logged_on() -> Session:
    session = Session(SendBudget(), "peer", lambda _session: None)
    session.logged_on = True
    session.last_receive_monotonic = asyncio.get_running_loop().time()
    return session


@pytest.mark.parametrize("owed", ["flush ack", "persisted ack"])
async def test_a_client_owed_an_answer_is_not_idle_and_is_once_answered(owed: str) -> None:
    session = logged_on()
    durable = asyncio.Event()

    async def flush() -> None:  # as the flush's task: the ack once the disk has it all
        await durable.wait()

    def owes_persisted_ack(_session: Session) -> bool:
        return owed == "persisted ack" and not durable.is_set()

    if owed == "flush ack":
        session.spawn(flush())
    watchdog = asyncio.create_task(_watch_timeouts(session, IDLE, owes_persisted_ack))
    # Nothing to await here: the point is that ten idle timeouts pass and nothing happens.
    await asyncio.sleep(10 * IDLE.idle_timeout_ms / 1000)
    assert not session.outbox.closed
    durable.set()
    async with asyncio.timeout(30):
        await watchdog  # answered, and then silent: closed as idle
    assert session.outbox.close_reason is not None
    assert "(IdleTimeout)" in session.outbox.close_reason[1]


async def test_a_silent_client_owed_nothing_is_closed() -> None:
    session = logged_on()
    async with asyncio.timeout(30):
        await _watch_timeouts(session, IDLE, lambda _session: False)
    assert session.outbox.close_reason is not None
    details = session.outbox.close_reason[1]
    assert "no command and no subscription for 50 ms (IdleTimeout)" in details


async def test_an_idle_timeout_shorter_than_the_logon_timeout_holds() -> None:
    """The idle watch starts once the client has logged on, not once LogonTimeout has passed."""
    session = logged_on()
    limits = ClientLimits(logon_timeout_ms=3_600_000, idle_timeout_ms=50)
    async with asyncio.timeout(60):  # an hour before the idle watch looked after the logon
        await _watch_timeouts(session, limits, lambda _session: False)
    assert session.outbox.close_reason is not None
    assert "(IdleTimeout)" in session.outbox.close_reason[1]


async def test_the_reason_is_also_the_streams_last_message() -> None:
    """A client whose write meets the stream's end reads the reason from this message (gRPC may
    then report INTERNAL instead of the status, grpc/grpc#36066)."""
    session = logged_on()
    async with asyncio.timeout(30):
        await _watch_timeouts(session, IDLE, lambda _session: False)
    async with asyncio.timeout(30):
        frames = [pb.ServerFrame.FromString(frame) async for frame in session.outbox.frames()]
    disconnect = frames[-1].messages[-1].disconnect
    assert session.outbox.close_reason is not None
    assert disconnect.reason == session.outbox.close_reason[1]
    assert disconnect.error_code == "connection_broken"
