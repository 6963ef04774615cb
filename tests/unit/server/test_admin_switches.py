"""The administrator's switches over a real AdminHttpServer, driven by the real CLI commands:
proxied transfer per queue (R7) and client transports (InitialState), both POST only.

The queues are configured queues over real engines and replicated-queue cores; only the
driver around them is replaced by the few fields the pages read (a driver needs a whole
instance).
"""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest
from click.testing import CliRunner

from amps import errors
from amps.cli.admin_cmds import admin
from amps.config import Config, QueueConfig, load_config
from amps.queue import Deliver, MessagePublished, QueueEngine, QueueStatistics, Subscribed
from amps.server.admin_http import AdminHttpServer
from amps.server.admin_routes import QUEUE_ACTIONS_PATH, QUEUES_PATH, QueueRoutes
from amps.server.queues import policy_for
from amps.server.transports import (
    TRANSPORT_ACTIONS_PATH,
    TRANSPORTS_PATH,
    ClientTransports,
    TransportRoutes,
)
from replication.latency import LatencyOptions
from replication.ownership import AppendOwnership, TransferKind
from replication.queue_replica import QueueReplica, ReplicaOptions, ReplicaStatistics

LATENCY_MS = 250

CONFIG = """<AMPSConfig><Name>east</Name>
<Transports>
  <Transport><Name>clients</Name><Type>grpc</Type><InetAddr>0</InetAddr>
    <InitialState>disabled</InitialState></Transport>
  <Transport><Name>peers</Name><Type>amps-replication</Type><InetAddr>0</InetAddr></Transport>
</Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>
  <Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>
    <MessageType>json</MessageType></Queue>
  <Queue><Name>solo</Name><UnderlyingTopic>other</UnderlyingTopic>
    <MessageType>json</MessageType></Queue>
  <LocalQueue><Name>jobs</Name><UnderlyingTopic>jobs-in</UnderlyingTopic>
    <MessageType>json</MessageType></LocalQueue>
</SOW>
<Replication><Destination><Name>west</Name><SyncType>async</SyncType>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>work</Name><MessageType>json</MessageType></Topic>
  <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9</InetAddr></Transport>
</Destination></Replication>
</AMPSConfig>"""


@dataclass
class Queue:
    """A QueueSource: a configured queue, its real replica core, the switch the driver keeps."""

    config: QueueConfig
    replica: QueueReplica
    replicated: bool
    proxied_transfer: bool = False

    def set_proxied_transfer(self, enabled: bool) -> None:
        assert self.replicated
        self.proxied_transfer = enabled
        self.replica.proxied_transfer_switched(enabled, now_ms=0)

    def statistics(self) -> QueueStatistics:
        return self.replica.engine.statistics(now_ms=0)

    def ownership_statistics(self) -> ReplicaStatistics | None:
        return self.replica.statistics() if self.replicated else None


@dataclass
class Served:
    address: str
    queues: dict[str, Queue]
    transports: ClientTransports


def _queues(config: Config) -> dict[str, Queue]:
    queues = {}
    for q in config.queues:
        replicated = config.replicates_queue(q)
        options = ReplicaOptions(
            kind=q.kind, replicated=replicated, latency=LatencyOptions(default_ms=LATENCY_MS)
        )
        replica = QueueReplica(config.name, QueueEngine(policy_for(q)), options)
        queues[q.name] = Queue(q, replica, replicated)
    return queues


