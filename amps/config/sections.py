"""Parsers for the instance-level sections: Admin, Transports and TransactionLog."""

from __future__ import annotations

import re
from typing import Literal, cast
from xml.etree.ElementTree import Element

from amps.config.model import (
    GIB,
    KIB,
    REPLICATION_TYPES,
    AdminConfig,
    AuthenticationConfig,
    ClientLimits,
    InetAddr,
    MessageType,
    TlsConfig,
    TopicConfig,
    TransactionLogConfig,
    TransportConfig,
    TransportType,
)
from amps.config.reader import Children, Reader
from amps.config.topics import compile_topic_regex, is_regex
from amps.config.units import choice, count, duration, parse_enabled, size
from amps.names import MAX_TOPIC_LENGTH, name_problem

# Journal size: AMPS's minimum is 10MB; we allow 64KB so tests can roll segments cheaply.
MIN_JOURNAL_SIZE_BYTES = 64 * KIB
MAX_MESSAGE_SIZE_BYTES = GIB
DEFAULT_HOST = "127.0.0.1"

_HOST = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)
_IPV6 = re.compile(r"[0-9A-Fa-f:.%]+", re.ASCII)

parse_message_type = choice("json", "binary")


def parse_inet_addr(text: str) -> InetAddr:
    """`9007`, `host:9007` or `[::1]:9007`; a bare port means 127.0.0.1 (not every interface)."""
    expected = "a port (0-65535), host:port or [ipv6]:port"
    host, port_text = DEFAULT_HOST, text
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":") or not _IPV6.fullmatch(inside):
            raise ValueError(expected)
        host, port_text = inside, rest[1:]
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
        if not _HOST.fullmatch(host):
            raise ValueError(expected)
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(expected)
    return InetAddr(host, int(port_text))


def _bounded_topic(text: str) -> str:
    if len(text) > MAX_TOPIC_LENGTH:
        raise ValueError(f"a topic of at most {MAX_TOPIC_LENGTH} characters ({len(text)} given)")
    return text


def parse_topic_name(text: str) -> str:
    """A literal topic or a regex that RE2 compiles."""
    _bounded_topic(text)
    if is_regex(text):
        compile_topic_regex(text)
    return text


def parse_literal_topic(text: str) -> str:
    """A literal topic name (no regex metacharacters, no whitespace)."""
    _bounded_topic(text)
    if is_regex(text) or any(c.isspace() for c in text):
        raise ValueError("a literal topic name (no regex characters or spaces)")
    return text


def parse_publish_topic(text: str) -> str:
    """A topic published to: always literal, whatever its characters; no whitespace."""
    _bounded_topic(text)
    if any(c.isspace() for c in text):
        raise ValueError("a topic name without spaces")
    return text


def parse_name(text: str) -> str:
    """An identifier such as an instance, group or transport name (bounds in amps.names)."""
    problem = name_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


TLS_ELEMENTS = ("Certificate", "PrivateKey", "CAFile", "VerifyClient")
PEER_ELEMENTS = ("AllowedInstance", "AllowedGroup")
LIMIT_ELEMENTS = (
    "MaxConnections",
    "MaxSubscriptionsPerClient",
    "MaxBookmarksPerAck",
    "LogonTimeout",
    "IdleTimeout",
)


def parse_admin(reader: Reader, path: str, element: Element) -> AdminConfig:
    fields = reader.children(
        element, path, single=("InetAddr", "FileName", "Interval", *TLS_ELEMENTS)
    )
    return AdminConfig(
        inet_addr=reader.optional(fields, "InetAddr", parse_inet_addr),
        file_name=reader.value(fields, "FileName", str, ":memory:"),
        interval_ms=reader.value(fields, "Interval", duration(10**6, 10**9, "1s"), 10_000),
        tls=parse_tls(reader, path, fields),
    )


def secure_replication_tls(reader: Reader, path: str, tls: TlsConfig | None) -> TlsConfig | None:
    """amps-replication-secure is mutual TLS: a certificate, a key and the CA peers chain to
    (both sides always verify each other; VerifyClient cannot turn that off)."""
    if tls is None:
        reader.error(f"{path}/Certificate", None, "a Certificate and PrivateKey (mutual TLS)")
        return None
    if tls.ca_file is None:
        reader.error(f"{path}/CAFile", None, "the CAFile peers' certificates chain to")
        return None
    return TlsConfig(tls.certificate, tls.private_key, tls.ca_file, verify_client=True)


