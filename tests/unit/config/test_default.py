"""The built-in default configuration loads and says what `amps server` promises."""

from __future__ import annotations

from amps.config import DEFAULT_CONFIG_XML, InetAddr, default_config, load_config


def test_default_config_loads_without_errors() -> None:
    config = load_config(DEFAULT_CONFIG_XML)
    assert config == default_config()
    assert config.name == "amps-1"
    assert config.group == "amps-1"


def test_default_config_listens_on_loopback() -> None:
    config = default_config()
    assert config.grpc_transport is not None
    assert config.grpc_transport.inet_addr == InetAddr("127.0.0.1", 9007)
    assert config.admin is not None
    assert config.admin.inet_addr == InetAddr("127.0.0.1", 8085)


def test_default_config_records_every_topic_and_has_the_work_queue() -> None:
    config = default_config()
    log = config.transaction_log
    assert log is not None
    assert log.journal_directory == "./data/journal"
    assert log.records_topic("orders")
    assert log.message_type_for("anything.at.all") == "json"
    work = config.queue("work")
    assert work is not None
    assert work.kind == "Queue"
    assert work.underlying_topic == "orders"
    assert work.default_publish_target == "orders"
    assert work.lease_period_ms == 30_000
    assert work.max_per_subscription_backlog == 100
    assert work.matches_underlying("orders")
    assert not work.matches_underlying("orders2")
