"""Builders for the protobuf commands the client sends (the only place that shapes them)."""

from __future__ import annotations

from amps.client.policy import AckBatch, StoredPublish
from amps.v1 import client_pb2

CLIENT_VERSION = "amps-python/0.1"


def logon_command(cmd_id: str, client_name: str, user: str, password: str) -> client_pb2.Command:
    """The first command of every stream; answered with the persisted sequence number."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed",
        logon=client_pb2.Logon(
            client_name=client_name, user_id=user, password=password, version=CLIENT_VERSION
        ),
    )


def publish_command(entry: StoredPublish) -> client_pb2.Command:
    """A publish that requests a (conflated) persisted ack (L2, L3)."""
    return client_pb2.Command(
        ack_type="persisted",
        publish=client_pb2.Publish(topic=entry.topic, data=entry.data, seq=entry.seq),
    )


def subscribe_command(
    cmd_id: str,
    *,
    sub_id: str,
    topic: str,
    filter: str,
    bookmark: str | None,
    options: str,
    max_backlog: int | None,
) -> client_pb2.Command:
    """A subscribe requesting a processed ack (which carries the granted max_backlog)."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed",
        subscribe=client_pb2.Subscribe(
            topic=topic,
            sub_id=sub_id,
            filter=filter,
            bookmark=bookmark or "",
            options=options,
            max_backlog=max_backlog or 0,
            has_max_backlog=max_backlog is not None,
        ),
    )


def unsubscribe_command(cmd_id: str, sub_id: str) -> client_pb2.Command:
    """Stop one subscription (or a comma list, or `all`)."""
    return client_pb2.Command(
        cmd_id=cmd_id, ack_type="processed", unsubscribe=client_pb2.Unsubscribe(sub_id=sub_id)
    )


def queue_ack_command(batch: AckBatch, options: str = "") -> client_pb2.Command:
    """A queue acknowledgement (Q10): a sow_delete naming bookmarks, with no ack requested."""
    return client_pb2.Command(
        ack_type="",
        sow_delete=client_pb2.SowDelete(
            topic=batch.topic, bookmark=batch.bookmark_list, options=options
        ),
    )


def sow_delete_command(
    cmd_id: str, topic: str, *, bookmark: str, filter: str, options: str
) -> client_pb2.Command:
    """A sow_delete whose processed ack reports `records_deleted`."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed",
        sow_delete=client_pb2.SowDelete(
            topic=topic, bookmark=bookmark, filter=filter, options=options
        ),
    )


def sow_command(cmd_id: str, topic: str, filter: str) -> client_pb2.Command:
    """A sow query; its results carry `query_id` = `cmd_id`."""
    return client_pb2.Command(
        cmd_id=cmd_id,
        ack_type="processed",
        sow=client_pb2.Sow(topic=topic, filter=filter, query_id=cmd_id),
    )


def flush_command(cmd_id: str) -> client_pb2.Command:
    """Ask the instance to send outstanding acks; its processed ack is a round trip."""
    return client_pb2.Command(cmd_id=cmd_id, ack_type="processed", flush=client_pb2.Flush())


def heartbeat_command(options: str) -> client_pb2.Command:
    """`start,<seconds>` asks the instance for heartbeats; `beat` tells it we are alive."""
    return client_pb2.Command(heartbeat=client_pb2.Heartbeat(options=options))
