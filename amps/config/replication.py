"""`Replication/Destination`, parsed into typed values for the replication issue (§1.7)."""

from __future__ import annotations

from typing import Literal, cast
from xml.etree.ElementTree import Element

from amps.config.model import (
    REPLICATION_TYPES,
    DestinationConfig,
    InetAddr,
    MessageType,
    ReplicationConfig,
    ReplicationTopicConfig,
    ReplicationTransportConfig,
    ReplicationType,
    SyncType,
    TransactionLogConfig,
    TransportConfig,
)
from amps.config.reader import Reader
from amps.config.sections import (
    TLS_ELEMENTS,
    parse_inet_addr,
    parse_message_type,
    parse_name,
    parse_tls,
    parse_topic_name,
    secure_replication_tls,
)
from amps.config.topics import compile_topic_regex, is_regex
from amps.config.units import choice, duration, parse_enabled

_DESTINATION_ELEMENTS = (
    "Name",
    "Group",
    "SyncType",
    "PassThrough",
    "ResyncPassThrough",
    "Compression",
    "CompressionType",
    "AckConflationInterval",
)


def _parse_regex(text: str) -> str:
    compile_topic_regex(text)
    return text


def parse_replication(
    reader: Reader, path: str, element: Element
) -> tuple[ReplicationConfig, list[tuple[str, ReplicationTopicConfig]]]:
    fields = reader.children(element, path, repeated=("Destination",))
    destinations: list[DestinationConfig] = []
    topics: list[tuple[str, ReplicationTopicConfig]] = []
    paths: list[str] = []
    for destination_path, destination_element in fields.many("Destination"):
        destination = _parse_destination(reader, destination_path, destination_element, topics)
        if destination is not None:
            destinations.append(destination)
            paths.append(destination_path)
    return ReplicationConfig(tuple(destinations), tuple(paths)), topics


def check_destinations(
    reader: Reader,
    replication: ReplicationConfig,
    name: str | None,
    transports: tuple[TransportConfig, ...],
) -> None:
    """The start-up refusals: a peer named as this instance, a link to this instance's own
    replication address, or two destinations with one Name (a peer has one link)."""
    incoming = next((t.inet_addr for t in transports if t.type in REPLICATION_TYPES), None)
    seen: dict[str, str] = {}
    count = len(replication.destinations)
    paths = replication.paths or tuple(
        f"AMPSConfig/Replication/Destination[{i}]" for i in range(1, count + 1)
    )
    for path, destination in zip(paths, replication.destinations, strict=True):
        if destination.name == name:
            reader.error(f"{path}/Name", destination.name, "a peer other than this instance")
        if destination.name in seen:
            reader.error(
                f"{path}/Name",
                destination.name,
                f"a peer not already a destination at {seen[destination.name]}",
            )
        seen.setdefault(destination.name, path)
        for t_index, transport in enumerate(destination.transports, 1):
            for a_index, addr in enumerate(transport.inet_addrs, 1):
                if incoming is not None and _same_listener(addr, incoming):
                    reader.error(
                        f"{path}/Transport[{t_index}]/InetAddr[{a_index}]",
                        str(addr),
                        "the address of another instance (this is this instance's own "
                        "amps-replication transport)",
                    )


def _same_listener(addr: InetAddr, listener: InetAddr) -> bool:
    """Whether connecting to `addr` reaches `listener` on this host (loopback or wildcard)."""
    if addr.port != listener.port:
        return False
    local = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}
    return addr.host == listener.host or (addr.host in local and listener.host in local)


