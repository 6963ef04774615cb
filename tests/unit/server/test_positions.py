"""Origin positions kept as publishes are dispatched (amps.server.positions, issue 10)."""

from __future__ import annotations

from amps.log.records import PublishRecord
from amps.server.positions import OriginPositions


def _publish(txid: int, topic: str, origin: str, origin_txid: int) -> PublishRecord:
    return PublishRecord(
        txid=txid, timestamp_us=1, topic=topic, data=b"{}", publisher_id=1, seq=txid,
        origin_instance=origin, origin_txid=origin_txid,
    )  # fmt: skip


def test_each_origins_last_publish_of_the_matching_topics_from_a_start() -> None:
    known = OriginPositions(history_through=0)
    known.dispatched([
        _publish(1, "a", "x", 1), _publish(2, "b", "y", 40), _publish(3, "a", "x", 3),
        _publish(4, "b", "x", 4), _publish(5, "a", "y", 41),
    ])  # fmt: skip
    everything = known.positions(lambda topic: True, 1)
    assert everything == {"x": 4, "y": 41}
    assert known.positions(lambda topic: topic == "a", 1) == {"x": 3, "y": 41}
    # From txid 4 on, topic a has only y's publish: x's last one there came before.
    assert known.positions(lambda topic: topic == "a", 4) == {"y": 41}
    assert known.positions(lambda topic: topic == "c", 1) == {}
    assert known.positions(lambda topic: topic == "a", 1, literal="a") == {"x": 3, "y": 41}
    assert known.positions(lambda topic: topic == "c", 1, literal="c") == {}