def parse_tls(reader: Reader, path: str, fields: Children) -> TlsConfig | None:
    """The TLS elements of a Transport or Admin: none of them = plaintext."""
    certificate = reader.optional(fields, "Certificate", str)
    private_key = reader.optional(fields, "PrivateKey", str)
    ca_file = reader.optional(fields, "CAFile", str)
    verify_client = reader.value(fields, "VerifyClient", parse_enabled, False)
    if certificate is None and private_key is None:
        if ca_file is not None or verify_client:
            reader.error(f"{path}/Certificate", None, "a Certificate and PrivateKey for TLS")
        return None
    if certificate is None or private_key is None:
        missing = "Certificate" if certificate is None else "PrivateKey"
        reader.error(f"{path}/{missing}", None, "both Certificate and PrivateKey (PEM files)")
        return None
    if verify_client and ca_file is None:
        reader.error(f"{path}/CAFile", None, "a CAFile to verify client certificates against")
    return TlsConfig(certificate, private_key, ca_file, verify_client)


def parse_authentication(reader: Reader, path: str, element: Element) -> AuthenticationConfig:
    """`Authentication`: `UsersFile` (the users, see amps users), or `Mode none` explicitly."""
    fields = reader.children(element, path, single=("UsersFile", "Mode"))
    users_file = reader.optional(fields, "UsersFile", str)
    mode = reader.value(fields, "Mode", choice("users", "none"), "users")
    if mode == "users" and users_file is None:
        reader.error(f"{path}/UsersFile", None, "a UsersFile (or <Mode>none</Mode> to run open)")
    if mode == "none" and users_file is not None:
        reader.error(f"{path}/Mode", mode, "Mode users with a UsersFile (or no UsersFile)")
    return AuthenticationConfig(users_file, cast(Literal["users", "none"], mode))


def parse_transports(reader: Reader, path: str, element: Element) -> tuple[TransportConfig, ...]:
    fields = reader.children(element, path, repeated=("Transport",))
    transports: list[TransportConfig] = []
    names: dict[str, str] = {}
    replication_path: str | None = None
    for transport_path, transport_element in fields.many("Transport"):
        transport = _parse_transport(reader, transport_path, transport_element)
        if transport is None:
            continue
        name_path = f"{transport_path}/Name"
        if transport.name in names:
            reader.error(name_path, transport.name, f"a name not used by {names[transport.name]}")
        names.setdefault(transport.name, transport_path)
        if transport.type in REPLICATION_TYPES:
            if replication_path is not None:
                reader.error(
                    f"{transport_path}/Type",
                    transport.type,
                    f"at most one replication transport (already {replication_path})",
                )
            replication_path = replication_path or transport_path
        transports.append(transport)
    return tuple(transports)


def _parse_transport(reader: Reader, path: str, element: Element) -> TransportConfig | None:
    fields = reader.children(
        element,
        path,
        single=(
            "Name",
            "Type",
            "InetAddr",
            "MaxMessageSize",
            "InitialState",
            "Authentication",
            *TLS_ELEMENTS,
            *LIMIT_ELEMENTS,
        ),
        repeated=PEER_ELEMENTS,
    )
    name = reader.required(fields, "Name", parse_name, "a transport name")
    kind = reader.required(
        fields,
        "Type",
        choice("grpc", *REPLICATION_TYPES),
        "a transport Type: grpc, amps-replication or amps-replication-secure",
    )
    inet_addr = reader.required(fields, "InetAddr", parse_inet_addr, "a port or host:port")
    max_size_bytes = reader.value(
        fields, "MaxMessageSize", size(1, MAX_MESSAGE_SIZE_BYTES, "1 byte", "1GB"), 1024 * KIB
    )
    state = reader.value(fields, "InitialState", choice("enabled", "disabled"), "enabled")
    if name is None or kind is None or inet_addr is None:
        return None
    if kind in REPLICATION_TYPES and state == "disabled":
        # Incoming replication must come up for the runbook's recovery to work; links are
        # switched per destination (amps admin replication), not by closing the listener.
        reader.error(
            f"{path}/InitialState",
            state,
            "enabled on a replication transport (InitialState disabled applies to client "
            "transports: the instance still replicates while clients are kept out)",
        )
    tls = parse_tls(reader, path, fields)
    if kind == "amps-replication-secure":
        tls = secure_replication_tls(reader, path, tls)
    authentication = None
    if hit := fields.one("Authentication"):
        authentication = parse_authentication(reader, *hit)
        if kind != "grpc":
            reader.error(
                hit[0],
                kind,
                "Authentication on a grpc transport only (replication peers authenticate by "
                "mutual TLS: Type amps-replication-secure)",
            )
    allowed = {tag: _peer_names(reader, fields, tag, kind) for tag in PEER_ELEMENTS}
    limits = _parse_limits(reader, path, fields, kind)
    return TransportConfig(
        name,
        cast(TransportType, kind),
        inet_addr,
        max_size_bytes,
        tls,
        initially_enabled=state == "enabled",
        authentication=authentication,
        allowed_instances=allowed["AllowedInstance"],
        allowed_groups=allowed["AllowedGroup"],
        limits=limits,
    )


