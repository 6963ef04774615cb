"""`SOW/Queue`, `SOW/LocalQueue`, `SOW/GroupLocalQueue`: parsing and the rules that tie a queue to
the transaction log (AMPS-REFERENCE §1.3; SPEC Q1, Q9, A1, A4, R2)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import cast
from xml.etree.ElementTree import Element

from amps.config.model import (
    DAY_MS,
    DEFAULT_TRANSFER_LATENCY_MS,
    DEFAULT_TRANSFER_REQUEST_TIMEOUT_MS,
    ExpirationModel,
    FairnessModel,
    Leasing,
    MessageType,
    QueueConfig,
    QueueKind,
    Semantics,
    TransactionLogConfig,
)
from amps.config.reader import Children, Reader
from amps.config.sections import (
    parse_literal_topic,
    parse_message_type,
    parse_name,
    parse_publish_topic,
    parse_topic_name,
)
from amps.config.topics import covering_names, is_regex, topic_matches
from amps.config.units import choice, count, duration, parse_enabled

QUEUE_TAGS: dict[str, QueueKind] = {
    "Queue": "Queue",
    "QueueDefinition": "Queue",
    "LocalQueue": "LocalQueue",
    "GroupLocalQueue": "GroupLocalQueue",
}
QUEUE_ELEMENTS = (
    "Name",
    "MessageType",
    "UnderlyingTopic",
    "DefaultPublishTarget",
    "Semantics",
    "LeasePeriod",
    "Expiration",
    "ExpirationModel",
    "MaxBacklog",
    "MaxPerSubscriptionBacklog",
    "MaxCancels",
    "MaxDeliveries",
    "FairnessModel",
    "Leasing",
    "Priority",
    "BarrierExpression",
    "TargetQueueDepth",
    "Filter",
    "RecoveryPoint",
    "FileBackedMetadata",
    "DeferredAckExpiration",
    "InitialOwner",
    "GroupLocalQueueDomain",
    "DefaultTransferLatency",
    "TransferRequestTimeout",
)
_RECOVERY_POINT = re.compile(
    r"epoch|now|creation|\d{8}T\d{6}(?:\.\d{1,6})?Z?|[^|\s]+\|\d+\|", re.ASCII | re.IGNORECASE
)
parse_fairness = choice("fast", "round-robin", "proportional")
parse_leasing = choice("strict", "sublet")
parse_semantics = choice("at-least-once", "at-most-once")
parse_expiration_model = choice("default", "queue", "latest", "earliest")
_positive_ms = duration(1_000_000, 1_000_000, "1ms")
# The estimator's own bounds (replication/latency.py LatencyOptions) cap the default at 60s.
_transfer_latency_ms = duration(1_000_000, 1_000_000, "1ms", 60 * 1_000_000_000, "60s")
_transfer_timeout_ms = duration(1_000_000, 1_000_000, "1ms", 3_600 * 1_000_000_000, "1h")
_TRANSFER_ELEMENTS = ("DefaultTransferLatency", "TransferRequestTimeout")


@dataclass(frozen=True, slots=True)
class LocatedQueue:
    """A parsed queue with the element paths the cross-section checks report against."""

    queue: QueueConfig
    path: str
    name_path: str
    underlying_path: str
    target_path: str
    message_type_path: str


def parse_recovery_point(text: str) -> str:
    """epoch, now, creation, a bookmark `publisher|seq|` or a timestamp `YYYYMMDDTHHMMSS[Z]`."""
    if _RECOVERY_POINT.fullmatch(text) is None:
        raise ValueError("epoch, now, creation, a bookmark or a YYYYMMDDTHHMMSS timestamp")
    return text.lower() if text.lower() in ("epoch", "now", "creation") else text


def parse_sow(reader: Reader, path: str, element: Element, group: str) -> list[LocatedQueue]:
    fields = reader.children(element, path, repeated=tuple(QUEUE_TAGS))
    located: list[LocatedQueue] = []
    for tag, kind in QUEUE_TAGS.items():
        for queue_path, queue_element in fields.many(tag):
            queue = _parse_queue(reader, queue_path, queue_element, kind, group)
            if queue is not None:
                located.append(queue)
    # Report in file order, whatever the tag.
    order = {id(child): index for index, child in enumerate(element)}
    by_path = {p: order[id(e)] for tag in QUEUE_TAGS for p, e in fields.many(tag)}
    located.sort(key=lambda item: by_path[item.path])
    _check_unique_names(reader, located)
    return located


def _parse_queue(
    reader: Reader, path: str, element: Element, kind: QueueKind, group: str
) -> LocatedQueue | None:
    fields = reader.children(element, path, single=QUEUE_ELEMENTS, synonyms={"Topic": "Name"})
    name = reader.required(fields, "Name", parse_literal_topic, "a queue Name (or Topic)")
    message_type = reader.required(
        fields, "MessageType", parse_message_type, "a MessageType: json or binary"
    )
    underlying = reader.value(fields, "UnderlyingTopic", parse_topic_name, name)
    target = reader.optional(fields, "DefaultPublishTarget", parse_publish_topic)
    if underlying is not None and name is not None:
        target = _resolve_target(reader, fields, underlying, target)
    # Every element is read before giving up, so one run reports every mistake in the queue.
    queue = _read_policy(reader, fields, kind, group)
    if name is None or message_type is None or underlying is None or target is None:
        return None
    queue = replace(
        queue,
        name=name,
        message_type=cast(MessageType, message_type),
        underlying_topic=underlying,
        default_publish_target=target,
    )
    return LocatedQueue(
        queue,
        path,
        reader.path_of(fields, "Name"),
        reader.path_of(fields, "UnderlyingTopic" if fields.has("UnderlyingTopic") else "Name"),
        reader.path_of(fields, "DefaultPublishTarget"),
        reader.path_of(fields, "MessageType"),
    )


def _read_policy(reader: Reader, fields: Children, kind: QueueKind, group: str) -> QueueConfig:
    """Every element but the topics, checked alone and together (A4, Q9, R2)."""
    semantics = cast(Semantics, reader.value(fields, "Semantics", parse_semantics, "at-least-once"))
    fairness = reader.optional(fields, "FairnessModel", parse_fairness)
    initial_owner = reader.optional(fields, "InitialOwner", parse_name)
    domain = reader.optional(fields, "GroupLocalQueueDomain", parse_name)
    priority = reader.expression(fields, "Priority", "priority")
    barrier = reader.expression(fields, "BarrierExpression", "barrier")
    target_depth = reader.optional(fields, "TargetQueueDepth", count(1))
    _check_exclusive(reader, fields, priority, barrier, target_depth)
    _check_owner(reader, fields, kind, initial_owner, domain)
    return QueueConfig(
        name="",
        kind=kind,
        message_type="json",
        underlying_topic="",
        default_publish_target="",
        semantics=semantics,
        lease_period_ms=reader.optional(fields, "LeasePeriod", _positive_ms),
        expiration_ms=reader.optional(fields, "Expiration", _positive_ms),
        expiration_model=cast(
            ExpirationModel,
            reader.value(fields, "ExpirationModel", parse_expiration_model, "default"),
        ),
        max_backlog=reader.optional(fields, "MaxBacklog", count(1)),
        max_per_subscription_backlog=reader.value(fields, "MaxPerSubscriptionBacklog", count(1), 1),
        max_cancels=reader.value(fields, "MaxCancels", count(0), 0),
        max_deliveries=reader.value(fields, "MaxDeliveries", count(0), 0),
        fairness_model=_resolve_fairness(reader, fields, semantics, fairness),
        leasing=cast(Leasing, reader.value(fields, "Leasing", parse_leasing, "sublet")),
        priority=priority,
        barrier_expression=barrier,
        target_queue_depth=target_depth,
        filter=reader.expression(fields, "Filter", "queue-filter"),
        recovery_point=reader.value(fields, "RecoveryPoint", parse_recovery_point, "epoch"),
        file_backed_metadata=reader.value(fields, "FileBackedMetadata", parse_enabled, False),
        deferred_ack_expiration_ms=reader.value(
            fields, "DeferredAckExpiration", _positive_ms, DAY_MS
        ),
        initial_owner=initial_owner,
        group_local_queue_domain=(domain or group) if kind == "GroupLocalQueue" else None,
        default_transfer_latency_ms=reader.value(
            fields, "DefaultTransferLatency", _transfer_latency_ms, DEFAULT_TRANSFER_LATENCY_MS
        ),
        transfer_request_timeout_ms=reader.value(
            fields,
            "TransferRequestTimeout",
            _transfer_timeout_ms,
            DEFAULT_TRANSFER_REQUEST_TIMEOUT_MS,
        ),
    )


def _check_exclusive(
    reader: Reader,
    fields: Children,
    priority: str | None,
    barrier: str | None,
    target_depth: int | None,
) -> None:
    """A4: TargetQueueDepth excludes Priority and BarrierExpression; Priority excludes barriers."""
    if target_depth is not None and priority is not None:
        reader.error(
            reader.path_of(fields, "TargetQueueDepth"),
            str(target_depth),
            "no TargetQueueDepth on a queue with Priority",
        )
    if target_depth is not None and barrier is not None:
        reader.error(
            reader.path_of(fields, "TargetQueueDepth"),
            str(target_depth),
            "no TargetQueueDepth on a queue with a BarrierExpression",
        )
    if priority is not None and barrier is not None:
        reader.error(
            reader.path_of(fields, "BarrierExpression"),
            barrier,
            "no BarrierExpression on a queue with Priority",
        )


def _resolve_fairness(
    reader: Reader, fields: Children, semantics: Semantics, fairness: str | None
) -> FairnessModel:
    """Q9: proportional by default; at-most-once allows only round-robin (its default)."""
    if semantics == "at-most-once":
        if fairness not in (None, "round-robin"):
            reader.error(
                reader.path_of(fields, "FairnessModel"),
                fairness,
                "round-robin, the only FairnessModel of an at-most-once queue",
            )
        return "round-robin"
    return cast(FairnessModel, fairness or "proportional")


def _check_owner(
    reader: Reader, fields: Children, kind: QueueKind, owner: str | None, domain: str | None
) -> None:
    """R2: InitialOwner is required on GroupLocalQueue and meaningless (refused) elsewhere."""
    if kind == "GroupLocalQueue":
        if owner is None and not fields.has("InitialOwner"):
            reader.error(f"{fields.path}/InitialOwner", None, "an InitialOwner instance name")
        return
    if fields.has("InitialOwner"):
        reader.error(reader.path_of(fields, "InitialOwner"), owner, f"no InitialOwner on a {kind}")
    if fields.has("GroupLocalQueueDomain"):
        reader.error(
            reader.path_of(fields, "GroupLocalQueueDomain"),
            domain,
            f"no GroupLocalQueueDomain on a {kind}",
        )
    if kind == "LocalQueue":  # R2: never replicated, so it never transfers
        for tag in _TRANSFER_ELEMENTS:
            if (hit := fields.one(tag)) is not None:
                reader.error(
                    hit[0],
                    (hit[1].text or "").strip(),
                    f"no {tag} on a LocalQueue (it is never replicated)",
                )


def _resolve_target(
    reader: Reader, fields: Children, underlying: str, target: str | None
) -> str | None:
    """A1: a regex UnderlyingTopic needs a DefaultPublishTarget that it matches."""
    if target is None:
        if fields.has("DefaultPublishTarget"):
            return None  # already reported as invalid
        if is_regex(underlying):
            reader.error(
                f"{fields.path}/DefaultPublishTarget",
                None,
                "a DefaultPublishTarget, required when UnderlyingTopic is a regex",
            )
            return None
        return underlying
    if not topic_matches(underlying, target):
        reader.error(
            reader.path_of(fields, "DefaultPublishTarget"),
            target,
            f"a topic matched by the UnderlyingTopic {underlying!r}",
        )
        return None
    return target


def _check_unique_names(reader: Reader, located: list[LocatedQueue]) -> None:
    first: dict[str, str] = {}
    for item in located:
        name = item.queue.name
        if name in first:
            reader.error(item.name_path, name, f"a queue name not already used by {first[name]}")
        first.setdefault(name, item.path)


def check_queues_against_log(
    reader: Reader, located: list[LocatedQueue], log: TransactionLogConfig | None
) -> None:
    """Q1: every underlying topic is recorded in the log, with the queue's message type."""
    for item in located:
        queue = item.queue
        if log is None:
            reader.error(
                item.underlying_path,
                queue.underlying_topic,
                "a topic recorded in the TransactionLog (no TransactionLog is configured)",
            )
            continue
        recorded = [topic.name for topic in log.topics]
        if queue.underlying_is_regex:
            covers = covering_names(queue.underlying_topic, recorded)
            expected = (
                "a regex covered by TransactionLog/Topic entries: the same regex, a catch-all "
                "'.*', or '^A$|^B$' alternatives whose topics are each recorded"
            )
        else:
            entry = log.topic_for(queue.underlying_topic)
            covers = None if entry is None else (entry.name,)
            expected = "a topic recorded in the TransactionLog (a TransactionLog/Topic matches it)"
        if covers is None:
            reader.error(item.underlying_path, queue.underlying_topic, expected)
            continue
        types = {t.name: t.message_type for t in log.topics}
        wrong = sorted({types[name] for name in covers} - {queue.message_type})
        if wrong:
            reader.error(
                item.message_type_path,
                queue.message_type,
                f"the MessageType of the underlying topic in the TransactionLog ({wrong[0]})",
            )
