"""Fuzzing the admin HTTP interface (issue 11, "Also"): whatever bytes a client sends, the
answer is one of the declared responses (200, 400, 404, 405, 431) or, for a request that never
completes its head, a closed connection; never a 500, never an exception, memory bounded.

A real AdminHttpServer on 127.0.0.1 serves the instance's routes over real queue engines.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from amps.config import QueueConfig, load_config
from amps.queue import QueueEngine, QueueStatistics
from amps.server.admin_http import AdminHttpServer
from amps.server.admin_routes import QUEUES_PATH, QueueRoutes
from amps.server.queues import policy_for
from tests.harness.bounds import peak_memory_below

DECLARED = {200, 400, 404, 405, 431}
STATUS_LINE = re.compile(rb"HTTP/1\.1 (\d{3}) [A-Za-z ]+\r\n")
REQUEST_MEMORY_BYTES = 2 * 1024 * 1024
FUZZ = settings(
    max_examples=200,
    deadline=None,  # bounded by the server's own limits and the memory bound, not the clock
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CONFIG = """<AMPSConfig><Name>fuzz</Name>
<TransactionLog><JournalDirectory>j</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>
<MessageType>json</MessageType></Queue>
<LocalQueue><Name>jobs/ü</Name><UnderlyingTopic>jobs</UnderlyingTopic>
<MessageType>json</MessageType></LocalQueue></SOW></AMPSConfig>"""


@dataclass
class Queue:
    """A QueueSource: a configured queue and a real engine's statistics."""

    config: QueueConfig
    engine: QueueEngine
    replicated: bool = False
    proxied_transfer: bool = False

    def set_proxied_transfer(self, enabled: bool) -> None:
        self.proxied_transfer = enabled

    def ownership_statistics(self) -> None:
        return None  # neither queue spans instances here

    def statistics(self) -> QueueStatistics:
        return self.engine.statistics(now_ms=0)


@dataclass
class Served:
    loop: asyncio.AbstractEventLoop
    port: int


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    loop = asyncio.new_event_loop()
    queues = {q.name: Queue(q, QueueEngine(policy_for(q))) for q in load_config(CONFIG).queues}
    routes = QueueRoutes("fuzz", lambda: queues)
    server = AdminHttpServer(
        {
            "/amps/instance.json": lambda: ("application/json", b"{}"),
            QUEUES_PATH: routes.list_json,
            f"{QUEUES_PATH}.json": routes.list_json,
            "/health": lambda: ("text/plain", b"ok\n"),
        },
        {f"{QUEUES_PATH}/": routes.one_json},
    )
    port = loop.run_until_complete(server.start("127.0.0.1", 0))
    try:
        yield Served(loop, port)
    finally:
        loop.run_until_complete(server.stop())
        loop.close()


def _exchange(served: Served, request: bytes) -> bytes:
    """Send `request`, half-close, and read everything until the server closes."""

    async def exchange() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        try:
            writer.write(request)
            await writer.drain()
            writer.write_eof()  # a head without its blank line ends here, not at a timeout
            return await asyncio.wait_for(reader.read(), timeout=30)
        except ConnectionResetError:
            return b""  # the server answered and closed while the request was still arriving
        finally:
            writer.close()

    return served.loop.run_until_complete(exchange())


PATHS = st.sampled_from(
    [
        "/", "/health", "/metrics", "/amps/instance.json", QUEUES_PATH, f"{QUEUES_PATH}.json",
        f"{QUEUES_PATH}/", f"{QUEUES_PATH}/work", f"{QUEUES_PATH}/work!json",
        f"{QUEUES_PATH}/work.json", f"{QUEUES_PATH}/work/queue_depth",
        f"{QUEUES_PATH}/work/nope.json", f"{QUEUES_PATH}/jobs%2F%C3%BC", f"{QUEUES_PATH}/%ff%fe",
        f"{QUEUES_PATH}/work/%", f"{QUEUES_PATH}//", "/amps/instance/queues/" + "a" * 9000,
    ]
)  # fmt: skip


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """Requests that are nearly right (method, path, query, headers), or any bytes."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.binary(max_size=2048))
    method = draw(st.sampled_from(["GET"] * 6 + ["POST", "get", "", "GET GET"]))
    path = draw(PATHS | st.text(max_size=40).map(lambda t: "/" + t))
    query = draw(st.sampled_from(["", "?a=1", "?%", "?" + "q" * 100]))
    version = draw(st.sampled_from(["HTTP/1.1"] * 6 + ["HTTP/1.0", "", "HTTP/9"]))
    headers = draw(
        st.lists(st.sampled_from(["Host: x"] * 4 + ["X: " + "y" * 5000, ":", "é: è"]), max_size=3)
    )
    head = " ".join(filter(None, [method, path + query, version]))
    end = draw(st.sampled_from(["\r\n\r\n"] * 6 + ["\r\n", ""]))
    text = "\r\n".join([head, *headers]) + end
    return text.encode("utf-8", "surrogatepass")


@FUZZ
@given(requests())
def test_any_request_gets_a_declared_answer_or_a_close(served: Served, request: bytes) -> None:
    with peak_memory_below(REQUEST_MEMORY_BYTES + 4 * len(request)):
        response = _exchange(served, request)
    if not response:
        event("closed without an answer")
        assert b"\r\n\r\n" not in request, "a complete head must be answered"
        return
    match = STATUS_LINE.match(response)
    assert match is not None, response[:200]
    status = int(match.group(1))
    event(f"HTTP {status}")
    assert status in DECLARED, response[:500]
    head, _, body = response.partition(b"\r\n\r\n")
    length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head + b"\r\n")
    assert length is not None
    assert int(length.group(1)) == len(body)
