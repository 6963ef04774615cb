"""Default-deny outside loopback (issue 12, S1): which listeners reach beyond this host, and
whether the configuration protects them.

A listener on a loopback address (127.0.0.0/8, ::1, `localhost`) is reachable from this host
only. Any other address, `0.0.0.0` and `::` included, and any host name but `localhost` (it may
resolve to anything), counts as reachable from the network. Such a listener needs
`<Authentication><UsersFile>`; an incoming replication port beyond loopback also needs
`amps-replication-secure` (mutual TLS), since replication carries records and ownership grants
that no user logon guards. `<Authentication><Mode>none</Mode>` lifts both rules on purpose.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from amps.config.model import AuthenticationConfig, Config, InetAddr

USERS_FIX = (
    "<Authentication><UsersFile>PATH</UsersFile></Authentication> (users made with "
    "`amps users add`), a loopback address (127.0.0.1, ::1), or "
    "<Authentication><Mode>none</Mode></Authentication> to run open on purpose"
)
SECURE_REPLICATION_FIX = (
    "Type amps-replication-secure (mutual TLS; certificates from deploy/make-certs.sh), a "
    "loopback address, or <Authentication><Mode>none</Mode></Authentication> to run open on "
    "purpose: a plaintext replication port lets anyone who reaches it inject records"
)


def is_loopback(host: str) -> bool:
    """Whether a listener on `host` is reachable from this host only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


@dataclass(frozen=True, slots=True)
class Listener:
    """One address this instance listens on, with the element path that configures it."""

    path: str
    kind: str  # "client", "admin" or "replication"
    inet_addr: InetAddr
    authentication: AuthenticationConfig | None
    secure: bool = False  # replication only: amps-replication-secure


@dataclass(frozen=True, slots=True)
class Exposure:
    """A listener beyond loopback that the configuration leaves unprotected: `expected` says
    how to fix it (a ConfigError's parts)."""

    path: str
    value: str
    expected: str


def listeners(config: Config) -> list[Listener]:
    """Every address `config` makes the instance listen on (client, admin, replication)."""
    found: list[Listener] = []
    for index, transport in enumerate(config.transports, 1):
        path = f"AMPSConfig/Transports/Transport[{index}]"
        authentication = transport.authentication or config.authentication
        if transport.type == "grpc":
            found.append(Listener(path, "client", transport.inet_addr, authentication))
        else:
            secure = transport.type == "amps-replication-secure"
            found.append(Listener(path, "replication", transport.inet_addr, authentication, secure))
    admin = config.admin
    if admin is not None and admin.inet_addr is not None:
        found.append(Listener("AMPSConfig/Admin", "admin", admin.inet_addr, config.authentication))
    return found


def exposures(config: Config) -> list[Exposure]:
    """The listeners beyond loopback left open without `Mode none` saying so (default-deny)."""
    found: list[Exposure] = []
    for listener in listeners(config):
        if is_loopback(listener.inet_addr.host):
            continue
        authentication = listener.authentication
        if authentication is not None and authentication.mode == "none":
            continue
        value = str(listener.inet_addr)
        if listener.kind == "replication":
            if not listener.secure:
                found.append(Exposure(f"{listener.path}/Type", value, SECURE_REPLICATION_FIX))
            continue  # mutual TLS authenticates the peer; user logons play no part
        if authentication is None:
            what = "an admin port" if listener.kind == "admin" else "a client port"
            found.append(
                Exposure(
                    f"{listener.path}/InetAddr",
                    value,
                    f"{what} beyond loopback protected by {USERS_FIX}",
                )
            )
    return found


def open_listeners(config: Config) -> list[Listener]:
    """Listeners beyond loopback that `Mode none` leaves open: warned about at every start."""
    return [
        listener
        for listener in listeners(config)
        if not is_loopback(listener.inet_addr.host)
        and listener.authentication is not None
        and listener.authentication.mode == "none"
    ]
