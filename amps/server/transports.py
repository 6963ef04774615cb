"""Which client transports take connections now: `InitialState` at start, then
`amps admin transport enable|disable NAME` (POST /amps/administrator/transports/<name>/...).

A disabled client transport still listens (gRPC binds its ports once, at start) but refuses
every logon with `TransportDisabled` (retriable: a client with other addresses fails over), and
disabling it disconnects the clients logged on through it, so their leases return at once (Q6).
The state is not persisted: a restart starts from `InitialState` again, as in AMPS. Replication
transports are not switched here (their links are, with `amps admin replication`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from amps import errors
from amps.config import TransportConfig
from amps.config.model import REPLICATION_TYPES

log = logging.getLogger("amps.transports")

JSON = "application/json"
TRANSPORTS_PATH = "/amps/instance/transports"
TRANSPORT_ACTIONS_PATH = "/amps/administrator/transports/"
VERBS = ("enable", "disable")


@dataclass(slots=True)
class _State:
    config: TransportConfig
    enabled: bool
    refused_logons: int = 0
    changes: int = 0


class ClientTransports:
    """The enabled/disabled state of every configured transport; only client ones change."""

    def __init__(self, transports: tuple[TransportConfig, ...]) -> None:
        self._states = {t.name: _State(t, t.initially_enabled) for t in transports}
        # Called with (transport name, enabled) after every change: the server disconnects
        # the transport's clients and updates the gRPC health status.
        self.on_change: list[Callable[[str, bool], None]] = []

    def enabled(self, name: str) -> bool:
        state = self._states.get(name)
        return state is None or state.enabled

    def check_logon(self, name: str) -> None:
        """Raise TransportDisabled when `name` refuses client logons now."""
        state = self._states.get(name)
        if state is not None and not state.enabled:
            state.refused_logons += 1
            raise errors.TransportDisabled(name)

    def set_enabled(self, name: str, enabled: bool) -> bool:
        """Switch a client transport; returns whether the state changed. KeyError for an
        unknown name, ValueError for a replication transport."""
        state = self._states[name]
        if state.config.type in REPLICATION_TYPES:
            raise ValueError(name)
        if state.enabled == enabled:
            return False
        state.enabled = enabled
        state.changes += 1
        log.warning(
            "transport %s %s by an administrator: %s",
            name,
            "enabled" if enabled else "disabled",
            "client logons accepted" if enabled else "client logons refused, clients disconnected",
        )
        for listener in self.on_change:
            listener(name, enabled)
        return True

    def as_json(self, bound_ports: dict[str, int]) -> list[dict[str, Any]]:
        """One entry per transport, in configuration order."""
        items = []
        for name, state in self._states.items():
            config = state.config
            items.append(
                {
                    "name": name,
                    "type": config.type,
                    "inet_addr": str(config.inet_addr),
                    "port": bound_ports.get(name, config.inet_addr.port),
                    "tls": config.tls is not None,
                    "initial_state": "enabled" if config.initially_enabled else "disabled",
                    "state": "enabled" if state.enabled else "disabled",
                    "refused_logons": state.refused_logons,
                    "state_changes": state.changes,
                }
            )
        return items


def _dumps(body: object) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_INDENT_2)


class TransportRoutes:
    """`/amps/instance/transports` (GET) and `/amps/administrator/transports/<name>/<verb>`."""

    def __init__(self, transports: ClientTransports, bound_ports: Callable[[], dict[str, int]]):
        self._transports = transports
        self._bound_ports = bound_ports

    def list_json(self) -> tuple[str, bytes]:
        return JSON, _dumps({"transports": self._transports.as_json(self._bound_ports())})

    def act(self, rest: str) -> tuple[int, str, bytes]:
        """POST `<name>/enable` or `<name>/disable`."""
        name, _, verb = rest.rpartition("/")
        names = [item["name"] for item in self._transports.as_json({})]
        if verb not in VERBS or not name:
            text = f"expected /amps/administrator/transports/<name>/enable or disable, not {rest!r}"
            return 404, JSON, _dumps({"error": text, "transports": names})
        try:
            changed = self._transports.set_enabled(name, verb == "enable")
        except KeyError:
            return 404, JSON, _dumps({"error": f"no such transport {name!r}", "transports": names})
        except ValueError:
            text = (
                f"transport {name!r} carries incoming replication, which is not switched here; "
                "only client transports are enabled or disabled"
            )
            return 409, JSON, _dumps({"error": text})
        state = "enabled" if verb == "enable" else "disabled"
        return 200, JSON, _dumps({"transport": name, "state": state, "changed": changed})
