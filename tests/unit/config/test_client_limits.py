"""The client limits of a grpc transport (issue 12, S5): defaults, values, bounds."""

from __future__ import annotations

import pytest

from amps.config.model import ClientLimits

from .helpers import assert_error, document, load


def transport(inside: str, kind: str = "grpc") -> str:
    return document(
        f"<Transports><Transport><Name>t</Name><Type>{kind}</Type><InetAddr>9007</InetAddr>"
        f"{inside}</Transport></Transports>"
    )


def test_every_limit_has_a_safe_default() -> None:
    config = load(transport(""))
    assert config.grpc_transport is not None
    assert config.grpc_transport.limits == ClientLimits(
        max_connections=1_000,
        max_subscriptions_per_client=1_000,
        max_bookmarks_per_ack=10_000,
        logon_timeout_ms=10_000,
        idle_timeout_ms=3_600_000,
    )


def test_limits_are_read_with_their_units() -> None:
    config = load(
        transport(
            "<MaxConnections>5</MaxConnections><MaxSubscriptionsPerClient>7"
            "</MaxSubscriptionsPerClient><MaxBookmarksPerAck>100</MaxBookmarksPerAck>"
            "<LogonTimeout>2s</LogonTimeout><IdleTimeout>0s</IdleTimeout>"
        )
    )
    assert config.grpc_transport is not None
    assert config.grpc_transport.limits == ClientLimits(5, 7, 100, 2_000, 0)


@pytest.mark.parametrize(
    ("element", "value", "expected"),
    [
        ("MaxConnections", "0", "from 1 to 1000000"),
        ("MaxBookmarksPerAck", "0", "from 1 to 1000000"),
        ("LogonTimeout", "10ms", "100ms"),
        ("LogonTimeout", "2h", "1h"),
        ("IdleTimeout", "5", "a duration with a unit"),
    ],
)
def test_a_limit_out_of_bounds_is_refused(element: str, value: str, expected: str) -> None:
    assert_error(
        transport(f"<{element}>{value}</{element}>"),
        f"AMPSConfig/Transports/Transport[1]/{element}",
        expected,
    )


def test_client_limits_on_a_replication_transport_are_refused() -> None:
    assert_error(
        transport("<MaxConnections>5</MaxConnections>", "amps-replication"),
        "AMPSConfig/Transports/Transport[1]/MaxConnections",
        "on a grpc transport only",
    )