def _parse_limits(reader: Reader, path: str, fields: Children, kind: str) -> ClientLimits:
    """The client limits of a grpc transport (S5): each element optional, defaults in
    ClientLimits."""
    if kind != "grpc":
        for tag in LIMIT_ELEMENTS:
            if fields.has(tag):
                reader.error(f"{path}/{tag}", kind, f"{tag} on a grpc transport only")
        return ClientLimits()
    default = ClientLimits()
    return ClientLimits(
        max_connections=reader.value(
            fields, "MaxConnections", count(1, 1_000_000), default.max_connections
        ),
        max_subscriptions_per_client=reader.value(
            fields,
            "MaxSubscriptionsPerClient",
            count(1, 1_000_000),
            default.max_subscriptions_per_client,
        ),
        max_bookmarks_per_ack=reader.value(
            fields, "MaxBookmarksPerAck", count(1, 1_000_000), default.max_bookmarks_per_ack
        ),
        logon_timeout_ms=reader.value(
            fields,
            "LogonTimeout",
            duration(1_000_000, 100_000_000, "100ms", 3_600 * 10**9, "1h"),
            default.logon_timeout_ms,
        ),
        idle_timeout_ms=reader.value(
            fields,
            "IdleTimeout",
            duration(1_000_000, 0, "0"),
            default.idle_timeout_ms,
        ),
    )


def _peer_names(reader: Reader, fields: Children, tag: str, kind: str) -> tuple[str, ...]:
    """`AllowedInstance` / `AllowedGroup` entries: names, on a replication transport only."""
    names: list[str] = []
    for entry_path, entry in fields.many(tag):
        if kind not in REPLICATION_TYPES:
            reader.error(entry_path, kind, f"{tag} on a replication transport only")
            continue
        text = reader.text(entry_path, entry)
        if text is None:
            continue
        problem = name_problem(text)
        if problem is not None:
            reader.error(entry_path, text, problem)
        else:
            names.append(text)
    return tuple(names)


def parse_transaction_log(reader: Reader, path: str, element: Element) -> TransactionLogConfig:
    fields = reader.children(
        element,
        path,
        single=(
            "JournalDirectory",
            "JournalArchiveDirectory",
            "JournalSize",
            "FlushInterval",
            "PreallocatedJournalFiles",
        ),
        repeated=("Topic",),
        synonyms={"MinJournalSize": "JournalSize"},
    )
    directory = reader.required(fields, "JournalDirectory", str, "a journal directory")
    return TransactionLogConfig(
        journal_directory=directory or "",
        topics=_parse_log_topics(reader, fields),
        journal_size_bytes=reader.value(
            fields, "JournalSize", size(MIN_JOURNAL_SIZE_BYTES, 2**62, "64KB", "4EB"), GIB
        ),
        flush_interval_us=reader.value(
            fields, "FlushInterval", duration(1_000, 1_000, "1us", 10**9, "1000ms"), 100_000
        ),
        preallocated_journal_files=reader.value(fields, "PreallocatedJournalFiles", count(1), 2),
        journal_archive_directory=reader.optional(fields, "JournalArchiveDirectory", str),
    )


def _parse_log_topics(reader: Reader, fields: Children) -> tuple[TopicConfig, ...]:
    topics: list[TopicConfig] = []
    seen: dict[str, str] = {}
    for topic_path, topic_element in fields.many("Topic"):
        topic_fields = reader.children(topic_element, topic_path, single=("Name", "MessageType"))
        name = reader.required(topic_fields, "Name", parse_topic_name, "a topic name or regex")
        message_type = reader.required(
            topic_fields, "MessageType", parse_message_type, "a MessageType: json or binary"
        )
        if name is None or message_type is None:
            continue
        if name in seen:
            reader.error(f"{topic_path}/Name", name, f"a topic not already listed at {seen[name]}")
            continue
        seen[name] = topic_path
        topics.append(TopicConfig(name, cast(MessageType, message_type)))
    return tuple(topics)
