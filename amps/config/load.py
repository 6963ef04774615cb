"""`load_config`: XML text -> a validated `Config`, or one ConfigError listing every mistake."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from xml.etree.ElementTree import Element, ParseError

import defusedxml
import defusedxml.ElementTree

from amps.config.actions import check_actions_against_queues, parse_actions
from amps.config.default import DEFAULT_CONFIG_XML
from amps.config.exposure import exposures
from amps.config.model import (
    ActionConfig,
    AdminConfig,
    Config,
    RawElement,
    ReplicationConfig,
    TransactionLogConfig,
    TransportConfig,
)
from amps.config.queues import check_queues_against_log, parse_sow
from amps.config.reader import ExpressionCheck, Reader
from amps.config.replication import (
    check_destinations,
    check_queue_replication,
    check_replication_against_log,
    parse_replication,
)
from amps.config.sections import (
    parse_admin,
    parse_authentication,
    parse_name,
    parse_transaction_log,
    parse_transports,
)
from amps.config.units import parse_percent, size
from amps.errors import ConfigError

ROOT = "AMPSConfig"
DOCUMENT = "(document)"
# Sections a later issue interprets; kept as written so they are not silently dropped.
RESERVED_SECTIONS = (
    "Entitlement",
    "Logging",
    "Modules",
    "MessageTypes",
    "Tuning",
)
TYPED_SECTIONS = (
    "Admin",
    "Authentication",
    "Transports",
    "TransactionLog",
    "SOW",
    "Actions",
    "Replication",
)
# Real configurations are a few kilobytes; a file past this is the wrong file.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
SLOW_CLIENT_ELEMENTS = ("MessageMemoryLimit", "ClientMaxCapacity")
MIN_MESSAGE_MEMORY_LIMIT_BYTES = 64 * 1024
CLIENT_SHARE_MESSAGES = 4


class ConfigErrors(ConfigError):
    """Every mistake found in one file; `path`, `value` and `expected` are the first one's."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        assert errors
        first = errors[0]
        super().__init__(first.path, first.value, first.expected)
        self.errors: tuple[ConfigError, ...] = tuple(errors)
        if len(errors) > 1:
            lines = [f"{len(errors)} configuration errors:"]
            lines.extend(f"  {error.message}" for error in errors)
            self.message = "\n".join(lines)
            self.args = (self.message,)


def load_config(
    text: str,
    env: Mapping[str, str] | None = None,
    *,
    check_expression: ExpressionCheck | None = None,
) -> Config:
    """Parse and validate one AMPS-style XML configuration; raise ConfigErrors on any mistake.

    `env` feeds `${NAME}` references; `check_expression(text, kind)` may raise FilterSyntaxError.
    """
    root = _parse_xml(text)
    reader = Reader(env if env is not None else {}, check_expression)
    config = _read_root(reader, root)
    if config is not None:
        for exposure in exposures(config):  # default-deny outside loopback (S1)
            reader.error(exposure.path, exposure.value, exposure.expected)
    if reader.errors or config is None:
        raise ConfigErrors(reader.errors or [ConfigError(ROOT, None, "a valid configuration")])
    return config


def decode_config(data: bytes) -> str:
    """A configuration file's bytes as text: UTF-8 (a byte-order mark allowed), at most 4MB."""
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigErrors([ConfigError(DOCUMENT, f"{len(data)} bytes", "a file of at most 4MB")])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        where = f"byte 0x{data[error.start]:02x} at offset {error.start}"
        raise ConfigErrors(
            [ConfigError(DOCUMENT, where, "UTF-8 text (an XML configuration file)")]
        ) from None


def default_config() -> Config:
    """The built-in configuration (`DEFAULT_CONFIG_XML`) loaded."""
    return load_config(DEFAULT_CONFIG_XML)