@pytest.fixture
def served() -> Iterator[Served]:
    config = load_config(CONFIG)
    queues = _queues(config)
    transports = ClientTransports(config.transports)
    queue_routes = QueueRoutes("east", lambda: queues)
    transport_routes = TransportRoutes(transports, lambda: {"clients": 7001})
    server = AdminHttpServer(
        {
            QUEUES_PATH: queue_routes.list_json,
            f"{QUEUES_PATH}.json": queue_routes.list_json,
            TRANSPORTS_PATH: transport_routes.list_json,
            f"{TRANSPORTS_PATH}.json": transport_routes.list_json,
        },
        {f"{QUEUES_PATH}/": queue_routes.one_json},
        {QUEUE_ACTIONS_PATH: queue_routes.act, TRANSPORT_ACTIONS_PATH: transport_routes.act},
    )
    loop = asyncio.new_event_loop()
    port = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield Served(f"127.0.0.1:{port}", queues, transports)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def http(served: Served, path: str, method: str = "GET") -> tuple[int, bytes]:
    url = f"http://{served.address}{path}"
    sent = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(sent, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def cli(served: Served, *args: str, answer: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(admin, [*args, "--server", served.address], input=answer)
    return result.exit_code, result.output


# -- proxied transfer ------------------------------------------------------------------------


def test_proxied_transfer_asks_first_and_a_no_changes_nothing(served: Served) -> None:
    code, output = cli(served, "queue", "proxied-transfer", "work", "enable", answer="n\n")
    assert code == 1
    assert "delivered twice" in output  # the warning is shown before the question
    assert "Enable proxied transfer for work? [y/N]" in output
    assert not served.queues["work"].proxied_transfer
    # No answer at all (stdin closed, a script without --yes) is a no too.
    code, _ = cli(served, "queue", "proxied-transfer", "work", "enable", answer="")
    assert (code, served.queues["work"].proxied_transfer) == (1, False)


def test_proxied_transfer_yes_at_the_prompt_or_with_yes_switches_it(served: Served) -> None:
    code, output = cli(served, "queue", "proxied-transfer", "work", "enable", answer="y\n")
    assert code == 0, output
    assert output.endswith("proxied transfer enabled for queue work\n")
    assert served.queues["work"].proxied_transfer
    code, output = cli(served, "queue", "proxied-transfer", "work", "enable", "--yes")
    assert (code, output) == (0, "proxied transfer enabled for queue work (it already was)\n")
    code, output = cli(served, "queue", "proxied-transfer", "work", "disable", "--yes")
    assert (code, output) == (0, "proxied transfer disabled for queue work\n")
    assert not served.queues["work"].proxied_transfer


def test_the_queue_pages_and_the_table_show_the_setting(served: Served) -> None:
    cli(served, "queue", "proxied-transfer", "work!json", "enable", "--yes")  # the AMPS id
    status, body = http(served, f"{QUEUES_PATH}/work/proxied_transfer")
    assert (status, orjson.loads(body)) == (200, {"proxied_transfer": True})
    page = orjson.loads(http(served, f"{QUEUES_PATH}.json")[1])
    shown = {q["name"]: (q["replicated"], q["proxied_transfer"]) for q in page["queues"]}
    assert shown == {"work": (True, True), "solo": (False, False), "jobs": (False, False)}
    code, output = cli(served, "queues")
    assert code == 0
    queues, ownership = output.strip().split("\n\n")
    assert [line.split()[0] for line in queues.splitlines()] == ["QUEUE", "jobs", "solo", "work"]
    header, row = ownership.splitlines()  # replicated queues only
    assert (header.split()[0], header.split()[-1]) == ("QUEUE", "PROXIED")
    assert (row.split()[0], row.split()[-1]) == ("work", "yes")


def test_ownership_statistics_follow_a_proxied_claim(served: Served) -> None:
    """R7 through the surfaces: a message owned by `west` waits here for a local subscriber;
    with proxied transfer on and `west` unreachable, it is claimed, counted and shown."""
    replica = served.queues["work"].replica
    replica.handle(Subscribed("client/s", "s", 5), now_ms=1)
    replica.published([MessagePublished(1, 7, 1, 1, 0, False)], ["west"], now_ms=1)
    cli(served, "queue", "proxied-transfer", "work", "enable", "--yes")
    replica.reachability_changed({"west"}, now_ms=2)
    actions = replica.on_deadline(now_ms=2 + LATENCY_MS)  # waited past the estimate (R4)
    kinds = [type(a) for a in actions]
    assert kinds.index(AppendOwnership) < kinds.index(Deliver)  # logged before delivered
    claim = actions[kinds.index(AppendOwnership)]
    assert isinstance(claim, AppendOwnership)
    assert (claim.record.kind, claim.record.owner, claim.record.epoch) == (
        TransferKind.CLAIM,
        "east",
        1,
    )
    one = orjson.loads(http(served, f"{QUEUES_PATH}/work")[1])
    counts = {k: one[k] for k in ("owned", "transferred_in", "transferred_out", "proxied_claims")}
    assert counts == {"owned": 1, "transferred_in": 1, "transferred_out": 0, "proxied_claims": 1}
    assert one["transfer_latency_seconds"] == LATENCY_MS / 1000
    # Estimates are per owner; this instance is no owner to wait for (it claimed the message).
    assert one["transfer_latency_seconds_by_owner"] == {"west": LATENCY_MS / 1000}
    assert orjson.loads(http(served, f"{QUEUES_PATH}/solo")[1])["transfer_latency_seconds"] is None
    output = cli(served, "queues")[1]
    header, row = output.strip().split("\n\n")[1].splitlines()
    cells = dict(zip(header.split(), row.split(), strict=True))
    assert (cells["OWNED"], cells["IN"], cells["CLAIMS"], cells["PROXIED"]) == (
        "1",
        "1",
        "1",
        "yes",
    )


def test_unknown_local_and_unreplicated_queues_are_refused_with_a_reason(served: Served) -> None:
    code, output = cli(served, "queue", "proxied-transfer", "nope", "enable", "--yes")
    assert code == 1
    assert "HTTP 404" in output
    assert "no such queue 'nope'" in output
    code, output = cli(served, "queue", "proxied-transfer", "jobs", "enable", "--yes")
    assert (code, "HTTP 409" in output, "LocalQueue" in output) == (1, True, True)
    code, output = cli(served, "queue", "proxied-transfer", "solo", "enable", "--yes")
    assert (code, "not replicated" in output) == (1, True)
    assert not any(q.proxied_transfer for q in served.queues.values())
    status, body = http(served, f"{QUEUE_ACTIONS_PATH}work/enable_everything", "POST")
    assert status == 404
    assert b"enable_proxied_transfer" in body


def test_a_get_on_the_switch_is_refused_and_changes_nothing(served: Served) -> None:
    status, body = http(served, f"{QUEUE_ACTIONS_PATH}work/enable_proxied_transfer")
    assert (status, body) == (405, b"this path changes the instance: use POST\n")
    assert not served.queues["work"].proxied_transfer
    status, _ = http(served, f"{TRANSPORT_ACTIONS_PATH}clients/enable")
    assert status == 405
    assert not served.transports.enabled("clients")


def test_the_cli_refuses_a_bad_action_as_a_usage_error(served: Served) -> None:
    code, output = cli(served, "queue", "proxied-transfer", "work", "on", "--yes")
    assert code == 2
    assert "'enable', 'disable'" in output


# -- client transports -----------------------------------------------------------------------


def test_a_transport_that_starts_disabled_refuses_logons_until_enabled(served: Served) -> None:
    transports = served.transports
    with pytest.raises(errors.TransportDisabled) as refused:
        transports.check_logon("clients")
    assert "amps admin transport enable clients" in refused.value.message
    assert refused.value.retriable  # a client with other addresses fails over
    code, output = cli(served, "transports")
    assert code == 0
    rows = [line.split() for line in output.splitlines()]
    assert rows[1] == ["clients", "grpc", "7001", "disabled", "disabled", "1"]
    assert rows[2][:4] == ["peers", "amps-replication", "0", "enabled"]
    code, output = cli(served, "transport", "enable", "clients")  # no question to enable
    assert (code, output) == (0, "transport clients enabled\n")
    transports.check_logon("clients")


def test_disabling_a_transport_asks_first_and_tells_the_listeners(served: Served) -> None:
    changes: list[tuple[str, bool]] = []
    served.transports.on_change.append(lambda name, enabled: changes.append((name, enabled)))
    cli(served, "transport", "enable", "clients")
    code, output = cli(served, "transport", "disable", "clients", answer="n\n")
    assert code == 1
    assert "disconnect every client" in output
    assert served.transports.enabled("clients")
    code, output = cli(served, "transport", "disable", "clients", "--yes")
    assert (code, output) == (0, "transport clients disabled\n")
    assert changes == [("clients", True), ("clients", False)]
    body = orjson.loads(http(served, f"{TRANSPORTS_PATH}.json")[1])
    assert body["transports"][0]["state_changes"] == 2


def test_unknown_and_replication_transports_are_refused(served: Served) -> None:
    code, output = cli(served, "transport", "enable", "nope")
    assert (code, "no such transport 'nope'" in output) == (1, True)
    code, output = cli(served, "transport", "disable", "peers", "--yes")
    assert (code, "HTTP 409" in output, "incoming replication" in output) == (1, True, True)
    status, _ = http(served, f"{TRANSPORT_ACTIONS_PATH}clients/restart", "POST")
    assert status == 404
