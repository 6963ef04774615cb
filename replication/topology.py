"""Queue topology across instances (R8): the queue definitions a side sends in its Hello, and
the comparison with the peer's that accepts or refuses the link. [core]

Rule 1: a destination *takes* a queue (`Queue` or `GroupLocalQueue`) when it takes the queue's
name: it has no Topic element, or a Topic whose Name (literal or regex) matches the name. A
`LocalQueue` is never taken (a regex that matches one replicates its data only). A destination
that takes only the underlying topic, under another name (an archive), takes data, not the
queue: there is nothing to compare.
Rule 2: a queue taken over a link in either direction is a queue of the same kind on both
sides, with the same UnderlyingTopic, MessageType, Filter and InitialOwner, and is taken in
both directions: acknowledgements and transfers must reach every copy.
Rule 3 (passthrough): what this side receives from the peer about a queue comes from the peer
and from the holders behind it (the peer's destinations that take the queue, named in its
digest); each of this side's other destinations that take the queue must pass their groups
through, or those holders' acks and transfers stop here.
What one configuration alone tells (the underlying topic replicated with the queue, passthrough
between this instance's own destinations and within its group) is refused at start-up instead
(amps/config/replication.py), before any link exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from amps.config.topics import topic_matches
from replication.frames import Digest, QueueDigest

if TYPE_CHECKING:
    from amps.config.model import DestinationConfig, QueueConfig

# A refusal lists at most this many differences (and how many more there are).
MAX_DIFFERENCES_SHOWN = 5

_FIELDS = (
    ("UnderlyingTopic", "underlying_topic"),
    ("MessageType", "message_type"),
    ("Filter", "filter"),
    ("InitialOwner", "initial_owner"),
)


@dataclass(frozen=True, slots=True)
class Side:
    """One end of a link as the comparison sees it: who, and the digest it sends the other."""

    instance: str
    group: str
    digest: Digest


@dataclass(frozen=True, slots=True)
class _Destination:
    group: str
    pass_through: str | None
    queues: frozenset[str]  # the names of the queues it takes


def takes(digest: Digest, name: str) -> bool:
    """Whether a side that sends `digest` replicates the topic `name` to its peer (Rule 1)."""
    return digest.sends and (
        not digest.topics or any(topic_matches(t.name, name) for t in digest.topics)
    )


def _replicated(queue: QueueDigest, digest: Digest) -> bool:
    return queue.kind != "LocalQueue" and takes(digest, queue.name)


def differences(local: Side, peer: Side) -> list[str]:
    """Every way the queue definitions of the two sides disagree (Rule 2), each naming both
    instances; [] when they agree."""
    mine = {q.name: q for q in local.digest.queues}
    theirs = {q.name: q for q in peer.digest.queues}
    found: list[str] = []
    for name in sorted(mine.keys() | theirs.keys()):
        here, there = mine.get(name), theirs.get(name)
        if not (
            (here is not None and _replicated(here, local.digest))
            or (there is not None and _replicated(there, peer.digest))
        ):
            continue  # not replicated either way: each side's own business
        found.extend(_compare(name, local, here, peer, there))
    return found


def _compare(
    name: str, local: Side, here: QueueDigest | None, peer: Side, there: QueueDigest | None
) -> list[str]:
    a, b = local.instance, peer.instance
    if there is None:
        assert here is not None
        return [f"queue {name!r} is a {here.kind} on {a} and not a queue on {b}"]
    if here is None:
        return [f"queue {name!r} is a {there.kind} on {b} and not a queue on {a}"]
    if here.kind != there.kind:
        return [f"queue {name!r} is a {here.kind} on {a} and a {there.kind} on {b}"]
    found = [
        f"queue {name!r} has {label} {_shown(getattr(here, field))} on {a} and "
        f"{_shown(getattr(there, field))} on {b}"
        for label, field in _FIELDS
        if getattr(here, field) != getattr(there, field)
    ]
    forth, back = takes(local.digest, name), takes(peer.digest, name)
    if forth != back:
        (source, target), target_digest = ((a, b), peer.digest) if forth else ((b, a), local.digest)
        why = (
            f"{target}'s destination {source} does not take it"
            if target_digest.sends
            else f"{target} has no destination {source}"
        )
        found.append(f"queue {name!r} is replicated from {source} to {target} only ({why})")
    return found


def _shown(value: str) -> str:
    return repr(value) if value else "none"


class Topology:
    """This instance's queues and the destinations that take each: the queue digests its
    Hellos carry, and the check of a peer's Hello against them."""

    def __init__(
        self,
        local: str,
        group: str,
        queues: Iterable[QueueConfig],
        destinations: Iterable[DestinationConfig],
    ) -> None:
        self.local = local
        self.group = group
        defined = tuple(queues)
        self._destinations = {
            d.name: _Destination(
                d.group,
                d.pass_through,
                frozenset(q.name for q in defined if q.kind != "LocalQueue" and d.takes(q.name)),
            )
            for d in destinations
        }
        self.queues = tuple(self._digest(q) for q in defined)

    def _digest(self, queue: QueueConfig) -> QueueDigest:
        holders = [(self.local, self.group)]
        holders.extend(
            (name, d.group) for name, d in self._destinations.items() if queue.name in d.queues
        )
        return QueueDigest(
            name=queue.name,
            kind=queue.kind,
            message_type=queue.message_type,
            underlying_topic=queue.underlying_topic,
            filter=queue.filter or "",
            initial_owner=queue.initial_owner or "",
            holders=tuple(holders),
        )

    def check(self, mine: Digest, peer: str, peer_group: str, theirs: Digest) -> str | None:
        """Why the link to `peer` must be refused (R8), or None; `mine` is the digest this
        side sends the peer, `theirs` the one the peer sent."""
        found = differences(Side(self.local, self.group, mine), Side(peer, peer_group, theirs))
        found.extend(self.passthrough_gaps(peer, theirs.queues))
        if not found:
            return None
        shown = "; ".join(found[:MAX_DIFFERENCES_SHOWN])
        more = len(found) - MAX_DIFFERENCES_SHOWN
        return shown + (f"; and {more} more" if more > 0 else "")

    def passthrough_gaps(self, peer: str, theirs: Iterable[QueueDigest]) -> list[str]:
        """Rule 3: the holders behind `peer` whose groups one of this side's other destinations
        that take the queue does not pass through."""
        towards_peer = self._destinations.get(peer)
        found: list[str] = []
        for queue in theirs:
            if towards_peer is None or queue.name not in towards_peer.queues:
                continue  # not replicated with the peer here: differences() says so
            for name, destination in sorted(self._destinations.items()):
                if name == peer or queue.name not in destination.queues:
                    continue
                for holder, group in queue.holders:
                    if holder in (self.local, name) or _passes(destination, group):
                        continue
                    found.append(
                        f"{self.local}'s destination {name} does not pass through group "
                        f"{group!r}, and {holder} holds queue {queue.name!r} behind {peer} "
                        f"(PassThrough {_shown(destination.pass_through or '')})"
                    )
        return found


def _passes(destination: _Destination, group: str) -> bool:
    pattern = destination.pass_through
    return pattern is not None and topic_matches(pattern, group)
