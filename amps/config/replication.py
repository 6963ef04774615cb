"""`Replication/Destination`, parsed into typed values for the replication issue (§1.7)."""

from __future__ import annotations

from typing import Literal, cast
from xml.etree.ElementTree import Element

from amps.config.model import (
    REPLICATION_TYPES,
    DestinationConfig,
    InetAddr,
    MessageType,
    QueueConfig,
    ReplicationConfig,
    ReplicationTopicConfig,
    ReplicationTransportConfig,
    ReplicationType,
    SyncType,
    TransactionLogConfig,
    TransportConfig,
)
from amps.config.queues import LocatedQueue
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
from amps.config.topics import compile_topic_regex, covering_names, is_regex, topic_matches
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
    fields = reader.children(
        element, path, single=("ReachabilityInterval",), repeated=("Destination",)
    )
    interval_ms = reader.value(
        fields, "ReachabilityInterval", duration(1_000_000, 2 * 10**9, "2s", 3600 * 10**9, "1h"),
        5_000,
    )  # fmt: skip
    destinations: list[DestinationConfig] = []
    topics: list[tuple[str, ReplicationTopicConfig]] = []
    paths: list[str] = []
    for destination_path, destination_element in fields.many("Destination"):
        destination = _parse_destination(reader, destination_path, destination_element, topics)
        if destination is not None:
            destinations.append(destination)
            paths.append(destination_path)
    config = ReplicationConfig(tuple(destinations), interval_ms, tuple(paths))
    return config, topics


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
    paths = _destination_paths(replication)
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


def _destination_paths(replication: ReplicationConfig) -> tuple[str, ...]:
    count = len(replication.destinations)
    return replication.paths or tuple(
        f"AMPSConfig/Replication/Destination[{i}]" for i in range(1, count + 1)
    )


def check_queue_replication(
    reader: Reader, queues: list[LocatedQueue], replication: ReplicationConfig, group: str
) -> None:
    """R8, what this configuration alone tells: a destination that takes a queue (by name)
    also takes its underlying topic, unfiltered, and passes through the groups of the queue's
    other holders (and this instance's own group within it); replication/topology.py checks
    the rest against each peer when the link connects."""
    destinations = list(zip(_destination_paths(replication), replication.destinations, strict=True))
    for item in queues:
        queue = item.queue
        if queue.kind == "LocalQueue":
            continue  # never replicated (check_replication_against_log)
        takers = [(p, d) for p, d in destinations if d.takes(queue.name)]
        for path, destination in takers:
            _check_underlying(reader, path, destination, queue)
            others = [o for _, o in takers if o is not destination]
            _check_passthrough(reader, path, destination, queue.name, others, group)


def _check_passthrough(
    reader: Reader,
    path: str,
    destination: DestinationConfig,
    queue: str,
    others: list[DestinationConfig],
    group: str,
) -> None:
    """Between groups: the queue's other holders' groups; within: this instance's own group
    when the destination is in it (seed 004: its other instances reach the destination here)."""
    needed = [(o.group, f"{o.name} (group {o.group})") for o in others]
    if destination.group == group:
        needed.append((group, f"this instance's own group {group}"))
    missing: dict[str, str] = {}
    for needed_group, holder in needed:
        pattern = destination.pass_through
        if pattern is None or not topic_matches(pattern, needed_group):
            missing.setdefault(needed_group, holder)
    for needed_group, holder in missing.items():
        reader.error(
            f"{path}/PassThrough",
            destination.pass_through,
            f"a PassThrough matching group {needed_group!r}: queue {queue!r} is replicated to "
            f"{destination.name} and with {holder}, whose acks and transfers must reach it "
            "through this instance",
        )


def _check_underlying(
    reader: Reader, path: str, destination: DestinationConfig, queue: QueueConfig
) -> None:
    if not destination.topics:
        return  # takes every recorded topic, unfiltered
    underlying = queue.underlying_topic
    # A replication Filter the queue's own Filter does not equal would leave the peer's copy
    # of the queue without some of its messages.
    usable = [t.name for t in destination.topics if t.filter in (None, queue.filter)]
    if is_regex(underlying):
        covered = covering_names(underlying, usable) is not None
    else:
        covered = any(topic_matches(name, underlying) for name in usable)
    if not covered:
        reader.error(
            f"{path}/Topic",
            queue.name,
            f"a Topic that also replicates queue {queue.name!r}'s UnderlyingTopic "
            f"{underlying!r}, unfiltered or with the queue's own Filter (the queue's "
            "messages are stored there: without them its copy on the destination misses some)",
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
    queues: frozenset[str] = frozenset(),
) -> None:
    """§1.7: a replicated literal topic must be recorded in the local transaction log or name
    a queue (R8: its acks and transfers replicate); R2: it must not name a LocalQueue (never
    replicated: each instance delivers its own copy)."""
    for path, topic in topics:
        if is_regex(topic.name) or topic.name in queues:
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
