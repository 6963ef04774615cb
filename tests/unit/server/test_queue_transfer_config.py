"""R4: a replicated queue's transfer timing comes from its definition: DefaultTransferLatency is
the latency estimate until replicated acks give samples, TransferRequestTimeout how long a
request to the owner stands (amps.server.queues.QueueDriver)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from amps.config import Config, load_config
from amps.server.queues import QueueDriver
from tests.unit.server.test_admin_switches import CONFIG


@dataclass
class _Host:
    """What QueueDriver's constructor reads of its instance (a queue without file-backed
    metadata touches neither the journal nor the clock there)."""

    name: str
    config: Config


def _driver(timing: str) -> QueueDriver:
    # `work` is replicated (a destination's Topic names it).
    config = load_config(CONFIG.replace("<Name>work</Name>", f"<Name>work</Name>{timing}", 1))
    queue = config.queue("work")
    assert queue is not None
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