def _parse_destination(
    reader: Reader,
    path: str,
    element: Element,
    topics_out: list[tuple[str, ReplicationTopicConfig]],
) -> DestinationConfig | None:
    fields = reader.children(
        element, path, single=_DESTINATION_ELEMENTS, repeated=("Topic", "Transport")
    )
    name = reader.optional(fields, "Name", parse_name)
    group = reader.optional(fields, "Group", parse_name)
    if name is None and group is None and not fields.has("Name") and not fields.has("Group"):
        reader.error(f"{path}/Group", None, "a Group (or Name) for the destination")
    sync_type = reader.required(fields, "SyncType", choice("sync", "async"), "sync or async")
    transports = [_parse_transport(reader, p, e) for p, e in fields.many("Transport")]
    if not transports:
        reader.error(f"{path}/Transport", None, "at least one Transport")
    topics = [_parse_topic(reader, p, e) for p, e in fields.many("Topic")]
    topics_out.extend((p, t) for p, t in topics if t is not None)
    # Every element is read before giving up, so one run reports every mistake.
    destination = DestinationConfig(
        name=name or group or "",
        group=group or name or "",
        sync_type=cast(SyncType, sync_type or "sync"),
        transports=tuple(transports),
        topics=tuple(t for _, t in topics if t is not None),
        pass_through=reader.optional(fields, "PassThrough", _parse_regex),
        resync_pass_through=reader.optional(fields, "ResyncPassThrough", _parse_regex),
        compression=reader.value(fields, "Compression", parse_enabled, False),
        compression_type=cast(
            Literal["zlib", "zstd"],
            reader.value(fields, "CompressionType", choice("zlib", "zstd"), "zlib"),
        ),
        ack_conflation_interval_ms=reader.value(
            fields,
            "AckConflationInterval",
            duration(10**6, 10**6, "1ms", 10**9, "1s"),
            1_000,
        ),
    )
    if sync_type is None or (name is None and group is None):
        return None
    return destination


def _parse_transport(reader: Reader, path: str, element: Element) -> ReplicationTransportConfig:
    fields = reader.children(
        element, path, single=("Type", "ReconnectTimeout", *TLS_ELEMENTS), repeated=("InetAddr",)
    )
    kind = reader.required(
        fields,
        "Type",
        choice(*REPLICATION_TYPES),
        "Type amps-replication or amps-replication-secure",
    )
    addrs = []
    for addr_path, addr_element in fields.many("InetAddr"):
        text = reader.text(addr_path, addr_element)
        if text is not None:
            try:
                addrs.append(parse_inet_addr(text))
            except ValueError as problem:
                reader.error(addr_path, text, str(problem))
    timeout_ms = reader.optional(fields, "ReconnectTimeout", duration(10**6, 10**6, "1ms"))
    tls = parse_tls(reader, path, fields)
    if kind == "amps-replication-secure":
        tls = secure_replication_tls(reader, path, tls)
    kind = kind or "amps-replication"
    return ReplicationTransportConfig(cast(ReplicationType, kind), tuple(addrs), timeout_ms, tls)


def _parse_topic(
    reader: Reader, path: str, element: Element
) -> tuple[str, ReplicationTopicConfig | None]:
    fields = reader.children(element, path, single=("Name", "MessageType", "Filter"))
    name = reader.value(fields, "Name", parse_topic_name, ".*")
    message_type = reader.required(
        fields, "MessageType", parse_message_type, "a MessageType: json or binary"
    )
    # Replication filters are content filters, checked like a queue's Filter.
    topic_filter = reader.expression(fields, "Filter", "queue-filter")
    name_path = reader.path_of(fields, "Name")
    if message_type is None:
        return name_path, None
    return name_path, ReplicationTopicConfig(name, cast(MessageType, message_type), topic_filter)


def check_replication_against_log(
    reader: Reader,
    topics: list[tuple[str, ReplicationTopicConfig]],
    log: TransactionLogConfig | None,
    local_queues: frozenset[str] = frozenset(),
) -> None:
    """§1.7: a replicated literal topic must be recorded in the local transaction log; R2: it
    must not name a LocalQueue (never replicated: each instance delivers its own copy)."""
    for path, topic in topics:
        if is_regex(topic.name):
            continue  # a regex replicates whichever recorded topics it matches (data only)
        if topic.name in local_queues:
            reader.error(
                path,
                topic.name,
                "not a LocalQueue (a LocalQueue is never replicated; replicate its "
                "UnderlyingTopic to copy the data only)",
            )
            continue
        if log is None or not log.records_topic(topic.name):
            reader.error(path, topic.name, "a topic recorded in the local TransactionLog")
