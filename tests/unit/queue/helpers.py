"""Small builders for queue engine tests: publishers, subscriptions and action rendering."""

from __future__ import annotations

from amps.queue import (
    Action,
    Deliver,
    DeliverBarrier,
    MessagePublished,
    PublishDeadLetter,
    QueueEngine,
    RecordRemoval,
    Subscribed,
)
from amps.queue.events import TxidPredicate

PUBLISHER = 1


def published(
    txid: int,
    timestamp_ms: int = 0,
    *,
    priority: int = 0,
    barrier: bool = False,
    expiration_ms: int | None = None,
) -> MessagePublished:
    """Message `txid` from the test publisher, whose seq equals the txid."""
    return MessagePublished(txid, PUBLISHER, txid, timestamp_ms, priority, barrier, expiration_ms)


def subscribed(
    sub_id: str,
    client_id: str,
    max_backlog: int | None = None,
    matches: TxidPredicate | None = None,
) -> Subscribed:
    """A subscription event."""
    return Subscribed(sub_id, client_id, max_backlog, matches)


def bookmarks(*txids: int) -> list[tuple[int, int]]:
    """Bookmarks of the test publisher's messages."""
    return [(PUBLISHER, t) for t in txids]


def delivered(actions: list[Action]) -> list[tuple[str, int]]:
    """(sub_id, txid) of every Deliver, in order."""
    return [(a.sub_id, a.txid) for a in actions if isinstance(a, Deliver)]


def publish_all(engine: QueueEngine, txids: range, now_ms: int = 0) -> list[Action]:
    """Publish several messages; return all actions."""
    out: list[Action] = []
    for txid in txids:
        out.extend(engine.handle(published(txid, now_ms), now_ms))
    return out


def render(action: Action) -> str:
    """One line per action, for transcripts."""
    match action:
        case Deliver():
            lease = "none" if action.lease_deadline_ms is None else str(action.lease_deadline_ms)
            return (
                f"deliver {action.sub_id}@{action.client_id} txid={action.txid} "
                f"lease={lease} count={action.delivery_count}"
            )
        case DeliverBarrier():
            names = ",".join(f"{s}@{c}" for c, s in action.subscriptions) or "-"
            return f"barrier txid={action.txid} to {names}"
        case RecordRemoval():
            extra = f"({action.expire_reasons.reason_text()})" if action.expire_reasons else ""
            return f"record-removal txid={action.txid} {action.reason.value}{extra}"
        case PublishDeadLetter():
            return f"dead-letter txid={action.txid} reason={action.reasons.reason_text()}"
    raise AssertionError(f"unknown action {action!r}")
