"""R4: a replicated queue's transfer timing comes from its definition: DefaultTransferLatency is
the latency estimate until replicated acks give samples, TransferRequestTimeout how long a
request to the owner stands (amps.server.queues.QueueDriver)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from amps.config import Config, load_config
from amps.server.queues import QueueDriver

CONFIG = """<AMPSConfig><Name>east</Name>
<Transports>
  <Transport><Name>clients</Name><Type>grpc</Type><InetAddr>0</InetAddr></Transport>
  <Transport><Name>peers</Name><Type>amps-replication</Type><InetAddr>0</InetAddr></Transport>
</Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>
  <Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>
    <MessageType>json</MessageType>{timing}</Queue>
</SOW>
<Replication><Destination><Name>west</Name><SyncType>async</SyncType>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>work</Name><MessageType>json</MessageType></Topic>
  <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9</InetAddr></Transport>
</Destination></Replication>
</AMPSConfig>"""


@dataclass
class _Host:
    """What QueueDriver's constructor reads of its instance (a queue without file-backed
    metadata touches neither the journal nor the clock there)."""

    name: str
    config: Config


def _driver(timing: str) -> QueueDriver:
    config = load_config(CONFIG.format(timing=timing))
    (queue,) = config.queues
    return QueueDriver(queue, _Host("east", config))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("timing", "latency_ms", "timeout_ms"),
    [
        ("", 250, 1_000),
        (
            "<DefaultTransferLatency>40ms</DefaultTransferLatency>"
            "<TransferRequestTimeout>3s</TransferRequestTimeout>",
            40,
            3_000,
        ),
    ],
)
def test_the_configured_transfer_timing_is_used(
    timing: str, latency_ms: int, timeout_ms: int
) -> None:
    driver = _driver(timing)
    assert driver.replica is not None
    statistics = driver.ownership_statistics()
    assert statistics is not None
    # No replicated ack has arrived: the estimate is the configured default.
    assert statistics.latency_estimate_ms == latency_ms
    assert statistics.latency_estimates_ms == {}
    assert driver.replica.ownership.request_timeout_ms == timeout_ms
