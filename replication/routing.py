"""Which records of this instance's log go to one destination (R1, R9). [core]

Rule 1: publishes, a queue's removals that hold on every instance (acks, the owner's
expiries, at-most-once sends: `REPLICATED_REMOVALS`) and ownership records (grants and
claims, `TransferRecord`) replicate; a queue's record matches a destination's Topic by its
queue's name and ignores the Topic's Filter. Deliveries, leases, barrier releases and
expiries (`BARRIER_EXPIRED`: each instance releases or expires its own, R6) and a LocalQueue's
records stay local.
Rule 2: a record never goes back to its origin, and goes to a destination only when it
originated here or its origin's group matches the destination's PassThrough. A record that
reaches an instance twice (a triangle) is discarded there as a duplicate and never appended,
so it is never forwarded again: no loop can form, whatever the topology.
Rule 3: a destination without Topic elements takes every recorded topic; otherwise a publish
goes when its topic matches a Topic's Name and that Topic's Filter (if any).
Rule 4: a transfer request (R4) is never logged; it goes to its owner when the owner is a
ready neighbour, else to every other ready neighbour with one hop less (R9: passthrough
towards an owner that is not a neighbour), never back where it came from or to its requester,
and nowhere once its hops are spent (`route_request`; a lost request is a refusal).
Rule 5: an instance forwards and answers a given transfer request once (`RequestsSeen`, by
requester and request id): in a mesh with passthrough, copies of one request arrive by every
path, and forwarding each would send (N-2)(N-4)^(h-1) frames on hop h.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from amps.config.topics import topic_matches
from amps.log.records import PublishRecord, QueueAction, QueueRecord, Record, TransferRecord
from replication.frames import Digest, TopicDigest, TransferRequest

if TYPE_CHECKING:
    from amps.config.model import DestinationConfig
    from amps.expr import Filter


REPLICATED_REMOVALS = frozenset(
    {
        QueueAction.ACK,
        QueueAction.EXPIRE,
        QueueAction.EXPIRED,
        QueueAction.DELIVERED_AT_MOST_ONCE,
    }
)


@dataclass(frozen=True, slots=True)
class _TopicRule:
    name: str
    filter: Filter | None


class Route:
    """The routing decision for one destination of instance `local`."""

    def __init__(
        self, local: str, destination: DestinationConfig, local_queues: frozenset[str] = frozenset()
    ) -> None:
        self.local = local
        # R2: a LocalQueue's acks stay here, even where a Topic (`.*`) takes the queue's name.
        self._local_queues = local_queues
        self.destination = destination.name
        self.group = destination.group
        self.pass_through = destination.pass_through
        self.sync = destination.sync_type == "sync"
        # How often the destination acknowledges this link while it is async (AMPS's
        # AckConflationInterval); a sync destination acknowledges every batch at once.
        self.ack_conflation_interval_ms = destination.ack_conflation_interval_ms
        self._rules = tuple(
            _TopicRule(t.name, _compile(t.filter) if t.filter else None) for t in destination.topics
        )
        self._topic_cache: dict[str, tuple[_TopicRule, ...]] = {}
        self._topic_verdicts: dict[str, bool | tuple[Filter, ...]] = {}
        self.digest = Digest(
            sends=True,
            topics=tuple(
                TopicDigest(t.name, t.message_type, t.filter or "") for t in destination.topics
            ),
            sync=self.sync,
        )

    def wants(self, record: Record) -> bool:
        """Whether `record` (from this instance's log) goes to the destination."""
        if type(record) is PublishRecord:  # the usual case first: one look-up per topic
            if not self._origin_allows(record.origin_instance, record.origin_group):
                return False
            verdict = self._topic_verdicts.get(record.topic)
            if verdict is None:
                verdict = self._topic_verdict(record.topic)
            if type(verdict) is bool:
                return verdict
            return self.matches(verdict, record)
        if isinstance(record, (QueueRecord, TransferRecord)):
            return (
                (isinstance(record, TransferRecord) or record.action in REPLICATED_REMOVALS)
                and record.queue not in self._local_queues
                and self._origin_allows(record.origin_instance, record.origin_group)
                and (not self._rules or bool(self._rules_for(record.queue)))
            )
        return False  # no other kind of record replicates

    def publish_verdict(self, names: tuple[str, str, str]) -> bool | tuple[Filter, ...]:
        """`wants` for every publish of (topic, origin instance, origin group) at once: taken,
        not taken, or taken when one of the filters matches its data (`matches`). A link reading
        its journal as frames routes on their heads with it, and decodes only what a Filter
        must read."""
        topic, origin, group = names
        if not self._origin_allows(origin, group):
            return False
        verdict = self._topic_verdicts.get(topic)
        return self._topic_verdict(topic) if verdict is None else verdict

    @staticmethod
    def matches(filters: tuple[Filter, ...], record: PublishRecord) -> bool:
        """Rule 3's Filter: whether one of `filters` matches the publish."""
        return any(_matches(flt, record) for flt in filters)

    def _origin_allows(self, origin: str, group: str) -> bool:
        if origin == self.destination:
            return False
        return origin == self.local or self._passes_through(group)

    def _passes_through(self, group: str) -> bool:
        pattern = self.pass_through
        if pattern is None:
            return False
        return topic_matches(pattern, group)

    def _topic_verdict(self, topic: str) -> bool | tuple[Filter, ...]:
        """Rule 3 for a publish on `topic`: taken, not taken, or taken when a filter matches."""
        verdict: bool | tuple[Filter, ...] = True  # no Topic elements: every topic
        if self._rules:
            rules = self._rules_for(topic)
            filters = tuple(rule.filter for rule in rules if rule.filter is not None)
            if not rules:
                verdict = False
            elif len(filters) == len(rules):
                verdict = filters  # every matching Topic has a Filter: one of them must match
        if len(self._topic_verdicts) > 10_000:
            self._topic_verdicts.clear()
        self._topic_verdicts[topic] = verdict
        return verdict

    def _rules_for(self, topic: str) -> tuple[_TopicRule, ...]:
        rules = self._topic_cache.get(topic)
        if rules is None:
            rules = tuple(r for r in self._rules if topic_matches(r.name, topic))
            if len(self._topic_cache) > 10_000:
                self._topic_cache.clear()
            self._topic_cache[topic] = rules
        return rules


def _compile(text: str) -> Filter:
    # Imported on first use: the expression compiler is not needed to start an instance.
    from amps.expr import compile_filter

    return compile_filter(text)


def _matches(flt: Filter, record: PublishRecord) -> bool:
    from amps.expr import Message

    message = Message(
        record.data,
        topic=record.topic,
        bookmark=f"{record.publisher_id}|{record.seq}|",
        timestamp_us=record.timestamp_us,
        correlation_id=record.correlation_id,
        expiration_s=record.expiration_s,
    )
    return flt.matches(message)


NO_DIGEST = Digest(sends=False)
# R4: how many instances a transfer request may cross towards an owner that is no neighbour.
MAX_REQUEST_HOPS = 8


def route_request(
    request: TransferRequest, ready: Iterable[str], came_from: str
) -> tuple[TransferRequest, tuple[str, ...]]:
    """Rule 4: the request as it leaves here and the ready neighbours it goes to (none when
    its hops are spent). `came_from` is "" for a request made here."""
    peers = tuple(ready)
    if request.owner in peers:
        return request, (request.owner,)
    if request.hops_left <= 0:
        return request, ()
    skip = (came_from, request.requester)
    onwards = replace(request, hops_left=request.hops_left - 1)
    return onwards, tuple(p for p in peers if p not in skip)


class RequestsSeen:
    """Rule 5: the transfer requests this instance forwarded or answered, by (requester,
    request id), the newest `capacity` of them (a copy arrives within a few link delays)."""

    def __init__(self, capacity: int = 16_384) -> None:
        assert capacity > 0
        self._capacity = capacity
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self.copies = 0  # copies dropped, for statistics and tests

    def first(self, request: TransferRequest) -> bool:
        """True the first time a request arrives here; False for a copy (drop it). A request
        without an id (0: from an older peer) is always new: only its hops bound it."""
        if not request.request_id:
            return True
        key = (request.requester, request.request_id)
        seen = self._seen
        if key in seen:
            self.copies += 1
            return False
        seen[key] = None
        if len(seen) > self._capacity:
            seen.popitem(last=False)
        return True
