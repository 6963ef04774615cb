"""Bookmark replay (L7): read the journal from a start point, then hand over to live delivery."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from amps.log.records import PublishRecord
from amps.server.convert import success_ack

if TYPE_CHECKING:
    from amps.server.instance import Instance
    from amps.server.subscriptions import Subscription

log = logging.getLogger("amps.replay")

READ_BATCH_RECORDS = 2_000


async def replay(instance: Instance, subscription: Subscription, start_txid: int) -> None:
    """Deliver journal records from start_txid, then switch the subscription to live."""
    from amps.server.instance import delivery_for, expr_message

    session = subscription.session
    position = start_txid
    sub_ids = [subscription.sub_id]
    while not session.outbox.closed:
        limit = instance.dispatched_txid
        if position > limit:
            # No await between the check and the switch: the next live record is > limit.
            subscription.live = True
            session.send(success_ack(cmd_id="", ack_type="completed", sub_id=subscription.sub_id))
            return
        records = instance.journal.read(position, READ_BATCH_RECORDS)
        if not records:
            # Nothing readable below the dispatched point: the journal and dispatch disagree.
            log.error("replay for %s found no records at txid %d", subscription.sub_id, position)
            position = limit + 1
            continue
        if records[0].txid > limit:
            position = limit + 1
            continue
        for record in records:
            if record.txid > limit:
                break
            position = record.txid + 1
            if not isinstance(record, PublishRecord):
                continue
            if not subscription.topic.matches(record.topic):
                continue
            flt = subscription.filter
            if flt is not None and not flt.matches(expr_message(record)):
                continue
            session.send(delivery_for(record, sub_ids), len(record.data) + 64)
            subscription.delivered += 1
        await session.outbox.wait_drained()
        # Let live traffic and other sessions run between batches.
        await asyncio.sleep(0)
