"""Queue pages of the admin HTTP interface: `/amps/instance/queues[.json]` and `.../queues/<id>`.

The JSON keeps the AMPS statistic names where AMPS has one (AMPS-REFERENCE §5.3: `queue_depth`,
`backlog`, `seconds_behind`, `age_of_oldest_lease`, `expired_leases`, `deferred_ack_count`,
`inactive_message_count`, and the config echo `topic`, `message_type`, `max_backlog`,
`target_queue_depth`); the rest are this broker's own counters, named like the metrics.
A queue is found by its name or by the AMPS id `<topic>!<messagetype>`, either with `.json`.
A leaf, `.../queues/<id>/<statistic>`, answers `{"<statistic>": value}`.

The one queue action, POST `/amps/administrator/queues/<id>/enable_proxied_transfer` (or
`disable_...`), switches proxied transfer (R7) for a replicated queue on this instance only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from amps.config import QueueConfig
from amps.queue import QueueStatistics

if TYPE_CHECKING:
    from amps.metrics import OwnershipView

JSON = "application/json"
QUEUES_PATH = "/amps/instance/queues"
QUEUE_ACTIONS_PATH = "/amps/administrator/queues/"
PROXIED_VERBS = {"enable_proxied_transfer": True, "disable_proxied_transfer": False}


class QueueSource(Protocol):
    """What a page needs from one queue (a `QueueDriver` is one)."""

    @property
    def config(self) -> QueueConfig: ...

    @property
    def replicated(self) -> bool:
        """The queue spans instances (a replicated Queue or GroupLocalQueue)."""
        ...

    @property
    def proxied_transfer(self) -> bool: ...

    def set_proxied_transfer(self, enabled: bool) -> None: ...

    def statistics(self) -> QueueStatistics: ...

    def ownership_statistics(self) -> OwnershipView | None:
        """Ownership counters of a replicated queue; None for one that does not span."""
        ...


def _seconds(ms: int | None) -> float:
    return 0.0 if ms is None else ms / 1000.0


def queue_id(config: QueueConfig) -> str:
    """The AMPS admin id of a queue: `<topic>!<messagetype>`."""
    return f"{config.name}!{config.message_type}"


def queue_json(queue: QueueSource) -> dict[str, Any]:
    """One queue: config echo, then statistics (AMPS names first)."""
    config = queue.config
    s = queue.statistics()
    return {
        "id": queue_id(config),
        "name": config.name,
        "topic": config.name,
        "kind": config.kind,
        "underlying_topic": config.underlying_topic,
        "message_type": config.message_type,
        "semantics": config.semantics,
        "lease_period_seconds": _seconds(config.lease_period_ms),
        "max_backlog": config.max_backlog,
        "max_per_subscription_backlog": config.max_per_subscription_backlog,
        "target_queue_depth": config.target_queue_depth,
        "replicated": queue.replicated,
        "proxied_transfer": queue.proxied_transfer,
        # AMPS snapshot statistics
        "queue_depth": s.depth,
        "backlog": s.leased_count,
        "seconds_behind": _seconds(s.oldest_message_age_ms),
        "age_of_oldest_lease": _seconds(s.oldest_lease_age_ms),
        "expired_leases": s.expired_leases_total,
        "deferred_ack_count": s.deferred_ack_count,
        "inactive_message_count": s.inactive_count,
        # this broker's own
        "deliverable_count": s.deliverable_count,
        "subscription_count": s.subscription_count,
        "entered_count": s.entered_total,
        "delivered_count": s.delivered_total,
        "redelivered_count": s.redelivered_total,
        "acked_count": s.acked_total,
        "cancelled_count": s.cancelled_total,
        "expired_count": s.expired_total,
        "expired_by_reason": {
            "time_limit": s.expired_time_limit_total,
            "forced_expire": s.expired_forced_total,
            "max_cancels": s.expired_max_cancels_total,
            "max_deliveries": s.expired_max_deliveries_total,
        },
        "sent_at_most_once_count": s.sent_at_most_once_total,
        "barrier_delivered_count": s.barrier_delivered_total,
        **ownership_json(queue.ownership_statistics(), s),
    }


def ownership_json(o: OwnershipView | None, s: QueueStatistics) -> dict[str, Any]:
    """AMPS's `owned`, `transferred_in`, `transferred_out`, then this broker's own; a queue
    that does not span instances owns every message it holds and transfers none."""
    if o is None:
        return {
            "owned": s.depth,
            "transferred_in": 0,
            "transferred_out": 0,
            "owned_elsewhere_count": 0,
            "transfer_requests_sent": 0,
            "transfer_requests_granted": 0,
            "transfer_requests_unanswered": 0,
            "proxied_claims": 0,
            "transfer_latency_seconds": None,
            "transfer_latency_seconds_by_owner": {},
        }
    return {
        "owned": o.owned,
        "transferred_in": o.transferred_in,
        "transferred_out": o.transferred_out,
        "owned_elsewhere_count": o.owned_elsewhere,
        "transfer_requests_sent": o.requests_sent,
        "transfer_requests_granted": o.requests_granted,
        "transfer_requests_unanswered": o.requests_unanswered,
        "proxied_claims": o.proxied_claims,
        "transfer_latency_seconds": o.latency_estimate_ms / 1000.0,
        "transfer_latency_seconds_by_owner": {
            owner: ms / 1000.0 for owner, ms in sorted(o.latency_estimates_ms.items())
        },
    }


def _dumps(body: object) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_INDENT_2)


class QueueRoutes:
    """The queue pages over a live name -> queue mapping (read at each request)."""

    def __init__(self, node: str, queues: Callable[[], Mapping[str, QueueSource]]) -> None:
        self.node = node
        self._queues = queues

    def list_json(self) -> tuple[str, bytes]:
        """`/amps/instance/queues`: every queue, by name."""
        queues = self._queues()
        items = [queue_json(q) for _, q in sorted(queues.items())]
        return JSON, _dumps({"node": self.node, "queues": items})

    def one_json(self, rest: str) -> tuple[int, str, bytes]:
        """`/amps/instance/queues/<rest>`: one queue, or one statistic of it; 404 JSON if none."""
        queues = self._queues()
        found = self._find(queues, rest)
        if found is not None:
            return 200, JSON, _dumps(queue_json(found))
        head, sep, leaf = rest.rpartition("/")
        if sep:
            queue = self._find(queues, head)
            if queue is not None:
                body = queue_json(queue)
                key = leaf.removesuffix(".json")
                if key in body:
                    return 200, JSON, _dumps({key: body[key]})
                missing = f"queue {queue.config.name} has no statistic {key!r}"
                return 404, JSON, _dumps({"error": missing, "statistics": sorted(body)})
        return 404, JSON, _dumps({"error": f"no such queue {rest!r}", "queues": sorted(queues)})

    def act(self, rest: str) -> tuple[int, str, bytes]:
        """POST `<id>/enable_proxied_transfer` or `<id>/disable_proxied_transfer` (R7)."""
        queues = self._queues()
        head, _, verb = rest.rpartition("/")
        if verb not in PROXIED_VERBS or not head:
            text = (
                f"expected {QUEUE_ACTIONS_PATH}<queue>/enable_proxied_transfer or "
                f"disable_proxied_transfer, not {rest!r}"
            )
            return 404, JSON, _dumps({"error": text})
        queue = self._find(queues, head)
        if queue is None:
            return 404, JSON, _dumps({"error": f"no such queue {head!r}", "queues": sorted(queues)})
        config = queue.config
        if config.kind == "LocalQueue":
            text = (
                f"queue {config.name} is a LocalQueue: never replicated, each instance delivers "
                "its own copy, so there is no owner to act for (proxied transfer is for "
                "replicated queues)"
            )
            return 409, JSON, _dumps({"error": text})
        if not queue.replicated:
            text = (
                f"queue {config.name} is not replicated from this instance (no "
                "Replication/Destination/Topic names it): every message is owned here, so "
                "there is no owner to act for"
            )
            return 409, JSON, _dumps({"error": text})
        enabled = PROXIED_VERBS[verb]
        changed = queue.proxied_transfer != enabled
        queue.set_proxied_transfer(enabled)
        body = {"queue": config.name, "proxied_transfer": enabled, "changed": changed}
        return 200, JSON, _dumps(body)

    @staticmethod
    def _find(queues: Mapping[str, QueueSource], text: str) -> QueueSource | None:
        for candidate in (text, text.removesuffix(".json")):
            if candidate in queues:
                return queues[candidate]
            name, bang, message_type = candidate.rpartition("!")
            queue = queues.get(name) if bang else None
            if queue is not None and queue.config.message_type == message_type:
                return queue
        return None
