"""Bookmark replay (L7): read the journal from a start point, then hand over to live delivery.

The hot loop reads publishes as raw fields (`amps.log.raw`, no record objects) and encodes the
deliveries straight into chunks of frame entries (`amps.server.wire.DeliveryEncoder`, topic and
sub_id encoded once per topic; one join per chunk, so each message's data is copied once before
gRPC). Only a subscription with a content filter builds a record per message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from amps import errors
from amps.log import codec
from amps.log.raw import RawReader
from amps.server.convert import failure_ack, success_ack
from amps.server.outbox import MAX_FRAME_MESSAGES
from amps.server.topics import LiteralTopic
from amps.server.wire import DeliveryEncoder
from amps.v1 import client_pb2 as pb

if TYPE_CHECKING:
    from amps.server.instance import Instance
    from amps.server.session import Subscription

log = logging.getLogger("amps.replay")

READ_BATCH_RECORDS = 2_000
# A read batch holds about this many bytes of data at most (large messages: fewer records).
READ_BATCH_BYTES = 4 << 20
FIRST_BATCH_RECORDS = 64
# Deliveries are joined into chunks of this many (at most a frame's worth) or about this size.
CHUNK_MESSAGES = MAX_FRAME_MESSAGES
CHUNK_BYTES = 1 << 20


async def replay(instance: Instance, subscription: Subscription, start_txid: int) -> None:
    """Deliver journal records from start_txid, then switch the subscription to live."""
    reader = RawReader(instance.journal)
    reader.next_txid = start_txid
    # A replay in progress needs the log from where it reads: the lifecycle keeps it.
    holder = f"replay {subscription.session.client_id}/{subscription.sub_id}"
    unregister = instance.holds.register(holder, lambda: reader.next_txid)
    try:
        if subscription.positions_only:
            await _positions(instance, subscription, start_txid)
        else:
            await _replay(instance, subscription, start_txid, reader)
    except errors.CorruptRecord as exc:
        _end_on_damage(instance, subscription, exc)
    finally:
        unregister()
        reader.close()


def _end_on_damage(
    instance: Instance, subscription: Subscription, error: errors.CorruptRecord
) -> None:
    """The replay met a damaged record: it cannot go on without a gap, and a gap would break
    L7. Report the damage (logged once, counted) and end the subscription with a failed ack
    naming it; the client raises it from the subscription."""
    instance.damage.report(error, f"the bookmark replay of subscription {subscription.sub_id}")
    subscription.cancel_replay = None  # this task is ending already
    instance.remove_subscription(subscription)
    session = subscription.session
    session.send(failure_ack(error, cmd_id="", ack_type="completed", sub_id=subscription.sub_id))
    instance.statistics.rejected += 1


async def _positions(instance: Instance, subscription: Subscription, start_txid: int) -> None:
    """`positions_only`: each origin's position from the instance's own record of them (the
    log is read only once, by the first probe after a start), then the subscription ends."""
    known = instance.origin_positions
    await known.load(instance.journal, instance.holds)
    # No await from here on: the positions and dispatched_txid advance together.
    matcher = subscription.topic
    literal = matcher.text if isinstance(matcher, LiteralTopic) else None
    origins = known.positions(matcher.matches, start_txid, literal)
    _send_completed(subscription, instance.dispatched_txid, origins)
    subscription.cancel_replay = None  # this task is ending already
    instance.remove_subscription(subscription)


def _send_completed(
    subscription: Subscription, through_txid: int, origins: dict[str, int] | None
) -> None:
    """The completed ack of a replay: seq the txid it went through (every later record is
    delivered live), and with the `origin` option each origin's position."""
    positions = (
        [pb.ReplayOrigin(instance=o, txid=t) for o, t in sorted(origins.items())]
        if origins is not None
        else None
    )
    subscription.session.send(
        success_ack(
            cmd_id="", ack_type="completed", sub_id=subscription.sub_id, seq=through_txid,
            origins=positions,
        )
    )  # fmt: skip


async def _replay(
    instance: Instance, subscription: Subscription, start_txid: int, reader: RawReader
) -> None:
    from amps.server.instance import expr_message

    session = subscription.session
    outbox = session.outbox
    position = start_txid
    sub_ids = (subscription.sub_id,)
    flt = subscription.filter
    # The `origin` option: each origin's last publish of the topic, for the completed ack.
    origins: dict[bytes, int] | None = {} if subscription.origin else None
    only = subscription.only_origin
    # Topic (as stored) -> its encoder, or None when the subscription's topic does not match.
    encoders: dict[bytes, DeliveryEncoder | None] = {}
    unknown = DeliveryEncoder(b"", ())  # a sentinel: "topic not seen yet"
    batch_records = FIRST_BATCH_RECORDS  # until the records' size is known
    while not outbox.closed:
        limit = instance.dispatched_txid
        if position > limit:
            # No await between the check and the switch: the next live record is > limit.
            subscription.live = True
            _send_completed(
                subscription,
                limit,
                None
                if origins is None
                else {o.decode(errors="replace"): t for o, t in origins.items()},
            )
            return
        try:
            publishes, reached = reader.read(position, limit, batch_records)
        except errors.CorruptRecord:
            if batch_records == 1:
                raise  # the next record itself cannot be read
            # Damage somewhere in the batch: narrow down, delivering every record before it.
            batch_records //= 2
            continue
        if reached == position:
            # Nothing readable below the dispatched point: the journal and dispatch disagree.
            log.error("replay for %s found no records at txid %d", subscription.sub_id, position)
            position = limit + 1
            continue
        position = reached
        if publishes:
            average = sum(len(p[7]) for p in publishes) // len(publishes) + 1
            batch_records = max(1, min(READ_BATCH_RECORDS, READ_BATCH_BYTES // average))
        parts: list[bytes] = []
        count = size = delivered = 0
        for txid, ts, pub, seq, expiration_s, topic, correlation_id, data, origin, otx in publishes:
            encoder = encoders.get(topic, unknown)
            if encoder is unknown:
                matches = subscription.topic.matches(topic.decode())
                encoder = encoders[topic] = DeliveryEncoder(topic, sub_ids) if matches else None
            if encoder is None:
                continue
            if origins is not None:
                origins[origin] = otx  # the position among this topic's publishes
                if only is not None and origin != only:
                    continue
            if flt is not None:
                record = codec.new_publish(
                    txid, ts, topic.decode(), data, pub, seq, "", "", 0, correlation_id.decode(),
                    expiration_s,
                )  # fmt: skip
                if not flt.matches(expr_message(record)):
                    continue
            if origins is None:
                size += encoder.encode_into(parts, data, pub, seq, txid, ts, correlation_id)
            else:
                size += encoder.encode_into(
                    parts, data, pub, seq, txid, ts, correlation_id, origin, otx
                )
            count += 1
            if count >= CHUNK_MESSAGES or size >= CHUNK_BYTES:
                session.send_chunk(b"".join(parts), count)
                delivered += count
                parts = []
                count = size = 0
                if not outbox.drained:
                    # Large messages: pace within the batch too, well inside the send budget.
                    await outbox.wait_drained()
                    if outbox.closed:
                        subscription.delivered += delivered
                        return
        if count:
            session.send_chunk(b"".join(parts), count)
            delivered += count
        subscription.delivered += delivered
        await outbox.wait_drained()
        # Let live traffic and other sessions run between batches.
        await asyncio.sleep(0)