def _parse_xml(text: str) -> Element:
    try:
        root: Element = defusedxml.ElementTree.fromstring(text, forbid_dtd=True)
    except ParseError as error:
        line, column = error.position
        detail = str(error).split(":")[0]
        raise ConfigErrors(
            [
                ConfigError(
                    DOCUMENT, f"line {line}, column {column + 1}", f"well-formed XML ({detail})"
                )
            ]
        ) from None
    except defusedxml.DefusedXmlException as error:
        raise ConfigErrors(
            [ConfigError(DOCUMENT, type(error).__name__, "XML without DTD or entity declarations")]
        ) from None
    except ValueError as error:  # e.g. text that cannot be encoded (lone surrogates)
        raise ConfigErrors([ConfigError(DOCUMENT, None, f"XML text ({error})")]) from None
    if root.tag != ROOT:
        raise ConfigErrors([ConfigError(DOCUMENT, str(root.tag), f"the root element <{ROOT}>")])
    return root


def _read_root(reader: Reader, root: Element) -> Config | None:
    fields = reader.children(
        root,
        ROOT,
        single=("Name", "Group", *TYPED_SECTIONS, *SLOW_CLIENT_ELEMENTS, *RESERVED_SECTIONS),
    )
    name = reader.required(fields, "Name", parse_name, "the instance Name")
    group = reader.value(fields, "Group", parse_name, name)
    admin: AdminConfig | None = None
    transports: tuple[TransportConfig, ...] = ()
    log: TransactionLogConfig | None = None
    replication: ReplicationConfig | None = None
    if hit := fields.one("Admin"):
        admin = parse_admin(reader, *hit)
    authentication = (
        parse_authentication(reader, *hit) if (hit := fields.one("Authentication")) else None
    )
    if hit := fields.one("Transports"):
        transports = parse_transports(reader, *hit)
    if hit := fields.one("TransactionLog"):
        log = parse_transaction_log(reader, *hit)
    queues = parse_sow(reader, *hit, group or "") if (hit := fields.one("SOW")) else []
    check_queues_against_log(reader, queues, log)
    actions = parse_actions(reader, *hit, log) if (hit := fields.one("Actions")) else []
    check_actions_against_queues(reader, actions, tuple(item.queue for item in queues))
    if hit := fields.one("Replication"):
        replication, replicated_topics = parse_replication(reader, *hit)
        defined = [item.queue for item in queues]
        local_queues = frozenset(q.name for q in defined if q.kind == "LocalQueue")
        replicable = frozenset(q.name for q in defined if q.kind != "LocalQueue")
        check_replication_against_log(reader, replicated_topics, log, local_queues, replicable)
        check_destinations(reader, replication, name, transports)
        check_queue_replication(reader, queues, replication, group or "")
    reserved: list[RawElement] = [
        reader.raw(*hit) for tag in RESERVED_SECTIONS if (hit := fields.one(tag))
    ]
    memory_limit = reader.optional(
        fields, "MessageMemoryLimit", size(MIN_MESSAGE_MEMORY_LIMIT_BYTES, 2**62, "64KB", "4EB")
    )
    capacity_percent = reader.value(fields, "ClientMaxCapacity", parse_percent, 50)
    _check_client_share(reader, memory_limit, capacity_percent, transports)
    if name is None or group is None:
        return None
    action_configs: tuple[ActionConfig, ...] = tuple(action for action, _ in actions)
    return Config(
        name=name,
        group=group,
        admin=admin,
        transports=transports,
        transaction_log=log,
        queues=tuple(item.queue for item in queues),
        actions=action_configs,
        replication=replication,
        reserved=tuple(reserved),
        authentication=authentication,
        message_memory_limit_bytes=memory_limit,
        client_max_capacity_percent=capacity_percent,
    )


def _check_client_share(
    reader: Reader,
    memory_limit_bytes: int | None,
    capacity_percent: int,
    transports: tuple[TransportConfig, ...],
) -> None:
    """A client's share of MessageMemoryLimit must hold a few of the largest messages, or one
    message could disconnect any subscriber."""
    if memory_limit_bytes is None:
        return
    largest = max((t.max_message_size_bytes for t in transports), default=1 << 20)
    share = memory_limit_bytes * capacity_percent // 100
    if share < CLIENT_SHARE_MESSAGES * largest:
        reader.error(
            f"{ROOT}/MessageMemoryLimit",
            str(memory_limit_bytes),
            f"a limit whose ClientMaxCapacity share ({capacity_percent}% = {share} bytes) holds "
            f"at least {CLIENT_SHARE_MESSAGES} messages of MaxMessageSize ({largest} bytes)",
        )
