"""`Transport/InitialState` (seed 004's runbook: recover an instance without client access) and
which queues count as replicated (R2, R7)."""

from __future__ import annotations

from tests.unit.config.helpers import assert_error, document, load

GRPC = "<Name>clients</Name><Type>grpc</Type><InetAddr>1</InetAddr>"
REPLICATION = "<Name>peers</Name><Type>amps-replication</Type><InetAddr>2</InetAddr>"


def transports(*bodies: str) -> str:
    inner = "".join(f"<Transport>{body}</Transport>" for body in bodies)
    return document(f"<Transports>{inner}</Transports>")


def test_a_transport_starts_enabled_unless_initial_state_says_disabled() -> None:
    assert load(transports(GRPC)).transports[0].initially_enabled
    for word in ("disabled", "Disabled", " disabled "):
        config = load(transports(f"{GRPC}<InitialState>{word}</InitialState>"))
        assert not config.transports[0].initially_enabled
    enabled = load(transports(f"{GRPC}<InitialState>enabled</InitialState>"))
    assert enabled.transports[0].initially_enabled


def test_initial_state_takes_only_enabled_or_disabled() -> None:
    assert_error(
        transports(f"{GRPC}<InitialState>off</InitialState>"),
        "AMPSConfig/Transports/Transport[1]/InitialState",
        "one of enabled, disabled",
    )


def test_a_replication_transport_cannot_start_disabled() -> None:
    assert_error(
        transports(GRPC, f"{REPLICATION}<InitialState>disabled</InitialState>"),
        "AMPSConfig/Transports/Transport[2]/InitialState",
        "enabled on a replication transport",
    )


QUEUES = """<SOW>
  <Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>
    <MessageType>json</MessageType></Queue>
  <Queue><Name>solo</Name><UnderlyingTopic>ORDERS</UnderlyingTopic>
    <MessageType>json</MessageType></Queue>
  <LocalQueue><Name>local</Name><UnderlyingTopic>blobs</UnderlyingTopic>
    <MessageType>json</MessageType></LocalQueue>
</SOW>"""
ALL_RECORDED = """<TransactionLog><JournalDirectory>j</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>"""
DESTINATION = """<Replication><Destination><Name>amps-2</Name><SyncType>async</SyncType>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>work</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>blobs</Name><MessageType>json</MessageType></Topic>
  <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9</InetAddr></Transport>
</Destination></Replication>"""


def test_a_queue_is_replicated_when_a_destination_topic_names_it() -> None:
    config = load(document(QUEUES + DESTINATION, log=ALL_RECORDED))
    replicated = {q.name: config.replicates_queue(q) for q in config.queues}
    # A LocalQueue whose underlying topic replicates is still local (data only).
    assert replicated == {"work": True, "solo": False, "local": False}
    alone = load(document(QUEUES, log=ALL_RECORDED))
    assert not any(alone.replicates_queue(q) for q in alone.queues)
    # A destination without Topic replicates every recorded topic, queues included.
    everything = DESTINATION.split("<Topic>")[0] + DESTINATION[DESTINATION.index("<Transport>") :]
    config = load(document(QUEUES + everything, log=ALL_RECORDED))
    replicated = {q.name: config.replicates_queue(q) for q in config.queues}
    assert replicated == {"work": True, "solo": True, "local": False}


def test_reachability_interval_defaults_to_five_seconds_and_is_bounded() -> None:
    config = load(document(QUEUES + DESTINATION, log=ALL_RECORDED))
    assert config.replication is not None
    assert config.replication.reachability_interval_ms == 5_000
    shorter = DESTINATION.replace(
        "<Replication>", "<Replication><ReachabilityInterval>2s</ReachabilityInterval>"
    )
    config = load(document(QUEUES + shorter, log=ALL_RECORDED))
    assert config.replication is not None
    assert config.replication.reachability_interval_ms == 2_000
    assert_error(
        document(
            QUEUES
            + DESTINATION.replace(
                "<Replication>", "<Replication><ReachabilityInterval>1s</ReachabilityInterval>"
            ),
            log=ALL_RECORDED,
        ),
        "AMPSConfig/Replication/ReachabilityInterval",
        "from 2s",
    )
