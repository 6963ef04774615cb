"""Rule 3 of routing for publishes: a destination's Topic names and Filters decide per topic,
once, and per record only where every matching Topic has a Filter (issue 8, R1)."""

from __future__ import annotations

import pytest

from amps.config.model import DestinationConfig, ReplicationTopicConfig
from amps.log.records import PublishRecord
from replication.routing import Route


def _route(*topics: tuple[str, str | None]) -> Route:
    return Route(
        "a",
        DestinationConfig(
            "b", "g", "async", (), tuple(ReplicationTopicConfig(n, "json", f) for n, f in topics)
        ),
    )


def _publish(topic: str, data: bytes, origin: str = "a") -> PublishRecord:
    return PublishRecord(1, 1, topic, data, 1, 1, origin, "g", 1, "", 0)


@pytest.mark.parametrize(
    ("topics", "expected"),
    [
        ((), [True, True, True, True]),  # no Topic: every topic
        ((("orders", None),), [True, True, False, False]),
        ((("orders", "/x > 1"),), [True, False, False, False]),
        ((("orders", "/x > 1"), ("ord.*", None)), [True, True, False, False]),  # one unfiltered
        ((("orders", "/x > 5"), ("ord.*", "/x < 2")), [False, True, False, False]),
        ((("orders", None), ("audit", "/x > 1")), [True, True, True, False]),
    ],
)
def test_a_publish_goes_where_a_topic_takes_it_and_its_filter_if_any_matches(
    topics: tuple[tuple[str, str | None], ...], expected: list[bool]
) -> None:
    route = _route(*topics)
    records = [
        _publish("orders", b'{"x": 2}'),
        _publish("orders", b'{"x": 1}'),
        _publish("audit", b'{"x": 2}'),
        _publish("audit", b'{"x": 1}'),
    ]
    for _ in range(2):  # the second pass answers from the per-topic verdicts
        assert [route.wants(r) for r in records] == expected


def test_a_publish_never_returns_to_its_origin_and_passes_through_only_when_allowed() -> None:
    route = _route()
    assert not route.wants(_publish("orders", b"{}", origin="b"))
    assert not route.wants(_publish("orders", b"{}", origin="c"))  # no PassThrough
